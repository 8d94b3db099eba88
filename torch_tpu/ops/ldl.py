"""LDL^T with Bunch-Kaufman pivoting on the device: linalg_ldl_factor_ex
(linalg.ldl_factor) and linalg_ldl_solve, LAPACK's sytf2 / sytrs (lower)
step for step, so LD, pivots and info are CPU's (which calls LAPACK's
sytrf): the same pivot choices (alpha = (1 + sqrt 17) / 8 in the working
dtype, LAPACK's comparisons in its order), 1-based pivots, negative for a
2 x 2 block, the earlier columns' multipliers left unpermuted, the upper
triangle zero.

Only the lower triangle of A is read.  A step is a few device ops on the
whole matrix: the step's column, the pivot row and the choice between a
1 x 1 and a 2 x 2 block are computed on the device per matrix (masks
against positions, gathers for the interchange), so every step of a
factorization runs the same programs and reads nothing on the host; the
second column of a 2 x 2 block is a step that changes nothing.  Pivots can
differ from CPU's only where LAPACK's comparisons are ties to the last
bit (MKL's blocked code rounds differently), and NaN inputs (LAPACK's
search for the largest entry skips a NaN; argmax does not).

Real float32 / float64; complex inputs (hermitian matters there) go to the
CPU fallback.  Neither op has a gradient in PyTorch."""
import torch

from .._dispatch import Unsupported, register

_REAL = (torch.float32, torch.float64)


def _alpha(dtype):
    """(1 + sqrt(17)) / 8 as LAPACK computes it in the working precision."""
    return float((1 + torch.tensor(17.0, dtype=dtype).sqrt()) / 8)


def _symmetric(a):
    """The full symmetric matrix of a's lower triangle."""
    n = a.shape[-1]
    r = torch.arange(n, device=a.device)
    return torch.where(r[:, None] >= r[None, :], a, a.mT)


def _swap_index(r, i, j):
    """Positions r with i and j exchanged (i, j per matrix: [...])."""
    i, j = i.unsqueeze(-1), j.unsqueeze(-1)
    return torch.where(r == i, j, torch.where(r == j, i, r))


def _permute(a, p):
    """a[p][:, p] per matrix (p: [..., n])."""
    n = a.shape[-1]
    a = a.gather(-2, p.unsqueeze(-1).expand(*p.shape, n))
    return a.gather(-1, p.unsqueeze(-2).expand(*p.shape[:-1], n, n))


def _ldl_factor(A):
    n = A.shape[-1]
    batch = A.shape[:-2]
    dev, dt = A.device, A.dtype
    alpha = _alpha(dt)
    a = _symmetric(A)
    r = torch.arange(n, device=dev)
    rows, cols = r[:, None], r[None, :]
    lower = rows >= cols
    info = torch.zeros(batch, dtype=torch.int32, device=dev)
    skip = torch.zeros(batch, dtype=torch.bool, device=dev)
    pivots = []
    for k in range(n):
        col = a[..., :, k]
        absakk = col[..., k].abs()
        if k < n - 1:
            below = torch.where(r > k, col.abs(), -1.0)
            colmax, imax = below.max(-1)  # the first largest, as idamax
        else:
            colmax, imax = torch.zeros_like(absakk), torch.full(batch, k, device=dev)
        zero = (torch.maximum(absakk, colmax) == 0) | absakk.isnan()
        row = a.gather(-2, imax[..., None, None].expand(*batch, 1, n)).squeeze(-2)
        rowmax = torch.where((r >= k) & (r != imax.unsqueeze(-1)), row.abs(), -1.0).amax(-1)
        aii = row.gather(-1, imax.unsqueeze(-1)).squeeze(-1).abs()
        keep = zero | (absakk >= alpha * colmax) | (absakk >= alpha * colmax * (colmax / rowmax))
        one = keep | (aii >= alpha * rowmax)
        kp = torch.where(keep, k, imax)
        kk = torch.where(one, k, k + 1)
        step = ~skip & ~zero
        # interchange kk and kp in the trailing block a[k:, k:]
        swapped = _permute(a, _swap_index(r.expand(*batch, n), kk, kp))
        a = torch.where(step[..., None, None] & (rows >= k) & (cols >= k), swapped, a)
        x, akk = a[..., :, k], a[..., k, k]
        # 1 x 1: a22 -= x x^T / akk (sytf2's syr: a + x_i ((-1 / akk) x_j)), x /= akk
        d11 = 1 / akk
        a1 = a + x.unsqueeze(-1) * ((-d11)[..., None, None] * x.unsqueeze(-2))
        a1 = torch.where((rows > k) & (cols > k) & lower, a1, a)
        a1 = torch.where((rows > k) & (cols == k), (x * d11.unsqueeze(-1)).unsqueeze(-1), a1)
        if k < n - 1:
            # 2 x 2: the block's inverse applied to the two columns below it
            x1 = a[..., :, k + 1]
            d21 = a[..., k + 1, k]
            e11 = a[..., k + 1, k + 1] / d21
            e22 = akk / d21
            t = 1 / (e11 * e22 - 1)
            d21 = (t / d21).unsqueeze(-1)
            wk = d21 * (e11.unsqueeze(-1) * x - x1)
            wkp1 = d21 * (e22.unsqueeze(-1) * x1 - x)
            a2 = a - x.unsqueeze(-1) * wk.unsqueeze(-2) - x1.unsqueeze(-1) * wkp1.unsqueeze(-2)
            a2 = torch.where((rows > k + 1) & (cols > k + 1) & lower, a2, a)
            a2 = torch.where((rows > k + 1) & (cols == k), wk.unsqueeze(-1), a2)
            a2 = torch.where((rows > k + 1) & (cols == k + 1), wkp1.unsqueeze(-1), a2)
            a1 = torch.where(one[..., None, None], a1, a2)
        a = _symmetric(torch.where(step[..., None, None], a1, a))
        info = torch.where(~skip & zero & (info == 0), k + 1, info).int()
        piv = torch.where(one, kp + 1, -(kp + 1)).int()
        pivots.append(torch.where(skip, pivots[-1], piv) if pivots else piv)
        skip = ~skip & ~one
    piv = torch.stack(pivots, -1) if pivots else torch.zeros(*batch, 0, dtype=torch.int32, device=dev)
    return a.tril(), piv, info


@register("aten::linalg_ldl_factor_ex", out="aten::linalg_ldl_factor_ex.out")
def linalg_ldl_factor_ex(self, *, hermitian=False, check_errors=False):
    if self.dtype not in _REAL or self.dim() < 2 or self.dim() > 8 or self.shape[-1] != self.shape[-2]:
        raise Unsupported(f"linalg_ldl_factor_ex: {self.dtype} {tuple(self.shape)}")  # CPU's errors
    if self.numel() == 0:
        return (self.new_zeros(self.shape), torch.zeros(*self.shape[:-1], dtype=torch.int32, device=self.device),
                torch.zeros(self.shape[:-2], dtype=torch.int32, device=self.device))
    LD, pivots, info = _ldl_factor(self)
    if check_errors:
        torch._linalg_check_errors(info, "torch.linalg.ldl_factor_ex", is_matrix=self.dim() == 2)
    return LD, pivots, info


def _roles(pivots):
    """Per position: a 1 x 1 block, the first or the second row of a 2 x 2
    block (pairs of equal negative pivots, scanned from the top)."""
    neg = pivots < 0
    first, second = [], []
    prev = torch.zeros_like(neg[..., 0])
    for k in range(pivots.shape[-1]):
        f = neg[..., k] & ~prev
        first.append(f)
        second.append(prev)
        prev = f
    return ~neg, torch.stack(first, -1), torch.stack(second, -1)


@register("aten::linalg_ldl_solve", out="aten::linalg_ldl_solve.out")
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    """sytrs (lower): L D L^T X = B with L's interchanges applied row by row."""
    if LD.dtype not in _REAL or B.dtype != LD.dtype or pivots.dtype not in (torch.int32, torch.int64) or LD.dim() < 2 \
            or B.dim() < 2 or LD.dim() > 8 or B.dim() > 8 or LD.shape[-1] != LD.shape[-2] \
            or pivots.shape != LD.shape[:-1] or B.shape[-2] != LD.shape[-1]:
        raise Unsupported("linalg_ldl_solve: dtypes or shapes")  # CPU's errors
    try:
        batch = torch.broadcast_shapes(LD.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise Unsupported("linalg_ldl_solve: batch shapes") from None
    n, m = LD.shape[-1], B.shape[-1]
    a = LD.expand(*batch, n, n)
    piv = pivots.expand(*batch, n).long()
    b = B.expand(*batch, n, m).clone()
    if b.numel() == 0:
        return b
    one, first, second = _roles(piv)
    r = torch.arange(n, device=LD.device)
    rr = r.expand(*batch, n)
    kp = piv.abs() - 1

    def swap(b, i, j, on):
        p = torch.where(on.unsqueeze(-1), _swap_index(rr, i, j), rr)
        return b.gather(-2, p.unsqueeze(-1).expand(*batch, n, m))

    def sel(on, new, old):
        return torch.where(on[..., None, None], new, old)

    # L D Y = P B, top down
    for k in range(n):
        o, f = one[..., k], first[..., k]
        b = swap(b, torch.where(o, k, k + 1), kp[..., k], o | f)
        x, bk = a[..., :, k].unsqueeze(-1), b[..., k:k + 1, :]
        b1 = torch.where((r > k)[:, None], b + x * -bk, b)  # ger: b_i + x_i (-b_k)
        b1 = torch.where((r == k)[:, None], b1 * (1 / a[..., k, k])[..., None, None], b1)
        if k < n - 1:
            x1, bk1 = a[..., :, k + 1].unsqueeze(-1), b[..., k + 1:k + 2, :]
            b2 = torch.where((r > k + 1)[:, None], b + x * -bk, b)
            b2 = torch.where((r > k + 1)[:, None], b2 + x1 * -bk1, b2)
            akm1k = a[..., k + 1, k][..., None, None]
            akm1 = a[..., k, k][..., None, None] / akm1k
            ak = a[..., k + 1, k + 1][..., None, None] / akm1k
            denom = akm1 * ak - 1
            bkm1, bk_ = bk / akm1k, bk1 / akm1k
            b2 = torch.where((r == k)[:, None], (ak * bkm1 - bk_) / denom, b2)
            b2 = torch.where((r == k + 1)[:, None], (akm1 * bk_ - bkm1) / denom, b2)
            b = sel(f, b2, b)
        b = sel(o, b1, b)
    # L^T X = Y, bottom up
    for k in reversed(range(n)):
        o, s = one[..., k], second[..., k]
        below = torch.where((r > k)[:, None], b, torch.zeros_like(b))
        dk = (a[..., :, k].unsqueeze(-1) * below).sum(-2, keepdim=True)  # gemv: b_k - sum_i b_i l_ik
        nb = torch.where((r == k)[:, None], b - dk, b)
        if k > 0:
            dk1 = (a[..., :, k - 1].unsqueeze(-1) * below).sum(-2, keepdim=True)
            nb = torch.where(s[..., None, None] & (r == k - 1)[:, None], nb - dk1, nb)
        b = sel(o | s, nb, b)
        b = swap(b, torch.full_like(kp[..., k], k), kp[..., k], o | s)
    return b
