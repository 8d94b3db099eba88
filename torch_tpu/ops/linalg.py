"""Matrix products and the grouped matmul of MoE layers (csrc/ops/linalg.c).

aten::matmul / linear / outer / ger are CompositeImplicitAutograd: PyTorch
decomposes them into mm / bmm / addmm / _unsafe_view / mul before they reach
the device, so only the ops below need kernels.  bf16/f16 products accumulate
in f32.  beta / alpha travel as runtime 0-d inputs (no recompile when they
change).
"""
import torch

from .._dispatch import Call, Unsupported, coef, register, run, supported
from .._dtypes import dtype_code, scalar_type_name as _scalar_name


def _scalar_arg(v, dtype, name, strict=False):
    """beta / alpha as a runtime input in the type PyTorch computes them in.
    A float for integer tensors: addr (`strict`) refuses it, as CPU does;
    the addmm family truncates it to an integer, as CPU's kernels do."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if not dtype.is_floating_point and not dtype.is_complex and isinstance(v, float) and v != int(v):
        if strict:
            raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")
        v = int(v)
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
    if dt == torch.bool:  # CPU's logical form: (beta and self) or (alpha and vec1 x vec2)
        _scalar_arg(beta, dt, "beta", True), _scalar_arg(alpha, dt, "alpha", True)
        outer = vec1[:, None] & vec2[None, :]
        parts = ([outer] if alpha else []) + ([self] if beta else [])
        r = parts[0] | parts[1] if len(parts) == 2 else parts[0] if parts else torch.zeros_like(outer)
        return torch.broadcast_to(r, torch.broadcast_shapes(self.shape, outer.shape)).clone()
    return run("addr", [self, vec1, vec2, _scalar_arg(beta, dt, "beta", True),
                        _scalar_arg(alpha, dt, "alpha", True)], [dtype_code(dt)])[0]


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


_F8 = (torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float8_e4m3fnuz)


@register("aten::_scaled_mm", out="aten::_scaled_mm.out")
def scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """The float8 matmul (torchao's and Transformer Engine's training path)
    as CPU computes it: tensor-wise (0-d / one-element float32 scales) or
    row-wise ((M, 1) and (1, N) contiguous float32 scales); the product of
    the widened operands in float32, scaled, plus bias, rounded once into
    out_dtype (self's dtype by default).  CPU ignores scale_result and
    use_fast_accum; so do we."""
    if self.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"mat{1 if self.dim() != 2 else 2} must be a matrix")
    if self.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat_a and mat_b shapes cannot be multiplied ({self.shape[0]}x{self.shape[1]} and "
                           f"{mat2.shape[0]}x{mat2.shape[1]})")
    m, n = self.shape[0], mat2.shape[1]
    f8 = self.dtype in _F8 and mat2.dtype in _F8
    f32 = scale_a.dtype == torch.float32 and scale_b.dtype == torch.float32
    tensorwise = f8 and f32 and scale_a.numel() == 1 and scale_b.numel() == 1
    rowwise = f8 and f32 and tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n) \
        and scale_a.is_contiguous() and scale_b.is_contiguous()
    if not (tensorwise or rowwise):
        raise ValueError(
            "Invalid scaling configuration.\n"
            "- For TensorWise scaling, a and b should be float8, scales should be float and singletons.\n"
            f"- For RowWise scaling, a and b should be float8, scales should be float, scale_a should be ({m}, 1) "
            f"and scale_b should be (1, {n}), and both should be contiguous.\n"
            f"Got mat_a.dtype()={_scalar_name(self.dtype)}, scale_a.dtype()={_scalar_name(scale_a.dtype)}, "
            f"scale_a.size()={list(scale_a.shape)}, scale_a.stride()={list(scale_a.stride())}, "
            f"mat_b.dtype()={_scalar_name(mat2.dtype)}, scale_b.dtype()={_scalar_name(scale_b.dtype)}, "
            f"scale_b.size()={list(scale_b.shape)} and scale_b.stride()={list(scale_b.stride())}")
    sa = scale_a.reshape(()) if tensorwise else scale_a
    sb = scale_b.reshape(()) if tensorwise else scale_b
    r = torch.mm(self.float(), mat2.float()) * sa * sb
    if bias is not None:
        r = r + bias.float()
    return r.to(out_dtype if out_dtype is not None else self.dtype)
