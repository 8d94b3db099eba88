"""segment_reduce (torch._segment_reduce) and its backward on the device,
composed of device ops: CPU's kernel step for step, vectorized.

Segments are given by `lengths` or `offsets` (lengths' cumulative sum with
a leading 0), shaped data.shape[:axis] + (S,) / (S + 1,).  Each position j
along `axis` belongs to segment searchsorted(offsets, j, right) - 1; a
position before the first offset or past the last (unsafe lengths that do
not sum to the axis' size) belongs to none and is sent to a spare slot
that is cut off.  The forward is one scatter along `axis` onto the
reduction's start value (`initial`, else 0 / 1 / -inf / +inf): sum,
prod, amax, amin; mean is the sum over the length (NaN for an empty
segment without `initial`, as CPU); max and min are NaN where the segment
holds a NaN (CPU's running max keeps a NaN).

The backward is CPU's: sum and mean spread the gradient over the segment
(mean / length); max and min give it to the elements equal to the output
(or NaN), and where there are several, divide the positive ones by their
count (CPU divides only those); prod gives grad * output / x, and to a
zero or NaN element grad * initial * the product of the others.

Float32 / float64 data; the half types go to the CPU fallback.  Lengths
are checked when not `unsafe` (one host read, as PyTorch does on any
device); a bad argument goes to the CPU fallback, which raises PyTorch's
error."""
import torch

from .._dispatch import Unsupported, register

_REDUCES = ("sum", "mean", "max", "min", "prod")
_START = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _offsets(data, axis, lengths, offsets, unsafe, what):
    if data.dtype not in (torch.float32, torch.float64) or data.dim() > 8:
        raise Unsupported(f"{what}: {data.dtype}")
    if data.dim() == 0 or not -data.dim() <= axis < data.dim():
        raise Unsupported(f"{what}: axis")
    axis %= data.dim()
    seg = offsets if offsets is not None else lengths
    if seg is None or seg.dtype not in (torch.int64, torch.int32) or seg.dim() != axis + 1 \
            or tuple(seg.shape[:-1]) != tuple(data.shape[:axis]) or seg.device != data.device:
        raise Unsupported(f"{what}: segments")  # PyTorch's checks
    if offsets is None:
        if not unsafe and not bool(((lengths >= 0).all() & (lengths.sum(-1) == data.shape[axis]).all()).item()):
            raise Unsupported(f"{what}: lengths")  # CPU's errors
        offsets = torch.cat([lengths.new_zeros(lengths.shape[:-1] + (1,)), lengths.cumsum(-1)], -1)
    elif offsets.shape[-1] < 1:
        raise Unsupported(f"{what}: no offsets")
    return axis, offsets.long()


def _segment_ids(data, axis, offsets):
    """The segment of every element of data (data's shape, int64), S for
    the elements in no segment; and S."""
    S = offsets.shape[-1] - 1
    n = data.shape[axis]
    pos = torch.arange(n, device=data.device).expand(*offsets.shape[:-1], n).contiguous()
    seg = torch.searchsorted(offsets.contiguous(), pos, right=True) - 1
    seg = torch.where((seg >= 0) & (seg < S), seg, S)
    seg = seg.view(seg.shape + (1,) * (data.dim() - axis - 1)).expand(data.shape)
    return seg, S


def _slots(data, axis, S, value):
    shape = list(data.shape)
    shape[axis] = S + 1
    return torch.full(shape, value, dtype=data.dtype, device=data.device)


def _per_segment(v, data, axis):
    """A per-segment tensor (..., S) of the batch dims, shaped to broadcast
    against the output (batch, S, inner)."""
    return v.view(v.shape + (1,) * (data.dim() - axis - 1))


@register("aten::segment_reduce")
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                   initial=None):
    if reduce not in _REDUCES or indices is not None:
        raise Unsupported(f"segment_reduce: {reduce}")
    axis, offsets = _offsets(data, axis, lengths, offsets, unsafe, "segment_reduce")
    seg, S = _segment_ids(data, axis, offsets)
    start = _START[reduce] if initial is None else float(initial)
    if reduce in ("sum", "mean"):
        out = _slots(data, axis, S, start).scatter_add(axis, seg, data)
    else:
        how = {"prod": "prod", "max": "amax", "min": "amin"}[reduce]
        out = _slots(data, axis, S, start).scatter_reduce(axis, seg, data, how, include_self=True)
        if reduce != "prod":
            nans = _slots(data, axis, S, 0).scatter_add(axis, seg, data.isnan().to(data.dtype))
            out = torch.where(nans > 0, torch.full_like(out, float("nan")), out)
    out = out.narrow(axis, 0, S)
    if reduce == "mean":
        n = _per_segment((offsets[..., 1:] - offsets[..., :-1]).to(data.dtype), data, axis)
        empty = out.new_tensor(float("nan")) if initial is None else out
        out = torch.where(n > 0, out / torch.where(n > 0, n, torch.ones_like(n)), empty)
    return out


@register("aten::_segment_reduce_backward")
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    if reduce not in _REDUCES or grad.dtype != data.dtype or output.dtype != data.dtype:
        raise Unsupported(f"_segment_reduce_backward: {reduce}")
    axis, offsets = _offsets(data, axis, lengths, offsets, True, "_segment_reduce_backward")
    seg, S = _segment_ids(data, axis, offsets)
    valid = seg < S

    def at(v):  # v (batch, S, inner) read at each element's segment (0 for none)
        return torch.cat([v, torch.zeros_like(v.narrow(axis, 0, 1))], axis).gather(axis, seg)

    g = at(grad)
    if reduce == "sum":
        return g
    if reduce == "mean":
        n = _per_segment((offsets[..., 1:] - offsets[..., :-1]).to(data.dtype), data, axis)
        return at(grad / torch.where(n > 0, n, torch.ones_like(n)))
    if reduce in ("max", "min"):
        hit = valid & (data.isnan() | (data == at(output)))
        gi = torch.where(hit, g, torch.zeros_like(g))
        count = at(_slots(data, axis, S, 0).scatter_add(axis, seg, hit.to(data.dtype)).narrow(axis, 0, S))
        return torch.where((count >= 2) & (gi > 0), gi / torch.where(count >= 2, count, torch.ones_like(count)), gi)
    # prod
    special = data.isnan() | (data == 0)
    start = 1.0 if initial is None else float(initial)
    plain = torch.where(special, torch.ones_like(data), data)
    rest = at(_slots(data, axis, S, start).scatter_reduce(axis, seg, plain, "prod", include_self=True)
              .narrow(axis, 0, S))
    nans = at(_slots(data, axis, S, 0).scatter_add(axis, seg, data.isnan().to(data.dtype)).narrow(axis, 0, S))
    zeros = at(_slots(data, axis, S, 0).scatter_add(axis, seg, (data == 0).to(data.dtype)).narrow(axis, 0, S))
    nans = nans - data.isnan().to(data.dtype)  # among the others
    zeros = zeros - (data == 0).to(data.dtype)
    others = rest * torch.where(nans > 0, float("nan"), torch.where(zeros > 0, 0.0, 1.0)).to(data.dtype)
    gi = torch.where(special, g * others, g * at(output) / torch.where(special, torch.ones_like(data), data))
    return torch.where(valid, gi, torch.zeros_like(gi))
