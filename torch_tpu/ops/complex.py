"""Complex tensors on the device (csrc/ops/complex.c, and the elementwise /
linalg rules, whose StableHLO ops take complex operands as they are).

The real-typed kernels of the other families decline complex operands
(they raise Unsupported); the kernels here are registered as the device
alternative of those overloads (_dispatch.alternative: tried before the CPU
fallback), so a complex add / mul / exp ... runs on the device and
everything else keeps its own kernel.  Ops that only exist for complex
numbers (angle, conj_physical, torch.complex, torch.polar, view_as_real's
users) are registered directly.

Complex Python scalars and 0-d CPU tensors travel as 0-d device tensors
(uploaded; there is no complex scalar input form).  Results and promotion
follow PyTorch (torch.result_type; abs / angle of complex give the part
type).
"""
import torch

from .. import _C
from .._dispatch import Unsupported, _make_inplace, _make_out, _out_arg_names, alternative, register, run
from .._dtypes import dtype_code

aten = torch.ops.aten

_PART = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_CX = {v: k for k, v in _PART.items()}
_CX_ABS, _CX_ANGLE, _CX_CONJ, _CX_REAL, _CX_IMAG, _CX_SGN = range(6)


def _complex_dt(dt):
    if dt not in _PART:
        raise Unsupported(f"dtype {dt}")
    return dt


def _operand(x, dt, *near):
    """A tpu tensor as is; a Python number or 0-d CPU tensor as a 0-d tpu
    tensor of dt, uploaded to the device of the first tpu tensor in near."""
    if isinstance(x, torch.Tensor) and _C.is_tpu(x):
        return x
    if isinstance(x, torch.Tensor) and (x.device.type != "cpu" or x.dim() != 0):
        raise RuntimeError(f"Expected all tensors to be on the same device, but found tpu and {x.device}")
    from .core import from_host
    dev = next((t.device.index for t in near if isinstance(t, torch.Tensor) and _C.is_tpu(t)), None)
    return from_host(x.to(dt) if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=dt), dev)


def _any_tpu(*xs):
    return any(isinstance(x, torch.Tensor) and _C.is_tpu(x) for x in xs)


def _alternatives(functional, fn, out=None, inplace=None):
    """fn as the device alternative of the functional overload and, derived
    as register() derives them, of its out= and in-place overloads."""
    alternative(functional, fn)
    for n in [out] if isinstance(out, str) else (out or []):
        alternative(n, _make_out(fn, _out_arg_names(n), n))
    for n in [inplace] if isinstance(inplace, str) else (inplace or []):
        alternative(n, _make_inplace(fn, n))


# ---- arithmetic ------------------------------------------------------------------


def _addsub(rule):
    def kernel(self, other, *, alpha=1):
        dt = _complex_dt(torch.result_type(self, other))
        if not _any_tpu(self, other):
            raise Unsupported("no tpu operand")
        ins = [_operand(self, dt, other), _operand(other, dt, self)]
        if not (isinstance(alpha, (int, float)) and alpha == 1):
            ins.append(_operand(alpha, dt, self, other))
        return run(rule, ins, [dtype_code(dt)])[0]

    return kernel


def _binary(rule):
    def kernel(self, other):
        dt = _complex_dt(torch.result_type(self, other))
        if not _any_tpu(self, other):
            raise Unsupported("no tpu operand")
        return run(rule, [_operand(self, dt, other), _operand(other, dt, self)], [dtype_code(dt)])[0]

    return kernel


def _positional_alpha(kernel):
    def scalar_kernel(self, other, alpha=1):
        return kernel(self, other, alpha=alpha)

    return scalar_kernel


_add, _sub = _addsub("add"), _addsub("sub")
_alternatives("add.Tensor", _add, out="add.out", inplace="add_.Tensor")
_alternatives("add.Scalar", _positional_alpha(_add), out="add.Scalar_out", inplace="add_.Scalar")
_alternatives("sub.Tensor", _sub, out="sub.out", inplace="sub_.Tensor")
_alternatives("sub.Scalar", _positional_alpha(_sub), out="sub.Scalar_out", inplace="sub_.Scalar")


def _rsub(self, other, *, alpha=1):
    return _sub(other, self, alpha=alpha)


_alternatives("rsub.Tensor", _rsub, out="rsub.Tensor_out")
_alternatives("rsub.Scalar", _positional_alpha(_rsub), out="rsub.Scalar_out")
for _n in ("mul", "div"):
    _alternatives(f"{_n}.Tensor", _binary(_n), out=f"{_n}.out", inplace=f"{_n}_.Tensor")
    _alternatives(f"{_n}.Scalar", _binary(_n), out=f"{_n}.Scalar_out", inplace=f"{_n}_.Scalar")


def _compare(rule):
    def kernel(self, other):
        dt = _complex_dt(torch.result_type(self, other))
        if not _any_tpu(self, other):
            raise Unsupported("no tpu operand")
        return run(rule, [_operand(self, dt, other), _operand(other, dt, self)])[0]

    return kernel


for _n in ("eq", "ne"):
    _alternatives(f"{_n}.Tensor", _compare(_n), out=f"{_n}.Tensor_out")
    _alternatives(f"{_n}.Scalar", _compare(_n), out=f"{_n}.Scalar_out")


def _where(condition, self, other):
    dt = _complex_dt(torch.result_type(self, other))
    if condition.dtype not in (torch.bool, torch.uint8):
        raise Unsupported("condition dtype")
    return run("where", [condition, _operand(self, dt, other, condition), _operand(other, dt, self, condition)],
               [dtype_code(dt)])[0]


_alternatives("where.self", _where, out="where.self_out")

# unary math whose elementwise rule takes a complex operand unchanged
_UNARY = ["exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh",
          "sin", "cos", "tan", "neg"]


def _unary(rule):
    def kernel(self):
        dt = _complex_dt(self.dtype)
        return run(rule, [self], [dtype_code(dt)])[0]

    return kernel


for _n in _UNARY:
    _alternatives(_n, _unary(_n), out=f"{_n}.out", inplace=f"{_n}_")


def _square(self):
    dt = _complex_dt(self.dtype)
    return run("mul", [self, self], [dtype_code(dt)])[0]


def _pow_scalar(self, exponent):
    """z ** k for a real integer k (|k| <= 4: repeated products, as exact
    as PyTorch's); anything else goes to the CPU."""
    dt = _complex_dt(self.dtype)
    if isinstance(exponent, torch.Tensor) or isinstance(exponent, complex) or float(exponent) != int(exponent) \
            or abs(int(exponent)) > 4:
        return run("pow", [self, _operand(exponent, dt, self)], [dtype_code(dt)])[0]
    k = int(exponent)
    if k == 0:
        return run("add", [run("mul", [self, 0], [dtype_code(dt)])[0], 1], [dtype_code(dt)])[0]
    r = self
    for _ in range(abs(k) - 1):
        r = run("mul", [r, self], [dtype_code(dt)])[0]
    return run("reciprocal", [r], [dtype_code(dt)])[0] if k < 0 else r


_alternatives("pow.Tensor_Scalar", _pow_scalar, out="pow.Tensor_Scalar_out", inplace="pow_.Scalar")
_alternatives("pow.Tensor_Tensor", _binary("pow"), out="pow.Tensor_Tensor_out", inplace="pow_.Tensor")


# backward ops whose real-typed rules lack the conjugate complex gradients take
def _tanh_backward(grad_output, output):
    _complex_dt(torch.result_type(grad_output, output))
    return grad_output * (1 - output * output).conj_physical()


def _sigmoid_backward(grad_output, output):
    _complex_dt(torch.result_type(grad_output, output))
    return grad_output * (output * (1 - output)).conj_physical()


_alternatives("tanh_backward", _tanh_backward, out="tanh_backward.grad_input")
_alternatives("sigmoid_backward", _sigmoid_backward, out="sigmoid_backward.grad_input")


def _masked_fill(self, mask, value):
    dt = _complex_dt(self.dtype)
    if mask.dtype != torch.bool:
        raise Unsupported("mask dtype")
    return run("where", [mask, _operand(value, dt, self), self], [dtype_code(dt)])[0]


_alternatives("masked_fill.Scalar", _masked_fill, out="masked_fill.Scalar_out", inplace="masked_fill_.Scalar")
_alternatives("masked_fill.Tensor", _masked_fill, out="masked_fill.Tensor_out", inplace="masked_fill_.Tensor")


def _addmm_like(rule):
    def kernel(self, a, b, *, beta=1, alpha=1):
        dt = _complex_dt(a.dtype)
        return run(rule, [self, a, b, _operand(beta, dt, self, a), _operand(alpha, dt, self, a)])[0]

    return kernel


for _n in ("addmm", "baddbmm", "addmv"):
    _alternatives(_n, _addmm_like(_n), out=f"{_n}.out", inplace=f"{_n}_")


# ---- functions with a real side (complex.c) ---------------------------------------


def _cx(fn, x):
    if not (x.is_complex() or x.is_floating_point()):
        raise Unsupported(f"dtype {x.dtype}")
    return run("complex_unary", [x], [fn])[0]


def _abs(self):
    _complex_dt(self.dtype)
    return _cx(_CX_ABS, self)


_alternatives("abs", _abs, out="abs.out")


def _sgn(self):
    _complex_dt(self.dtype)
    return _cx(_CX_SGN, self)


_alternatives("sgn", _sgn, out="sgn.out", inplace="sgn_")


@register("angle", out="angle.out")
def angle(self):
    if not (self.is_complex() or self.is_floating_point()):
        raise Unsupported("angle of an integer tensor")  # CPU promotes to float
    return _cx(_CX_ANGLE, self)


@register("_conj_physical", out="conj_physical.out", inplace="conj_physical_")
def conj_physical(self):
    if not self.is_complex():
        return self.clone()
    if self.is_conj():  # conj of a lazily conjugated view: its raw values
        return torch.conj(self).clone()
    return _cx(_CX_CONJ, self)


alternative("conj_physical", conj_physical)  # ops/core.py's _conj resolves a conj view through the fallback


def _parts_check(real, imag, op):
    if real.dtype != imag.dtype:
        raise RuntimeError(f"Expected object of scalar type {real.dtype} but got scalar type {imag.dtype} for "
                           "second argument")
    if real.dtype not in _CX:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got {real.dtype} and "
                           f"{imag.dtype}")
    if real.dtype == torch.float16:
        raise Unsupported("complex32")


@register("complex")
def complex_(real, imag):
    _parts_check(real, imag, "complex")
    return run("complex_make", [real, imag], [0])[0]


@register("polar")
def polar(abs, angle):
    _parts_check(abs, angle, "polar")
    return run("complex_make", [abs, angle], [1])[0]


_CX_NAMES = {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.complex32: "ComplexHalf"}


def _parts_out(fn, name):
    # CPU: out's dtype must be exactly the complex type of the parts
    def out_variant(a, b, *, out):
        res = fn(a, b)
        if out.dtype != res.dtype:
            raise RuntimeError(f"Expected object of scalar type {_CX_NAMES.get(res.dtype, res.dtype)} but got "
                               f"scalar type {_CX_NAMES.get(out.dtype, out.dtype)} for argument 'out'")
        return _make_out(lambda: res, ["out"], name)(out=out)
    return out_variant


register("complex.out")(_parts_out(complex_, "complex"))
register("polar.out")(_parts_out(polar, "polar"))



# ---- reductions (reduce.c's sum / mean take a complex operand) -----------------------


def _reduction(rule):
    def kernel(self, dim=None, keepdim=False, *, dtype=None):
        dt = _complex_dt(dtype if dtype is not None else self.dtype)
        dims = [] if dim is None else [int(dim)] if isinstance(dim, int) else [int(d) for d in dim]
        return run(rule, [self], [dtype_code(dt), int(bool(keepdim)), *dims])[0]

    return kernel


def _reduction_all(rule):
    k = _reduction(rule)

    def kernel(self, *, dtype=None):
        return k(self, None, False, dtype=dtype)

    return kernel


_alternatives("sum.dim_IntList", _reduction("sum"), out="sum.IntList_out")
_alternatives("sum", _reduction_all("sum"), out="sum.out")
_alternatives("mean.dim", _reduction("mean"), out="mean.out")
_alternatives("mean", _reduction_all("mean"), out="mean.dtype_out")


def _constant_pad_nd(self, pad, value=0):
    """index.c's constant_pad_nd with the pad value as a 0-d complex tensor."""
    dt = _complex_dt(self.dtype)
    return run("constant_pad_nd", [self, _operand(value, dt, self)], [int(p) for p in pad])[0]


_alternatives("constant_pad_nd", _constant_pad_nd, out="constant_pad_nd.out")
