"""The Cholesky factorization on the device (rules in csrc/ops/cholesky.c):
linalg_cholesky_ex, which linalg.cholesky and cholesky reach; and the
triangular solves that use its factor: linalg_solve_triangular,
triangular_solve, cholesky_solve (_cholesky_solve_helper),
cholesky_inverse.  Their gradients are PyTorch's formulas, made of these
same device ops (cholesky's backward included).  Float32 and float64 with
one dtype; other dtypes, mixed dtypes and malformed shapes go to the CPU
fallback, which computes or raises exactly as PyTorch does.

Transformers calls it through torch.distributions' positive-definite check
(resizing token embeddings); `info` is LAPACK's (0, or the order of the
first leading minor that is not positive definite), computed on the device.
check_errors=True reads info on the host, as PyTorch does on any device.
Float32 and float64; complex inputs go to the CPU fallback."""
import torch

from .._dispatch import Unsupported, register, run
from .._dtypes import scalar_type_name as _short


@register("aten::linalg_cholesky_ex", out="aten::linalg_cholesky_ex.L")
def linalg_cholesky_ex(self, *, upper=False, check_errors=False):
    if self.dim() < 2:
        raise RuntimeError("linalg.cholesky: The input tensor A must have at least 2 dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"linalg.cholesky: A must be batches of square matrices, but they are "
                           f"{self.shape[-2]} by {self.shape[-1]} matrices")
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"linalg.cholesky: Expected a floating point or complex tensor as input. Got "
                           f"{_short(self.dtype)}")
    if self.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"linalg_cholesky_ex: {self.dtype}")  # complex, and PyTorch's own half errors
    if self.dim() > 8:
        raise Unsupported(f"linalg_cholesky_ex: rank {self.dim()}")
    L, info = run("cholesky_ex", [self], [int(bool(upper))])
    if check_errors:
        torch._linalg_check_errors(info, "linalg.cholesky_ex", is_matrix=self.dim() == 2)
    return L, info


# ---- triangular solves ----------------------------------------------------------------


def _solve_operands(A, B, left):
    """A, B broadcast to one batch, or Unsupported when the device does not
    take them (the CPU fallback then computes or raises as PyTorch)."""
    if A.dtype != B.dtype or A.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"triangular solve: {A.dtype} and {B.dtype}")
    if A.dim() < 2 or B.dim() < 2 or A.shape[-1] != A.shape[-2] or A.dim() > 8 or B.dim() > 8:
        raise Unsupported("triangular solve: shapes")
    m = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != m:
        raise Unsupported("triangular solve: shapes")
    try:
        batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise Unsupported("triangular solve: batch shapes") from None
    return A.expand(*batch, m, m), B.expand(*batch, *B.shape[-2:])


def _solve(A, B, *, upper, left=True, unitriangular=False, transpose=False):
    A, B = _solve_operands(A, B, left)
    if A.numel() == 0 or B.numel() == 0:
        return torch.zeros(B.shape, dtype=B.dtype, device=B.device)
    return run("triangular_solve", [A, B], [int(bool(left)), int(not upper), int(bool(unitriangular)),
                                            int(bool(transpose))])[0]


@register("aten::linalg_solve_triangular", out="aten::linalg_solve_triangular.out")
def linalg_solve_triangular(self, B, *, upper, left=True, unitriangular=False):
    return _solve(self, B, upper=upper, left=left, unitriangular=unitriangular)


@register("aten::triangular_solve", out="aten::triangular_solve.X")
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    x = _solve(A, self, upper=upper, unitriangular=unitriangular, transpose=transpose)
    return x, A.expand(*x.shape[:-2], *A.shape[-2:]).clone()


@register("aten::_cholesky_solve_helper")
def cholesky_solve_helper(self, A, upper):
    # A A^H = L L^T (lower) or U^T U (upper): two triangular solves
    y = _solve(A, self, upper=upper, transpose=upper)
    return _solve(A, y, upper=upper, transpose=not upper)


@register("aten::cholesky_inverse", out="aten::cholesky_inverse.out")
def cholesky_inverse(self, upper=False):
    if self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        raise Unsupported("cholesky_inverse: shapes")
    eye = torch.eye(self.shape[-1], dtype=self.dtype, device=self.device).expand(self.shape)
    return cholesky_solve_helper(eye, self, upper)


@register("aten::cholesky", out="aten::cholesky.out")
def cholesky(self, upper=False):
    """The deprecated torch.cholesky: linalg_cholesky_ex, errors checked."""
    L, info = linalg_cholesky_ex(self, upper=upper)
    torch._linalg_check_errors(info, "cholesky", is_matrix=self.dim() == 2)
    return L
