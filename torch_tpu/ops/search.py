"""Membership, search and binning kernels: isin, searchsorted, bucketize,
histc (rules in csrc/ops/search.c); histogram and histogramdd composed of
searchsorted and scatter_add.

isin runs in every `generate` (stop tokens), histc in every Mixture-of-
Experts layer (tokens per expert): on the device they cost no host round
trip.  Operands are compared in their promoted dtype, as PyTorch; complex
inputs go to the CPU fallback."""
import math

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


# ---- histogram --------------------------------------------------------------------------------
# Bad arguments (bins <= 0, a range that is not finite or decreasing, a
# weight of another shape or dtype, edges that are not 1-d) raise
# Unsupported: the CPU kernel then raises its own error, word for word.


def _histogram_check(self, weight):
    if self.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"histogram of {self.dtype}")
    if weight is not None and (weight.shape != self.shape or weight.dtype != self.dtype):
        raise Unsupported("histogram: a weight of another shape or dtype than the input")


def _histogram_counts(self, edges, weight, density):
    """Counts (or summed weights) of self's elements per bin of the sorted
    edges: bin i holds edges[i] <= x < edges[i + 1], the last bin its right
    edge too (CPU's upper_bound rule); elements outside or NaN count nowhere."""
    x = self.reshape(-1)
    nbins = edges.numel() - 1
    inside = (x >= edges[0]) & (x <= edges[-1])
    pos = (torch.searchsorted(edges, x, right=True) - 1).clamp(0, nbins - 1)
    w = torch.ones_like(x) if weight is None else weight.reshape(-1)
    w = torch.where(inside, w, torch.zeros((), dtype=x.dtype, device=x.device))
    hist = torch.zeros(nbins, dtype=x.dtype, device=x.device).scatter_add(0, pos, w)
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return hist


@register("aten::histogram.bin_ct", out="aten::histogram.bin_ct_out")
def histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    """bins equal bins over range, or over [min, max] of self (one host read
    of the two numbers, which CPU checks: finite, and an empty range widened
    by 0.5 on each side); the edges are CPU's linspace."""
    _histogram_check(self, weight)
    if bins <= 0 or (range is not None and len(range) != 2):
        raise Unsupported("histogram: bins <= 0 or a range of other than 2 numbers")
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif self.numel():
        lo, hi = (float(v) for v in torch.aminmax(self))
    else:
        lo, hi = 0.0, 1.0  # CPU's (and NumPy's) range of no elements
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise Unsupported("histogram: a range that is not finite or decreasing")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    # bins + 1 numbers from two: made as CPU makes them (its linspace, bit
    # for bit: an element on an edge falls in the same bin), then uploaded
    edges = torch.linspace(lo, hi, bins + 1, dtype=self.dtype).to(self.device)
    return _histogram_counts(self, edges, weight, density), edges


@register("aten::histogram.bins_tensor", out="aten::histogram.bins_tensor_out")
def histogram_bins_tensor(self, bins, *, weight=None, density=False):
    """The bins' edges as given (increasing)."""
    _histogram_check(self, weight)
    if bins.dim() != 1 or bins.numel() < 2 or bins.dtype != self.dtype:
        raise Unsupported("histogram: edges that are not a 1-d tensor of 2 or more of the input's dtype")
    edges = bins.to(self.device)
    return _histogram_counts(self, edges, weight, density), edges.clone()


# ---- histogramdd: the N columns of self's last dim binned together ----------------------------
# (torch.histogramdd's three ATen ops; the composite itself calls the first
# two, so bin counts cost one host read of the columns' min and max each.)


def _histdd_check(self, weight, nbins):
    if self.dtype not in (torch.float32, torch.float64) or self.dim() < 1 or self.dim() > 8:
        raise Unsupported(f"histogramdd of {self.dtype}")
    if nbins != self.shape[-1] or (weight is not None and (weight.shape != self.shape[:-1]
                                                           or weight.dtype != self.dtype)):
        raise Unsupported("histogramdd: bins or weight of another shape")  # CPU's errors
    return self.reshape(-1, self.shape[-1])


def _histdd_edges(x, bins, rng):
    """CPU's edges: per column, linspace over range or [min, max] (one host
    read; an empty range widened by 0.5 on each side, no elements [0, 1])."""
    n = x.shape[-1]
    if any(int(b) <= 0 for b in bins):
        raise Unsupported("histogramdd: bins <= 0")
    if rng is not None:
        if len(rng) != 2 * n:
            raise Unsupported("histogramdd: range of another length")
        lo, hi = [float(v) for v in rng[0::2]], [float(v) for v in rng[1::2]]
    elif x.shape[0]:
        mn, mx = torch.aminmax(x, dim=0)
        lo, hi = torch.stack([mn, mx]).tolist()
    else:
        lo, hi = [0.0] * n, [1.0] * n
    edges = []
    for d in range(n):
        a, b = lo[d], hi[d]
        if not (math.isfinite(a) and math.isfinite(b)) or a > b:
            raise Unsupported("histogramdd: a range that is not finite or decreasing")
        if a == b:
            a, b = a - 0.5, b + 0.5
        edges.append(torch.linspace(a, b, int(bins[d]) + 1, dtype=x.dtype).to(x.device))
    return edges


def _histdd_counts(x, edges, weight, density):
    """Bin (i_0, ..., i_N-1) counts the rows whose column d lies in bin i_d
    of edges[d] (edges[i] <= v < edges[i + 1], the last bin its right edge
    too); a row outside in any column, or NaN, counts nowhere."""
    sizes = [e.numel() - 1 for e in edges]
    flat = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    inside = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    for d, e in enumerate(edges):
        v = x[:, d].contiguous()
        inside = inside & (v >= e[0]) & (v <= e[-1])
        flat = flat * sizes[d] + (torch.searchsorted(e, v, right=True) - 1).clamp(0, sizes[d] - 1)
    w = torch.ones(x.shape[0], dtype=x.dtype, device=x.device) if weight is None else weight.reshape(-1)
    w = torch.where(inside, w, torch.zeros((), dtype=x.dtype, device=x.device))
    total = 1
    for s in sizes:
        total *= s
    hist = torch.zeros(total, dtype=x.dtype, device=x.device).scatter_add(0, flat, w).view(sizes)
    if density:  # CPU's order: by the sum, then by each dim's bin lengths
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = sizes[d]
            hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


@register("aten::_histogramdd_bin_edges")
def histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    x = _histdd_check(self, weight, len(bins))
    return _histdd_edges(x, bins, range)


@register("aten::_histogramdd_from_bin_cts")
def histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    x = _histdd_check(self, weight, len(bins))
    return _histdd_counts(x, _histdd_edges(x, bins, range), weight, density)


@register("aten::_histogramdd_from_bin_tensors")
def histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    x = _histdd_check(self, weight, len(bins))
    if any(b.dim() != 1 or b.numel() < 2 or b.dtype != self.dtype for b in bins):
        raise Unsupported("histogramdd: edges that are not 1-d tensors of 2 or more of the input's dtype")
    return _histdd_counts(x, [b.to(self.device) for b in bins], weight, density)
