"""Reduction kernels on tpu against PyTorch CPU: dims/keepdim/dtype,
NaN handling, 0-d and zero-size inputs, out= variants, errors, and gradients
through softmax/log_softmax and the reductions."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from torch_tpu import _dispatch

TPU = torch.device("tpu")


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to(TPU)
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, tuple):
        return tuple(to_cpu(v) for v in x)
    if isinstance(x, list):
        return [to_cpu(v) for v in x]
    return x


@contextlib.contextmanager
def on_tpu():
    before = _dispatch.fallback_counts()
    yield
    after = _dispatch.fallback_counts()
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not new, f"ran on the CPU fallback: {new}"


def compare(fn, *args, atol=None, rtol=None, **kwargs):
    want = fn(*args, **kwargs)
    with on_tpu():
        got = fn(*to_tpu(args), **{k: to_tpu(v) for k, v in kwargs.items()})
    got = to_cpu(got)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(wants) == len(gots)
    for g, w in zip(gots, wants):
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            assert g.shape == w.shape, (g.shape, w.shape)
        assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True)
    return got


def rand(shape, dtype=torch.float32, low=-3.0, high=3.0):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high) + 1, shape, dtype=dtype)
    return (torch.rand(shape, dtype=torch.float64) * (high - low) + low).to(dtype)


DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool]
DIMS = [None, 0, 1, -1, (0, 2), (), [1, -1]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", DIMS)
def test_sum_prod(dtype, dim):
    x = rand((3, 4, 5), dtype, -2, 2)
    for keepdim in [False, True]:
        if dim is None:
            compare(torch.sum, x)
        else:
            compare(torch.sum, x, dim, keepdim=keepdim)
    if dim is None:
        compare(torch.prod, x)
    elif isinstance(dim, int):
        compare(torch.prod, x, dim, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("dim", DIMS)
def test_mean(dtype, dim):
    x = rand((3, 4, 5), dtype)
    if dim is None:
        compare(torch.mean, x)
    else:
        compare(torch.mean, x, dim)
        compare(torch.mean, x, dim, keepdim=True)


def test_sum_mean_dtype_arg_and_errors():
    x = rand((4, 6), torch.int32, -5, 5)
    compare(torch.sum, x, 1, dtype=torch.float64)
    compare(torch.sum, x, dtype=torch.int32)
    compare(torch.mean, x, 0, dtype=torch.float32)
    compare(torch.mean, rand((4, 6), torch.bfloat16), dtype=torch.float32)
    compare(torch.prod, rand((5,), torch.float32, 0.5, 1.5), dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"mean\(\): could not infer output dtype"):
        torch.mean(x.to(TPU))
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.sum(x.to(TPU), 2)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.sum(x.to(TPU), (0, -2))


def test_bf16_sum_accumulates_in_f32():
    x = torch.ones(5000, dtype=torch.bfloat16)
    compare(torch.sum, x)
    compare(torch.mean, rand((4096,), torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_amax_amin_max_min(dtype):
    x = rand((3, 4, 5), dtype, -5, 5)
    for fn in [torch.amax, torch.amin]:
        compare(fn, x)
        compare(fn, x, 1)
        compare(fn, x, (0, 2), keepdim=True)
    compare(torch.max, x)
    compare(torch.min, x)
    for dim in [0, 1, -1]:
        for keepdim in [False, True]:
            compare(torch.max, x, dim, keepdim=keepdim)
            compare(torch.min, x, dim, keepdim=keepdim)
    if dtype != torch.bool:
        compare(torch.argmax, x)
        compare(torch.argmin, x, 1)
        compare(torch.argmax, x, -1, keepdim=True)
        compare(torch.argmin, x, keepdim=True)
        compare(torch.aminmax, x)
        compare(torch.aminmax, x, dim=1, keepdim=True)


def test_max_ties_and_nan():
    x = torch.tensor([[1.0, 5.0, float("nan"), 2.0, float("nan")], [3.0, 3.0, 0.0, -1.0, 3.0]])
    compare(torch.max, x, 1)
    compare(torch.min, x, 1)
    compare(torch.amax, x, 1)
    compare(torch.amin, x, 0)
    compare(torch.max, x)
    compare(torch.argmax, x, 1)
    compare(torch.argmin, x)
    i = torch.tensor([[4, 9, 9, 1], [2, 2, 7, 7]])
    compare(torch.max, i, 1)
    compare(torch.min, i, 1)


def test_max_min_out_variants():
    x = rand((3, 5))
    t = x.to(TPU)
    v, i = torch.empty(0, device=TPU), torch.empty(0, dtype=torch.long, device=TPU)
    torch.max(t, 1, out=(v, i))
    wv, wi = torch.max(x, 1)
    assert_close(v.cpu(), wv)
    assert torch.equal(i.cpu(), wi)
    o = torch.empty(0, device=TPU)
    torch.sum(t, 0, out=o)
    assert_close(o.cpu(), x.sum(0))
    o2 = torch.empty(0, dtype=torch.long, device=TPU)
    torch.argmax(t, 1, out=o2)
    assert torch.equal(o2.cpu(), x.argmax(1))


def test_extreme_errors_on_empty():
    e = torch.empty(0, 3, device=TPU)
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        torch.amax(e, 0)
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        torch.max(e)
    with pytest.raises(IndexError):
        torch.max(e, 0)
    with pytest.raises(IndexError, match="Expected reduction dim to be specified"):  # as CPU (was RuntimeError)
        torch.argmax(e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.uint8])
def test_all_any_count_nonzero(dtype):
    x = rand((3, 4), dtype, 0, 2)
    for fn in [torch.all, torch.any]:
        compare(fn, x)
        compare(fn, x, 1)
        compare(fn, x, 0, keepdim=True)
        compare(fn, x, dim=(0, 1))
    compare(torch.count_nonzero, x)
    compare(torch.count_nonzero, x, 1)
    compare(torch.count_nonzero, x, (0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_var_std(dtype):
    x = rand((4, 5, 6), dtype)
    for fn in [torch.var, torch.std]:
        compare(fn, x)
        compare(fn, x, 1)
        compare(fn, x, (0, 2), keepdim=True)
        compare(fn, x, 1, correction=0)
        compare(fn, x, -1, unbiased=False)
        compare(fn, x, correction=2)
    for fn in [torch.var_mean, torch.std_mean]:
        compare(fn, x)
        compare(fn, x, 2, keepdim=True)
        compare(fn, x, (0, 1), correction=0)
    compare(torch.var, rand((1, 3), dtype), 0)  # N - correction = 0 -> nan/inf like CPU
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        torch.var(torch.arange(4, device=TPU))


@pytest.mark.parametrize("p", [2, 1, float("inf"), float("-inf"), 0, 3, 0.5])
def test_norms(p):
    x = rand((3, 4, 5))
    compare(torch.linalg.vector_norm, x, p)
    compare(torch.linalg.vector_norm, x, p, dim=1)
    compare(torch.linalg.vector_norm, x, p, dim=(0, 2), keepdim=True)
    compare(torch.norm, x, p, dim=1)
    compare(torch.linalg.vector_norm, rand((3, 4), torch.bfloat16), p, dim=0)
    compare(torch.linalg.vector_norm, rand((3, 4), torch.bfloat16), p, dtype=torch.float32)


def test_norm_forms():
    x = rand((4, 6), torch.float64)
    compare(torch.norm, x)
    compare(lambda t: t.norm(), x)
    compare(lambda t: t.norm(1, dim=0, keepdim=True), x)
    compare(F.normalize, x, dim=1)


def test_logsumexp():
    x = rand((3, 4, 5), low=-20, high=20)
    compare(torch.logsumexp, x, 1)
    compare(torch.logsumexp, x, (0, 2), keepdim=True)
    compare(torch.logsumexp, rand((3, 4), torch.bfloat16), 1)
    compare(torch.logsumexp, rand((3, 4), torch.int64, -3, 3), 1)
    inf = float("inf")
    compare(torch.logsumexp, torch.tensor([[-inf, -inf], [inf, 1.0], [2.0, 3.0]]), 1)
    compare(torch.logsumexp, torch.empty(0, 3), 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dtype, dim):
    x = rand((3, 4, 5), dtype, -10, 10)
    compare(F.softmax, x, dim)
    # PyTorch CPU's bf16 last-dim log_softmax rounds x - max to bf16 before
    # subtracting log(sum); ours rounds once (it matches a float64 reference
    # to bf16 precision), so near-zero outputs differ by a few bf16 ulps.
    atol = 8e-3 if dtype == torch.bfloat16 else None
    compare(F.log_softmax, x, dim, atol=atol, rtol=None if atol is None else 1.6e-2)


def test_softmax_dtype_and_special():
    x = rand((4, 7), torch.bfloat16)
    compare(F.softmax, x, 1, dtype=torch.float32)
    # half_to_float: CPU does not implement it; compare with softmax in float32
    with on_tpu():
        got = torch.ops.aten._softmax(x.to(TPU), 1, True)
        got_log = torch.ops.aten._log_softmax(x.to(TPU), 0, True)
    assert got.dtype == torch.float32 and got_log.dtype == torch.float32
    assert_close(got.cpu(), F.softmax(x.float(), 1))
    assert_close(got_log.cpu(), F.log_softmax(x.float(), 0))
    inf = float("inf")
    compare(F.softmax, torch.tensor([[-inf, -inf, -inf], [0.0, -inf, 1.0]]), 1)
    compare(F.softmax, torch.tensor(2.0), 0)
    compare(F.softmax, torch.empty(0, 4), 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_softmax_gradients(dtype):
    x = rand((4, 6), dtype, -4, 4)
    g = rand((4, 6), dtype)
    for fn in [lambda t: F.softmax(t, 1), lambda t: F.log_softmax(t, 0), lambda t: F.softmax(t, -1) * 3]:
        xc = x.clone().requires_grad_()
        fn(xc).backward(g)
        xt = x.to(TPU).requires_grad_()
        with on_tpu():
            fn(xt).backward(g.to(TPU))
        assert_close(xt.grad.cpu(), xc.grad)


def test_reduction_gradients():
    x = rand((3, 4, 5), torch.float64)
    fns = [lambda t: t.sum(1).pow(2).sum(), lambda t: t.mean((0, 2)).exp().sum(),
           lambda t: t.var(1).sum(), lambda t: t.std(0, keepdim=True).sum(),
           lambda t: torch.logsumexp(t, 2).sum(), lambda t: t.amax(1).sum(), lambda t: t.max(2).values.sum(),
           lambda t: torch.linalg.vector_norm(t, 2, dim=1).sum(), lambda t: t.cumsum(1).sin().sum(),
           lambda t: F.cross_entropy(t[:, :, 0], torch.tensor([1, 0, 3], device=t.device))]
    for fn in fns:
        xc = x.clone().requires_grad_()
        fn(xc).backward()
        xt = x.to(TPU).requires_grad_()
        fn(xt).backward()
        assert_close(xt.grad.cpu(), xc.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool,
                                   torch.bfloat16])
def test_cumsum_cumprod(dtype):
    x = rand((4, 37), dtype, -2, 2) if dtype != torch.bfloat16 else rand((4, 37), dtype, 0.9, 1.1)
    for dim in [0, 1, -1]:
        compare(torch.cumsum, x, dim)
        if dtype.is_floating_point:
            compare(torch.cumprod, rand((4, 9), dtype, 0.5, 1.5), dim)
        else:
            compare(torch.cumprod, rand((4, 9), dtype, -2, 2), dim)
    compare(torch.cumsum, x, 1, dtype=torch.float64)
    compare(torch.cumsum, torch.tensor(3.0), 0)
    compare(torch.cumsum, torch.empty(0, 3), 0)
    t = x.to(TPU)
    if dtype in (torch.float32, torch.int64):
        t.cumsum_(1)
        assert_close(t.cpu(), x.clone().cumsum_(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_sort_topk(dtype):
    x = rand((4, 9), dtype, -3, 3)  # small range: many ties, checks stability
    for dim in [0, 1, -1]:
        for desc in [False, True]:
            compare(torch.sort, x, dim=dim, descending=desc, stable=True)
    compare(torch.sort, x)
    compare(torch.argsort, x, dim=1, stable=True)
    distinct = (torch.randperm(36).reshape(4, 9) - 18).to(dtype)  # topk's order of ties is unspecified
    for k in [0, 1, 3]:
        compare(torch.topk, distinct, k)
        compare(torch.topk, distinct, k, 0, largest=False)


def test_sort_nan_and_topk_errors():
    x = torch.tensor([3.0, float("nan"), 1.0, 3.0, -2.0, float("nan"), 2.0])
    compare(torch.sort, x, stable=True)
    compare(torch.sort, x, descending=True, stable=True)
    compare(torch.topk, torch.tensor([3.0, float("nan"), 1.0]), 2)
    compare(torch.sort, torch.tensor(5.0))
    compare(torch.sort, torch.empty(0, 2), 0)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(torch.arange(3.0, device=TPU), 4)
    v, i = torch.empty(0, device=TPU), torch.empty(0, dtype=torch.long, device=TPU)
    torch.sort(x.to(TPU), stable=True, out=(v, i))
    wv, wi = torch.sort(x, stable=True)
    assert_close(v.cpu(), wv, equal_nan=True)
    assert torch.equal(i.cpu(), wi)


def test_zero_size_and_0d():
    e = torch.empty(0, 3)
    compare(torch.sum, e)
    compare(torch.sum, e, 0)
    compare(torch.mean, e, 0)
    compare(torch.prod, e, 0)
    compare(torch.amax, e, 1)
    compare(torch.all, e, 0)
    compare(torch.any, e)
    compare(torch.var, e, 1)
    s = torch.tensor(2.5)
    compare(torch.sum, s)
    compare(torch.sum, s, 0)
    compare(torch.mean, s, -1, keepdim=True)
    compare(torch.max, s, 0)
    compare(torch.argmax, s)
    compare(torch.amax, s)
