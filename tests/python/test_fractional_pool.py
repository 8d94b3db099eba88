"""Fractional max pooling on tpu vs PyTorch CPU given the same
_random_samples: values, indices (ties, NaN, -inf), gradients; the module
with output_ratio and samples drawn on the device; bad arguments raise the
CPU's exception and message.  No CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

T = torch.device("tpu")


def _compare(k, x, kernel, out, samples):
    fn = F.fractional_max_pool2d if k == 2 else F.fractional_max_pool3d
    xc, xt = x.clone().requires_grad_(), x.to(T).requires_grad_()
    fb = torch_tpu.fallback_counts()
    yc, ic = fn(xc, kernel, output_size=out, return_indices=True, _random_samples=samples)
    yt, it = fn(xt, kernel, output_size=out, return_indices=True, _random_samples=samples.to(T))
    assert it.dtype == torch.int64 and yt.dtype == x.dtype
    assert torch.equal(it.cpu(), ic), "indices differ"
    torch.testing.assert_close(yt.cpu(), yc.detach(), equal_nan=True, atol=0, rtol=0)
    g = torch.randn(yc.shape, dtype=x.dtype)
    yc.backward(g)
    yt.backward(g.to(T))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-6, rtol=1e-6)
    assert torch_tpu.fallback_counts() == fb, "an op fell back to the CPU"


@pytest.mark.parametrize("shape,kernel,out", [
    ((2, 3, 7, 6), (2, 3), (4, 3)), ((1, 2, 9, 9), 3, (4, 4)), ((3, 7, 6), 2, (3, 2)),
    ((2, 2, 8, 5), (1, 2), (8, 4)), ((1, 1, 5, 5), 5, (1, 1)), ((2, 3, 16, 12), 2, (9, 7))])
def test_fractional_max_pool2d_matches_cpu(shape, kernel, out):
    torch.manual_seed(0)
    N = shape[0] if len(shape) == 4 else 1
    _compare(2, torch.randn(*shape), kernel, out, torch.rand(N, shape[-3], 2))


@pytest.mark.parametrize("shape,kernel,out", [
    ((2, 2, 5, 6, 7), (2, 2, 3), (3, 3, 2)), ((2, 5, 6, 7), 2, (2, 4, 3)), ((1, 3, 4, 5, 6), 1, (2, 3, 5))])
def test_fractional_max_pool3d_matches_cpu(shape, kernel, out):
    torch.manual_seed(1)
    N = shape[0] if len(shape) == 5 else 1
    _compare(3, torch.randn(*shape), kernel, out, torch.rand(N, shape[-4], 3))


def test_ties_take_the_first_maximum():
    torch.manual_seed(2)
    x = torch.randint(0, 3, (2, 3, 9, 9)).float()
    _compare(2, x, 3, (4, 4), torch.rand(2, 3, 2))
    _compare(3, torch.randint(0, 2, (1, 2, 5, 5, 5)).float(), 2, (3, 3, 3), torch.rand(1, 2, 3))


def test_nan_and_infinities_like_cpu():
    torch.manual_seed(3)
    x = torch.randn(1, 3, 6, 7)
    x.view(-1)[::5] = float("nan")
    x.view(-1)[1::9] = float("-inf")
    x[0, 1] = float("-inf")  # a plane of -inf: the first element of each window
    x[0, 2, :, 3] = float("inf")
    _compare(2, x, 2, (3, 4), torch.rand(1, 3, 2))


def test_extra_samples_are_ignored_and_samples_may_be_views():
    torch.manual_seed(4)
    samples = torch.rand(5, 3, 4)[:, :, 1:3]  # 5 >= batch 2, a strided view
    _compare(2, torch.randn(2, 3, 8, 8), 2, (5, 5), samples)


def test_float64():
    torch.manual_seed(5)
    _compare(2, torch.randn(2, 2, 7, 7, dtype=torch.float64), 2, (4, 4), torch.rand(2, 2, 2, dtype=torch.float64))


@pytest.mark.parametrize("cls,shape,k", [(torch.nn.FractionalMaxPool2d, (2, 3, 10, 9), 2),
                                         (torch.nn.FractionalMaxPool3d, (1, 2, 6, 7, 8), 3)])
def test_module_with_output_ratio_draws_samples_on_the_device(cls, shape, k):
    """The module draws its samples with torch.rand on the tpu: the values
    must be the input elements the returned indices name, and each output
    the max of a window of the kernel size inside the input."""
    torch.manual_seed(6)
    m = cls(2, output_ratio=0.5, return_indices=True)
    x = torch.randn(*shape)
    y, idx = m(x.to(T))
    y, idx = y.cpu(), idx.cpu()
    want_shape = list(shape[:-k]) + [int(s * 0.5) for s in shape[-k:]]
    assert list(y.shape) == want_shape
    flat = x.flatten(-k)
    torch.testing.assert_close(flat.gather(-1, idx.flatten(-k)).view_as(y), y, atol=0, rtol=0)
    assert torch_tpu.fallback_counts().get("aten::fractional_max_pool2d.output", 0) == 0


def test_module_info_samples_raise_like_cpu():
    """torch's ModuleInfo samples pass float64 _random_samples with float32
    input: the CPU raises, so must the tpu (the same message)."""
    x = torch.randn(1, 3, 5, 7)
    s = torch.rand(1, 3, 2, dtype=torch.float64)
    msgs = []
    for dev in ("cpu", T):
        with pytest.raises(RuntimeError) as e:
            F.fractional_max_pool2d(x.to(dev), 2, output_ratio=(0.5, 0.5), _random_samples=s.to(dev))
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] == "Expect _random_samples to have the same dtype as input"


@pytest.mark.parametrize("k,shape,kernel,out,samples", [
    (2, (5, 7), 2, (2, 3), (1, 3, 2)),
    (2, (1, 3, 5, 7), 2, (2, 3), (3, 2)),
    (2, (2, 3, 5, 7), 2, (2, 3), (1, 3, 2)),
    (2, (1, 3, 5, 7), 2, (2, 3), (1, 2, 2)),
    (2, (1, 3, 5, 7), 2, (2, 3), (1, 3, 3)),
    (2, (1, 3, 5, 7), (4, 2), (3, 3), (1, 3, 2)),
    (2, (1, 3, 5, 7), (2, 7), (2, 3), (1, 3, 2)),
    (2, (1, 0, 5, 7), 2, (2, 3), (1, 0, 2)),
    (3, (5, 7, 3), 2, (2, 2, 2), (1, 3, 3)),
    (3, (1, 3, 5, 7, 5), (5, 2, 2), (2, 2, 2), (1, 3, 3)),
    (3, (1, 3, 5, 7, 5), 2, (2, 2, 2), (1, 3, 2)),
    (3, (1, 3, 4, 4, 4), 1, (4, 3, 2), (1, 3, 3)),
])
def test_bad_arguments_raise_like_cpu(k, shape, kernel, out, samples):
    op = torch.ops.aten.fractional_max_pool2d if k == 2 else torch.ops.aten.fractional_max_pool3d
    kernel = [kernel] * k if isinstance(kernel, int) else list(kernel)
    msgs = []
    for dev in ("cpu", T):
        with pytest.raises(RuntimeError) as e:
            op(torch.randn(*shape, device=dev), kernel, list(out), torch.rand(*samples, device=dev))
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def test_integer_input_raises_not_implemented_like_cpu():
    for dev in ("cpu", T):
        with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
            torch.ops.aten.fractional_max_pool2d(torch.randint(0, 5, (1, 3, 5, 7), device=dev), [2, 2], [2, 3],
                                                 torch.randint(0, 5, (1, 3, 2), device=dev))


def test_backward_checks_grad_shape():
    x = torch.randn(1, 3, 5, 7, device=T)
    idx = torch.zeros(1, 3, 2, 3, dtype=torch.long, device=T)
    with pytest.raises(RuntimeError, match="gradOutput sizes unexpected"):
        torch.ops.aten.fractional_max_pool2d_backward(torch.randn(1, 3, 2, 2, device=T), x, [2, 2], [2, 3], idx)
    x3 = torch.randn(1, 3, 5, 7, 5, device=T)
    idx3 = torch.zeros(1, 3, 2, 2, 2, dtype=torch.long, device=T)
    with pytest.raises(RuntimeError, match="gradOutput width unexpected"):
        torch.ops.aten.fractional_max_pool3d_backward(torch.randn(1, 3, 2, 2, 1, device=T), x3, [2, 2, 2],
                                                      [2, 2, 2], idx3)
