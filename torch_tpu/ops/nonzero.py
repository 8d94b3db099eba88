"""Data-dependent result shapes on the device: nonzero and nonzero_static
(rule in csrc/ops/nonzero.c), unique and unique_consecutive (composed here
from sort, compare, cumsum and nonzero, all device ops).

nonzero's result shape depends on the data.  The rule computes the
coordinates into a buffer with one row per element (static shape: one
program per input shape) and the count as a 0-d tensor; the count is read
on the host (8 bytes, the one sync nonzero needs on any device, as CUDA's)
and the result is the buffer's first `count` rows, a contiguous view.
nonzero_static needs no read at all.  argwhere, torch.where(cond) and the
boolean-mask indexing kernels (index.py) reach nonzero.

unique sorts the flat input (stable), marks each element that differs from
its predecessor, and reads the marks' positions with nonzero: the same one
8-byte read.  The inverse is each group's number scattered back through the
sort permutation, the counts the distances between group starts.  NaNs are
never equal, so each is its own group, as on CPU.  unique_consecutive is
the same without the sort.  Along a `dim` the elements are the slices
(rows of the input with dim first, the rest flattened), sorted
lexicographically by a stable sort per column, last column first."""
import torch

from .._dispatch import Unsupported, register, run


def _check(self, what):
    if self.dtype.is_complex:
        raise Unsupported(f"{what}: complex input")
    if self.dim() > 8:  # TPU_MAX_RANK
        raise Unsupported(f"{what}: rank {self.dim()}")


@register("aten::nonzero", out="aten::nonzero.out")
def nonzero(self):
    _check(self, "nonzero")
    rank = self.dim()
    if self.numel() == 0:
        return torch.empty((0, rank), dtype=torch.long, device=self.device)
    coords, count = run("nonzero", [self], [self.numel(), 0])
    n = int(count.item())  # the one host read: the result's size
    return coords[:n, :rank]


@register("aten::nonzero_static", out="aten::nonzero_static.out")
def nonzero_static(self, *, size, fill_value=-1):
    _check(self, "nonzero_static")
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    rank = self.dim()
    if self.numel() == 0:
        return torch.full((size, rank), fill_value, dtype=torch.long, device=self.device)
    coords, _ = run("nonzero", [self], [int(size), int(fill_value)])
    return coords[:, :rank] if rank == 0 else coords


# ---- unique ---------------------------------------------------------------------------


def _groups(flat, perm, shape, return_inverse, return_counts):
    """flat: 1-D, equal values adjacent, or 2-D, equal rows adjacent (unique
    along a dim); perm: flat's positions in the input (None: the
    identity).  -> (values, inverse, counts) as aten returns them (empty
    tensors for what was not asked)."""
    dev, n = flat.device, flat.shape[0]
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    if n > 1:
        ne = flat[1:] != flat[:-1]
        starts[1:] = ne.any(1) if flat.dim() == 2 else ne
    first = starts.nonzero().squeeze(1)  # the one host read: the number of groups
    values = flat[first]
    inverse = torch.empty(0, dtype=torch.long, device=dev)
    counts = torch.empty(0, dtype=torch.long, device=dev)
    if return_inverse:
        group = starts.to(torch.long).cumsum(0) - 1
        if perm is not None:
            group = torch.empty_like(group).index_put_((perm,), group)
        inverse = group.reshape(shape)
    if return_counts:
        counts = torch.cat([first[1:], torch.full((1,), n, dtype=torch.long, device=dev)]) - first
    return values, inverse, counts


def _unique_check(self, what):
    if self.dtype.is_complex:
        raise Unsupported(f"{what}: complex input")


def _empty_unique(self, return_inverse):
    dev = self.device
    inverse = torch.empty(self.shape if return_inverse else (0,), dtype=torch.long, device=dev)
    return (torch.empty(0, dtype=self.dtype, device=dev), inverse, torch.empty(0, dtype=torch.long, device=dev))


@register("aten::_unique2", out="aten::_unique2.out")
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    _unique_check(self, "unique")
    if self.numel() == 0:
        return _empty_unique(self, return_inverse)
    flat = self.reshape(-1)
    if flat.dtype == torch.bool:  # sorted as bytes
        s, perm = torch.sort(flat.to(torch.uint8), stable=True)
        s = s.to(torch.bool)
    else:
        s, perm = torch.sort(flat, stable=True)
    return _groups(s, perm, self.shape, return_inverse, return_counts)


def _rows(self, dim):
    """self with `dim` (>= 0) first and the rest flattened: [size(dim), rest]; bool
    as bytes (sorted and compared as CPU)."""
    rows = self.movedim(dim, 0)
    return dim, rows.reshape(rows.shape[0], -1).to(torch.uint8 if self.dtype == torch.bool else self.dtype), rows.shape


def _unique_rows(self, dim, lexsort, return_inverse, return_counts):
    """unique along `dim`: rows (the slices along dim) sorted
    lexicographically (a stable sort per column, last column first) when
    asked, then grouped as the flat case."""
    _unique_check(self, "unique")
    if self.dim() == 0:
        raise Unsupported("unique along a dim: 0-d input")
    r = self.dim()
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    d = dim % r
    if self.numel() == 0:
        if self.shape[d] != 0:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        empty = torch.empty(0, dtype=torch.long, device=self.device)
        return self.clone(), empty, empty.clone()
    d, rows, moved = _rows(self, d)
    perm = None
    if lexsort:
        perm = torch.arange(rows.shape[0], device=self.device)
        for j in reversed(range(rows.shape[1])):
            _, p = torch.sort(rows[perm, j], stable=True)
            perm = perm[p]
        rows = rows[perm]
    values, inverse, counts = _groups(rows, perm, (rows.shape[0],), return_inverse, return_counts)
    values = values.to(self.dtype).reshape((values.shape[0],) + tuple(moved[1:])).movedim(0, d)
    return values.contiguous(), inverse, counts


@register("aten::unique_dim", out="aten::unique_dim.out")
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_rows(self, dim, True, return_inverse, return_counts)


@register("aten::unique_dim_consecutive", out="aten::unique_dim_consecutive.out")
def unique_dim_consecutive(self, dim, return_inverse=False, return_counts=False):
    return _unique_rows(self, dim, False, return_inverse, return_counts)


@register("aten::_unique", out="aten::_unique.out")
def unique(self, sorted=True, return_inverse=False):
    values, inverse, _ = unique2(self, sorted, return_inverse, False)
    return values, inverse


@register("aten::unique_consecutive", out="aten::unique_consecutive.out")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    _unique_check(self, "unique_consecutive")
    if dim is not None:
        return _unique_rows(self, dim, False, return_inverse, return_counts)
    if self.numel() == 0:
        return _empty_unique(self, return_inverse)
    return _groups(self.reshape(-1), None, self.shape, return_inverse, return_counts)
