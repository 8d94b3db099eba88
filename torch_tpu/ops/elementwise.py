"""Elementwise kernels: arithmetic, math functions, comparisons, select,
activations and their backward ops (rules in csrc/ops/elementwise.c).

Every kernel computes PyTorch's result dtype here (torch.result_type and the
int -> float promotion of "float" ops) and passes it as the rule's int attr
0.  Scalar operands become 0-d inputs in that dtype; Scalar coefficients
(alpha, negative_slope, beta ...) become 0-d inputs in its compute dtype
(float32 for half types, float64 for double, int64/bool otherwise) so a
changing value never recompiles.  Complex dtypes go to the CPU fallback.
"""
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .. import _C
from .._dispatch import Unsupported, _cpu_fallback, impl, register, run, scalar
from .._dtypes import CODE, dtype_code

aten = torch.ops.aten


class _Fallback(Unsupported):
    """Raised by a kernel for inputs the engine does not take (complex)."""


def _op(name):
    base, _, overload = name.partition(".")
    return getattr(getattr(aten, base), overload or "default")


def reg(functional, out=None, inplace=None, fast=None, float_only=False):
    """register() with a CPU fallback for dtypes the engine lacks.  With
    fast=rule the functional overload is a C kernel (_C.fast_binary) that
    runs same-dtype operands without any Python frame and calls this
    Python kernel for everything else."""

    def deco(fn):
        op = _op(functional)

        def kernel(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except _Fallback:
                return _cpu_fallback(op, *args, **kwargs)

        kernel.__name__ = fn.__name__
        if fast:
            _C.register_fast_kernel(functional, kernel)
            register(None, out=out, inplace=inplace)(kernel)
        else:
            register(functional, out=out, inplace=inplace)(kernel)
        return fn

    return deco


# ---- dtype helpers ------------------------------------------------------------


def _check(dt):
    if dt.is_complex or dt not in CODE:
        raise _Fallback()
    return dt


def _rt(a, b):
    return _check(torch.result_type(a, b))


def _rtn(*xs):
    """Result dtype of several operands (tensors and Python numbers)."""
    xs = [x for x in xs if x is not None]
    _, dt = elementwise_dtypes(*xs, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return _check(dt)


def _float(dt):
    return dt if dt.is_floating_point else torch.get_default_dtype()


def _num(v, dt):
    if dt.is_floating_point:
        return float(v)
    if dt == torch.bool:
        return bool(v)
    return int(v)


def _arg(x, dt):
    """An operand: a tpu tensor as is; a Python number or 0-d CPU tensor as a
    0-d input of dtype dt (the rule converts to dt anyway)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu" and x.dim() == 0:
            if x.is_complex():
                raise _Fallback()
            return scalar(_num(x.item(), dt), dt)
        if x.is_complex():
            raise _Fallback()
        return x
    if isinstance(x, complex):
        raise _Fallback()
    return scalar(_num(x, dt), dt)


def _compute(dt):
    if dt == torch.float64:
        return torch.float64
    if dt.is_floating_point:
        return torch.float32
    if dt == torch.bool:
        return torch.bool
    return torch.int64


def _coef(v, dt):
    """A Scalar coefficient as a runtime input in dt's compute dtype."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    c = _compute(dt)
    return scalar(_num(v, c), c)


def _run(rule, inputs, dt, *ints, floats=()):
    return run(rule, inputs, [dtype_code(dt), *ints], floats)[0]


def _is_int(dt):
    return not dt.is_floating_point and not dt.is_complex and dt != torch.bool


def _check_alpha(dt, alpha, op):
    if isinstance(alpha, bool):
        if dt != torch.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif isinstance(alpha, float) and not dt.is_floating_point:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _no_bool_sub(a, b):
    def isb(x):
        return (isinstance(x, torch.Tensor) and x.dtype == torch.bool) or isinstance(x, bool)

    if isb(a) or isb(b):
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
            "mask, use the `~` or `logical_not()` operator instead."
        )


# ---- arithmetic -------------------------------------------------------------------


def _add(self, other, alpha, rule="add"):
    dt = _rt(self, other)
    _check_alpha(dt, alpha, rule)
    inputs = [_arg(self, dt), _arg(other, dt)]
    if not (alpha == 1 and not isinstance(alpha, torch.Tensor)):
        inputs.append(_coef(alpha, dt))
    return _run(rule, inputs, dt)


@reg("add.Tensor", out="add.out", inplace="add_.Tensor", fast="add")
def add(self, other, *, alpha=1):
    return _add(self, other, alpha)


@reg("add.Scalar", out="add.Scalar_out", inplace="add_.Scalar", fast="add")
def add_scalar(self, other, alpha=1):
    return _add(self, other, alpha)


@reg("sub.Tensor", out="sub.out", inplace="sub_.Tensor", fast="sub")
def sub(self, other, *, alpha=1):
    _no_bool_sub(self, other)
    return _add(self, other, alpha, "sub")


@reg("sub.Scalar", out="sub.Scalar_out", inplace="sub_.Scalar", fast="sub")
def sub_scalar(self, other, alpha=1):
    _no_bool_sub(self, other)
    return _add(self, other, alpha, "sub")


@reg("rsub.Tensor", out="rsub.Tensor_out")
def rsub(self, other, *, alpha=1):
    _no_bool_sub(self, other)
    return _add(other, self, alpha, "sub")


@reg("rsub.Scalar", out="rsub.Scalar_out")
def rsub_scalar(self, other, alpha=1):
    _no_bool_sub(self, other)
    dt = _rt(self, other)
    _check_alpha(dt, alpha, "rsub")
    inputs = [_arg(other, dt), _arg(self, dt)]
    if alpha != 1:
        inputs.append(_coef(alpha, dt))
    return _run("sub", inputs, dt)


def _binary(rule, self, other, dt=None):
    dt = dt or _rt(self, other)
    return _run(rule, [_arg(self, dt), _arg(other, dt)], dt)


@reg("mul.Tensor", out="mul.out", inplace="mul_.Tensor", fast="mul")
def mul(self, other):
    return _binary("mul", self, other)


@reg("mul.Scalar", out="mul.Scalar_out", inplace="mul_.Scalar", fast="mul")
def mul_scalar(self, other):
    return _binary("mul", self, other)


_MODES = {None: 0, "trunc": 1, "floor": 2}


def _div(self, other, rounding_mode=None):
    if rounding_mode not in _MODES:
        raise RuntimeError(
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
        )
    dt = _rt(self, other)
    if rounding_mode is None:
        dt = _float(dt)
    return _run("div", [_arg(self, dt), _arg(other, dt)], dt, _MODES[rounding_mode])


@reg("div.Tensor", out="div.out", inplace="div_.Tensor", fast="div", float_only=True)
def div(self, other):
    return _div(self, other)


@reg("div.Scalar", out="div.Scalar_out", inplace="div_.Scalar", fast="div", float_only=True)
def div_scalar(self, other):
    return _div(self, other)


@reg("div.Tensor_mode", out="div.out_mode", inplace="div_.Tensor_mode")
def div_mode(self, other, *, rounding_mode):
    return _div(self, other, rounding_mode)


@reg("div.Scalar_mode", out="div.Scalar_mode_out", inplace="div_.Scalar_mode")
def div_scalar_mode(self, other, *, rounding_mode):
    return _div(self, other, rounding_mode)


@reg("floor_divide", out="floor_divide.out", inplace="floor_divide_.Tensor")
def floor_divide(self, other):
    return _div(self, other, "floor")


@reg("floor_divide.Scalar", out="floor_divide.Scalar_out", inplace="floor_divide_.Scalar")
def floor_divide_scalar(self, other):
    return _div(self, other, "floor")


for _name, _rule in [("remainder", "remainder"), ("fmod", "fmod")]:
    reg(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(
        lambda self, other, _r=_rule: _binary(_r, self, other))
    reg(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(
        lambda self, other, _r=_rule: _binary(_r, self, other))


@reg("remainder.Scalar_Tensor", out="remainder.Scalar_Tensor_out")
def remainder_scalar_tensor(self, other):
    return _binary("remainder", self, other)


def _pow(self, exponent):
    dt = _rt(self, exponent)
    if (_is_int(dt) and isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return _run("pow", [_arg(self, dt), _arg(exponent, dt)], dt)


reg("pow.Tensor_Tensor", out="pow.Tensor_Tensor_out", inplace="pow_.Tensor")(_pow)
reg("pow.Tensor_Scalar", out="pow.Tensor_Scalar_out", inplace="pow_.Scalar")(_pow)
reg("pow.Scalar", out="pow.Scalar_out")(_pow)


def _minmax(rule):
    def kernel(self, other):
        dt = _rt(self, other)
        return _run(rule, [_arg(self, dt), _arg(other, dt)], dt)

    return kernel


for _name in ["maximum", "minimum", "fmax", "fmin"]:
    reg(_name, out=f"{_name}.out")(_minmax(_name))


@reg("atan2", out="atan2.out", inplace="atan2_")
def atan2(self, other):
    return _binary("atan2", self, other, _float(_rt(self, other)))


def _bitwise(rule):
    def kernel(self, other):
        return _binary(rule, self, other)

    return kernel


for _name in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
    reg(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_bitwise(_name))
    reg(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(_bitwise(_name))
    reg(f"{_name}.Scalar_Tensor", out=f"{_name}.Scalar_Tensor_out")(_bitwise(_name))

for _name in ["bitwise_left_shift", "bitwise_right_shift"]:
    reg(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_bitwise(_name))
    reg(f"{_name}.Tensor_Scalar", out=f"{_name}.Tensor_Scalar_out", inplace=f"{_name}_.Tensor_Scalar")(
        _bitwise(_name))
    reg(f"{_name}.Scalar_Tensor", out=f"{_name}.Scalar_Tensor_out")(_bitwise(_name))
for _dunder, _name in [("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift")]:
    reg(f"__{_dunder}__.Tensor", inplace=f"__i{_dunder}__.Tensor")(_bitwise(_name))
    reg(f"__{_dunder}__.Scalar", inplace=f"__i{_dunder}__.Scalar")(_bitwise(_name))


@reg("bitwise_not", out="bitwise_not.out", inplace="bitwise_not_")
def bitwise_not(self):
    return _run("bitwise_not", [self], _check(self.dtype))


def _logical(rule):
    def kernel(self, other):
        _check(self.dtype)
        return run(rule, [_arg(self, self.dtype), _arg(other, other.dtype)])[0]

    return kernel


for _name in ["logical_and", "logical_or", "logical_xor"]:
    reg(_name, out=f"{_name}.out", inplace=f"{_name}_")(_logical(_name))


@reg("logical_not", out="logical_not.out", inplace="logical_not_")
def logical_not(self):
    _check(self.dtype)
    return run("logical_not", [self])[0]


# ---- unary math ---------------------------------------------------------------------

# rule -> promote int/bool to the default float dtype?
_UNARY = {
    "exp": True, "exp2": True, "expm1": True, "log": True, "log2": True, "log10": True, "log1p": True,
    "sqrt": True, "rsqrt": True, "reciprocal": True, "sigmoid": True, "tanh": True, "sin": True, "cos": True,
    "tan": True, "asin": True, "acos": True, "atan": True, "sinh": True, "cosh": True, "asinh": True,
    "acosh": True, "atanh": True, "erf": True, "erfc": True, "erfinv": True,
    "floor": False, "ceil": False, "trunc": False, "frac": False, "sign": False, "sgn": False, "abs": False,
}


# dtypes PyTorch CPU has no kernel for (NotImplementedError, as on CPU).
_UNARY_REJECTS = {"abs": lambda dt: dt == torch.bool,
                  "frac": lambda dt: not dt.is_floating_point}


def _unary(rule, to_float):
    def kernel(self):
        dt = _check(self.dtype)
        if rule in _UNARY_REJECTS and _UNARY_REJECTS[rule](dt):
            raise NotImplementedError(f'"{rule}_cpu" not implemented for \'{_tname(dt)}\'')
        if to_float:
            dt = _float(dt)
        return _run(rule, [self], dt)

    kernel.__name__ = rule
    return kernel


for _name, _tf in _UNARY.items():
    reg(_name, out=f"{_name}.out", inplace=f"{_name}_")(_unary(_name, _tf))


@reg("neg", out="neg.out", inplace="neg_")
def neg(self):
    if self.dtype == torch.bool:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
            "use the `~` or `logical_not()` operator instead."
        )
    return _run("neg", [self], _check(self.dtype))


@reg("round", out="round.out", inplace="round_")
def round_(self):
    return _run("round", [self], _check(self.dtype), 0)


@reg("round.decimals", out="round.decimals_out", inplace="round_.decimals")
def round_decimals(self, *, decimals):
    if decimals != 0 and not self.dtype.is_floating_point:
        raise RuntimeError("round_cpu not implemented for integral types with decimals != 0")
    return _run("round", [self], _check(self.dtype), int(decimals))


@reg("signbit", out="signbit.out")
def signbit(self):
    _check(self.dtype)
    return run("signbit", [self])[0]


def _classify(rule):
    def kernel(self):
        _check(self.dtype)
        return run(rule, [self])[0]

    return kernel


for _name in ["isnan", "isinf", "isposinf", "isneginf", "isfinite"]:
    reg(_name, out=None if _name == "isfinite" else f"{_name}.out")(_classify(_name))


@reg("nan_to_num", out="nan_to_num.out", inplace="nan_to_num_")
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    dt = _check(self.dtype)
    if not dt.is_floating_point:
        return _run("convert", [self], dt)
    fi = torch.finfo(dt)
    vals = [0.0 if nan is None else nan, fi.max if posinf is None else posinf, fi.min if neginf is None else neginf]
    return _run("nan_to_num", [self] + [scalar(float(v), dt) for v in vals], dt)


# ---- compare / select -------------------------------------------------------------------


def _compare(rule):
    def kernel(self, other):
        ct = _rt(self, other)
        return run(rule, [_arg(self, ct), _arg(other, ct)], [dtype_code(ct)])[0]

    return kernel


for _name in ["eq", "ne", "lt", "le", "gt", "ge"]:
    reg(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_compare(_name))
    reg(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(_compare(_name))


@reg("where.self", out="where.self_out")
def where(condition, self, other):
    if condition.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype {_tname(condition.dtype)}"
        )
    dt = _rt(self, other)
    return _run("where", [condition, _arg(self, dt), _arg(other, dt)], dt)


def _tname(dt):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte", torch.bool: "Bool"}.get(dt, str(dt))


def _masked_fill(self, mask, value):
    dt = _check(self.dtype)
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {_tname(mask.dtype)}")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(
                f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.dim()} "
                "dimension(s)."
            )
        if value.device.type == "cpu":
            value = value.item()
    return _run("masked_fill", [self, mask, _arg(value, dt)], dt)


reg("masked_fill.Scalar", out="masked_fill.Scalar_out", inplace="masked_fill_.Scalar")(_masked_fill)
reg("masked_fill.Tensor", out="masked_fill.Tensor_out", inplace="masked_fill_.Tensor")(_masked_fill)


def _clamp(self, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = _rtn(self, min, max)
    if dt == torch.bool:
        raise _Fallback()
    inputs = [self] + [_arg(v, dt) for v in (min, max) if v is not None]
    return _run("clamp", inputs, dt, int(min is not None), int(max is not None))


reg("clamp", out="clamp.out", inplace="clamp_")(_clamp)
reg("clamp.Tensor", out="clamp.Tensor_out", inplace="clamp_.Tensor")(_clamp)
for _ov in ["", ".Tensor"]:
    reg(f"clamp_min{_ov}", out=f"clamp_min{'.Tensor_out' if _ov else '.out'}", inplace=f"clamp_min_{_ov}")(
        lambda self, min: _clamp(self, min, None))
    reg(f"clamp_max{_ov}", out=f"clamp_max{'.Tensor_out' if _ov else '.out'}", inplace=f"clamp_max_{_ov}")(
        lambda self, max: _clamp(self, None, max))


def _lerp(self, end, weight):
    dt = _rtn(self, end)
    return _run("lerp", [_arg(self, dt), _arg(end, dt), _arg(weight, dt)], dt)


reg("lerp.Scalar", out="lerp.Scalar_out", inplace="lerp_.Scalar")(_lerp)
reg("lerp.Tensor", out="lerp.Tensor_out", inplace="lerp_.Tensor")(_lerp)


@reg("addcmul", out="addcmul.out", inplace="addcmul_")
def addcmul(self, tensor1, tensor2, *, value=1):
    dt = _rtn(self, tensor1, tensor2)
    return _run("addcmul", [self, tensor1, tensor2, _coef(value, dt)], dt)


@reg("addcdiv", out="addcdiv.out", inplace="addcdiv_")
def addcdiv(self, tensor1, tensor2, *, value=1):
    if _is_int(tensor1.dtype) and _is_int(tensor2.dtype) or (tensor1.dtype == torch.bool and tensor2.dtype == torch.bool):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform "
            "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
            "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
            "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
            "implementation: (input + value * tensor1 / tensor2), for all dtypes."
        )
    dt = _rtn(self, tensor1, tensor2)
    return _run("addcdiv", [self, tensor1, tensor2, _coef(value, dt)], dt)


# ---- activations -----------------------------------------------------------------------------


def _act_dt(x):
    return _check(x.dtype)


@reg("relu", out="relu.out", inplace="relu_")
def relu(self):
    if self.dtype == torch.bool:
        raise RuntimeError('"clamp_min_scalar_cpu" not implemented for \'Bool\'')
    return _run("relu", [self], _act_dt(self))


@reg("leaky_relu", out="leaky_relu.out", inplace="leaky_relu_")
def leaky_relu(self, negative_slope=0.01):
    dt = _act_dt(self)
    return _run("leaky_relu", [self, _coef(negative_slope, dt)], dt)


@reg("elu", out="elu.out", inplace="elu_")
def elu(self, alpha=1, scale=1, input_scale=1):
    dt = _act_dt(self)
    return _run("elu", [self, _coef(alpha, dt), _coef(scale, dt), _coef(input_scale, dt)], dt)


@reg("celu", out="celu.out", inplace="celu_")
def celu(self, alpha=1.0):
    return elu(self, alpha, 1.0, 1.0 / float(alpha))


_APPROX = {"none": 0, "tanh": 1}


@reg("gelu", out="gelu.out", inplace="gelu_")
def gelu(self, *, approximate="none"):
    if approximate not in _APPROX:
        raise RuntimeError("approximate argument must be either none or tanh.")
    return _run("gelu", [self], _act_dt(self), _APPROX[approximate])


for _name in ["silu", "mish", "hardsigmoid", "hardswish"]:
    reg(_name, out=f"{_name}.out", inplace=f"{_name}_")(
        (lambda r: lambda self: _run(r, [self], _act_dt(self)))(_name))


@reg("softplus", out="softplus.out")
def softplus(self, beta=1, threshold=20):
    dt = _act_dt(self)
    return _run("softplus", [self, _coef(beta, dt), _coef(threshold, dt)], dt)


@reg("hardtanh", out="hardtanh.out", inplace="hardtanh_")
def hardtanh(self, min_val=-1, max_val=1):
    dt = _act_dt(self)
    if dt == torch.bool:
        raise _Fallback()
    return _run("hardtanh", [self, _arg(min_val, dt), _arg(max_val, dt)], dt)


@reg("threshold", out="threshold.out", inplace="threshold_")
def threshold(self, threshold, value):
    dt = _act_dt(self)
    return _run("threshold", [self, _coef(threshold, dt), _coef(value, dt)], dt)


# ---- backward ops --------------------------------------------------------------------------------


def _bwd_dt(grad, x):
    return _rt(grad, x)


@reg("threshold_backward", out="threshold_backward.grad_input")
def threshold_backward(grad_output, self, threshold):
    dt = _bwd_dt(grad_output, self)
    return _run("threshold_backward", [grad_output, self, _coef(threshold, dt)], dt)


@reg("gelu_backward", out="gelu_backward.grad_input")
def gelu_backward(grad_output, self, *, approximate="none"):
    return _run("gelu_backward", [grad_output, self], _bwd_dt(grad_output, self), _APPROX[approximate])


for _name in ["silu_backward", "sigmoid_backward", "tanh_backward", "hardsigmoid_backward"]:
    reg(_name, out=f"{_name}.grad_input")(
        (lambda r: lambda grad_output, x: _run(r, [grad_output, x], _bwd_dt(grad_output, x)))(_name))
reg("hardswish_backward", out="hardswish_backward.out")(
    lambda grad_output, self: _run("hardswish_backward", [grad_output, self], _bwd_dt(grad_output, self)))
reg("mish_backward")(
    lambda grad_output, self: _run("mish_backward", [grad_output, self], _bwd_dt(grad_output, self)))


@reg("leaky_relu_backward", out="leaky_relu_backward.grad_input")
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    if self_is_result and float(negative_slope) < 0:
        raise RuntimeError(
            "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
            "This is caused by calling in-place forward function with a negative slope, please call out-of-place "
            "version instead. File an issue at https://github.com/pytorch/pytorch if you do require supporting "
            "in-place leakRelu backward calculation with negative slope"
        )
    dt = _bwd_dt(grad_output, self)
    return _run("leaky_relu_backward", [grad_output, self, _coef(negative_slope, dt)], dt)


@reg("elu_backward", out="elu_backward.grad_input")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    dt = _bwd_dt(grad_output, self_or_result)
    return _run("elu_backward", [grad_output, self_or_result, _coef(alpha, dt), _coef(scale, dt),
                                 _coef(input_scale, dt)], dt, int(bool(is_result)))


@reg("softplus_backward", out="softplus_backward.grad_input")
def softplus_backward(grad_output, self, beta, threshold):
    dt = _bwd_dt(grad_output, self)
    return _run("softplus_backward", [grad_output, self, _coef(beta, dt), _coef(threshold, dt)], dt)


@reg("hardtanh_backward", out="hardtanh_backward.grad_input")
def hardtanh_backward(grad_output, self, min_val, max_val):
    dt = _bwd_dt(grad_output, self)
    return _run("hardtanh_backward", [grad_output, self, _coef(min_val, dt), _coef(max_val, dt)], dt)

