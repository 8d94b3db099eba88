"""LU-based linear algebra on the device (rules in csrc/ops/lu.c; the
triangular solves of cholesky.py): linalg_lu_factor_ex and linalg_lu (square
or rectangular), linalg_lu_solve, lu_unpack, and what PyTorch builds on them: linalg.solve (_linalg_solve_ex),
linalg.inv (linalg_inv_ex), linalg.det (_linalg_det), linalg.slogdet and
logdet (_linalg_slogdet).  Their gradients are PyTorch's formulas over the
same ops (lu_solve with the saved LU and pivots), so training stays on the
device.  Float32 and float64; other dtypes, mixed dtypes and malformed
shapes go to the CPU fallback, which computes or raises as PyTorch.

As PyTorch does, det and slogdet factor A^T when A is a contiguous real
matrix (LAPACK's column-major view of it): their saved LU and pivots, which
the backward formulas read, are then the same as on CPU.

pivots and info are LAPACK's (1-based row interchanges; info k+1 for the
first zero pivot k), computed on the device; check_errors reads info on the
host, as PyTorch does on any device."""
import torch

from .._dispatch import _EXACT_DTYPE_OUT, Unsupported, register, run
from .cholesky import _solve

_REAL = (torch.float32, torch.float64)


def _square(A, what):
    if A.dtype not in _REAL or A.dim() < 2 or A.dim() > 8 or A.shape[-1] != A.shape[-2]:
        raise Unsupported(f"{what}: {A.dtype} {tuple(A.shape)}")


def _factor(A):
    return run("lu_factor", [A], [])


def _permute_rows(B, perm):
    """(P^T B)[i] = B[perm[i]] along B's rows (dim -2), batches broadcast."""
    idx = perm.unsqueeze(-1).expand(*perm.shape, B.shape[-1])
    return B.gather(-2, idx)


def _unpermute_rows(Y, perm):
    """X with X[perm[i]] = Y[i] (P Y)."""
    idx = perm.unsqueeze(-1).expand(*perm.shape, Y.shape[-1])
    return torch.empty_like(Y).scatter_(-2, idx, Y)


def _lu_solve(LU, pivots, B, left=True, adjoint=False):
    """X with A X = B (left) or X A = B, A = P L U from (LU, pivots); op(A)
    = A^T when adjoint (real dtypes)."""
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _lu_solve(LU, pivots, B.mT, True, not adjoint).mT
    batch = torch.broadcast_shapes(LU.shape[:-2], B.shape[:-2])
    n, k = LU.shape[-1], B.shape[-1]
    LU, B = LU.expand(*batch, n, n), B.expand(*batch, n, k)
    perm = run("lu_permutation", [pivots.expand(*batch, n)], [])[0]
    if not adjoint:  # U^-1 L^-1 P^T B
        y = _solve(LU, _permute_rows(B, perm), upper=False, unitriangular=True)
        return _solve(LU, y, upper=True)
    # A^T X = B: U^T L^T P^T X = B -> X = P L^-T U^-T B
    y = _solve(LU, B, upper=True, transpose=True)
    y = _solve(LU, y, upper=False, unitriangular=True, transpose=True)
    return _unpermute_rows(y, perm)


def _matrices(A, what):
    if A.dtype not in _REAL or A.dim() < 2 or A.dim() > 8:
        raise Unsupported(f"{what}: {A.dtype} {tuple(A.shape)}")


def _factor_any(A):
    """getrf of m x n matrices through the square rule: a tall A gets zero
    columns, a wide one zero rows, to max(m, n) (the first min(m, n) steps
    pick the same pivots: a zero never beats a real row, ties go to the
    first row, real rows come first); LU cut back to m x n, pivots to
    min(m, n), info the first exactly zero pivot among those (LAPACK's)."""
    m, n = A.shape[-2], A.shape[-1]
    if m == n:
        return _factor(A)
    k, big = min(m, n), max(m, n)
    Ap = torch.nn.functional.pad(A, (0, big - n, 0, big - m))
    LU, pivots, _ = _factor(Ap)
    LU, pivots = LU[..., :m, :n].contiguous(), pivots[..., :k].contiguous()
    zero = LU.diagonal(dim1=-2, dim2=-1) == 0
    first = torch.argmax(zero.to(torch.int32), dim=-1).to(torch.int32) + 1
    info = torch.where(zero.any(-1), first, torch.zeros_like(first))
    return LU, pivots, info


@register("aten::linalg_lu_factor_ex", out="aten::linalg_lu_factor_ex.out")
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    _matrices(A, "linalg_lu_factor_ex")
    if not pivot:
        raise Unsupported("linalg_lu_factor_ex without pivoting")
    LU, pivots, info = _factor_any(A)
    if check_errors:
        torch._linalg_check_errors(info, "torch.linalg.lu_factor_ex", is_matrix=A.dim() == 2)
    return LU, pivots, info


@register("aten::linalg_lu_solve", out="aten::linalg_lu_solve.out")
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    _square(LU, "linalg_lu_solve")
    if (B.dtype != LU.dtype or B.dim() < 2 or pivots.dtype != torch.int32 or pivots.shape != LU.shape[:-1]
            or B.shape[-2 if left else -1] != LU.shape[-1]):
        raise Unsupported("linalg_lu_solve: operands")
    try:
        torch.broadcast_shapes(LU.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise Unsupported("linalg_lu_solve: batch shapes") from None
    return _lu_solve(LU, pivots, B, left, adjoint)


def _perm_matrix(pivots, m, dt, dev):
    """P (m x m) of A = P L U from k <= m pivots (the rows past k stay)."""
    k = pivots.shape[-1]
    if k < m:
        rest = torch.arange(k + 1, m + 1, dtype=pivots.dtype, device=dev).expand(*pivots.shape[:-1], m - k)
        pivots = torch.cat([pivots, rest], -1)
    perm = run("lu_permutation", [pivots], [])[0]
    # P with (P^T)[i, perm[i]] = 1, i.e. P[perm[i], i] = 1
    eye = torch.eye(m, dtype=dt, device=dev).expand(*pivots.shape[:-1], m, m)
    return _permute_rows(eye, perm).mT.contiguous()


@register("aten::lu_unpack", out="aten::lu_unpack.out")
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    _matrices(LU_data, "lu_unpack")
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    if LU_pivots.dtype != torch.int32 or LU_pivots.shape[-1] != k or LU_pivots.shape[:-1] != LU_data.shape[:-2]:
        raise Unsupported("lu_unpack: pivots")  # CPU's errors
    dev, dt = LU_data.device, LU_data.dtype
    if unpack_data:
        L = LU_data[..., :, :k].tril(-1) + torch.eye(m, k, dtype=dt, device=dev)
        U = LU_data[..., :k, :].triu()
    else:
        L = torch.empty(0, dtype=dt, device=dev)
        U = torch.empty(0, dtype=dt, device=dev)
    P = _perm_matrix(LU_pivots, m, dt, dev) if unpack_pivots else torch.empty(0, dtype=dt, device=dev)
    return P, L, U


@register("aten::linalg_lu", out="aten::linalg_lu.out")
def linalg_lu(A, *, pivot=True):
    _matrices(A, "linalg_lu")
    if not pivot:
        raise Unsupported("linalg_lu without pivoting")  # CPU refuses it too
    LU, pivots, _ = _factor_any(A)
    return lu_unpack(LU, pivots)


def _vector_rhs(A, B):
    # linalg.solve's rule: B is a vector (batch) when it has one dimension
    # less than A and matches A's leading shape
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])


@register("aten::_linalg_solve_ex", out="aten::_linalg_solve_ex.result")
def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    _square(A, "linalg.solve")
    if B.dtype != A.dtype or B.dim() < 1 or B.dim() > 8:
        raise Unsupported("linalg.solve: operands")
    vector = _vector_rhs(A, B)
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.dim() < 2 or Bm.shape[-2 if left else -1] != A.shape[-1] or (vector and not left):
        raise Unsupported("linalg.solve: shapes")
    try:
        torch.broadcast_shapes(A.shape[:-2], Bm.shape[:-2])
    except RuntimeError:
        raise Unsupported("linalg.solve: batch shapes") from None
    LU, pivots, info = _factor(A)
    if check_errors:
        torch._linalg_check_errors(info, "torch.linalg.solve_ex", is_matrix=A.dim() == 2)
    X = _lu_solve(LU, pivots, Bm, left)
    return (X.squeeze(-1) if vector else X), LU, pivots, info


# CPU's linalg.solve out= wants the result's dtype (the meta kernel takes any): _dispatch's exact-dtype list
_EXACT_DTYPE_OUT.add("_linalg_solve_ex")


@register("aten::linalg_inv_ex", out="aten::linalg_inv_ex.inverse")
def linalg_inv_ex(A, *, check_errors=False):
    _square(A, "linalg.inv")
    LU, pivots, info = _factor(A)
    if check_errors:
        torch._linalg_check_errors(info, "torch.linalg.inv_ex", is_matrix=A.dim() == 2)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
    return _lu_solve(LU, pivots, eye), info


def _factors_transpose(A):
    return A.is_contiguous() and not A.is_complex()


def _det_parts(A):
    LU, pivots, _ = _factor(A.mT if _factors_transpose(A) else A)
    n = A.shape[-1]
    diag = LU.diagonal(dim1=-2, dim2=-1)
    swaps = (pivots != torch.arange(1, n + 1, dtype=torch.int32, device=A.device)).sum(-1)
    odd = swaps.remainder(2) == 1
    return LU, pivots, diag, odd


@register("aten::_linalg_det", out="aten::_linalg_det.result")
def linalg_det(A):
    _square(A, "linalg.det")
    LU, pivots, diag, odd = _det_parts(A)
    d = diag.prod(-1)
    return torch.where(odd, -d, d), LU, pivots


@register("aten::_linalg_slogdet", out="aten::_linalg_slogdet.sign")
def linalg_slogdet(A):
    _square(A, "linalg.slogdet")
    LU, pivots, diag, odd = _det_parts(A)
    sign = torch.sign(diag).prod(-1)
    sign = torch.where(odd, -sign, sign)
    return sign, diag.abs().log().sum(-1), LU, pivots
