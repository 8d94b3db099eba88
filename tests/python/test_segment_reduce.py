"""segment_reduce (torch._segment_reduce) and its backward on the device
(torch_tpu/ops/segment_reduce.py; issue 42 item 6: both went through the
CPU fallback): every reduction, with and without `initial`, by lengths and
by offsets, along inner and outer axes, with empty segments, NaNs, ties and
zeros, equals CPU's in value and gradient, and nothing falls back; bad
lengths raise CPU's errors."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback

REDUCES = ["sum", "mean", "max", "min", "prod"]
# data shape, axis, lengths, unsafe
CASES = [
    ((6,), 0, [2, 0, 3, 1], False),
    ((7, 3), 0, [0, 2, 2, 1], True),  # the last 2 rows are in no segment
    ((3, 5), 1, [[2, 0, 3], [1, 1, 3], [0, 5, 0]], False),
    ((2, 5, 3), 1, [[2, 0, 3], [5, 0, 0]], False),
    ((2, 5, 3), -2, [[2, 0, 3], [5, 0, 0]], False),
]


def _data(shape, dtype, seed):
    torch.manual_seed(seed)
    x = torch.randn(*shape, dtype=dtype)
    flat = x.view(-1)
    flat[1] = flat[2]  # a tie
    flat[3] = 0.0
    if flat.numel() > 8:
        flat[7] = 0.0  # a second zero
        flat[-1] = float("nan")
    return x


def _run(dev, x, reduce, axis, seg, kind, unsafe, initial, g):
    xd = x.detach().to(dev).requires_grad_()
    kw = {kind: seg.to(dev), "axis": axis, "unsafe": unsafe}
    if initial is not None:
        kw["initial"] = initial
    out = torch._segment_reduce(xd, reduce, **kw)
    (gx,) = torch.autograd.grad(out, xd, g.to(dev))
    return out.detach().cpu(), gx.cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("initial", [None, 2.0, -1.5])
@pytest.mark.parametrize("kind", ["lengths", "offsets"])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_segment_reduce_and_gradient_equal_cpu(case, reduce, kind, initial, dtype):
    shape, axis, lengths, unsafe = CASES[case]
    x = _data(shape, dtype, case)
    lengths = torch.tensor(lengths)
    seg = lengths if kind == "lengths" else torch.cat([lengths.new_zeros(lengths.shape[:-1] + (1,)),
                                                       lengths.cumsum(-1)], -1)
    want = torch._segment_reduce(x, reduce, **{kind: seg}, axis=axis, unsafe=unsafe,
                                 **({} if initial is None else {"initial": initial}))
    torch.manual_seed(9)
    g = torch.randn_like(want)
    w_out, w_grad = _run("cpu", x, reduce, axis, seg, kind, unsafe, initial, g)
    with no_fallback():
        t_out, t_grad = _run("tpu", x, reduce, axis, seg, kind, unsafe, initial, g)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert t_out.shape == w_out.shape and t_out.dtype == w_out.dtype
    torch.testing.assert_close(t_out, w_out, equal_nan=True, **tol)
    torch.testing.assert_close(t_grad, w_grad, equal_nan=True, **tol)


def test_offsets_not_starting_at_zero():
    x = torch.randn(8, 2)
    off = torch.tensor([2, 3, 3, 7])  # rows 0, 1 and 7 in no segment
    for reduce in REDUCES:
        want = torch._segment_reduce(x, reduce, offsets=off)
        with no_fallback():
            got = torch._segment_reduce(x.to("tpu"), reduce, offsets=off.to("tpu"))
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


ERRORS = [
    lambda d: torch._segment_reduce(torch.randn(5, device=d), "sum", lengths=torch.tensor([2, 2], device=d)),
    lambda d: torch._segment_reduce(torch.randn(5, device=d), "sum", lengths=torch.tensor([6, -1], device=d)),
    lambda d: torch._segment_reduce(torch.randn(5, device=d), "median", lengths=torch.tensor([5], device=d)),
    lambda d: torch._segment_reduce(torch.randn(3, 5, device=d), "sum", lengths=torch.tensor([5, 0], device=d),
                                    axis=1),
    lambda d: torch._segment_reduce(torch.randn(5, device=d), "sum"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_segment_reduce_errors_are_cpus(i):
    with pytest.raises(Exception) as cpu:
        ERRORS[i]("cpu")
    with pytest.raises(Exception) as tpu:
        ERRORS[i]("tpu")
    assert type(tpu.value) is type(cpu.value) and str(tpu.value) == str(cpu.value)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_max_min_ties_share_the_gradient_as_cpu(reduce, sign):
    # CPU divides a tied segment's gradient by the number of ties only where it is positive
    x = torch.tensor([1.0, 3.0, 3.0, 3.0, 0.0, 2.0, -4.0, -4.0])
    if reduce == "min":
        x = -x
    lengths = torch.tensor([4, 2, 2])
    g = torch.tensor([2.0, -1.0, 0.5]) * sign
    w_out, w_grad = _run("cpu", x, reduce, 0, lengths, "lengths", False, None, g)
    with no_fallback():
        t_out, t_grad = _run("tpu", x, reduce, 0, lengths, "lengths", False, None, g)
    assert torch.equal(t_out, w_out) and torch.equal(t_grad, w_grad), (t_grad, w_grad)
