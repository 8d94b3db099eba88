"""nonzero and nonzero_static on the device (rule in csrc/ops/nonzero.c).

nonzero's result shape depends on the data.  The rule computes the
coordinates into a buffer with one row per element (static shape: one
program per input shape) and the count as a 0-d tensor; the count is read
on the host (8 bytes, the one sync nonzero needs on any device, as CUDA's)
and the result is the buffer's first `count` rows, a contiguous view.
nonzero_static needs no read at all.  argwhere, torch.where(cond) and the
boolean-mask indexing kernels (index.py) reach nonzero."""
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
