"""Kernels of torch_tpu/ops/extra.py (rules in csrc/ops/extra.c) on tpu vs
CPU, by value and by gradient (autograd on both), with no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

T = torch.device("tpu")


def _to(a, dev, rg):
    if isinstance(a, torch.Tensor):
        a = a.detach().clone().to(dev)
        return a.requires_grad_(rg) if rg else a
    return a


def _compare(fn, *args, atol=1e-5, rtol=1e-4, grad=True, nograd=(), gtol=10):
    """fn on CPU and tpu copies: outputs equal; then gradients of
    sum(out[0] * r) for every float arg not in nograd; no fallback runs."""
    def rg(i, a):
        return grad and i not in nograd and isinstance(a, torch.Tensor) and a.is_floating_point()

    cpu = [_to(a, "cpu", rg(i, a)) for i, a in enumerate(args)]
    tpu = [_to(a, T, rg(i, a)) for i, a in enumerate(args)]
    before = torch_tpu.fallback_counts()
    oc, ot = fn(*cpu), fn(*tpu)
    ocs, ots = ([oc], [ot]) if isinstance(oc, torch.Tensor) else (list(oc), list(ot))
    for c, t in zip(ocs, ots):
        assert t.device.type == "tpu"
        assert t.dtype == c.dtype and t.shape == c.shape
        torch.testing.assert_close(t.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)
    if grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in cpu):
        r = torch.randn(ocs[0].shape, dtype=ocs[0].dtype)
        ocs[0].backward(r)
        ots[0].backward(r.to(T))
        for c, t in zip(cpu, tpu):
            if isinstance(c, torch.Tensor) and c.requires_grad:
                assert t.grad is not None
                torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol * gtol, rtol=rtol * gtol, equal_nan=True)
    after = torch_tpu.fallback_counts()
    grown = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not grown, f"ran through the CPU fallback: {grown}"


# ---- upsampling ----------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(size=(10, 14)), dict(scale_factor=1.7),
                                dict(scale_factor=(0.6, 2.5)), dict(scale_factor=2),
                                dict(scale_factor=1.7, recompute_scale_factor=True)])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest2d(kw, mode):
    _compare(lambda x: F.interpolate(x, mode=mode, **kw), torch.randn(2, 3, 5, 7))


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest1d_3d(mode):
    _compare(lambda x: F.interpolate(x, size=11, mode=mode), torch.randn(2, 3, 5))
    _compare(lambda x: F.interpolate(x, scale_factor=0.7, mode=mode), torch.randn(2, 3, 9))
    _compare(lambda x: F.interpolate(x, size=(3, 4, 5), mode=mode), torch.randn(1, 2, 2, 3, 4))
    _compare(lambda x: F.interpolate(x, scale_factor=(1.5, 2, 0.5), mode=mode), torch.randn(1, 2, 2, 3, 4))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(size=(1, 1)), dict(scale_factor=2.3),
                                dict(scale_factor=(0.5, 3))])
def test_upsample_bilinear2d(align, kw):
    _compare(lambda x: F.interpolate(x, mode="bilinear", align_corners=align, **kw), torch.randn(2, 3, 5, 7))


@pytest.mark.parametrize("align", [False, True])
def test_upsample_linear1d_trilinear3d(align):
    _compare(lambda x: F.interpolate(x, size=9, mode="linear", align_corners=align), torch.randn(2, 3, 5))
    _compare(lambda x: F.interpolate(x, size=(3, 5, 7), mode="trilinear", align_corners=align),
             torch.randn(1, 2, 2, 3, 4))


def test_upsample_bilinear2d_double_and_half():
    _compare(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), torch.randn(1, 2, 4, 6, dtype=torch.float64))
    _compare(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"), torch.randn(1, 2, 4, 6).to(torch.bfloat16),
             atol=2e-2, rtol=2e-2, grad=False)


def test_upsample_module_training():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Upsample(scale_factor=2),
                              torch.nn.Conv2d(4, 2, 3, padding=1, padding_mode="reflect"),
                              torch.nn.Upsample(scale_factor=2, mode="bilinear"))
    x = torch.randn(2, 3, 6, 5)
    _compare(lambda x, *ps: torch.func.functional_call(net, dict(zip(dict(net.named_parameters()), ps)), (x,)),
             x, *[p.detach() for p in net.parameters()], atol=1e-4)


# ---- padding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes(mode):
    _compare(lambda x: F.pad(x, (2, 3), mode=mode), torch.randn(2, 3, 5))
    _compare(lambda x: F.pad(x, (2, 3), mode=mode), torch.randn(3, 5))
    _compare(lambda x: F.pad(x, (2, 3, 1, 0), mode=mode), torch.randn(2, 3, 5, 7))
    _compare(lambda x: F.pad(x, (0, 1, 3, 2), mode=mode), torch.randn(3, 5, 7))
    _compare(lambda x: F.pad(x, (2, 1, 1, 2, 1, 1), mode=mode), torch.randn(1, 2, 3, 3, 4))


def test_pad_replicate_large_and_negative():
    _compare(lambda x: F.pad(x, (6, 0, 2, 5), mode="replicate"), torch.randn(1, 2, 3, 3))
    _compare(lambda x: F.pad(x, (-1, 2), mode="replicate"), torch.randn(1, 2, 5))


def test_pad_reflect_too_large_raises_like_cpu():
    x = torch.randn(1, 2, 3)
    with pytest.raises(RuntimeError):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError):
        F.pad(x.to(T), (3, 0), mode="reflect")


# ---- activations and elementwise ------------------------------------------------------------------


def test_log_sigmoid():
    x = torch.randn(4, 5) * 10
    x[0, 0] = 0.0
    _compare(F.logsigmoid, x)
    _compare(torch.nn.LogSigmoid(), torch.randn(3, 4, dtype=torch.float64))


@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2])
def test_logaddexp(fn):
    a, b = torch.randn(4, 5) * 20, torch.randn(5) * 20
    _compare(fn, a, b)
    inf = float("inf")
    _compare(fn, torch.tensor([inf, -inf, inf, 1.0, float("nan")]), torch.tensor([inf, -inf, -inf, -inf, 1.0]),
             grad=False)


def test_logit():
    x = torch.rand(20)
    x[0], x[1] = 0.0, 1.0
    _compare(lambda x: torch.logit(x, eps=0.05), x)
    _compare(lambda x: torch.logit(x), torch.rand(20) * 0.98 + 0.01)
    _compare(lambda x: torch.logit(x), torch.tensor([-0.5, 1.5, 0.25]), grad=False)
    _compare(lambda x: torch.logit(x), torch.arange(3), grad=False)


def test_xlogy_xlog1py():
    x = torch.tensor([0.0, 1.0, 2.0, 0.0, -1.5, 3.0])
    y = torch.tensor([0.0, 2.0, float("nan"), 3.0, 0.5, 4.0])
    _compare(torch.xlogy, x, y, grad=False)
    _compare(torch.xlogy, torch.randn(3, 4), torch.rand(4) + 0.1)
    _compare(lambda y: torch.xlogy(2.0, y), torch.rand(5) + 0.1)
    _compare(lambda x: torch.xlogy(x, 3), torch.randn(5))
    _compare(torch.special.xlog1py, torch.randn(3, 4), torch.rand(4))


def test_xlogy_inplace_and_int():
    a = torch.rand(5) + 0.5
    ta = a.to(T)
    ta.xlogy_(2.0)
    torch.testing.assert_close(ta.cpu(), a.xlogy(2.0))
    _compare(torch.xlogy, torch.arange(4), torch.arange(4) + 1, grad=False)


@pytest.mark.parametrize("fn", [F.hardshrink, F.softshrink])
def test_shrink(fn):
    x = torch.randn(5, 6)
    _compare(fn, x)
    _compare(lambda x: fn(x, 1.2), x)
    _compare(fn, torch.tensor([float("nan"), 0.5, -0.5, 0.2]), grad=False)


def test_prelu():
    x = torch.randn(2, 3, 4, 5)
    _compare(F.prelu, x, torch.rand(3) - 0.5)
    _compare(F.prelu, x, torch.tensor([0.25]))
    _compare(F.prelu, torch.randn(6, 3), torch.rand(3))
    m = torch.nn.PReLU(3)
    _compare(lambda x, w: F.prelu(x, w), x, m.weight.detach())


def test_glu():
    _compare(F.glu, torch.randn(4, 6))
    _compare(lambda x: F.glu(x, 1), torch.randn(2, 4, 3))
    _compare(lambda x: F.glu(x, 0), torch.randn(4, 3, dtype=torch.float64))


def test_lgamma_digamma_polygamma():
    x = torch.randn(30) * 5
    _compare(torch.lgamma, x, atol=1e-4)
    _compare(torch.digamma, torch.rand(30) * 10 + 0.1, atol=1e-4)
    _compare(torch.digamma, torch.tensor([0.0, -1.0, -2.5, 1.0]), grad=False, atol=1e-4)
    for n in (0, 1, 2, 3):
        _compare(lambda x: torch.polygamma(n, x), torch.rand(20) * 5 + 0.2, grad=n < 3, atol=1e-4, rtol=1e-3)
    _compare(torch.lgamma, torch.arange(1, 6), grad=False)


# ---- reductions, scans, factories ----------------------------------------------------------------


def test_nansum():
    x = torch.randn(4, 5, 3)
    x[0, 1, 2] = float("nan")
    x[3, 0, 0] = float("nan")
    _compare(torch.nansum, x)
    _compare(lambda x: torch.nansum(x, 1), x)
    _compare(lambda x: torch.nansum(x, (0, 2), keepdim=True), x)
    _compare(lambda x: torch.nansum(x, -1, dtype=torch.float64), x)
    _compare(torch.nansum, torch.randint(0, 5, (3, 4)), grad=False)
    _compare(lambda x: torch.nansum(x, 0), x.to(torch.bfloat16), atol=1e-2, rtol=1e-2, grad=False)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin(fn):
    x = torch.randn(4, 7)
    x[1, 3] = x[1, 1]  # ties take the last index
    _compare(lambda x: fn(x, 1), x)
    _compare(lambda x: fn(x, 0), x)
    y = x.clone()
    y[2, 2] = float("nan")
    y[2, 5] = float("nan")
    _compare(lambda x: fn(x, 1), y, grad=False)
    _compare(lambda x: fn(x, -1), torch.randint(0, 3, (3, 9)), grad=False)
    _compare(lambda x: fn(x, 0), torch.tensor(2.5), grad=False)


def test_logcumsumexp():
    x = torch.randn(4, 9) * 30
    x[0, 0] = -1000.0
    _compare(lambda x: torch.logcumsumexp(x, 1), x, atol=1e-4)
    _compare(lambda x: torch.logcumsumexp(x, 0), torch.randn(17, 3, dtype=torch.float64))
    inf = float("inf")
    _compare(lambda x: torch.logcumsumexp(x, 0), torch.tensor([-inf, -inf, 1.0, inf, 2.0]), grad=False)


def test_eye():
    before = torch_tpu.fallback_counts()
    for args, kw in [((3,), {}), ((3, 5), {}), ((4, 2), dict(dtype=torch.int64)), ((0,), {}),
                     ((2,), dict(dtype=torch.bool))]:
        t = torch.eye(*args, device=T, **kw)
        torch.testing.assert_close(t.cpu(), torch.eye(*args, **kw))
    out = torch.empty(7, device=T)
    torch.eye(2, 3, out=out)
    torch.testing.assert_close(out.cpu(), torch.eye(2, 3))
    assert torch_tpu.fallback_counts() == before
    with pytest.raises(RuntimeError):
        torch.eye(-1, device=T)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_linspace_logspace(dtype):
    before = torch_tpu.fallback_counts()
    for args in [(-1, 3.5, 11), (0, 1, 1), (2, -7, 0), (5, 5, 4), (-3, 17, 7), (0, 10, 100)]:
        torch.testing.assert_close(torch.linspace(*args, dtype=dtype, device=T).cpu(),
                                   torch.linspace(*args, dtype=dtype))
        if dtype.is_floating_point:
            torch.testing.assert_close(torch.logspace(*args, dtype=dtype, device=T).cpu(),
                                       torch.logspace(*args, dtype=dtype), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.logspace(0, 3, 4, base=2, dtype=dtype, device=T).cpu(),
                               torch.logspace(0, 3, 4, base=2, dtype=dtype))
    assert torch_tpu.fallback_counts() == before


# ---- windows ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,d,p,s", [((2, 3), 1, 1, (2, 1)), (3, 2, 0, 1), (1, 1, 0, 2), ((3, 2), (1, 2), (2, 0), 3)])
def test_unfold_fold(k, d, p, s):
    x = torch.randn(2, 3, 8, 9)
    _compare(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), x)
    cols = F.unfold(x, k, dilation=d, padding=p, stride=s)
    _compare(lambda c: F.fold(c, (8, 9), k, dilation=d, padding=p, stride=s), cols)
    _compare(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), x[0])


def test_tensor_unfold_backward():
    _compare(lambda x: x.unfold(1, 3, 2), torch.randn(3, 10))
    _compare(lambda x: x.unfold(0, 2, 1), torch.randn(6, 2, 3))
    _compare(lambda x: x.unfold(-1, 4, 5), torch.randn(2, 13))


def test_max_unpool2d():
    x = torch.randn(2, 3, 6, 8)
    o, i = F.max_pool2d(x, 2, return_indices=True)
    _compare(lambda o, i: F.max_unpool2d(o, i, 2), o, i)
    _compare(lambda o, i: F.max_unpool2d(o, i, 2, output_size=(7, 9)), o, i)
    o, i = F.max_pool2d(x[0], 3, stride=2, padding=1, return_indices=True)
    _compare(lambda o, i: F.max_unpool2d(o, i, 3, stride=2, padding=1, output_size=(6, 8)), o, i)


def test_empty_batches_stay_on_device():
    _compare(lambda x: F.pad(x, (1, 2), mode="reflect"), torch.randn(0, 3, 3), grad=False)
    _compare(lambda x: F.pad(x, (0, 2, 0, 1), mode="replicate"), torch.randn(0, 3, 3, 3), grad=False)
    _compare(lambda x: F.unfold(x, 2), torch.randn(0, 1, 5, 5), grad=False)
    _compare(lambda x: F.fold(x, (3, 3), 2), torch.randn(0, 4, 4), grad=False)
    _compare(lambda x: x.unfold(0, 1, 1), torch.tensor(1.5))


def test_reflect_negative_padding():
    _compare(lambda x: F.pad(x, (-1, 1, -2, 1), mode="reflect"), torch.randn(1, 3, 4, 4))


def test_polygamma_negative_inputs():
    x = torch.tensor([-8.4784, -3.7, -0.5, -0.2, 0.3, 7.5, -1.5, 30.0, -15.2])
    for n in (1, 2, 3, 4):
        _compare(lambda x: torch.polygamma(n, x), x, grad=False, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(scale_factor=2.3), dict(size=(1, 2))])
def test_upsample_bicubic2d(align, kw):
    _compare(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw), torch.randn(2, 3, 5, 7))
    _compare(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw),
             torch.randn(1, 2, 4, 6, dtype=torch.float64))
