"""QR through Householder reflectors: geqrf, linalg_householder_product
(orgqr), ormqr and linalg_qr (torch.qr, torch.linalg.qr) on the device.

LAPACK's conventions, step for step, so the results are CPU's (which
calls LAPACK) up to rounding: geqrf's reflector j (dlarfg) maps column j's
part from the diagonal down, (alpha, x), onto (beta, 0) with
beta = -sign(alpha) * ||(alpha, x)||, v = (1, x / (alpha - beta)),
tau = (beta - alpha) / beta (tau = 0, H = I, when x = 0); v's tail is stored
below the diagonal, beta on it.  Q = H_1 H_2 ... H_k, each H = I - tau v v^T.

No lowering rule of their own: each step is a few device ops on the
whole matrix, the step's column chosen by masks against a position, so
every step of a factorization runs the same programs (a column's index is
a view offset, and numbers are program inputs).  Real float32 / float64;
complex inputs go to the CPU fallback.  Autograd is PyTorch's
(derivatives.yaml's formulas for linalg_qr, householder_product and ormqr
are made of device ops; geqrf's is CPU's "not implemented").
"""
import torch

from .._dispatch import Unsupported, register


def _real(*xs):
    for x in xs:
        if x.dtype not in (torch.float32, torch.float64):
            raise Unsupported(f"Householder QR of {x.dtype}")


def _col(a, j):
    """Column j of each matrix of a, [..., m]."""
    return a.select(-1, j)


def _reflect_left(c, v, tau):
    """(I - tau v v^T) c for every matrix: v [..., m], tau [...]."""
    w = (v.unsqueeze(-1) * c).sum(-2, keepdim=True)  # v^T c, [..., 1, n]
    return c - (tau[..., None, None] * v.unsqueeze(-1)) * w


def _reflect_right(c, v, tau):
    """c (I - tau v v^T): v [..., n]."""
    w = (c * v.unsqueeze(-2)).sum(-1, keepdim=True)  # c v, [..., m, 1]
    return c - (tau[..., None, None] * w) * v.unsqueeze(-2)


def _reflector(a, tau, j):
    """Reflector j of geqrf's compact form: [..., m] with 1 at j, a's column
    j below it, zeros above."""
    m = a.shape[-2]
    rows = torch.arange(m, device=a.device)
    col = _col(a, j)
    return torch.where(rows > j, col, (rows == j).to(a.dtype)), tau[..., j]


@register("aten::geqrf", out="aten::geqrf.a")
def geqrf(self):
    _real(self)
    if self.dim() < 2:
        raise Unsupported("geqrf of fewer than 2 dimensions")  # CPU's error
    m, n = self.shape[-2], self.shape[-1]
    k = min(m, n)
    a = self.clone()
    taus = []
    rows = torch.arange(m, device=a.device)
    cols = torch.arange(n, device=a.device)
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    for j in range(k):
        col = _col(a, j)
        alpha = col[..., j]
        below = torch.where(rows > j, col, zero)
        xnorm = torch.linalg.vector_norm(below, dim=-1)
        beta = -torch.copysign(torch.hypot(alpha, xnorm), alpha)
        plain = xnorm == 0  # H = I: tau 0, the column as it is
        safe_beta = torch.where(plain, torch.ones_like(beta), beta)
        tau = torch.where(plain, zero, (beta - alpha) / safe_beta)
        scale = torch.where(plain, torch.ones_like(alpha), alpha - beta)
        v = torch.where(rows > j, col / scale.unsqueeze(-1), (rows == j).to(a.dtype))
        rest = _reflect_left(a, v, tau)  # the columns after j
        newcol = torch.where(rows > j, v, torch.where(rows == j, torch.where(plain, alpha, beta).unsqueeze(-1), col))
        a = torch.where(cols > j, rest, torch.where(cols == j, newcol.unsqueeze(-1), a))
        taus.append(tau)
    tau = torch.stack(taus, -1) if taus else a.new_zeros(a.shape[:-2] + (0,))
    return a, tau


@register("aten::linalg_householder_product", out="aten::linalg_householder_product.out")
def householder_product(input, tau):
    """The first n columns of H_1 ... H_k (LAPACK's orgqr), input [..., m, n]."""
    _real(input, tau)
    if input.dim() < 2 or input.shape[-2] < input.shape[-1] or tau.shape[-1] > input.shape[-1] \
            or tau.shape[:-1] != input.shape[:-2] or tau.dtype != input.dtype:
        raise Unsupported("householder_product with bad shapes or dtypes")  # CPU's errors
    m, n = input.shape[-2], input.shape[-1]
    q = torch.eye(m, n, dtype=input.dtype, device=input.device).expand(input.shape).clone()
    tau = tau.to(input.device)
    for j in reversed(range(tau.shape[-1])):
        v, t = _reflector(input, tau, j)
        q = _reflect_left(q, v, t)
    return q


@register("aten::ormqr", out="aten::ormqr.out")
def ormqr(self, input2, input3, left=True, transpose=False):
    """Q C, Q^T C, C Q or C Q^T for Q = H_1 ... H_k of geqrf's (self, tau)."""
    a, tau, c = self, input2, input3
    _real(a, tau, c)
    if a.dim() < 2 or c.dim() < 2 or tau.shape[-1] > min(a.shape[-2], a.shape[-1]) \
            or a.shape[-2] != (c.shape[-2] if left else c.shape[-1]) or not (a.dtype == tau.dtype == c.dtype) \
            or tau.shape[:-1] != a.shape[:-2] or c.shape[:-2] != a.shape[:-2]:
        raise Unsupported("ormqr with bad shapes or dtypes")  # CPU's errors
    k = tau.shape[-1]
    # Q C = H_1 (H_2 (... H_k C)); Q^T C = H_k (... H_1 C); C Q = ((C H_1) H_2) ...; C Q^T: H_k first
    order = range(k) if left == bool(transpose) else reversed(range(k))
    out = c.clone()
    for j in order:
        v, t = _reflector(a, tau, j)
        out = _reflect_left(out, v, t) if left else _reflect_right(out, v, t)
    return out


@register("aten::linalg_qr", out="aten::linalg_qr.out")
def linalg_qr(A, mode="reduced"):
    _real(A)
    if mode not in ("reduced", "complete", "r") or A.dim() < 2:
        raise Unsupported("linalg_qr: a mode or shape CPU refuses")  # CPU's errors
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    a, tau = geqrf(A)
    r_rows = m if mode == "complete" else k
    r = torch.triu(a[..., :r_rows, :])
    if mode == "r":
        return A.new_empty((0,)), r
    if mode == "complete" and m > n:
        # the first n reflectors of an m x m Q: zero columns add identity reflectors
        v = torch.cat([a, a.new_zeros(a.shape[:-1] + (m - n,))], -1)
        t = torch.cat([tau, tau.new_zeros(tau.shape[:-1] + (m - n,))], -1)
        return householder_product(v, t), r
    return householder_product(a[..., :, :k], tau), r
