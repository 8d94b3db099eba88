"""Ops that went through the CPU fallback (issue 42: a host round trip per
call on a TPU) and run on tpu now: cauchy_, log_normal_, geometric_,
normal with tensor mean/std, copysign, frexp, histogram, histogramdd, sgn's
gradient (_efficientzerotensor), hash_tensor.  The draws come from the device's
generator, so they are compared with CPU's in distribution (quantiles,
moments and frequencies of 200,000 draws), not element by element;
copysign's values, dtypes, gradients and every error are CPU's."""
import math

import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback

N = 200_000


def _no_fallback(fn):
    with no_fallback():
        return fn()


def _quantiles(x, qs=(0.1, 0.25, 0.5, 0.75, 0.9)):
    x = x.double().sort().values
    return torch.tensor([x[int(q * (len(x) - 1))].item() for q in qs], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cauchy_matches_cpu_in_distribution(dtype):
    torch.manual_seed(0)
    t = _no_fallback(lambda: torch.empty(N, device="tpu", dtype=dtype).cauchy_(1.5, 0.5)).cpu()
    c = torch.empty(N, dtype=dtype).cauchy_(1.5, 0.5)
    assert t.dtype == c.dtype
    # quantiles of Cauchy(1.5, 0.5): 1.5 + 0.5 tan(pi (q - 1/2))
    want = torch.tensor([1.5 + 0.5 * math.tan(math.pi * (q - 0.5)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)],
                        dtype=torch.float64)
    assert torch.allclose(_quantiles(t), want, atol=0.03), (_quantiles(t), want)
    assert torch.allclose(_quantiles(c), want, atol=0.03)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_log_normal_matches_cpu_in_distribution(dtype):
    torch.manual_seed(0)
    t = _no_fallback(lambda: torch.empty(N, device="tpu", dtype=dtype).log_normal_(0.5, 0.25)).cpu()
    c = torch.empty(N, dtype=dtype).log_normal_(0.5, 0.25)
    assert t.dtype == c.dtype and bool((t > 0).all())
    lt, lc = t.double().log(), c.double().log()
    tol = 0.01 if dtype in (torch.float32, torch.float64) else 0.02
    assert abs(lt.mean().item() - 0.5) < tol and abs(lc.mean().item() - 0.5) < tol
    assert abs(lt.std().item() - 0.25) < tol and abs(lc.std().item() - 0.25) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.uint8, torch.float64])
def test_geometric_matches_cpu_in_distribution(dtype):
    p = 0.3
    torch.manual_seed(0)
    t = _no_fallback(lambda: torch.empty(N, device="tpu", dtype=dtype).geometric_(p)).cpu()
    c = torch.empty(N, dtype=dtype).geometric_(p)
    assert t.dtype == c.dtype
    # P(X = k) = (1 - p)^(k - 1) p, k >= 1: mean 1/p
    assert t.min().item() >= 0 and abs(t.double().mean().item() - 1 / p) < 0.05
    assert abs(c.double().mean().item() - 1 / p) < 0.05
    for k in (1, 2, 3):
        want = (1 - p) ** (k - 1) * p
        assert abs((t == k).double().mean().item() - want) < 0.005, k


@pytest.mark.parametrize("kind", ["tensor_tensor", "tensor_float", "float_tensor"])
def test_normal_with_tensor_mean_or_std(kind):
    mean = torch.arange(4.0).repeat(N // 4)
    std = torch.full((N,), 0.5)
    args = {"tensor_tensor": (mean, std), "tensor_float": (mean, 0.5), "float_tensor": (2.0, std)}[kind]
    targs = tuple(a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args)
    t = _no_fallback(lambda: torch.normal(*targs)).cpu()
    c = torch.normal(*args)
    assert t.shape == c.shape and t.dtype == c.dtype
    m = mean if kind != "float_tensor" else torch.full((N,), 2.0)
    z = (t - m) / 0.5
    assert abs(z.mean().item()) < 0.01 and abs(z.std().item() - 1) < 0.01
    # out=
    out = torch.empty(0, device="tpu")
    torch.normal(*targs, out=out)
    assert out.shape == c.shape


def test_normal_broadcasts_and_keeps_mean_dtype_like_cpu():
    for mdt, sdt in ((torch.float16, torch.float32), (torch.float32, torch.float64), (torch.float64, torch.float32)):
        m, s = torch.zeros(1, 3, dtype=mdt), torch.ones(2, 1, dtype=sdt)
        c = torch.normal(m, s)
        t = torch.normal(m.to("tpu"), s.to("tpu"))
        assert t.shape == c.shape and t.dtype == c.dtype, (mdt, sdt)


def test_seeds_and_generators_reproduce_and_high_rank():
    shape = (2, 1, 3, 1, 2, 1, 1, 2, 1, 2)
    for fn in (lambda g: torch.empty(shape, device="tpu").cauchy_(generator=g),
               lambda g: torch.empty(shape, device="tpu").log_normal_(generator=g),
               lambda g: torch.empty(shape, device="tpu", dtype=torch.int64).geometric_(0.5, generator=g),
               lambda g: torch.normal(torch.zeros(shape, device="tpu"), torch.ones(shape, device="tpu"), generator=g)):
        a = fn(torch.Generator(device="tpu").manual_seed(7)).cpu()
        b = fn(torch.Generator(device="tpu").manual_seed(7)).cpu()
        d = fn(torch.Generator(device="tpu").manual_seed(8)).cpu()
        assert a.shape == torch.Size(shape) and torch.equal(a, b) and not torch.equal(a, d)


ERRORS = [
    lambda d: torch.empty(3, device=d).cauchy_(0, 0),
    lambda d: torch.empty(3, device=d).cauchy_(0, -1.5),
    lambda d: torch.empty(3, device=d, dtype=torch.long).cauchy_(),
    lambda d: torch.empty(3, device=d, dtype=torch.int32).cauchy_(),
    lambda d: torch.empty(3, device=d).geometric_(0),
    lambda d: torch.empty(3, device=d).geometric_(1.0),
    lambda d: torch.empty(3, device=d, dtype=torch.bool).geometric_(0.5),
    lambda d: torch.empty(3, device=d).log_normal_(1, 0),
    lambda d: torch.empty(3, device=d, dtype=torch.long).log_normal_(),
    lambda d: torch.normal(torch.zeros(3, device=d), -torch.ones(3, device=d)),
    lambda d: torch.normal(torch.zeros(3, device=d), torch.ones(2, device=d)),
    lambda d: torch.normal(torch.zeros(3, device=d), -1.0),
    lambda d: torch.normal(0.0, -torch.ones(3, device=d)),
    lambda d: torch.normal(torch.zeros(3, device=d, dtype=torch.long), torch.ones(3, device=d)),
]


def _error_like_cpu(fn):
    """fn("tpu") raises CPU's exception type; returns both messages."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(Exception) as tpu:
        fn("tpu")
    assert type(tpu.value) is type(cpu.value)
    return str(cpu.value), str(tpu.value)


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_are_cpus(i):
    cpu, tpu = _error_like_cpu(ERRORS[i])
    assert tpu == cpu


COPYSIGN = [
    (lambda d: torch.tensor([1.5, -2.0, 0.0, -0.0, float("inf"), 3.0], device=d),
     lambda d: torch.tensor([-1.0, 2.0, -0.0, 0.0, -3.0, float("-nan")], device=d)),
    (lambda d: torch.tensor([1, -2, 3], device=d), lambda d: torch.tensor([-1, 1, -1], device=d)),
    (lambda d: torch.tensor([True, False], device=d), lambda d: -1),
    (lambda d: torch.tensor([1.0, -2.0], device=d), lambda d: -0.0),
    (lambda d: torch.tensor([1.0, -2.0], device=d, dtype=torch.float16), lambda d: torch.tensor([-1.0], device=d)),
    (lambda d: torch.tensor([[1.0], [2.0]], device=d, dtype=torch.bfloat16),
     lambda d: torch.tensor([-1.0, 1.0, -1.0], device=d, dtype=torch.float64)),
]


@pytest.mark.parametrize("i", range(len(COPYSIGN)))
def test_copysign_equals_cpu(i):
    a, b = COPYSIGN[i]
    want = torch.copysign(a("cpu"), b("cpu"))
    got = _no_fallback(lambda: torch.copysign(a("tpu"), b("tpu")))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want) and torch.equal(torch.signbit(got.cpu()), torch.signbit(want))


def test_copysign_inplace_out_and_grad():
    x, s = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([-1.0, -1.0, 1.0])
    t = x.to("tpu")
    t.copysign_(s.to("tpu"))
    assert torch.equal(t.cpu(), x.clone().copysign_(s))
    out = torch.empty(3, device="tpu")
    torch.copysign(x.to("tpu"), s.to("tpu"), out=out)
    assert torch.equal(out.cpu(), torch.copysign(x, s))
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    torch.copysign(xc, s).sum().backward()
    torch.copysign(xt, s.to("tpu")).sum().backward()
    assert torch.equal(xt.grad.cpu(), xc.grad)


COPYSIGN_ERRORS = [
    lambda d: torch.copysign(torch.ones(2, device=d), torch.ones(3, device=d)),
    lambda d: torch.copysign(torch.ones(2, device=d, dtype=torch.cfloat), torch.ones(2, device=d)),
    lambda d: torch.ones(2, device=d, dtype=torch.long).copysign_(torch.ones(2, device=d)),
]


@pytest.mark.parametrize("i", range(len(COPYSIGN_ERRORS)))
def test_copysign_errors_are_cpus(i):
    cpu, tpu = _error_like_cpu(COPYSIGN_ERRORS[i])
    assert cpu in tpu  # (an in-place cast error is prefixed with the op's name)


_FREXP_EDGES = {torch.float32: [0.0, -0.0, 1.0, -1.0, 0.5, 3.75, -1e-40, 1e-45, float("inf"), -float("inf"),
                                float("nan"), 1e30, -0.1, 3.4028234663852886e38, 1.1754943508222875e-38],
                torch.float64: [0.0, -0.0, 1.0, -0.5, -1e-310, 5e-324, float("inf"), float("nan"), 1e300,
                                2.2250738585072014e-308, 1.7976931348623157e308]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frexp_equals_cpu_bit_for_bit(dtype):
    # subnormals included: XLA's CPU code flushes them in float arithmetic,
    # the kernel works on the bits
    torch.manual_seed(0)
    edges = torch.tensor(_FREXP_EDGES.get(dtype, [0.0, -0.0, 1.0, 6e-8, float("inf"), float("nan")]))
    x = torch.cat([edges.to(dtype), (torch.randn(2000, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (2000,))
                                     ).to(dtype)])
    m, e = torch.frexp(x)
    mt, et = _no_fallback(lambda: torch.frexp(x.to("tpu")))
    assert mt.dtype == dtype and et.dtype == torch.int32
    torch.testing.assert_close(mt.cpu(), m, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(et.cpu(), e)
    num = ~m.isnan()  # (a NaN's sign bit is not CPU's to keep: bfloat16 conversions differ)
    assert torch.equal(torch.signbit(mt.cpu())[num], torch.signbit(m)[num])
    mo, eo = torch.empty(0, device="tpu", dtype=dtype), torch.empty(0, device="tpu", dtype=torch.int32)
    _no_fallback(lambda: torch.frexp(x.to("tpu"), out=(mo, eo)))
    assert torch.equal(eo.cpu(), e)


_HIST = [dict(bins=10), dict(bins=7, range=(-1.0, 2.0)), dict(bins=5, density=True), dict(bins=4, weight=True),
         dict(bins=3, range=(0.0, 0.0)), dict(bins=[-2.0, -0.5, 0.0, 0.1, 3.0]),
         dict(bins=6, weight=True, density=True, range=(-3, 1)), dict(bins=[-1.0, 0.0, 1.0], weight=True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("i", range(len(_HIST)))
def test_histogram_equals_cpu(i, dtype):
    torch.manual_seed(i)
    x = torch.randn(50, 3, dtype=dtype)
    kw = dict(_HIST[i])
    if "range" in kw:
        x[0, 0] = float("nan")  # counted nowhere (an explicit range: without one CPU refuses NaN)
    x[1, 1] = 0.0  # on an edge
    if kw.get("weight"):
        kw["weight"] = torch.rand(50, 3, dtype=dtype)
    if isinstance(kw["bins"], list):
        kw["bins"] = torch.tensor(kw["bins"], dtype=dtype)
    h, e = torch.histogram(x, **kw)
    kt = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    ht, et = _no_fallback(lambda: torch.histogram(x.to("tpu"), **kt))
    torch.testing.assert_close(ht.cpu(), h)
    assert torch.equal(et.cpu(), e)
    ho, eo = torch.empty(0, device="tpu", dtype=dtype), torch.empty(0, device="tpu", dtype=dtype)
    _no_fallback(lambda: torch.histogram(x.to("tpu"), **kt, out=(ho, eo)))
    torch.testing.assert_close(ho.cpu(), h)


@pytest.mark.parametrize("bad", [dict(bins=0), dict(bins=3, range=(2.0, 1.0)), dict(bins=3, range=(0.0, math.inf)),
                                 dict(bins=3, weight=torch.ones(4))])
def test_histogram_errors_are_cpus(bad):
    x = torch.randn(5)
    with pytest.raises(RuntimeError) as c:
        torch.histogram(x, **bad)
    kt = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in bad.items()}
    with pytest.raises(RuntimeError) as t:
        torch.histogram(x.to("tpu"), **kt)
    assert str(t.value) == str(c.value)


_HISTDD = [dict(bins=[3, 4]), dict(bins=5), dict(bins=[2, 3], range=[-1.0, 1.0, 0.0, 0.0]), dict(bins=[4, 2], weight=True),
           dict(bins=[3, 3], density=True), dict(bins=[2, 5], weight=True, density=True, range=[-2, 1, -1, 3]),
           dict(bins="tensors"), dict(bins="tensors", weight=True, density=True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("i", range(len(_HISTDD)))
def test_histogramdd_equals_cpu(i, dtype):
    torch.manual_seed(i)
    x = torch.randn(4, 10, 2, dtype=dtype)
    kw = dict(_HISTDD[i])
    if "range" in kw:
        x[0, 0, 0] = float("nan")  # counted nowhere (an explicit range: without one CPU refuses NaN)
    x[1, 1, 1] = 0.0
    if kw.get("weight"):
        kw["weight"] = torch.rand(4, 10, dtype=dtype)
    if kw["bins"] == "tensors":
        kw["bins"] = [torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0], dtype=dtype), torch.tensor([-1.0, 0.0, 1.0], dtype=dtype)]
        x[2, 2, 0] = 3.0  # on the last edge: in the last bin
    h, e = torch.histogramdd(x, **kw)
    kt = {k: (v.to("tpu") if isinstance(v, torch.Tensor) else [b.to("tpu") for b in v] if k == "bins" and
              isinstance(v, list) and isinstance(v[0], torch.Tensor) else v) for k, v in kw.items()}
    ht, et = _no_fallback(lambda: torch.histogramdd(x.to("tpu"), **kt))
    torch.testing.assert_close(ht.cpu(), h)
    assert len(et) == len(e) and all(torch.equal(a.cpu(), b) for a, b in zip(et, e))


@pytest.mark.parametrize("bad", [dict(bins=[2, 0]), dict(bins=[2, 2, 2]), dict(bins=[2, 2], range=[1.0, 0.0, 0, 1]),
                                 dict(bins=[2, 2], range=[0.0, 1.0]), dict(bins=[2, 2], weight=torch.ones(4)),
                                 dict(bins=[2, 2], nan=True)])
def test_histogramdd_errors_are_cpus(bad):
    x = torch.randn(5, 2)
    bad = dict(bad)
    if bad.pop("nan", False):
        x[0, 1] = float("nan")
    with pytest.raises(RuntimeError) as c:
        torch.histogramdd(x, **bad)
    kt = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in bad.items()}
    with pytest.raises(RuntimeError) as t:
        torch.histogramdd(x.to("tpu"), **kt)
    assert str(t.value) == str(c.value)


_SGN = [torch.tensor([1.5, -2.0, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), -1e-30]),
        torch.complex(torch.tensor([3.0, 0.0, 0.0, -1.0, float("inf"), 1e-30]),
                      torch.tensor([4.0, 0.0, -2.0, 1e-20, 1.0, -1e-30]))]


@pytest.mark.parametrize("i", range(len(_SGN)), ids=["real", "complex"])
def test_sgn_and_its_gradient_equal_cpu(i):
    # a real input's gradient is autograd's zero tensor (_efficientzerotensor),
    # which went through the CPU fallback
    x = _SGN[i]
    g = torch.randn_like(x)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    yc = torch.sgn(xc)
    (gc,) = torch.autograd.grad(yc, xc, g)
    with no_fallback():
        yt = torch.sgn(xt)
        (gt,) = torch.autograd.grad(yt, xt, g.to("tpu"))
    torch.testing.assert_close(yt.detach().cpu(), yc.detach(), equal_nan=True)
    assert gt.dtype == gc.dtype and gt.shape == gc.shape
    torch.testing.assert_close(gt.cpu(), gc, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, None])
def test_efficientzerotensor_is_zeros_on_the_device(dtype):
    want = torch._efficientzerotensor((2, 0, 3) if dtype == torch.bool else (2, 3), dtype=dtype)
    with no_fallback():
        got = torch._efficientzerotensor(tuple(want.shape), dtype=dtype, device="tpu")
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), torch.zeros_like(want))


_F32_EDGES = [1.0, 2.0, -0.0, 0.0, float("nan"), float("inf"), -float("inf"), 1e-45, -3e-39, 1.17e-38, 3.4e38, -1.5]


def _hash_cases():
    signalling = torch.tensor([0x7F800001, -0x7FFFFEDD], dtype=torch.int32).view(torch.float32)  # quieted as CPU
    return [(torch.tensor(_F32_EDGES)[:, None], dict(dim=1)), (signalling[:, None], dict(dim=1)),
            (torch.randn(3, 4, 5), {}), (torch.randn(3, 4, 5), dict(dim=(0, 2), keepdim=True)),
            (torch.randn(2, 3), dict(dim=-1)), (torch.randint(-100, 100, (4, 6), dtype=torch.int32), {}),
            (torch.tensor([-1, 7], dtype=torch.int8), {}), (torch.tensor([255, 3], dtype=torch.uint8), {}),
            (torch.tensor([True, False, True]), {}), (torch.randn(5, dtype=torch.float64), dict(dim=0)),
            (torch.randn(7).half(), {}), (torch.randn(7).bfloat16(), {}), (torch.randn(0, 3), dict(dim=1)),
            (torch.tensor(2.5), {}), (torch.tensor(2.5), dict(dim=0, keepdim=True)),
            (torch.randint(0, 2 ** 62, (9,), dtype=torch.int64), {})]


@pytest.mark.parametrize("i", range(16))
def test_hash_tensor_equals_cpu_bit_for_bit(i):
    torch.manual_seed(i)
    x, kw = _hash_cases()[i]
    want = torch.hash_tensor(x, **kw)
    got = _no_fallback(lambda: torch.hash_tensor(x.to("tpu"), **kw))
    assert got.dtype == torch.uint64 and got.shape == want.shape
    assert torch.equal(got.cpu().view(torch.int64), want.view(torch.int64))
    out = torch.empty(0, dtype=torch.uint64, device="tpu")
    _no_fallback(lambda: torch.hash_tensor(x.to("tpu"), **kw, out=out))
    assert torch.equal(out.cpu().view(torch.int64), want.view(torch.int64))


@pytest.mark.parametrize("bad", [lambda d: torch.hash_tensor(torch.zeros(0, device=d)),
                                 lambda d: torch.hash_tensor(torch.zeros(3, 0, device=d), dim=1),
                                 lambda d: torch.hash_tensor(torch.zeros(3, device=d), dim=1),
                                 lambda d: torch.hash_tensor(torch.zeros(3, device=d), mode=1),
                                 lambda d: torch.hash_tensor(torch.zeros(3, device=d, dtype=torch.complex64))])
def test_hash_tensor_errors_are_cpus(bad):
    cpu, tpu = _error_like_cpu(bad)
    assert tpu == cpu
