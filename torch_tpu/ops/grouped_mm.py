"""Grouped matrix multiply: torch._grouped_mm / F.grouped_mm, the kernel of
Mixture-of-Experts layers (Transformers routes MoE experts to it on tpu;
rule in csrc/ops/grouped_mm.c).  Its backward is PyTorch's own formula,
which calls _grouped_mm again with transposed operands (the 2D x 2D layout
for the weight gradient)."""
import torch

from .._dispatch import Unsupported, register, run
from .._dtypes import CODE, dtype_code


@register("aten::_grouped_mm")
def grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    if bias is not None:
        raise RuntimeError("Bias tensor provided, but it is not supported yet.")
    if self.dtype not in CODE or self.dtype.is_complex:
        raise Unsupported(f"grouped_mm of {self.dtype}")
    if self.dtype != mat2.dtype:
        raise RuntimeError(f"grouped_mm: expected mat_a and mat_b of one dtype, got {self.dtype} and {mat2.dtype}")
    if offs is not None and offs.dtype != torch.int32:
        raise RuntimeError(f"Offsets tensor must be integer (int32) tensor, but got {offs.dtype}.")
    ints = [dtype_code(out_dtype) if out_dtype is not None else 0]
    inputs = [self, mat2] + ([offs] if offs is not None else [])
    return run("grouped_mm", inputs, ints)[0]
