"""Ops with no rule of their own, composed on the device from ops that have
one (no host round trip unless the result's size depends on the data):

- trace: the diagonal's sum (integers summed in int64, as PyTorch);
- linalg_cross: two rolled products along `dim`;
- median, median.dim, kthvalue: a stable sort along the dimension, then the
  k-th slice.  NaN sorts last, as on CPU; a row holding a NaN has median NaN
  at the index of its first NaN (CPU's rule); ties take the first index in
  sort order;
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
    _check_dim(self, dim, "median")
    x = self if self.dim() else self.reshape(1)
    d = dim if self.dim() else 0
    n = x.shape[d]
    s, perm = _sorted_along(x, d)
    v, i = s.narrow(d, (n - 1) // 2, 1), perm.narrow(d, (n - 1) // 2, 1)
    if x.is_floating_point():
        # a row with a NaN: NaN at the index of its first NaN, which the
        # stable sort puts first among the NaNs at the row's end
        nans = torch.isnan(s).sum(d, keepdim=True)
        first_nan = perm.gather(d, (n - nans).clamp(max=n - 1))
        has = nans > 0
        v = torch.where(has, torch.full_like(v, float("nan")), v)
        i = torch.where(has, first_nan, i)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return (v.reshape(()), i.reshape(())) if not self.dim() else (v, i)


@register("aten::median.dim", out="aten::median.dim_values")
def median_dim(self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim)


@register("aten::median", out="aten::median.out")
def median(self):
    return _median_dim(self.reshape(-1), 0, False)[0]


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
