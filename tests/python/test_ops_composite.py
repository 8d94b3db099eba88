"""Ops composed on the device (torch_tpu/ops/composite.py) vs PyTorch CPU,
with no CPU fallback: trace, linalg.cross, median, nanmedian, mode,
kthvalue, cdist, pdist, bincount, renorm, repeat_interleave(Tensor),
hypot, heaviside, sinc; values, dtypes, NaN rules, gradients, errors.  (The OpInfo sweep covers their float32 samples.)"""
import math

import pytest
import torch

import torch_tpu
from op_compare import no_fallback

T = torch.device("tpu")


def _same(fn, *xs, exact=True):
    c = fn(*xs)
    t = no_fallback(lambda: fn(*[x.to(T) if isinstance(x, torch.Tensor) else x for x in xs]))
    c, t = (c, t) if isinstance(c, tuple) else ((c,), (t,))
    for a, b in zip(c, t):
        assert b.device.type == "tpu" and b.dtype == a.dtype and b.shape == a.shape, (a, b)
        if exact:
            torch.testing.assert_close(b.cpu(), a, equal_nan=True, atol=0, rtol=0)
        else:
            torch.testing.assert_close(b.cpu(), a, equal_nan=True)


@pytest.mark.parametrize("dt", [torch.float32, torch.int32, torch.int64, torch.float64])
def test_trace_dtypes(dt):
    x = (torch.randn(4, 6) * 10).to(dt)
    _same(torch.trace, x)


def test_trace_gradient_and_error():
    x = torch.randn(3, 5, requires_grad=True)
    y = x.detach().to(T).requires_grad_()
    torch.trace(x).backward()
    no_fallback(lambda: torch.trace(y).backward())
    torch.testing.assert_close(y.grad.cpu(), x.grad)
    with pytest.raises(RuntimeError):
        torch.trace(torch.ones(3, device=T))


def test_cross_broadcast_dims_and_out():
    a, b = torch.randn(2, 3, 4), torch.randn(1, 3, 4)
    _same(lambda x, y: torch.linalg.cross(x, y, dim=1), a, b, exact=False)
    _same(lambda x, y: torch.cross(x, y, dim=1), a, b, exact=False)
    _same(lambda x, y: torch.linalg.cross(x, y), torch.randint(-5, 5, (4, 3)), torch.randint(-5, 5, (4, 3)))
    with pytest.raises(RuntimeError):
        torch.linalg.cross(torch.randn(2, 4, device=T), torch.randn(2, 4, device=T))


@pytest.mark.parametrize("dt", [torch.float32, torch.int64])
@pytest.mark.parametrize("keepdim", [False, True])
def test_median_and_kthvalue_along_dims(dt, keepdim):
    x = torch.randperm(35).reshape(5, 7).to(dt)  # no ties: indices are defined
    for d in (0, 1, -1):
        _same(lambda a: torch.median(a, d, keepdim=keepdim), x)
        _same(lambda a: torch.kthvalue(a, 3, d, keepdim=keepdim), x)
    _same(torch.median, x)
    _same(lambda a: torch.median(a, 0), torch.tensor(4.0))
    _same(lambda a: torch.kthvalue(a, 1), torch.tensor(4.0))


def test_median_nan_rows_take_the_first_nan():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [4.0, 2.0, 3.0, 1.0], [float("nan")] * 4])
    _same(lambda a: torch.median(a, 1), x)
    _same(torch.median, x)
    _same(torch.median, torch.tensor([3.0, 1.0, 2.0]))
    _same(lambda a: torch.kthvalue(a, 4, 1), x)  # NaN sorts last


def test_median_gradient_flows_to_the_chosen_element():
    x = torch.randperm(12).reshape(3, 4).float().requires_grad_()
    y = x.detach().to(T).requires_grad_()
    torch.median(x, 1).values.sum().backward()
    no_fallback(lambda: torch.median(y, 1).values.sum().backward())
    torch.testing.assert_close(y.grad.cpu(), x.grad)


def test_kthvalue_k_out_of_range_raises_as_on_cpu():
    with pytest.raises(RuntimeError) as cpu:
        torch.kthvalue(torch.randn(3), 4)
    with pytest.raises(RuntimeError) as tpu:
        torch.kthvalue(torch.randn(3, device=T), 4)
    assert str(tpu.value) == str(cpu.value)


@pytest.mark.parametrize("dt", [torch.int64, torch.int32])
def test_repeat_interleave_tensor(dt):
    r = torch.tensor([2, 0, 3, 1], dtype=dt)
    _same(torch.repeat_interleave, r)
    x = torch.randn(4, 3)
    _same(lambda a, rr: torch.repeat_interleave(a, rr, dim=0), x, r)
    _same(lambda a, rr: torch.repeat_interleave(a, rr, dim=0, output_size=6), x, r)
    _same(lambda a: a.repeat_interleave(torch.tensor([1, 2, 0], device=a.device), dim=1), x)


def test_repeat_interleave_negative_repeats_raise():
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device=T))


def test_hypot_extremes_and_gradient():
    a = torch.tensor([3.0, 0.0, 1e30, 1e-30, float("inf"), float("nan"), -5.0, float("nan")])
    b = torch.tensor([4.0, 0.0, 1e30, 1e-30, float("nan"), 1.0, 12.0, float("-inf")])
    _same(torch.hypot, a, b, exact=False)
    x, y = torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)
    xt, yt = x.detach().to(T).requires_grad_(), y.detach().to(T).requires_grad_()
    torch.hypot(x, y).sum().backward()
    no_fallback(lambda: torch.hypot(xt, yt).sum().backward())
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(yt.grad.cpu(), y.grad)


def test_heaviside_and_sinc():
    x = torch.tensor([-2.0, 0.0, 3.0, float("nan"), -0.0])
    _same(torch.heaviside, x, torch.tensor([0.5]))
    _same(torch.heaviside, torch.tensor([-1, 0, 2]), torch.tensor([7, 7, 7]))
    _same(torch.sinc, torch.tensor([0.0, 0.5, -1.5, 1e-8, 3.0, float("inf"), float("nan")]), exact=False)
    _same(torch.sinc, torch.randn(8).half(), exact=False)
    x = torch.randn(5, requires_grad=True)
    xt = x.detach().to(T).requires_grad_()
    torch.sinc(x).sum().backward()
    no_fallback(lambda: torch.sinc(xt).sum().backward())
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    assert math.isclose(torch.sinc(torch.zeros((), device=T)).item(), 1.0)


@pytest.mark.parametrize("shape", [(), (2, 3)])
def test_median_and_kthvalue_dim_out_of_range_raise_as_on_cpu(shape):
    x = torch.randn(shape)
    for fn in (lambda t: torch.median(t, 5), lambda t: torch.kthvalue(t, 1, 5)):
        with pytest.raises(IndexError) as cpu:
            fn(x)
        with pytest.raises(IndexError) as tpu:
            fn(x.to(T))
        assert str(tpu.value) == str(cpu.value)


NAN = float("nan")


def test_nanmedian():
    # (an all-NaN row of 4 or more: CPU's index is where its nth_element
    # leaves it, not reproduced; the value is NaN all the same)
    a = torch.tensor([[1., NAN, 3., 2.], [NAN, NAN, NAN, 1.], [5., NAN, 1., NAN], [NAN, 7., 4., 4.]])
    _same(lambda x: torch.nanmedian(x, 1), a)
    _same(lambda x: torch.nanmedian(x, 0, keepdim=True), a)
    _same(torch.nanmedian, a)
    _same(lambda x: torch.nanmedian(x, 1), torch.randint(0, 5, (3, 6)))
    _same(lambda x: torch.nanmedian(x, 0), torch.tensor([NAN, NAN, NAN]))  # all NaN: NaN at the first


def test_mode():
    # ties: the smallest value; the index of its last occurrence
    _same(lambda x: torch.mode(x, 1), torch.tensor([[1., 2., 2., 3., 3., 0.], [4., 4., 4., 1., 1., 1.]]))
    torch.manual_seed(0)
    _same(lambda x: torch.mode(x, 0, keepdim=True), torch.randint(0, 3, (7, 4)))
    _same(torch.mode, torch.tensor([3., NAN, NAN, 1.]))
    _same(torch.mode, torch.tensor(2.5))


def _grads(fn, *xs, atol=1e-5):
    cpu = [x.clone().requires_grad_() for x in xs]
    dev = [x.to(T).requires_grad_() for x in xs]
    want = fn(*cpu)
    got = no_fallback(lambda: fn(*dev))
    torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=atol, rtol=1e-4)
    r = torch.randn(want.shape)
    want.backward(r)
    got.backward(r.to(T))
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.grad.cpu(), c.grad, atol=atol * 10, rtol=1e-3)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, math.inf, 3.0])
def test_cdist_and_pdist(p):
    torch.manual_seed(1)
    for mode in ("use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist"):
        _grads(lambda x, y: torch.cdist(x, y, p=p, compute_mode=mode), torch.randn(2, 5, 3), torch.randn(4, 3))
    _grads(lambda x: torch.pdist(x, p=p), torch.randn(6, 3))
    x = torch.randn(4, 3)  # equal rows: distance 0, gradient 0
    _grads(lambda x, y: torch.cdist(x, y, p=p), x, torch.cat([x[:2], torch.randn(2, 3)]))
    _grads(lambda x, y: torch.cdist(x, y, p=p), torch.randn(0, 3), torch.randn(2, 3))


def test_cdist_large_uses_blocks():
    # more rows than one difference block holds: the blocks agree with CPU
    import torch_tpu.ops.composite as composite

    old, composite._PAIR_CHUNK = composite._PAIR_CHUNK, 64
    try:
        _grads(lambda x, y: torch.cdist(x, y, p=1.0), torch.randn(30, 4), torch.randn(7, 4))
    finally:
        composite._PAIR_CHUNK = old


def test_bincount():
    x = torch.tensor([1, 3, 3, 0])
    _same(torch.bincount, x)
    _same(lambda x, w: torch.bincount(x, w, minlength=7), x, torch.rand(4))
    _same(lambda x, w: torch.bincount(x, w), x, torch.tensor([1, 2, 3, 4]))  # float64, as CPU
    _same(lambda x: torch.bincount(x, minlength=3), torch.tensor([], dtype=torch.long))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([-1, 2], device=T))


@pytest.mark.parametrize("p,dim,maxnorm", [(2, 0, 1.0), (1, 1, 0.5), (3, -1, 2.0)])
def test_renorm(p, dim, maxnorm):
    torch.manual_seed(2)
    _grads(lambda x: torch.renorm(x, p, dim, maxnorm), torch.randn(4, 5, 3))
    x = torch.randn(4, 5)
    got = x.to(T)
    got.renorm_(p, dim % 2, maxnorm)
    torch.testing.assert_close(got.cpu(), x.renorm(p, dim % 2, maxnorm))


@pytest.mark.parametrize("args", [(4, 4), (3, 5, 1), (5, 3, -2), (0, 3)])
def test_tril_triu_indices(args):
    for f in (torch.tril_indices, torch.triu_indices):
        got = no_fallback(lambda: f(*args, device=T))
        assert got.device.type == "tpu" and torch.equal(got.cpu(), f(*args))


def test_channel_shuffle():
    x = torch.randn(2, 6, 3, 3)
    _same(lambda t: torch.nn.functional.channel_shuffle(t, 3), x)
    _same(lambda t: torch.nn.ChannelShuffle(2)(t), x)
