"""The Cholesky factorization on the device (rule in csrc/ops/cholesky.c):
linalg_cholesky_ex, which linalg.cholesky and cholesky reach.

Transformers calls it through torch.distributions' positive-definite check
(resizing token embeddings); `info` is LAPACK's (0, or the order of the
first leading minor that is not positive definite), computed on the device.
check_errors=True reads info on the host, as PyTorch does on any device.
Float32 and float64; complex inputs go to the CPU fallback.  The backward
is PyTorch's formula (its triangular solves have no device rule yet)."""
import torch

from .._dispatch import Unsupported, register, run
from .._dtypes import scalar_type_name as _short


@register("aten::linalg_cholesky_ex", out="aten::linalg_cholesky_ex.L")
def linalg_cholesky_ex(self, *, upper=False, check_errors=False):
    if self.dim() < 2:
        raise RuntimeError("linalg.cholesky: The input tensor A must have at least 2 dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"linalg.cholesky: A must be batches of square matrices, but they are "
                           f"{self.shape[-2]} by {self.shape[-1]} matrices")
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"linalg.cholesky: Expected a floating point or complex tensor as input. Got "
                           f"{_short(self.dtype)}")
    if self.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"linalg_cholesky_ex: {self.dtype}")  # complex, and PyTorch's own half errors
    if self.dim() > 8:
        raise Unsupported(f"linalg_cholesky_ex: rank {self.dim()}")
    L, info = run("cholesky_ex", [self], [int(bool(upper))])
    if check_errors:
        torch._linalg_check_errors(info, "linalg.cholesky_ex", is_matrix=self.dim() == 2)
    return L, info
