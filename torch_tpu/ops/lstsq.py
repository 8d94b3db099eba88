"""Least squares on the device: linalg_lstsq (torch.linalg.lstsq) for every
driver CPU has, with CPU's outputs per driver.

- 'gels' and 'gelsy' (CPU's default) solve through the Householder QR of
  householder.py, as LAPACK's gels does: for m >= n, A = QR and
  x = R^-1 (Q^T B)[:n], the residuals (m > n, gels only) the squares of
  (Q^T B)[n:]; for m < n the minimum-norm solution from A^T = QR,
  x = Q [R^-T B; 0].  gels' info (the first zero on R's diagonal) is read by
  check_errors on the host, as PyTorch does on any device.  gelsy's rank
  comes from a column-pivoted QR and an incremental condition estimate we
  do not reproduce: the device answers only when A is surely of full rank
  for it (||R||_F ||R^-1||_F, a bound on cond(A), times a margin of 10 --
  10 n for a wide A, whose rank LAPACK judges on n pivoted columns -- below
  1/rcond; one host read), and sends every other A to the CPU fallback.
- 'gelss' and 'gelsd' are the SVD's (jacobi.py): singular values, rank
  (those above rcond times the largest) and the truncated pseudo-inverse's
  solution, rank-deficient inputs included; their residuals exist when
  every rank is n (one host read, as on CPU).

rank and singular_values have A's batch shape (B's batch only broadcasts
the solution and residuals), as on CPU.  Real float32 / float64 with one
dtype; complex or empty inputs, and malformed arguments (CPU raises), go
to the CPU fallback.  The gradient is PyTorch's formula (pinv, on the
device)."""
import torch

from .._dispatch import Unsupported, register

_DRIVERS = ("gels", "gelsy", "gelss", "gelsd")


def _operands(A, B, driver):
    driver = "gelsy" if driver is None else str(driver).lower()
    if driver not in _DRIVERS:
        raise Unsupported(f"linalg_lstsq: driver {driver!r}")  # CPU's error
    if A.dtype != B.dtype or A.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"linalg_lstsq: {A.dtype} and {B.dtype}")
    if A.dim() < 2 or A.dim() > 8 or A.dim() - B.dim() not in (0, 1):
        raise Unsupported("linalg_lstsq: dimensions")  # CPU's errors
    vector = A.dim() - B.dim() == 1
    B2 = B.unsqueeze(-1) if vector else B
    if B2.shape[-2] != A.shape[-2]:
        raise Unsupported("linalg_lstsq: rows")
    try:
        batch = torch.broadcast_shapes(A.shape[:-2], B2.shape[:-2])
    except RuntimeError:
        raise Unsupported("linalg_lstsq: batch shapes") from None
    if A.numel() == 0 or B2.numel() == 0:
        raise Unsupported("linalg_lstsq: empty")  # CPU's zeros and ranks
    return driver, vector, batch, B2


def _qr_solve(A, B):
    """gels: x, the rows of Q^T B past n (the residuals' terms; m > n), and
    the triangular factor R (min(m, n) square)."""
    m, n = A.shape[-2], A.shape[-1]
    if m >= n:
        a, tau = torch.geqrf(A)
        c = torch.ormqr(a, tau, B, left=True, transpose=True)
        R = a[..., :n, :].triu()
        return torch.linalg.solve_triangular(R, c[..., :n, :], upper=True), c[..., n:, :], R
    a, tau = torch.geqrf(A.mT.contiguous())  # A^T = Q R, n x m
    R = a[..., :m, :].triu()
    y = torch.linalg.solve_triangular(R.mT, B, upper=False)
    y = torch.cat([y, y.new_zeros(y.shape[:-2] + (n - m, y.shape[-1]))], -2)
    return torch.ormqr(a, tau, y, left=True, transpose=False), None, R


def _surely_full_rank(R, rcond, margin):
    """True when gelsy's rank is min(m, n) for every matrix: cond(A) <=
    ||R||_F ||R^-1||_F, and gelsy's estimate never exceeds the true
    condition of its (pivoted) leading block."""
    k = R.shape[-1]
    eye = torch.eye(k, dtype=R.dtype, device=R.device).expand(R.shape)
    rinv = torch.linalg.solve_triangular(R, eye, upper=True)
    bound = torch.linalg.matrix_norm(R) * torch.linalg.matrix_norm(rinv)
    return bool((bound * (max(rcond, 0.0) * margin) < 1).all())


@register("aten::linalg_lstsq", out="aten::linalg_lstsq.out")
def linalg_lstsq(self, b, rcond=None, *, driver=None):
    A = self
    driver, vector, batch, B = _operands(A, b, driver)
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    if rcond is None:
        rcond = torch.finfo(A.dtype).eps * max(m, n)
    rows = A.shape[:-2]

    def empty():  # a new one per output: autograd marks residuals, never singular_values
        return A.new_empty((0,))

    no_rank = torch.empty((0,), dtype=torch.int64, device=A.device)
    if driver in ("gels", "gelsy"):
        Ab = A.expand(*batch, m, n)
        x, tail, R = _qr_solve(Ab, B.expand(*batch, m, B.shape[-1]))
        if driver == "gels":
            zero = R.diagonal(dim1=-2, dim2=-1) == 0
            info = torch.where(zero.any(-1), zero.int().argmax(-1) + 1, 0).int()
            torch._linalg_check_errors(info, "torch.linalg.lstsq", is_matrix=info.numel() <= 1)
            residuals = tail.square().sum(-2) if m > n else empty()
            rank = no_rank
        else:
            if not _surely_full_rank(R, float(rcond), 10.0 * (n if m < n else 1)):
                raise Unsupported("linalg_lstsq: gelsy's rank may be below min(m, n)")
            residuals = empty()
            rank = torch.full(rows, k, dtype=torch.int64, device=A.device)
        sv = empty()
    else:
        U, S, Vh = torch.linalg.svd(A, full_matrices=False)
        r = torch.finfo(A.dtype).eps if rcond < 0 else float(rcond)
        thr = S[..., :1] * r
        if driver == "gelss":
            thr = thr.clamp_min(torch.finfo(A.dtype).tiny)
        keep = S > thr
        rank = keep.sum(-1)
        inv = torch.where(keep, 1 / torch.where(keep, S, torch.ones_like(S)), torch.zeros_like(S))
        x = Vh.mT @ (inv.unsqueeze(-1) * (U.mT @ B))
        residuals = empty()
        if m > n and bool((rank == n).all()):
            residuals = (A @ x - B).square().sum(-2)
        sv = S
    if vector:
        x = x.squeeze(-1)
    return x, residuals, rank, sv
