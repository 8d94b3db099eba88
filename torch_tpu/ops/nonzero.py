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
the same without the sort.  unique with a `dim` stays on the CPU fallback."""
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
    """flat: 1-D, equal values adjacent; perm: flat's positions in the input
    (None: the identity).  -> (values, inverse, counts) as aten returns
    them (empty tensors for what was not asked)."""
    dev, n = flat.device, flat.numel()
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    if n > 1:
        starts[1:] = flat[1:] != flat[:-1]
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


@register("aten::_unique", out="aten::_unique.out")
def unique(self, sorted=True, return_inverse=False):
    values, inverse, _ = unique2(self, sorted, return_inverse, False)
    return values, inverse


@register("aten::unique_consecutive", out="aten::unique_consecutive.out")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    _unique_check(self, "unique_consecutive")
    if dim is not None:
        raise Unsupported("unique_consecutive with dim")
    if self.numel() == 0:
        return _empty_unique(self, return_inverse)
    return _groups(self.reshape(-1), None, self.shape, return_inverse, return_counts)
