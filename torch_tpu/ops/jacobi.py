"""The singular value decomposition on the device by one-sided Jacobi
rotations (Hestenes): _linalg_svd (torch.linalg.svd, svdvals, and what
PyTorch builds on them: matrix_rank, cond, the 2- and nuclear norms, pinv);
and the symmetric eigenproblem by two-sided Jacobi rotations: _linalg_eigh
(eigh, eigvalsh, and the hermitian=True forms of matrix_rank and pinv),
below.

The columns of A (m >= n; a wide A is decomposed as its transpose) are
rotated in pairs until they are orthogonal: a rotation of columns p, q by
the angle that zeroes their inner product, V accumulating the same
rotations.  The pairs of a round are disjoint (a round-robin tournament:
n - 1 rounds of n / 2 pairs meet every pair once, an odd n gets a zero
column), so a round is a few whole-batch ops on gathered columns, and every
round of every sweep runs the same programs (the pairs are index tensors,
inputs of the program).  A fixed number of sweeps (cyclic Jacobi converges
quadratically: 10 for float32, 14 for float64, checked against LAPACK on
random and ill-conditioned matrices in tests/python/test_jacobi_svd.py).
The singular values are the columns' norms, sorted descending; U is the
Q of a Householder QR of A V with the signs of its R's diagonal (so U is
orthonormal even where singular values are 0; with full_matrices the
complete Q), Vh = V^T.

U and V are a valid SVD but their columns' signs need not be LAPACK's (no
two SVD routines agree on them: CUDA's differ from CPU's too); S, and so
svdvals, pinv, matrix_rank, cond and the norms, are CPU's up to rounding.
Real float32 / float64; complex inputs and a `driver` (CUDA's option) go to
the CPU fallback.
"""
import torch

from .._dispatch import Unsupported, register
from .householder import linalg_qr

_SWEEPS = {torch.float32: 10, torch.float64: 14}
_ROUNDS = {}


def _rounds(n, device):
    """The round-robin schedule of n (even) columns: ([rounds, n/2] p, q)."""
    key = (n, str(device))
    if key not in _ROUNDS:
        players = list(range(n))
        ps, qs = [], []
        for _ in range(n - 1):
            ps.append(players[: n // 2])
            qs.append(players[n // 2:][::-1])
            players = [players[0]] + [players[-1]] + players[1:-1]
        _ROUNDS[key] = (torch.tensor(ps, device=device), torch.tensor(qs, device=device))
    return _ROUNDS[key]


def _rotation(app, aqq, apq):
    """(c, s) of the Jacobi rotation that zeroes apq of the 2 x 2 symmetric
    [[app, apq], [apq, aqq]] (the smaller angle; c = 1, s = 0 where apq is
    already 0 or the angle underflows), element by element."""
    still = apq != 0
    g = torch.where(still, apq, torch.ones_like(apq))
    zeta = (aqq - app) / (2 * g)
    sign = torch.where(zeta >= 0, torch.ones_like(zeta), -torch.ones_like(zeta))
    t = sign / (zeta.abs() + torch.sqrt(1 + zeta * zeta))
    t = torch.where(still & torch.isfinite(t), t, torch.zeros_like(t))
    c = torch.rsqrt(1 + t * t)
    return c, c * t


def _rotate(a, v, p, q):
    """One round: columns p[i] and q[i] of every matrix of a (and v) rotated
    so that they are orthogonal."""
    ap, aq = a.index_select(-1, p), a.index_select(-1, q)
    c, s = _rotation((ap * ap).sum(-2), (aq * aq).sum(-2), (ap * aq).sum(-2))
    c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    a = a.index_copy(-1, p, c * ap - s * aq).index_copy(-1, q, s * ap + c * aq)
    vp, vq = v.index_select(-1, p), v.index_select(-1, q)
    v = v.index_copy(-1, p, c * vp - s * vq).index_copy(-1, q, s * vp + c * vq)
    return a, v


def _jacobi(A):
    """(A V, V) with the columns of A V orthogonal; A [..., m, n], m >= n."""
    n = A.shape[-1]
    odd = n % 2
    a = torch.nn.functional.pad(A, (0, odd)) if odd else A
    N = n + odd
    v = torch.eye(N, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], N, N).contiguous()
    ps, qs = _rounds(N, A.device)
    for _ in range(_SWEEPS[A.dtype]):
        for r in range(N - 1):
            a, v = _rotate(a, v, ps[r], qs[r])
    if odd:  # the zero column met the others but stayed zero: drop it and its row and column of V
        a, v = a[..., :n], v[..., :n, :n]
    return a, v


def _svd(A, compute_uv, full):
    m, n = A.shape[-2], A.shape[-1]
    if m < n:
        U, S, Vh = _svd(A.mT, compute_uv, full)
        return (Vh.mT, S, U.mT) if compute_uv else (U, S, Vh)
    av, v = _jacobi(A)
    S, order = torch.sort(torch.linalg.vector_norm(av, dim=-2), dim=-1, descending=True)
    if not compute_uv:
        empty = A.new_empty((0,))
        return empty, S, empty
    idx = order.unsqueeze(-2)
    v = v.gather(-1, idx.expand(*v.shape[:-1], n))
    av = av.gather(-1, idx.expand(*av.shape[:-1], n))
    # A V = U S: U is the Q of A V, signed by R's diagonal; full_matrices:
    # the complete Q (its last m - n columns an orthonormal completion)
    Q, R = linalg_qr(av, "complete" if full else "reduced")
    sign = torch.where(R.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(A.dtype)
    if Q.shape[-1] > n:
        sign = torch.cat([sign, sign.new_ones(sign.shape[:-1] + (Q.shape[-1] - n,))], -1)
    return Q * sign.unsqueeze(-2), S, v.mT


@register("aten::_linalg_svd", out="aten::_linalg_svd.U")
def linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None):
    if A.dtype not in _SWEEPS or A.dim() < 2 or A.dim() > 8:
        raise Unsupported(f"svd of {A.dtype} {tuple(A.shape)}")
    m, n = A.shape[-2], A.shape[-1]
    if driver is not None:
        raise Unsupported("svd with a driver (CUDA's option: CPU's error)")
    if A.numel() == 0:  # no matrices, or matrices without rows or columns: the shapes, and CPU's identities
        k, batch, dt, dev = min(m, n), A.shape[:-2], A.dtype, A.device
        S = torch.empty(*batch, k, dtype=dt, device=dev)
        if not compute_uv:
            return A.new_empty((0,)), S, A.new_empty((0,))
        ur, vc = (m, n) if full_matrices else (k, k)
        U = torch.eye(m, ur, dtype=dt, device=dev).expand(*batch, m, ur).contiguous()
        Vh = torch.eye(vc, n, dtype=dt, device=dev).expand(*batch, vc, n).contiguous()
        return U, S, Vh
    return _svd(A, compute_uv, full_matrices)


# ---- symmetric eigenproblems: two-sided Jacobi -------------------------------------------------
# The same tournament of disjoint pairs; a round's rotations make one
# rotation matrix J (the identity with each pair's c, s scattered in), and
# A <- J^T A J zeroes each pair's off-diagonal element.  The eigenvalues are
# the diagonal after the sweeps, sorted ascending; the eigenvectors V's
# columns (their signs need not be LAPACK's).  Only the triangle UPLO names
# is read.  Real float32 / float64; complex inputs go to the CPU fallback.

_EIGH_SWEEPS = {torch.float32: 10, torch.float64: 14}


def _sym_rotate(a, v, p, q):
    """One round of two-sided Jacobi: for each pair (p[i], q[i]) the
    rotation J that zeroes a[p, q]; a <- J^T a J (two products with the
    round's rotation matrix), v <- v J."""
    app = a.diagonal(dim1=-2, dim2=-1).index_select(-1, p)
    aqq = a.diagonal(dim1=-2, dim2=-1).index_select(-1, q)
    apq = a.index_select(-2, p).gather(-1, q.expand(*a.shape[:-2], -1).unsqueeze(-1)).squeeze(-1)
    c, s = _rotation(app, aqq, apq)
    n = a.shape[-1]
    # J: the identity but J[p, p] = J[q, q] = c, J[p, q] = s, J[q, p] = -s
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape).contiguous()
    rows = torch.cat([p, q, p, q])
    cols = torch.cat([p, q, q, p])
    vals = torch.cat([c, c, s, -s], -1)
    flat = rows * n + cols
    J = eye.reshape(*a.shape[:-2], n * n).scatter(-1, flat.expand(*a.shape[:-2], -1), vals).reshape(a.shape)
    a = J.mT @ a @ J
    return a, v @ J


def _eigh(A, compute_v):
    n = A.shape[-1]
    odd = n % 2
    a = torch.nn.functional.pad(A, (0, odd, 0, odd)) if odd else A
    N = n + odd
    v = torch.eye(N, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], N, N).contiguous()
    ps, qs = _rounds(N, A.device)
    for _ in range(_EIGH_SWEEPS[A.dtype]):
        for r in range(N - 1):
            a, v = _sym_rotate(a, v, ps[r], qs[r])
    if odd:  # the padding's row and column stayed zero and apart
        a, v = a[..., :n, :n], v[..., :n, :n]
    w, order = torch.sort(a.diagonal(dim1=-2, dim2=-1), dim=-1)
    if not compute_v:
        return w, A.new_empty((0,))
    return w, v.gather(-1, order.unsqueeze(-2).expand(v.shape))


@register("aten::_linalg_eigh", out="aten::_linalg_eigh.eigenvalues")
def linalg_eigh(A, UPLO="L", compute_v=True):
    if A.dtype not in _EIGH_SWEEPS or A.dim() < 2 or A.dim() > 8 or A.shape[-1] != A.shape[-2] \
            or UPLO not in ("L", "U"):
        raise Unsupported(f"eigh of {A.dtype} {tuple(A.shape)}")  # complex, and CPU's errors
    if A.numel() == 0:
        w = A.new_empty(A.shape[:-1])
        return w, (A.new_empty(A.shape) if compute_v else A.new_empty((0,)))
    # the triangle UPLO names, mirrored (the other one is never read)
    tri = A.tril() if UPLO == "L" else A.triu()
    sym = tri + tri.mT - torch.diag_embed(A.diagonal(dim1=-2, dim2=-1))
    return _eigh(sym, compute_v)
