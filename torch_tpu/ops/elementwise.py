"""Elementwise kernels: arithmetic, bitwise and logical ops, comparisons,
where, masked_fill, clamp, lerp, addcmul / addcdiv (rules in
csrc/ops/elementwise.c), and the adapter helpers the elementwise families
(math.py, activation.py, foreach.py) share.

Every kernel computes PyTorch's result dtype here (torch.result_type, and the
int -> float promotion of "float" ops) and passes it as the rule's int attr
0.  Scalar operands become 0-d inputs in that dtype; Scalar coefficients
(alpha, negative_slope, beta ...) become 0-d inputs in its compute dtype
(_dtypes.coef_dtype) so a changing value never recompiles.  Complex dtypes
go to the CPU fallback.  Kernels return a Call (rule and arguments): the
registered kernel runs it, and the foreach kernels run the Calls of a whole
list in one node.
"""
import functools
import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .. import _C
from .._dispatch import Call, Unsupported, coef, operand, register, run, supported
from .._dtypes import dtype_code, scalar_type_name
from .core import fill_value

# ---- dtype helpers ------------------------------------------------------------


def result_dtype(a, b):
    """torch.result_type of two operands, if the engine computes in it."""
    return supported(torch.result_type(a, b))


def result_dtype_n(*xs):
    """Result dtype of several operands (tensors and Python numbers)."""
    xs = [x for x in xs if x is not None]
    _, dt = elementwise_dtypes(*xs, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return supported(dt)


def float_dtype(dt):
    """The result dtype of a "float" op (exp, true division ...): int and
    bool promote to the default float dtype."""
    return dt if dt.is_floating_point else torch.get_default_dtype()


def ew(rule, inputs, dt, *ints, floats=()):
    """The Call of an elementwise rule with result dtype dt (int attr 0)."""
    return Call(rule, inputs, (dtype_code(dt), *ints), tuple(floats))


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
    dt = result_dtype(self, other)
    _check_alpha(dt, alpha, rule)
    inputs = [operand(self, dt), operand(other, dt)]
    if not (alpha == 1 and not isinstance(alpha, torch.Tensor)):
        inputs.append(coef(alpha, dt))
    return ew(rule, inputs, dt)


@register("add.Tensor", out="add.out", inplace="add_.Tensor", fast=True)
def add(self, other, *, alpha=1):
    return _add(self, other, alpha)


@register("add.Scalar", out="add.Scalar_out", inplace="add_.Scalar", fast=True)
def add_scalar(self, other, alpha=1):
    return _add(self, other, alpha)


@register("sub.Tensor", out="sub.out", inplace="sub_.Tensor", fast=True)
def sub(self, other, *, alpha=1):
    _no_bool_sub(self, other)
    return _add(self, other, alpha, "sub")


@register("sub.Scalar", out="sub.Scalar_out", inplace="sub_.Scalar", fast=True)
def sub_scalar(self, other, alpha=1):
    _no_bool_sub(self, other)
    return _add(self, other, alpha, "sub")


@register("rsub.Tensor", out="rsub.Tensor_out")
def rsub(self, other, *, alpha=1):
    _no_bool_sub(self, other)
    return _add(other, self, alpha, "sub")


@register("rsub.Scalar", out="rsub.Scalar_out")
def rsub_scalar(self, other, alpha=1):
    _no_bool_sub(self, other)
    dt = result_dtype(self, other)
    _check_alpha(dt, alpha, "rsub")
    inputs = [operand(other, dt), operand(self, dt)]
    if alpha != 1:
        inputs.append(coef(alpha, dt))
    return ew("sub", inputs, dt)


def _binary(rule, self, other, dt=None):
    dt = dt or result_dtype(self, other)
    return ew(rule, [operand(self, dt), operand(other, dt)], dt)


@register("mul.Tensor", out="mul.out", inplace="mul_.Tensor", fast=True)
def mul(self, other):
    return _binary("mul", self, other)


@register("mul.Scalar", out="mul.Scalar_out", inplace="mul_.Scalar", fast=True)
def mul_scalar(self, other):
    return _binary("mul", self, other)


_MODES = {None: 0, "trunc": 1, "floor": 2}


def _div(self, other, rounding_mode=None):
    if rounding_mode not in _MODES:
        raise RuntimeError(
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
        )
    dt = result_dtype(self, other)
    if rounding_mode is None:
        dt = float_dtype(dt)
    return ew("div", [operand(self, dt), operand(other, dt)], dt, _MODES[rounding_mode])


@register("div.Tensor", out="div.out", inplace="div_.Tensor", fast=True)
def div(self, other):
    return _div(self, other)


@register("div.Scalar", out="div.Scalar_out", inplace="div_.Scalar", fast=True)
def div_scalar(self, other):
    return _div(self, other)


@register("div.Tensor_mode", out="div.out_mode", inplace="div_.Tensor_mode")
def div_mode(self, other, *, rounding_mode):
    return _div(self, other, rounding_mode)


@register("div.Scalar_mode", out="div.Scalar_mode_out", inplace="div_.Scalar_mode")
def div_scalar_mode(self, other, *, rounding_mode):
    return _div(self, other, rounding_mode)


@register("floor_divide", out="floor_divide.out", inplace="floor_divide_.Tensor")
def floor_divide(self, other):
    return _div(self, other, "floor")


@register("floor_divide.Scalar", out="floor_divide.Scalar_out", inplace="floor_divide_.Scalar")
def floor_divide_scalar(self, other):
    return _div(self, other, "floor")


for _name, _rule in [("remainder", "remainder"), ("fmod", "fmod")]:
    register(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(
        lambda self, other, _r=_rule: _binary(_r, self, other))
    register(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(
        lambda self, other, _r=_rule: _binary(_r, self, other))


@register("remainder.Scalar_Tensor", out="remainder.Scalar_Tensor_out")
def remainder_scalar_tensor(self, other):
    return _binary("remainder", self, other)


def power(self, exponent):
    dt = result_dtype(self, exponent)
    if (_is_int(dt) and isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    k = _C.pow_scalar_code(self, exponent) if isinstance(self, torch.Tensor) and dt == self.dtype else 0
    if k:  # the exponents CPU computes without std::pow (the C++ kernel's rule too)
        return ew("pow_scalar", [self], dt, k)
    return ew("pow", [operand(self, dt), operand(exponent, dt)], dt)


# C++ kernels for floating results (arith.cpp); integer powers here
register("pow.Tensor_Tensor", out="pow.Tensor_Tensor_out", inplace="pow_.Tensor", fast=True)(power)
register("pow.Tensor_Scalar", out="pow.Tensor_Scalar_out", inplace="pow_.Scalar", fast=True)(power)
register("pow.Scalar", out="pow.Scalar_out")(power)


def _minmax(rule):
    def kernel(self, other):
        dt = result_dtype(self, other)
        return ew(rule, [operand(self, dt), operand(other, dt)], dt)

    return kernel


maximum = register("maximum", out="maximum.out")(_minmax("maximum"))
minimum = register("minimum", out="minimum.out")(_minmax("minimum"))
for _name in ["fmax", "fmin"]:
    register(_name, out=f"{_name}.out")(_minmax(_name))



def _broadcast_check(a, b):
    """TensorIterator's shape check (RuntimeError, CPU's message)."""
    for i in range(1, min(len(a), len(b)) + 1):
        if a[-i] != b[-i] and a[-i] != 1 and b[-i] != 1:
            raise RuntimeError(f"The size of tensor a ({a[-i]}) must match the size of tensor b ({b[-i]}) at "
                               f"non-singleton dimension {max(len(a), len(b)) - i}")


def _copysign(self, other):
    """|self| with the sign of other (its sign bit: -0.0 counts as
    negative), in the float result dtype: abs, signbit and where."""
    dt = torch.result_type(self, other)
    if dt.is_complex:
        raise NotImplementedError(f"\"copysign_cpu\" not implemented for '{scalar_type_name(dt)}'")
    dt = float_dtype(supported(dt))
    if isinstance(other, torch.Tensor):
        _broadcast_check(list(self.shape), list(other.shape))
        negative = torch.signbit(other)
    else:
        negative = math.copysign(1.0, float(other)) < 0
    mag = torch.abs(self.to(dt))
    if isinstance(negative, bool):
        return mag.neg_() if negative else mag
    return torch.where(negative, -mag, mag)


register("copysign.Tensor", out="copysign.out", inplace="copysign_.Tensor")(_copysign)
register("copysign.Scalar", out="copysign.Scalar_out", inplace="copysign_.Scalar")(_copysign)


_BITWISE_CPU_NAME = {"bitwise_left_shift": "lshift", "bitwise_right_shift": "rshift"}


def _bitwise(rule):
    def kernel(self, other):
        dt = torch.result_type(self, other)
        if isinstance(self, torch.Tensor) and isinstance(other, torch.Tensor):
            _broadcast_check(self.shape, other.shape)  # CPU checks the shapes before the dtype
        if dt.is_floating_point or dt.is_complex:  # CPU's dispatch error, NotImplementedError
            raise NotImplementedError(
                f'"{_BITWISE_CPU_NAME.get(rule, rule)}_cpu" not implemented for \'{scalar_type_name(dt)}\'')
        return _binary(rule, self, other)

    return kernel


for _name in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
    register(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_bitwise(_name))
    register(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(_bitwise(_name))
    register(f"{_name}.Scalar_Tensor", out=f"{_name}.Scalar_Tensor_out")(_bitwise(_name))

for _name in ["bitwise_left_shift", "bitwise_right_shift"]:
    register(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_bitwise(_name))
    register(f"{_name}.Tensor_Scalar", out=f"{_name}.Tensor_Scalar_out", inplace=f"{_name}_.Tensor_Scalar")(
        _bitwise(_name))
    register(f"{_name}.Scalar_Tensor", out=f"{_name}.Scalar_Tensor_out")(_bitwise(_name))
for _dunder, _name in [("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift")]:
    register(f"__{_dunder}__.Tensor", inplace=f"__i{_dunder}__.Tensor")(_bitwise(_name))
    register(f"__{_dunder}__.Scalar", inplace=f"__i{_dunder}__.Scalar")(_bitwise(_name))


@register("bitwise_not", out="bitwise_not.out", inplace="bitwise_not_")
def bitwise_not(self):
    if self.dtype.is_floating_point or self.dtype.is_complex:  # CPU's dispatch error, NotImplementedError
        raise NotImplementedError(f'"bitwise_not_cpu" not implemented for \'{scalar_type_name(self.dtype)}\'')
    return ew("bitwise_not", [self], supported(self.dtype))


def _logical(rule):
    def kernel(self, other):
        supported(self.dtype)
        return Call(rule, [operand(self, self.dtype), operand(other, other.dtype)])

    return kernel


for _name in ["logical_and", "logical_or", "logical_xor"]:
    register(_name, out=f"{_name}.out", inplace=f"{_name}_")(_logical(_name))


@register("logical_not", out="logical_not.out", inplace="logical_not_")
def logical_not(self):
    supported(self.dtype)
    return Call("logical_not", [self])


# ---- compare / select -------------------------------------------------------------------


def _compare(rule):
    def kernel(self, other):
        ct = result_dtype(self, other)
        return ew(rule, [operand(self, ct), operand(other, ct)], ct)

    return kernel


for _name in ["eq", "ne", "lt", "le", "gt", "ge"]:
    register(f"{_name}.Tensor", out=f"{_name}.Tensor_out", inplace=f"{_name}_.Tensor")(_compare(_name))
    register(f"{_name}.Scalar", out=f"{_name}.Scalar_out", inplace=f"{_name}_.Scalar")(_compare(_name))


@register("where.self", out="where.self_out")
def where(condition, self, other):
    if condition.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{scalar_type_name(condition.dtype)}"
        )
    dt = result_dtype(self, other)
    return ew("where", [condition, operand(self, dt), operand(other, dt)], dt)


def _masked_fill(self, mask, value):
    dt = supported(self.dtype)
    if mask.dtype != torch.bool:
        raise RuntimeError(
            f"masked_fill_ only supports boolean masks, but got mask with dtype {scalar_type_name(mask.dtype)}")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(
                f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.dim()} "
                "dimension(s)."
            )
        if value.device.type == "cpu":
            value = value.item()
    if not isinstance(value, torch.Tensor):
        value = fill_value(value, dt)
    return ew("masked_fill", [self, mask, operand(value, dt)], dt)


register("masked_fill.Scalar", out="masked_fill.Scalar_out", inplace="masked_fill_.Scalar")(_masked_fill)
register("masked_fill.Tensor", out="masked_fill.Tensor_out", inplace="masked_fill_.Tensor")(_masked_fill)


def clamp(self, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = result_dtype_n(self, min, max)
    if dt == torch.bool:
        raise Unsupported()
    inputs = [self] + [operand(v, dt) for v in (min, max) if v is not None]
    return ew("clamp", inputs, dt, int(min is not None), int(max is not None))


register("clamp", out="clamp.out", inplace="clamp_")(clamp)
register("clamp.Tensor", out="clamp.Tensor_out", inplace="clamp_.Tensor")(clamp)
for _ov in ["", ".Tensor"]:
    register(f"clamp_min{_ov}", out=f"clamp_min{'.Tensor_out' if _ov else '.out'}", inplace=f"clamp_min_{_ov}")(
        lambda self, min: clamp(self, min, None))
    register(f"clamp_max{_ov}", out=f"clamp_max{'.Tensor_out' if _ov else '.out'}", inplace=f"clamp_max_{_ov}")(
        lambda self, max: clamp(self, None, max))


def lerp(self, end, weight):
    dt = result_dtype_n(self, end)
    return ew("lerp", [operand(self, dt), operand(end, dt), operand(weight, dt)], dt)


register("lerp.Scalar", out="lerp.Scalar_out", inplace="lerp_.Scalar")(lerp)
register("lerp.Tensor", out="lerp.Tensor_out", inplace="lerp_.Tensor")(lerp)


@register("addcmul", out="addcmul.out", inplace="addcmul_")
def addcmul(self, tensor1, tensor2, *, value=1):
    dt = result_dtype_n(self, tensor1, tensor2)
    return ew("addcmul", [self, tensor1, tensor2, coef(value, dt)], dt)


@register("addcdiv", out="addcdiv.out", inplace="addcdiv_")
def addcdiv(self, tensor1, tensor2, *, value=1):
    if (_is_int(tensor1.dtype) and _is_int(tensor2.dtype)
            or (tensor1.dtype == torch.bool and tensor2.dtype == torch.bool)):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform "
            "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
            "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
            "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
            "implementation: (input + value * tensor1 / tensor2), for all dtypes."
        )
    dt = result_dtype_n(self, tensor1, tensor2)
    return ew("addcdiv", [self, tensor1, tensor2, coef(value, dt)], dt)


# ---- assertions on the device (rule "assert_async": a device-side check) ------


@functools.lru_cache(maxsize=256)
def _assert_msg_ints(msg):
    """The rule's attrs for a message: [nbytes, bytes packed 8 to an int];
    None for one the check cannot carry as it is (long, or with the
    payload placeholder "{}" or a NUL): that call runs on CPU."""
    b = msg.encode("utf-8")
    if len(b) > 320 or b"{}" in b or b"\0" in b:
        return None
    return (len(b),) + tuple(int.from_bytes(b[i:i + 8].ljust(8, b"\0"), "little", signed=True)
                             for i in range(0, len(b), 8))


def _assert_async(self, msg):
    """torch._assert_async on the device: no host sync; a zero raises
    RuntimeError (msg, or CPU's message) at the next host wait."""
    n = self.numel()
    if n != 1:  # the shape is known on the host: CPU's errors, at the call
        raise RuntimeError("Boolean value of Tensor with " + ("no values" if n == 0 else "more than one value")
                           + " is ambiguous")
    ints = _assert_msg_ints(msg)
    if ints is None:
        raise Unsupported("_assert_async: a message the device check cannot carry")
    if not self.is_complex():
        supported(self.dtype)
    run("assert_async", [self], ints)


@register("_assert_async")
def assert_async(self):
    _assert_async(self, "")


@register("_assert_async.msg")
def assert_async_msg(self, assert_msg):
    _assert_async(self, assert_msg or "Assertion is failed")  # CPU's text for an empty message


@register("_functional_assert_async.msg")
def functional_assert_async_msg(self, assert_msg, dep_token):
    _assert_async(self, assert_msg or "Assertion is failed")  # CPU's text for an empty message
    return dep_token.clone()
