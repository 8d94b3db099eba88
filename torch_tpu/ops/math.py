"""Elementwise math kernels: exponentials and logarithms, trigonometric and
hyperbolic functions, roots, rounding, sign, the classification predicates,
nan_to_num, atan2, and the special functions (erf, lgamma, digamma,
polygamma, the Bessel functions i0 / i0e / i1 / i1e, entr, zeta, nextafter,
logaddexp, xlogy, logit) (rules in csrc/ops/math.c).  The
conventions are elementwise.py's; a case a kernel does not take raises
Unsupported and runs through the CPU fallback.
"""
import torch

from .. import _C
from .._dispatch import Call, Unsupported, coef, operand, register, scalar, supported, write
from .._dtypes import dtype_code, scalar_type_name
from .elementwise import ew, float_dtype, result_dtype

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
                  "frac": lambda dt: not dt.is_floating_point,
                  # the rounding ops take integers (a copy) but not bool: '"trunc_vml_cpu" not implemented for 'Bool''
                  **{_r: (lambda dt: dt == torch.bool) for _r in ("floor", "ceil", "trunc")}}
_CPU_KERNEL = {"floor": "floor_vml_cpu", "ceil": "ceil_vml_cpu", "trunc": "trunc_vml_cpu"}


def _unary(rule, to_float):
    def kernel(self):
        dt = supported(self.dtype)
        if rule in _UNARY_REJECTS and _UNARY_REJECTS[rule](dt):
            raise NotImplementedError(f'"{_CPU_KERNEL.get(rule, rule + "_cpu")}" not implemented for '
                                      f'\'{scalar_type_name(dt)}\'')
        if to_float:
            dt = float_dtype(dt)
        return ew(rule, [self], dt)

    kernel.__name__ = rule
    return kernel


# op name -> kernel (returns a Call), also run by the foreach ops.  The
# functional overloads of floating inputs run as C++ kernels (fast=True,
# csrc/torch/arith.cpp: TPU_FAST_UNARY), which hand other cases here.
unary = {_name: register(_name, out=f"{_name}.out", inplace=f"{_name}_", fast=_name != "sgn")(_unary(_name, _tf))
         for _name, _tf in _UNARY.items()}


@register("neg", out="neg.out", inplace="neg_", fast=True)
def neg(self):
    if self.dtype == torch.bool:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
            "use the `~` or `logical_not()` operator instead."
        )
    return ew("neg", [self], supported(self.dtype))


@register("round", out="round.out", inplace="round_")
def round_(self):
    if self.dtype == torch.bool:
        raise NotImplementedError('"round_vml_cpu" not implemented for \'Bool\'')
    return ew("round", [self], supported(self.dtype), 0)


@register("round.decimals", out="round.decimals_out", inplace="round_.decimals")
def round_decimals(self, *, decimals):
    if decimals != 0 and not self.dtype.is_floating_point:
        raise RuntimeError("round_cpu not implemented for integral types with decimals != 0")
    return ew("round", [self], supported(self.dtype), int(decimals))


@register("signbit", out="signbit.out")
def signbit(self):
    supported(self.dtype)
    return Call("signbit", [self])


def _classify(rule):
    def kernel(self):
        supported(self.dtype)
        return Call(rule, [self])

    return kernel


for _name in ["isnan", "isinf", "isposinf", "isneginf", "isfinite"]:
    register(_name, out=None if _name == "isfinite" else f"{_name}.out")(_classify(_name))


@register("nan_to_num", out="nan_to_num.out", inplace="nan_to_num_")
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    dt = supported(self.dtype)
    if not dt.is_floating_point:
        return ew("convert", [self], dt)
    fi = torch.finfo(dt)
    vals = [0.0 if nan is None else nan, fi.max if posinf is None else posinf, fi.min if neginf is None else neginf]
    return ew("nan_to_num", [self] + [scalar(float(v), dt) for v in vals], dt)


@register("atan2", out="atan2.out", inplace="atan2_")
def atan2(self, other):
    dt = float_dtype(result_dtype(self, other))
    return ew("atan2", [operand(self, dt), operand(other, dt)], dt)



# ---- special functions ----------------------------------------------------------------


def _logaddexp(base2):
    def kernel(self, other):
        dt = supported(torch.result_type(self, other))
        if not dt.is_floating_point:
            raise Unsupported()
        return ew("logaddexp", [operand(self, dt), operand(other, dt)], dt, base2)

    return kernel


register("aten::logaddexp", out="aten::logaddexp.out")(_logaddexp(0))
register("aten::logaddexp2", out="aten::logaddexp2.out")(_logaddexp(1))


def _eps(eps):
    return eps is not None and float(eps) >= 0


@register("aten::logit", out="aten::logit.out", inplace="aten::logit_")
def logit(self, eps=None):
    dt = float_dtype(supported(self.dtype))
    ins = [self] + ([coef(eps, dt)] if _eps(eps) else [])
    return ew("logit", ins, dt)


@register("aten::logit_backward", out="aten::logit_backward.grad_input")
def logit_backward(grad_output, self, eps=None):
    dt = float_dtype(supported(torch.result_type(grad_output, self)))
    ins = [grad_output, self] + ([coef(eps, dt)] if _eps(eps) else [])
    return ew("logit_backward", ins, dt)


def _xlogy(is_1p):
    def kernel(self, other):
        dt = float_dtype(supported(torch.result_type(self, other)))
        return ew("xlogy", [operand(self, dt), operand(other, dt)], dt, is_1p)

    return kernel


register("aten::xlogy.Tensor", out="aten::xlogy.OutTensor", inplace="aten::xlogy_.Tensor")(_xlogy(0))
register("aten::xlogy.Scalar_Self", out="aten::xlogy.OutScalar_Self")(_xlogy(0))
register("aten::xlogy.Scalar_Other", out="aten::xlogy.OutScalar_Other", inplace="aten::xlogy_.Scalar_Other")(
    _xlogy(0))
register("aten::special_xlog1py", out="aten::special_xlog1py.out")(_xlogy(1))
register("aten::special_xlog1py.self_scalar", out="aten::special_xlog1py.self_scalar_out")(_xlogy(1))
register("aten::special_xlog1py.other_scalar", out="aten::special_xlog1py.other_scalar_out")(_xlogy(1))


def _special(rule):
    def kernel(self):
        dt = float_dtype(supported(self.dtype))
        return ew(rule, [self], dt)

    return kernel


lgamma = register("aten::lgamma", out="aten::lgamma.out", inplace="aten::lgamma_")(_special("lgamma"))
digamma = register("aten::digamma", out="aten::digamma.out", inplace="aten::digamma_")(_special("digamma"))
register("aten::i0", out="aten::i0.out", inplace="aten::i0_")(_special("i0"))
register("aten::special_i0e", out="aten::special_i0e.out")(_special("i0e"))
register("aten::special_i1", out="aten::special_i1.out")(_special("i1"))
register("aten::special_i1e", out="aten::special_i1e.out")(_special("i1e"))
register("aten::special_modified_bessel_i0", out="aten::special_modified_bessel_i0.out")(_special("i0"))
register("aten::special_modified_bessel_i1", out="aten::special_modified_bessel_i1.out")(_special("i1"))
register("aten::special_entr", out="aten::special_entr.out")(_special("entr"))


def _binary_special(rule):
    def kernel(self, other):
        dt = supported(torch.result_type(self, other))
        if rule == "nextafter" and not dt.is_floating_point:  # as CPU: no integer kernel
            raise NotImplementedError(f'"nextafter_cpu" not implemented for \'{scalar_type_name(dt)}\'')
        dt = float_dtype(dt)
        return ew(rule, [operand(self, dt), operand(other, dt)], dt)

    return kernel


register("aten::special_zeta", out="aten::special_zeta.out")(_binary_special("zeta"))
register("aten::special_zeta.self_scalar", out="aten::special_zeta.self_scalar_out")(_binary_special("zeta"))
register("aten::special_zeta.other_scalar", out="aten::special_zeta.other_scalar_out")(_binary_special("zeta"))
register("aten::nextafter", out="aten::nextafter.out", inplace="aten::nextafter_")(_binary_special("nextafter"))


@register("aten::polygamma", out="aten::polygamma.out")
def polygamma(n, self):
    dt = float_dtype(supported(self.dtype))
    if int(n) < 0:
        raise Unsupported()
    ct = dt if _C.platform() == "tpu" else torch.float64
    return ew("polygamma", [self], dt, int(n), dtype_code(ct))


@register("aten::polygamma_")
def polygamma_(self, n):
    res = polygamma(n, self).run()
    if res.dtype != self.dtype:
        raise Unsupported()
    write(self, res)
    return self



# ---- frexp ----------------------------------------------------------------------------------

# dtype -> (integer view, mantissa bits, exponent bias, exponent mask)
_FREXP = {torch.float32: (torch.int32, 23, 126, 0xFF), torch.float64: (torch.int64, 52, 1022, 0x7FF)}


def _frexp_bits(bits, dtype):
    """frexp of normal numbers given as their bits: the exponent field less
    the bias, and the mantissa with the exponent field of [0.5, 1)."""
    itype, mbits, bias, emask = _FREXP[dtype]
    exponent = ((bits >> mbits) & emask) - bias
    mant = ((bits & ~(emask << mbits)) | (bias << mbits)).view(dtype)
    return mant, exponent


@register("aten::frexp.Tensor", out="aten::frexp.Tensor_out")
def frexp(self):
    """mantissa in [0.5, 1) with self's sign and exponent (int32), self =
    mantissa * 2**exponent, as CPU's std::frexp; 0, inf and NaN give (self,
    0).  Computed on the bits: XLA's CPU code flushes subnormals to zero in
    float arithmetic, so a subnormal's mantissa field is converted to a
    (normal) float of the same digits and its exponent shifted."""
    if not self.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if self.dtype in (torch.float16, torch.bfloat16):  # exact in float32, and back
        mant, exponent = frexp(self.float())
        return mant.to(self.dtype), exponent
    itype, mbits, bias, emask = _FREXP[self.dtype]
    bits = self.view(itype)
    field = (bits >> mbits) & emask
    frac = bits & ((1 << mbits) - 1)
    mant, exponent = _frexp_bits(bits, self.dtype)
    # a subnormal is frac * 2**(1 - bias - 1 - mbits): frac as a float has the digits
    smant, sexp = _frexp_bits(frac.to(self.dtype).view(itype), self.dtype)
    sub = (field == 0) & (frac != 0)
    sign = bits & torch.iinfo(itype).min  # the sign bit
    smant = (smant.view(itype) | sign).view(self.dtype)
    mant = torch.where(sub, smant, mant)
    exponent = torch.where(sub, sexp - (bias + mbits), exponent)
    special = ((field == 0) & (frac == 0)) | (field == emask)
    return torch.where(special, self, mant), torch.where(special, 0, exponent).to(torch.int32)
