"""Ops composed on the device (torch_tpu/ops/composite.py) vs PyTorch CPU,
with no CPU fallback: trace, linalg.cross, median, kthvalue,
repeat_interleave(Tensor), hypot, heaviside, sinc; values, dtypes, NaN
rules, gradients, errors.  (The OpInfo sweep covers their float32 samples.)"""
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
