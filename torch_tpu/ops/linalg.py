"""Matrix products and the grouped matmul of MoE layers (csrc/ops/linalg.c).

aten::matmul / linear / outer / ger are CompositeImplicitAutograd: PyTorch
decomposes them into mm / bmm / addmm / _unsafe_view / mul before they reach
the device, so only the ops below need kernels.  bf16/f16 products accumulate
in f32.  beta / alpha travel as runtime 0-d inputs (no recompile when they
change).
"""
import torch

from .._dispatch import Call, Unsupported, coef, register, run, supported
from .._dtypes import dtype_code


def _scalar_arg(v, dtype, name):
    """beta / alpha as a runtime input in the type PyTorch computes them in."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if not dtype.is_floating_point and not dtype.is_complex and isinstance(v, float) and v != int(v):
        raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")
    if isinstance(v, complex):
        raise Unsupported(f"complex {name}")
    if dtype.is_complex:  # a real coefficient, in the part type
        dtype = torch.float64 if dtype == torch.complex128 else torch.float32
    return coef(v, dtype)


@register("aten::mm", out="aten::mm.out")
def mm(self, mat2):
    return Call("mm", [self, mat2])


@register("aten::bmm", out="aten::bmm.out")
def bmm(self, mat2):
    return run("bmm", [self, mat2])[0]


def _addlike(rule, self, a, b, beta, alpha):
    dt = a.dtype
    return run(rule, [self, a, b, _scalar_arg(beta, dt, "beta"), _scalar_arg(alpha, dt, "alpha")])[0]


@register("aten::addmm", out="aten::addmm.out", inplace="aten::addmm_")
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    return _addlike("addmm", self, mat1, mat2, beta, alpha)


@register("aten::baddbmm", out="aten::baddbmm.out", inplace="aten::baddbmm_")
def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    return _addlike("baddbmm", self, batch1, batch2, beta, alpha)


@register("aten::addbmm", out="aten::addbmm.out", inplace="aten::addbmm_")
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    return _addlike("addbmm", self, batch1, batch2, beta, alpha)


@register("aten::addmv", out="aten::addmv.out", inplace="aten::addmv_")
def addmv(self, mat, vec, *, beta=1, alpha=1):
    return _addlike("addmv", self, mat, vec, beta, alpha)


@register("aten::mv", out="aten::mv.out")
def mv(self, vec):
    return run("mv", [self, vec])[0]


@register("aten::dot", out="aten::dot.out")
def dot(self, tensor):
    return run("dot", [self, tensor])[0]


@register("aten::vdot", out="aten::vdot.out")
def vdot(self, other):
    if self.dtype.is_complex:  # conj(self) . other
        return run("dot", [torch.conj_physical(self), other])[0]
    return run("vdot", [self, other])[0]


@register("aten::addr", out="aten::addr.out", inplace="aten::addr_")
def addr(self, vec1, vec2, *, beta=1, alpha=1):
    dt = torch.promote_types(torch.promote_types(self.dtype, vec1.dtype), vec2.dtype)
    if vec1.dim() != 1 or vec2.dim() != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.dim()}-D")
    if dt == torch.bool:
        raise NotImplementedError("tpu: addr of bool tensors")
    return run("addr", [self, vec1, vec2, _scalar_arg(beta, dt, "beta"), _scalar_arg(alpha, dt, "alpha")],
               [dtype_code(dt)])[0]


# ---- grouped matrix multiply -------------------------------------------------
# torch._grouped_mm / F.grouped_mm, the kernel of Mixture-of-Experts layers
# (Transformers routes MoE experts to it on tpu).  Its backward is PyTorch's
# own formula, which calls _grouped_mm again with transposed operands (the
# 2D x 2D layout for the weight gradient).


@register("aten::_grouped_mm")
def grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    if bias is not None:
        raise RuntimeError("Bias tensor provided, but it is not supported yet.")
    supported(self.dtype)
    if self.dtype != mat2.dtype:
        raise RuntimeError(f"grouped_mm: expected mat_a and mat_b of one dtype, got {self.dtype} and {mat2.dtype}")
    if offs is not None and offs.dtype != torch.int32:
        raise RuntimeError(f"Offsets tensor must be integer (int32) tensor, but got {offs.dtype}.")
    ints = [dtype_code(out_dtype) if out_dtype is not None else 0]
    inputs = [self, mat2] + ([offs] if offs is not None else [])
    return run("grouped_mm", inputs, ints)[0]
