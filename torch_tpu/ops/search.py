"""Membership, search and binning kernels: isin, searchsorted, bucketize,
histc (rules in csrc/ops/search.c).

isin runs in every `generate` (stop tokens), histc in every Mixture-of-
Experts layer (tokens per expert): on the device they cost no host round
trip.  Operands are compared in their promoted dtype, as PyTorch; complex
inputs go to the CPU fallback."""
import torch

from .._dispatch import Unsupported, register, run
from .._dtypes import CODE, dtype_code


def _dt(*xs):
    dt = torch.result_type(*xs)
    if dt.is_complex or dt not in CODE:
        raise Unsupported(f"dtype {dt}")
    return dt


@register("aten::isin.Tensor_Tensor", out="aten::isin.Tensor_Tensor_out")
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    dt = _dt(elements, test_elements)
    return run("isin", [elements, test_elements], [dtype_code(dt), int(bool(invert))])[0]


@register("aten::isin.Tensor_Scalar", out="aten::isin.Tensor_Scalar_out")
def isin_tensor_scalar(elements, test_element, *, assume_unique=False, invert=False):
    dt = _dt(elements, test_element)
    test = torch.full((), test_element, dtype=dt, device=elements.device)
    return run("isin", [elements, test], [dtype_code(dt), int(bool(invert))])[0]


@register("aten::isin.Scalar_Tensor", out="aten::isin.Scalar_Tensor_out")
def isin_scalar_tensor(element, test_elements, *, assume_unique=False, invert=False):
    dt = _dt(element, test_elements)
    el = torch.full((), element, dtype=dt, device=test_elements.device)
    return run("isin", [el, test_elements], [dtype_code(dt), int(bool(invert))])[0]


def _side(right, side):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        return side == "right"
    return bool(right)


def _searchsorted(seq, values, out_int32, right, side, sorter):
    right = _side(right, side)
    if sorter is not None:
        if sorter.shape != seq.shape:
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same size, but got "
                               f"boundary tensor {list(seq.shape)}and got sorter tensor {list(sorter.shape)}")
        seq = torch.gather(seq, -1, sorter)
    dt = _dt(seq, values)
    out = torch.int32 if out_int32 else torch.int64
    return run("searchsorted", [seq, values], [dtype_code(dt), int(right), dtype_code(out)])[0]


@register("aten::searchsorted.Tensor", out="aten::searchsorted.Tensor_out")
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted(sorted_sequence, self, out_int32, right, side, sorter)


@register("aten::searchsorted.Scalar", out="aten::searchsorted.Scalar_out")
def searchsorted_scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    if sorted_sequence.dim() != 1:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           f"is 1, but we got boundaries tensor dim({sorted_sequence.dim()}) and input value's dim(0) "
                           "numel(1)")
    value = torch.full((), self, dtype=torch.result_type(sorted_sequence, self), device=sorted_sequence.device)
    return _searchsorted(sorted_sequence, value, out_int32, right, side, sorter)


@register("aten::bucketize.Tensor", out="aten::bucketize.Tensor_out")
def bucketize(self, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted(boundaries, self, out_int32, right, None, None)


@register("aten::histc", out="aten::histc.out")
def histc(self, bins=100, min=0, max=0):
    if self.is_complex() or self.dtype == torch.bool or self.dtype not in CODE:
        raise Unsupported(f"histc of {self.dtype}")
    lo, hi = float(min), float(max)
    if lo != lo or hi != hi or lo in (float("inf"), float("-inf")) or hi in (float("inf"), float("-inf")):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    return run("histc", [self], [int(bins)], [lo, hi])[0]
