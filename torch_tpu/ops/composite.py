"""Ops with no rule of their own, composed on the device from ops that have
one (no host round trip unless the result's size depends on the data):

- trace: the diagonal's sum (integers summed in int64, as PyTorch);
- linalg_cross: two rolled products along `dim`;
- median, median.dim, kthvalue: a stable sort along the dimension, then the
  k-th slice.  NaN sorts last, as on CPU; a row holding a NaN has median NaN
  at the index of its first NaN (CPU's rule); ties take the first index in
  sort order;
- nanmedian (the lower median of a row's non-NaN values), mode (runs of
  equal values in the stable sort; ties: the smallest value, at its last
  index, as CPU);
- _cdist_forward / _pdist_forward: the p-norm of row differences, in
  bounded blocks; registered for autograd too, so the gradient is the
  composition's (0 at a zero distance, as CPU's);
- bincount: index_add of ones or weights, its length from one host read
  (max, with min for CPU's error); renorm: per-slice norms and a factor;
- tril_indices / triu_indices (host integers, one upload), channel_shuffle
  (a reshape and a transpose);
- repeat_interleave.Tensor: positions by searchsorted over the repeats'
  cumulative sum; its length is the one host read (none with output_size);
- hypot, heaviside, sinc: elementwise formulas (hypot scaled by the larger
  operand so that it neither overflows nor underflows).

Their gradients are autograd's formulas over these device ops.  Inputs the
composition does not cover raise Unsupported: the CPU fallback computes or
raises as PyTorch."""
import math

import torch

from .._dispatch import Unsupported, register

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@register("aten::trace")
def trace(self):
    if self.dim() != 2 or self.dtype.is_complex:
        raise Unsupported("trace: not a real matrix")
    wide = self.dtype if self.dtype.is_floating_point else torch.int64
    return self.diagonal().sum(dtype=wide)


@register("aten::linalg_cross", out="aten::linalg_cross.out")
def linalg_cross(self, other, *, dim=-1):
    if self.dtype != other.dtype or self.dim() != other.dim() or self.dtype == torch.bool:
        raise Unsupported("linalg_cross: operands")
    try:
        shape = torch.broadcast_shapes(self.shape, other.shape)
    except RuntimeError:
        raise Unsupported("linalg_cross: shapes") from None
    if not -len(shape) <= dim < len(shape) or self.shape[dim] != 3 or other.shape[dim] != 3:
        raise Unsupported("linalg_cross: dimension")
    a, b = self.expand(shape), other.expand(shape)
    a1, a2 = a.roll(-1, dim), a.roll(-2, dim)
    b1, b2 = b.roll(-1, dim), b.roll(-2, dim)
    return a1 * b2 - a2 * b1


# ---- order statistics ---------------------------------------------------------------------


def _check_dim(self, dim, what):
    """A dim outside the tensor (a 0-d tensor has one) goes to the CPU
    fallback, which raises PyTorch's IndexError."""
    n = max(self.dim(), 1)
    if not -n <= dim < n:
        raise Unsupported(f"{what}: dim {dim}")


def _sorted_along(self, dim):
    if self.dtype.is_complex or self.dtype == torch.bool or self.numel() == 0:
        raise Unsupported("order statistic: input")
    return torch.sort(self, dim=dim, stable=True)


def _along(self, dim, what):
    """(x, d, sorted values, their indices): self at least 1-d, dim checked."""
    _check_dim(self, dim, what)
    x = self if self.dim() else self.reshape(1)
    d = dim if self.dim() else 0
    return (x, d) + tuple(_sorted_along(x, d))


def _reduced(self, v, i, d, keepdim):
    """The picked values and indices (keepdim shape) as the op returns them."""
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return (v.reshape(()), i.reshape(())) if not self.dim() else (v, i)


def _kth(self, k, dim, keepdim):
    """k-th smallest (0-based, NaN last) along dim, with its index."""
    s, perm = _sorted_along(self, dim)
    v = s.narrow(dim, k, 1)
    i = perm.narrow(dim, k, 1)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))


@register("aten::kthvalue", out="aten::kthvalue.values")
def kthvalue(self, k, dim=-1, keepdim=False):
    _check_dim(self, dim, "kthvalue")
    n = self.shape[dim] if self.dim() else 1
    if not 1 <= k <= n:
        raise Unsupported("kthvalue: k out of range")
    x = self if self.dim() else self.reshape(1)
    v, i = _kth(x, k - 1, dim if self.dim() else 0, keepdim or not self.dim())
    return (v.reshape(()), i.reshape(())) if not self.dim() else (v, i)


def _median_dim(self, dim, keepdim):
    x, d, s, perm = _along(self, dim, "median")
    n = x.shape[d]
    v, i = s.narrow(d, (n - 1) // 2, 1), perm.narrow(d, (n - 1) // 2, 1)
    if x.is_floating_point():
        # a row with a NaN: NaN at the index of its first NaN, which the
        # stable sort puts first among the NaNs at the row's end
        nans = torch.isnan(s).sum(d, keepdim=True)
        first_nan = perm.gather(d, (n - nans).clamp(max=n - 1))
        has = nans > 0
        v = torch.where(has, torch.full_like(v, float("nan")), v)
        i = torch.where(has, first_nan, i)
    return _reduced(self, v, i, d, keepdim)


@register("aten::median.dim", out="aten::median.dim_values")
def median_dim(self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim)


@register("aten::median", out="aten::median.out")
def median(self):
    return _median_dim(self.reshape(-1), 0, False)[0]


def _nanmedian_dim(self, dim, keepdim):
    x, d, s, perm = _along(self, dim, "nanmedian")
    if x.is_floating_point():  # the lower median of the non-NaN values (NaN sorts last)
        k = (((~torch.isnan(s)).sum(d, keepdim=True) - 1) // 2).clamp(min=0)
    else:
        k = torch.full_like(perm.narrow(d, 0, 1), (x.shape[d] - 1) // 2)
    return _reduced(self, s.gather(d, k), perm.gather(d, k), d, keepdim)


@register("aten::nanmedian.dim", out="aten::nanmedian.dim_values")
def nanmedian_dim(self, dim, keepdim=False):
    return _nanmedian_dim(self, dim, keepdim)


@register("aten::nanmedian", out="aten::nanmedian.out")
def nanmedian(self):
    return _nanmedian_dim(self.reshape(-1), 0, False)[0]


@register("aten::mode", out="aten::mode.values")
def mode(self, dim=-1, keepdim=False):
    """The most frequent value (ties: the smallest) and the index of its
    last occurrence, as CPU: runs of equal values in a stable sort; the run
    length peaks first at the end of the smallest most frequent value's run
    (NaN equals nothing, so each NaN is a run of its own)."""
    x, d, s, perm = _along(self, dim, "mode")
    n = x.shape[d]
    pos = torch.arange(n, device=x.device).reshape([n if j == d % x.dim() else 1 for j in range(x.dim())])
    starts = torch.ones_like(s, dtype=torch.bool)
    if n > 1:
        starts.narrow(d, 1, n - 1).copy_(s.narrow(d, 1, n - 1) != s.narrow(d, 0, n - 1))
    run_start = torch.where(starts, pos, torch.zeros_like(pos)).cummax(d).values
    length = pos - run_start
    k = (length == length.amax(d, keepdim=True)).to(torch.int32).argmax(d, keepdim=True)
    return _reduced(self, s.gather(d, k), perm.gather(d, k), d, keepdim)


# ---- distances ---------------------------------------------------------------------------------

_PAIR_CHUNK = 1 << 24  # elements of one (rows x cols x features) difference block


def _norm(diff, p):
    """vector_norm over the last dim; its gradient is 0 at a zero distance,
    as _cdist_backward's.  p = 0 counts the nonzeros, with a zero gradient
    (vector_norm's is None, CPU's zeros)."""
    if p == 0:
        return (diff != 0).to(diff.dtype).sum(-1) + diff.abs().clamp(max=0).sum(-1)
    return torch.linalg.vector_norm(diff, ord=p, dim=-1)


def _pair_norms(a, b, p):
    """|a_i - b_j|_p for rows of a [..., P, M] and b [..., R, M], in blocks of
    rows of a so the difference tensor stays bounded."""
    rows = max(1, _PAIR_CHUNK // max(1, b.shape[-2] * b.shape[-1]))
    parts = [_norm(a[..., i:i + rows, None, :] - b[..., None, :, :], p)
             for i in range(0, max(a.shape[-2], 1), rows)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


@register("aten::_cdist_forward", autograd=True)
def cdist_forward(x1, x2, p, compute_mode=None):
    if x1.dim() < 2 or x2.dim() < 2 or x1.shape[-1] != x2.shape[-1] or p < 0 or \
            x1.dtype != x2.dtype or x1.dtype not in _FLOATS:
        raise Unsupported("_cdist_forward: arguments")  # CPU raises its messages
    try:
        batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    except RuntimeError:
        raise Unsupported("_cdist_forward: batch shapes") from None
    a = x1.expand(*batch, *x1.shape[-2:])
    b = x2.expand(*batch, *x2.shape[-2:])
    return _pair_norms(a, b, p)


@register("aten::_pdist_forward", autograd=True)
def pdist_forward(self, p=2):
    if self.dim() != 2 or p < 0 or self.dtype not in _FLOATS:
        raise Unsupported("_pdist_forward: arguments")
    n = self.shape[0]
    i, j = torch.triu_indices(n, n, 1).to(self.device)
    return _norm(self.index_select(0, i) - self.index_select(0, j), p)


# ---- counting ------------------------------------------------------------------------------


@register("aten::bincount", out="aten::bincount.out")
def bincount(self, weights=None, minlength=0):
    """Counts (or sums weights) by value; the length is max + 1, one host
    read (with the minimum, to raise CPU's error)."""
    if self.dim() != 1 or self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool or \
            minlength < 0 or (weights is not None and (weights.shape != self.shape or weights.dtype.is_complex)):
        raise Unsupported("bincount: arguments")  # CPU raises its messages
    if self.numel():
        low, high = torch.stack([self.min(), self.max()]).to(torch.int64).tolist()
        if low < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    else:
        high = -1
    n = max(high + 1, minlength)
    idx = self.to(torch.int64)
    if weights is None:
        return torch.zeros(n, dtype=torch.int64, device=self.device).index_add(0, idx, torch.ones_like(idx))
    dt = torch.float32 if weights.dtype == torch.float32 else torch.float64  # CPU's result types
    return torch.zeros(n, dtype=dt, device=self.device).index_add(0, idx, weights.to(dt))


# ---- renorm --------------------------------------------------------------------------------------


@register("aten::renorm", out="aten::renorm.out", inplace="aten::renorm_")
def renorm(self, p, dim, maxnorm):
    if self.dim() < 1 or self.dtype not in _FLOATS or p <= 0 or maxnorm < 0:
        raise Unsupported("renorm: arguments")
    d = dim % self.dim() if -self.dim() <= dim < self.dim() else None
    if d is None:
        raise Unsupported("renorm: dim")
    wide = torch.float32 if self.dtype in (torch.float16, torch.bfloat16) else self.dtype
    x = self.to(wide)
    norm = torch.linalg.vector_norm(x, ord=p, dim=[j for j in range(x.dim()) if j != d], keepdim=True)
    factor = torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), torch.ones_like(norm))
    return (x * factor).to(self.dtype)


# ---- index factories and channel shuffle ------------------------------------------------------


def _index_factory(op):
    def kernel(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
        # a few host integers, uploaded once (as a CUDA build computes them)
        return op(row, col, offset, dtype=dtype or torch.int64).to(device or "tpu")
    return kernel


register("aten::tril_indices")(_index_factory(torch.tril_indices))
register("aten::triu_indices")(_index_factory(torch.triu_indices))


@register(["aten::channel_shuffle", "aten::native_channel_shuffle"])
def channel_shuffle(self, groups):
    if self.dim() < 3 or groups <= 0 or self.shape[1] % groups:
        raise Unsupported("channel_shuffle: arguments")  # CPU raises its messages
    n, c = self.shape[:2]
    rest = self.shape[2:]
    return self.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(self.shape)


# ---- repeat_interleave ------------------------------------------------------------------


@register("aten::repeat_interleave.Tensor", out="aten::repeat_interleave.Tensor_out")
def repeat_interleave(repeats, *, output_size=None):
    if repeats.dim() != 1 or repeats.dtype not in (torch.int32, torch.int64) or repeats.numel() == 0:
        raise Unsupported("repeat_interleave: repeats")
    if output_size is None:
        total, low = torch.stack([repeats.sum().to(torch.int64), repeats.min().to(torch.int64)]).tolist()
        if low < 0:
            raise RuntimeError("repeats can not be negative")
    else:
        total = int(output_size)
    ends = repeats.to(torch.int64).cumsum(0)
    pos = torch.arange(total, dtype=torch.int64, device=repeats.device)
    return torch.searchsorted(ends, pos, right=True).to(repeats.dtype)


# ---- elementwise formulas --------------------------------------------------------------------


@register("aten::hypot", out="aten::hypot.out", inplace="aten::hypot_")
def hypot(self, other):
    if self.dtype != other.dtype or self.dtype not in _FLOATS:
        raise Unsupported("hypot: dtypes")
    a, b = self.abs(), other.abs()
    big, small = torch.maximum(a, b), torch.minimum(a, b)
    safe = torch.where(big == 0, torch.ones_like(big), big)
    r = big * torch.sqrt(1 + (small / safe) ** 2)
    # inf beats NaN (as C's hypot); 0 and 0 give 0
    r = torch.where(big == 0, torch.zeros_like(r), r)
    return torch.where(torch.isinf(a) | torch.isinf(b), torch.full_like(r, math.inf), r)


@register("aten::heaviside", out="aten::heaviside.out", inplace="aten::heaviside_")
def heaviside(self, values):
    if self.dtype != values.dtype or self.dtype.is_complex or self.dtype == torch.bool:
        raise Unsupported("heaviside: dtypes")
    zero = torch.zeros((), dtype=self.dtype, device=self.device)
    step = (self > zero).to(self.dtype)
    return torch.where(self == zero, values, step).to(torch.result_type(self, values))


@register("aten::sinc", out="aten::sinc.out", inplace="aten::sinc_")
def sinc(self):
    if self.dtype not in _FLOATS:
        raise Unsupported("sinc: dtype")
    x = self.float() if self.dtype in (torch.float16, torch.bfloat16) else self
    px = x * math.pi
    safe = torch.where(x == 0, torch.ones_like(px), px)
    r = torch.where(x == 0, torch.ones_like(px), torch.sin(safe) / safe)
    return r.to(self.dtype)
