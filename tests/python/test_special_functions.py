"""The special functions that went through the CPU fallback (issue 42) and
run on tpu now, composed of device ops (torch_tpu/ops/special.py): ndtri,
log_ndtr, erfcx, airy_ai, the Bessel functions, the orthogonal
polynomials, igamma / igammac.  Every op is compared with PyTorch CPU on
its OpInfo float32 samples and on grids of edge values (0, negative, inf,
NaN, large arguments) in float32 and float64; dtypes, shapes, out=, the
Scalar overloads and autograd are CPU's; and no call falls back."""
import math
import os

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_tpu  # noqa: F401
from hf_util import no_fallback

UNARY = ["ndtri", "log_ndtr", "erfcx", "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
         "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
         "spherical_bessel_j0"]
POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]
OPINFO_NAMES = [f"special.{n}" for n in UNARY + POLYNOMIALS] + ["igamma", "igammac"]
# Fused mode compiles each composed kernel as one program (igamma's is a few
# hundred ops, ~3 s cold per shape): there the float64 grids are left to the
# strict and debug runs, which check the same kernels' values.
DTYPES = [torch.float32, pytest.param(torch.float64, marks=pytest.mark.skipif(
    os.environ.get("TORCH_TPU_EAGER_MODE", "").strip().lower() == "fused",
    reason="float64 grids run in strict and debug mode (fused: one cold compile per kernel and shape)"))]
# float32: OpInfo's tolerance for these ops (no override: 1e-4); float64: near the last bits
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float64: dict(atol=1e-9, rtol=1e-9)}


def _no_fallback(fn):
    with no_fallback():
        return fn()


def _tpu(a):
    return a.to("tpu") if isinstance(a, torch.Tensor) else a


def _check(fn, *args, dtype=torch.float32):
    want = fn(*args)
    got = _no_fallback(lambda: fn(*[_tpu(a) for a in args]))
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **TOL[dtype])


def _op(name):
    return getattr(torch.special, name)


_OPS = {op.name + ("." + op.variant_test_name if op.variant_test_name else ""): op for op in op_db}


@pytest.mark.parametrize("name", OPINFO_NAMES)
def test_opinfo_samples_match_cpu(name):
    op = _OPS[name]
    for s in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        _check(lambda x, *a: op.op(x, *a, **s.kwargs), s.input, *s.args)


# edge values: 0, -0, +-1, small, large, inf, NaN, and dense grids (no float32 subnormals: the device
# flushes them to zero)
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 2.09, -2.09, 5.0, -5.0, 8.0, 1e-6, -1e-6, 1e-30, 100.0, -100.0,
         103.9, 1e4, -1e4, 1e10, -1e10, math.inf, -math.inf, math.nan]


def _grid(dtype):
    return torch.cat([torch.linspace(-30, 30, 1201, dtype=dtype), torch.linspace(-3, 3, 301, dtype=dtype),
                      torch.logspace(-5, 8, 131, dtype=dtype), -torch.logspace(-5, 3, 81, dtype=dtype),
                      torch.tensor(EDGES, dtype=dtype)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_edges_and_grids(name, dtype):
    x = _grid(dtype)
    if name == "ndtri":
        x = torch.cat([torch.linspace(0, 1, 1001, dtype=dtype), torch.logspace(-37, -1, 73, dtype=dtype),
                       torch.tensor([-0.1, 1.1, 1 - 1e-7, 1e-30, math.inf, -math.inf, math.nan], dtype=dtype)])
    _check(_op(name), x, dtype=dtype)


def test_unary_promotes_integers_and_keeps_shapes():
    for name in ("ndtri", "erfcx", "bessel_j0", "modified_bessel_k1"):
        _check(_op(name), torch.arange(-3, 4).reshape(7, 1))
        _check(_op(name), torch.tensor([[True, False]]))
        _check(_op(name), torch.empty(2, 0, 3))
        _check(_op(name), torch.tensor(0.25))


POLY_X = [-1.5, -1.0, -0.7, -0.5, -1e-9, 0.0, 1e-9, 0.3, 0.5, 0.9, 1.0, 1 - 1e-7, 1.3, 2.0, -2.0, 7.5,
          math.inf, -math.inf, math.nan]
POLY_N = [-3.0, -1.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 13.0, 40.0,
          math.nan, math.inf, -math.inf, 1e30]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_edges(name, dtype):
    x = torch.tensor(POLY_X, dtype=dtype)[:, None]
    n = torch.tensor(POLY_N, dtype=dtype)[None, :]
    _check(_op(name), x, n, dtype=dtype)
    _check(_op(name), x, n.to(torch.int64).clamp(-5, 50), dtype=dtype)  # integer degrees
    _check(_op(name), x, 6, dtype=dtype)  # n_scalar
    _check(_op(name), 0.3, n, dtype=dtype)  # x_scalar


def test_polynomial_large_degree_and_hermite_limit():
    x = torch.linspace(-0.99, 0.99, 41)
    # the closed form on (-1, 1), no recurrence: cos(n acos x) (at larger n, one ulp of acos x is 1e-4)
    _check(torch.special.chebyshev_polynomial_t, x, 300.0)
    _check(torch.special.shifted_chebyshev_polynomial_w, (x + 1) / 2, torch.tensor(300.0))
    _check(torch.special.hermite_polynomial_h, x, torch.tensor([127.0, 128.0, 129.0, 1000.0]).reshape(4, 1))
    _check(torch.special.hermite_polynomial_he, x.double(), torch.tensor([513.0, 2.0], dtype=torch.float64)[:, None],
           dtype=torch.float64)


def test_polynomial_integer_inputs_promote_like_cpu():
    x, n = torch.tensor([2, 3, -1, 0]), torch.tensor([3, 2, 5, 4])
    _check(torch.special.chebyshev_polynomial_t, x, n)
    _check(torch.special.hermite_polynomial_h, x, 3)
    _check(torch.special.legendre_polynomial_p, 1, n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [torch.igamma, torch.igammac])
def test_incomplete_gamma_grids(op, dtype):
    a = torch.cat([torch.logspace(-3, 4, 29, dtype=dtype),
                   torch.tensor([0.0, -1.0, 0.5, 1.0, 20.5, 150.0, 250.0, 1e5, 1e6, math.inf, math.nan], dtype=dtype)])
    x = torch.cat([torch.logspace(-3, 4.3, 37, dtype=dtype),
                   torch.tensor([0.0, -1.0, 0.5, 1.0, 1.05, 1.1, 20.5, 150.0, 250.0, 1e5, 1e6, math.inf, math.nan],
                                dtype=dtype)])
    _check(op, a[:, None], x[None, :], dtype=dtype)
    # a ~ x, where each of ATen's branches hands over to the next
    s = torch.logspace(-2, 5, 120, dtype=dtype)
    _check(op, torch.cat([s] * 4), torch.cat([s * 0.69, s * 1.31, s * 0.95, s * 1.05]), dtype=dtype)


def test_incomplete_gamma_errors_and_special_aliases():
    a, x = torch.rand(6) * 5, torch.rand(6) * 5
    _check(torch.special.gammainc, a, x)
    _check(torch.special.gammaincc, a, x)
    _check(torch.igamma, a, torch.tensor(2.0))  # broadcast 0-d
    with pytest.raises(NotImplementedError, match="igamma_cpu"):
        torch.igamma(torch.tensor([2], device="tpu"), torch.tensor([3], device="tpu"))
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.igamma(torch.rand(3, device="tpu"), torch.rand(4, device="tpu"))


def test_out_and_inplace_variants():
    x = torch.rand(4, 3) * 0.9 + 0.05
    for name in UNARY:
        want = _op(name)(x)
        out = torch.empty(0, device="tpu")
        res = _no_fallback(lambda: _op(name)(x.to("tpu"), out=out))
        assert res is out and out.shape == want.shape
        torch.testing.assert_close(out.cpu(), want, **TOL[torch.float32])
    n = torch.tensor([0.0, 3.0, 7.0])
    for name in POLYNOMIALS:
        for args in ((x, n), (x, 4), (0.4, n)):
            want = _op(name)(*args)
            out = torch.empty(0, device="tpu")
            _no_fallback(lambda: _op(name)(*[_tpu(a) for a in args], out=out))
            assert out.shape == want.shape
            torch.testing.assert_close(out.cpu(), want, **TOL[torch.float32])
    for op in (torch.igamma, torch.igammac):
        out = torch.empty(0, device="tpu")
        _no_fallback(lambda: op(x.to("tpu"), n.to("tpu"), out=out))
        torch.testing.assert_close(out.cpu(), op(x, n), **TOL[torch.float32])
        t = x.to("tpu")
        getattr(t, op.__name__ + "_")(n.to("tpu"))
        torch.testing.assert_close(t.cpu(), op(x, n), **TOL[torch.float32])


@pytest.mark.parametrize("name", ["ndtri", "log_ndtr", "erfcx"])
def test_gradients_match_cpu(name):
    x = torch.rand(16, dtype=torch.float64) * 0.9 + 0.05
    if name != "ndtri":
        x = x * 8 - 4
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    _op(name)(xc).sum().backward()
    _no_fallback(lambda: _op(name)(xt).sum().backward())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def _grad_outcome(fn, device):
    x = torch.rand(3, dtype=torch.float64).to(device).requires_grad_()
    try:
        fn(x).sum().backward()
    except (RuntimeError, NotImplementedError) as e:
        return type(e), str(e)
    return x.grad.cpu()


def test_autograd_is_cpus_where_cpu_has_no_derivative():
    # no derivative formula (bessel_j0, the polynomials: a result without grad_fn) or a
    # not-implemented one (igamma's first argument): the same error as CPU
    other = torch.rand(3, dtype=torch.float64) + 0.5
    for fn in (torch.special.bessel_j0, lambda x: torch.special.chebyshev_polynomial_t(x, 3),
               lambda x: torch.igamma(x, other.to(x.device)), torch.special.airy_ai):
        want = _grad_outcome(fn, "cpu")
        assert isinstance(want, tuple)
        assert _grad_outcome(fn, "tpu") == want
    # igamma's second argument has a derivative
    a = torch.rand(5, dtype=torch.float64) + 0.5
    xv = torch.rand(5, dtype=torch.float64) + 0.5
    xc, xt = xv.clone().requires_grad_(), xv.to("tpu").requires_grad_()
    torch.igamma(a, xc).sum().backward()
    _no_fallback(lambda: torch.igamma(a.to("tpu"), xt).sum().backward())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
