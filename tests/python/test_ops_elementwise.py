"""Elementwise kernels on tpu against PyTorch CPU: values, dtypes, shapes,
broadcasting, 0-d and zero-size inputs, out=/in-place variants, errors, and
gradients through the backward ops."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from torch_tpu import _dispatch

TPU = torch.device("tpu")
FLOATS = [torch.float32, torch.bfloat16, torch.float64]


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to(TPU)
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


@contextlib.contextmanager
def on_tpu():
    """Asserts that nothing inside ran through the CPU fallback."""
    before = _dispatch.fallback_counts()
    yield
    after = _dispatch.fallback_counts()
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not new, f"ran on the CPU fallback: {new}"


def compare(fn, *args, atol=None, rtol=None, equal_nan=True, **kwargs):
    want = fn(*args, **kwargs)
    with on_tpu():
        got = fn(*to_tpu(args), **{k: to_tpu(v) for k, v in kwargs.items()})
    got = to_cpu(got)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape
    assert_close(got, want, atol=atol, rtol=rtol, equal_nan=equal_nan)
    return got


def rand(shape, dtype=torch.float32, low=-3.0, high=3.0):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high) + 1, shape, dtype=dtype)
    return (torch.rand(shape, dtype=torch.float64) * (high - low) + low).to(dtype)


# ---- unary math ------------------------------------------------------------------------------

UNARY = {
    # name: (fn, low, high)
    "neg": (torch.neg, -3, 3), "abs": (torch.abs, -3, 3), "exp": (torch.exp, -5, 5), "exp2": (torch.exp2, -5, 5),
    "expm1": (torch.expm1, -3, 3), "log": (torch.log, 0.01, 10), "log2": (torch.log2, 0.01, 10),
    "log10": (torch.log10, 0.01, 10), "log1p": (torch.log1p, -0.9, 10), "sqrt": (torch.sqrt, 0, 10),
    "rsqrt": (torch.rsqrt, 0.05, 10), "reciprocal": (torch.reciprocal, 0.5, 3),
    "sigmoid": (torch.sigmoid, -8, 8), "tanh": (torch.tanh, -4, 4), "sin": (torch.sin, -6, 6),
    "cos": (torch.cos, -6, 6), "tan": (torch.tan, -1.3, 1.3), "asin": (torch.asin, -1, 1),
    "acos": (torch.acos, -1, 1), "atan": (torch.atan, -8, 8), "sinh": (torch.sinh, -8, 8),
    "cosh": (torch.cosh, -8, 8), "asinh": (torch.asinh, -50, 50), "acosh": (torch.acosh, 1, 50),
    "atanh": (torch.atanh, -0.95, 0.95), "erf": (torch.erf, -4, 4), "erfc": (torch.erfc, -3, 5),
    "erfinv": (torch.erfinv, -0.99, 0.99), "floor": (torch.floor, -5, 5), "ceil": (torch.ceil, -5, 5),
    "round": (torch.round, -5, 5), "trunc": (torch.trunc, -5, 5), "frac": (torch.frac, -5, 5),
    "sign": (torch.sign, -3, 3), "sgn": (torch.sgn, -3, 3), "square": (torch.square, -3, 3),
    "relu": (torch.relu, -3, 3), "signbit": (torch.signbit, -3, 3),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name, dtype):
    fn, lo, hi = UNARY[name]
    x = rand((5, 7), dtype, lo, hi)
    compare(fn, x)


@pytest.mark.parametrize("name", ["exp", "sqrt", "sin", "sigmoid", "erf", "abs", "neg", "sign", "floor", "square",
                                  "log1p", "reciprocal"])
def test_unary_int64_promotes_like_cpu(name):
    fn, lo, hi = UNARY[name]
    x = rand((6,), torch.int64, max(lo, 0), hi + 2)
    compare(fn, x)


def test_unary_special_values():
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 1e-30, 80.0, -80.0])
    for fn in [torch.exp, torch.expm1, torch.log, torch.log1p, torch.sqrt, torch.tanh, torch.sigmoid, torch.erf,
               torch.erfc, torch.erfinv, torch.sign, torch.signbit, torch.isnan, torch.isinf, torch.isfinite,
               torch.isposinf, torch.isneginf, torch.floor, torch.trunc, torch.sinh, torch.cosh, torch.asinh,
               torch.atanh]:
        compare(fn, x)


def test_round_decimals():
    x = rand((20,), torch.float64, -100, 100)
    for d in [0, 1, 2, -1]:
        compare(torch.round, x, decimals=d)
    compare(torch.round, torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5]))


def test_unary_0d_and_zero_size():
    compare(torch.exp, torch.tensor(1.5))
    compare(torch.exp, torch.empty(0, 3))
    compare(torch.abs, torch.tensor(-3, dtype=torch.int32))


def test_unsupported_dtypes_raise_like_cpu():
    with pytest.raises(NotImplementedError, match="abs_cpu"):
        torch.abs(torch.ones(2, dtype=torch.bool, device=TPU))
    with pytest.raises(NotImplementedError, match="frac_cpu"):
        torch.frac(torch.ones(2, dtype=torch.int64, device=TPU))
    with pytest.raises(RuntimeError, match="Negation"):
        -torch.ones(2, dtype=torch.bool, device=TPU)


def test_unary_out_and_inplace_on_view():
    x = rand((4, 5))
    t = x.to(TPU)
    out = torch.empty(0, device=TPU)
    with on_tpu():
        torch.exp(t, out=out)
    assert_close(out.cpu(), torch.exp(x))
    xc = x.clone()
    xc[:, 1].exp_()
    with on_tpu():
        t[:, 1].exp_()
    assert_close(t.cpu(), xc)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.arange(3, device=TPU).exp_()


# ---- binary arithmetic -----------------------------------------------------------------------

BIN_DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32]


@pytest.mark.parametrize("dtype", BIN_DTYPES)
def test_add_sub_mul_broadcast_alpha(dtype):
    a, b = rand((3, 1, 4), dtype), rand((5, 1), dtype)
    compare(torch.add, a, b)
    compare(torch.sub, a, b)
    compare(torch.mul, a, b)
    alpha = 2 if not dtype.is_floating_point else 0.5
    compare(torch.add, a, b, alpha=alpha)
    compare(torch.sub, a, b, alpha=alpha)


def test_mixed_dtype_promotion_and_scalars():
    i = rand((4,), torch.int64)
    f = rand((4,), torch.float32)
    h = rand((4,), torch.bfloat16)
    compare(torch.add, i, f)
    compare(torch.add, h, f)
    compare(torch.mul, h, torch.tensor(3.5, dtype=torch.float64))  # 0-d does not promote
    compare(lambda x: x + 2.5, i)
    compare(lambda x: x * 3, h)
    compare(lambda x: 2 - x, i)
    compare(lambda x: 1.5 / x, f)
    compare(lambda x: x + True, rand((3,), torch.bool))
    compare(torch.add, rand((3,), torch.bool), rand((3,), torch.bool))
    compare(lambda x: torch.rsub(x, 2, alpha=3), i)


def test_add_alpha_errors_match_cpu():
    i = torch.arange(3, device=TPU)
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(i, i, alpha=0.5)
    with pytest.raises(RuntimeError, match="with a bool tensor is not supported"):
        torch.ones(2, dtype=torch.bool, device=TPU) - torch.ones(2, dtype=torch.bool, device=TPU)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.ones(3, device=TPU) + torch.ones(4, device=TPU)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_modes(dtype, mode):
    a = rand((6, 5), dtype, -20, 20)
    b = rand((6, 5), dtype, 1, 7) * torch.where(torch.rand(6, 5) > 0.5, 1, -1).to(dtype)
    compare(torch.div, a, b, rounding_mode=mode)
    compare(torch.div, a, 3, rounding_mode=mode)


def test_floor_divide_remainder_fmod_python_semantics():
    for dtype in [torch.int64, torch.float32, torch.float64]:
        a = rand((30,), dtype, -20, 20)
        b = rand((30,), dtype, 1, 6) * torch.where(torch.rand(30) > 0.5, 1, -1).to(dtype)
        compare(torch.floor_divide, a, b)
        compare(torch.remainder, a, b)
        compare(torch.fmod, a, b)
        compare(lambda x: x % 3, a)
        compare(lambda x: x // -3, a)
    compare(torch.remainder, 5, rand((4,), torch.int64, 1, 5))
    f = torch.tensor([1.0, -1.0, 0.0, 5.0])
    compare(torch.div, f, torch.zeros(4))
    compare(torch.div, f, torch.zeros(4), rounding_mode="floor")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_pow_forms(dtype):
    x = rand((4, 5), dtype, 0.1, 3)
    y = rand((4, 5), dtype, -2, 2)
    compare(torch.pow, x, y)
    compare(torch.pow, x, 2)
    compare(torch.pow, x, 0.5)
    compare(torch.pow, x, -1.5)
    compare(torch.pow, 2.0, y)
    compare(torch.square, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_pow_scalar_exponents_as_cpu_computes_them(dtype):
    """x ** 2, 3, -1, -2 are CPU's multiplies and divisions (bit-equal, also
    at 0, -0, inf, nan), 0.5 / -0.5 its sqrt and 1/sqrt (within 2 ulps: CPU's
    vectorized 1/sqrt is off by up to ~1.5 ulps, ours by 1), float16 keeps std::pow for
    0.5 / -0.5 / -1 as CPU does; gradients through them."""
    x = torch.cat([torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -2.0, 1e-3]),
                   torch.randn(200) * 4]).to(dtype)
    xt = x.to(TPU)
    for e in (2, 3, -1, -2, 2.0, -2.0):
        want, got = x.pow(e), xt.pow(e).cpu()
        assert torch.equal(want.isnan(), got.isnan()), e
        assert torch.equal(want.nan_to_num(0.0), got.nan_to_num(0.0)), (e, (want - got).abs().max())
    for e in (0.5, -0.5):
        want, got = x.pow(e), xt.pow(e).cpu()
        assert torch.equal(want.isnan(), got.isnan()), e
        assert_close(got, want, rtol=2 * torch.finfo(dtype).eps, atol=0, equal_nan=True)
    for e in (2, 3, -2, -1, 0.5, -0.5, 2.5):  # every form of pow computes as torch.pow
        ref = xt.pow(e).cpu().nan_to_num(0.0)
        assert torch.equal(xt.clone().pow_(e).cpu().nan_to_num(0.0), ref), e
        assert torch.equal(torch.pow(xt, e, out=torch.empty_like(xt)).cpu().nan_to_num(0.0), ref), e
        assert torch.equal(torch._foreach_pow([xt], e)[0].cpu().nan_to_num(0.0), ref), e
    a = torch.randn(6, dtype=torch.float64).abs() + 0.5
    at = a.to(TPU).requires_grad_()
    ac = a.clone().requires_grad_()
    sum(at.pow(e).sum() for e in (0.5, -0.5, -1, 2, 3, -2)).backward()
    sum(ac.pow(e).sum() for e in (0.5, -0.5, -1, 2, 3, -2)).backward()
    assert_close(at.grad.cpu(), ac.grad)


def test_pow_int():
    a = torch.tensor([2, -2, 3, 1, -1, 0, 5])
    b = torch.tensor([3, 3, 0, -4, -3, 2, 2])
    compare(torch.pow, a, b)
    compare(torch.pow, a, 3)
    compare(torch.pow, 2, b.abs())
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(a.to(TPU), -2)


def test_minmax_family_nan():
    a = torch.tensor([1.0, float("nan"), 3.0, float("nan"), -0.5])
    b = torch.tensor([2.0, 1.0, float("nan"), float("nan"), -1.0])
    for fn in [torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.max, torch.min]:
        compare(fn, a, b)
    compare(torch.maximum, rand((3, 1), torch.int64), rand((4,), torch.int64))
    compare(torch.atan2, rand((3, 4)), rand((4,)))


def test_bitwise_and_shifts():
    a, b = rand((10,), torch.int32, -50, 50), rand((10,), torch.int32, -50, 50)
    for fn in [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor]:
        compare(fn, a, b)
        compare(fn, a, 6)
        compare(fn, rand((5,), torch.bool), rand((5,), torch.bool))
    compare(torch.bitwise_not, a)
    compare(torch.bitwise_not, rand((5,), torch.bool))
    s = rand((10,), torch.int32, 0, 40)
    compare(torch.bitwise_left_shift, a, s)
    compare(torch.bitwise_right_shift, a, s)
    compare(lambda x: x << 3, a)
    compare(lambda x: x >> 2, a)
    compare(lambda x: 1 << x, rand((5,), torch.int64, 0, 20))
    with pytest.raises(RuntimeError):
        torch.bitwise_and(torch.ones(2, device=TPU), torch.ones(2, device=TPU))


def test_logical():
    a = torch.tensor([0.0, 1.5, float("nan"), -2.0])
    b = torch.tensor([3, 0, 0, 1])
    for fn in [torch.logical_and, torch.logical_or, torch.logical_xor]:
        compare(fn, a, b)
    compare(torch.logical_not, a)
    compare(torch.logical_not, b)
    out = torch.empty(4, dtype=torch.float32, device=TPU)
    torch.logical_and(a.to(TPU), b.to(TPU), out=out)
    assert_close(out.cpu(), torch.logical_and(a, b).float())


# ---- comparisons / select -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_comparisons(dtype):
    a, b = rand((3, 4), dtype, -2, 2), rand((4,), dtype, -2, 2)
    for fn in [torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]:
        compare(fn, a, b)
        compare(fn, a, 1)
    compare(lambda x: x < 0.5, a)


def test_comparison_inplace_and_out():
    x = rand((5,))
    t = x.to(TPU)
    with on_tpu():
        t.lt_(0.5)
    assert_close(t.cpu(), x.clone().lt_(0.5))
    out = torch.empty(0, dtype=torch.bool, device=TPU)
    torch.gt(x.to(TPU), 0, out=out)
    assert torch.equal(out.cpu(), x > 0)


def test_where_masked_fill():
    c = torch.rand(3, 4) > 0.5
    a, b = rand((3, 4)), rand((4,), torch.float64)
    compare(torch.where, c, a, b)
    compare(torch.where, c, a, 0.0)
    compare(torch.where, c, 1, rand((3, 4), torch.int64))
    compare(lambda x, m: x.masked_fill(m, -1.5), a, c)
    compare(lambda x, m: x.masked_fill(m, torch.tensor(7)), rand((3, 4), torch.int64), c[0])
    x = a.clone()
    t = x.to(TPU)
    with on_tpu():
        t.masked_fill_(c.to(TPU), 2.0)
    assert_close(t.cpu(), x.masked_fill_(c, 2.0))
    with pytest.raises(RuntimeError, match="boolean masks"):
        a.to(TPU).masked_fill(c.int().to(TPU), 1.0)
    with pytest.raises(RuntimeError, match="boolean tensor"):
        torch.where(c.float().to(TPU), a.to(TPU), a.to(TPU))


def test_clamp_forms():
    x = rand((4, 5), low=-4, high=4)
    x[0, 0] = float("nan")
    compare(torch.clamp, x, -1, 2)
    compare(torch.clamp, x, min=0.5)
    compare(torch.clamp, x, max=-0.5)
    compare(torch.clamp, x, rand((5,)), rand((4, 1)) + 2)
    compare(torch.clamp, x, min=rand((5,)))
    compare(torch.clamp_min, x, 0.1)
    compare(torch.clamp_max, x, 0.1)
    compare(torch.clamp, rand((6,), torch.int64, -5, 5), -2, 3)
    compare(torch.clamp, rand((6,), torch.int64, -5, 5), min=0.5)  # promotes to float
    compare(torch.clamp, x, float("nan"))
    t = x.to(TPU)
    t.clamp_(-1, 1)
    assert_close(t.cpu(), x.clamp(-1, 1), equal_nan=True)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        torch.clamp(t)


def test_nan_to_num_lerp_addcmul_addcdiv():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    for dtype in [torch.float32, torch.bfloat16, torch.float64]:
        compare(torch.nan_to_num, x.to(dtype))
        compare(torch.nan_to_num, x.to(dtype), nan=1.0, posinf=2.0, neginf=-3.0)
    compare(torch.nan_to_num, torch.arange(3))
    s, e, w = rand((3, 4)), rand((3, 4)), rand((4,), low=-1, high=2)
    compare(torch.lerp, s, e, w)
    compare(torch.lerp, s, e, 0.3)
    compare(torch.lerp, s, e, 0.8)
    compare(torch.addcmul, s, e, w, value=0.5)
    compare(torch.addcdiv, s, e, w.abs() + 0.5, value=-2)
    compare(torch.addcmul, rand((3,), torch.int64), rand((3,), torch.int64), rand((3,), torch.int64), value=2)
    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        i = torch.arange(3, device=TPU)
        torch.addcdiv(i, i, i)


# ---- activations and their gradients -------------------------------------------------------------

ACTS = {
    "relu": F.relu, "relu6": F.relu6, "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, 1.3), "celu": lambda x: F.celu(x, 0.7), "selu": F.selu,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish,
    "softplus": lambda x: F.softplus(x, beta=2, threshold=3), "hardtanh": lambda x: F.hardtanh(x, -0.5, 1.5),
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "threshold": lambda x: F.threshold(x, 0.3, -2.0),
    "sigmoid": torch.sigmoid, "tanh": torch.tanh,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_values(name, dtype):
    x = rand((6, 7), dtype, -5, 5)
    compare(ACTS[name], x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_gradients(name, dtype):
    fn = ACTS[name]
    x = rand((5, 6), dtype, -5, 5)
    g = rand((5, 6), dtype)
    xc = x.clone().requires_grad_()
    fn(xc).backward(g)
    xt = x.to(TPU).requires_grad_()
    with on_tpu():
        y = fn(xt)
        y.backward(g.to(TPU))
    assert xt.grad.device.type == "tpu"
    assert_close(xt.grad.cpu(), xc.grad)


def test_inplace_activations_and_backward_ops_directly():
    x = rand((4, 5), low=-4, high=4)
    for fn in [F.relu_, lambda t: F.leaky_relu_(t, 0.1), lambda t: F.elu_(t), F.hardtanh_, F.silu,
               lambda t: F.hardswish(t, inplace=True), lambda t: F.threshold_(t, 0.1, 5.0)]:
        a = x.clone()
        t = x.to(TPU)
        fn(a)
        with on_tpu():
            fn(t)
        assert_close(t.cpu(), a)
    g, y = rand((4, 5)), torch.rand(4, 5)
    aten = torch.ops.aten
    compare(aten.sigmoid_backward, g, y)
    compare(aten.tanh_backward, g, y)
    compare(aten.threshold_backward, g, x, 0.5)
    compare(aten.leaky_relu_backward, g, x, 0.3, False)
    compare(aten.elu_backward, g, 1.0, 1.0, 1.0, False, x)
    compare(aten.elu_backward, g, 1.0, 1.0, 1.0, True, F.elu(x))
    compare(aten.softplus_backward, g, x, 1.0, 20.0)
    compare(aten.hardtanh_backward, g, x, -1.0, 1.0)
    compare(aten.gelu_backward, g, x, approximate="tanh")
    compare(aten.mish_backward, g, x)
    compare(aten.silu_backward, g, x)
    compare(aten.hardsigmoid_backward, g, x)
    compare(aten.hardswish_backward, g, x)


def test_bf16_gradients():
    x = rand((8,), torch.bfloat16, -3, 3)
    for fn in [F.gelu, F.silu, torch.tanh, F.softplus]:
        xc = x.clone().requires_grad_()
        fn(xc).sum().backward()
        xt = x.to(TPU).requires_grad_()
        fn(xt).sum().backward()
        assert_close(xt.grad.cpu(), xc.grad)


def test_math_chain_gradient():
    x = rand((3, 4), torch.float64, 0.5, 2)
    xc = x.clone().requires_grad_()
    xt = x.to(TPU).requires_grad_()

    def f(v):
        return (torch.exp(-v) * torch.log(v) + torch.sqrt(v) / (v + 1) - v.pow(3) * 0.1).sum()

    f(xc).backward()
    with on_tpu():
        f(xt).backward()
    assert_close(xt.grad.cpu(), xc.grad)


def test_zero_size_and_0d_binary():
    compare(torch.add, torch.empty(0, 3), torch.ones(3))
    compare(torch.mul, torch.tensor(2.0), torch.tensor(3.0))
    compare(torch.where, torch.empty(0, dtype=torch.bool), torch.empty(0), torch.empty(0))
    compare(F.gelu, torch.empty(2, 0))
