"""Ops over GrowingTensors computed on the whole bucket (issue 42 item 5).

A GrowingTensor (torch_tpu/_growing.py) is the first `length` positions of
a bucketed buffer along one dim.  Computing on its valid part makes every
length a new shape, so a decoding loop that grows a KV cache by
`torch.cat` compiled its attention anew every step.  Here an op runs on the
whole bucket instead, and its result is again a GrowingTensor of the same
length (a *derived* one: its padding holds whatever the op made of the
padding), so every step of a bucket runs the same programs:

- elementwise ops (ATen's `pointwise` tag) whose other tensor operands
  broadcast along the growing dim (size 1 there), and the views that keep
  the growing dim whole (transpose, permute, unsqueeze, squeeze, expand,
  view / reshape that leave it a dim of its own, slices, selects, splits
  and cats along other dims, clone);
- matrix products: rows (or columns) that grow give a result whose rows
  (columns) grow; a product that contracts over the growing dim of both
  operands masks the padding to zero first and gives a plain tensor;
- reductions (sum, mean, amax, amin, logsumexp) and softmax over the
  growing dim mask the padding with the reduction's identity (the count of
  a mean is the valid length), over other dims they keep it growing;
  layer_norm over trailing dims keeps it growing.

The length enters a program only as a number (`arange(bucket) < length`:
Python numbers are runtime inputs), never as a shape.  Anything else
returns NotImplemented and runs on the valid part as a plain view (exact,
and compiled for its length as before).  Results equal the unpadded
computation: padding never reaches a valid position, since only a
reduction or a contraction mixes positions along the growing dim and both
mask it.
"""
import math

import torch

from ._growing import GrowingTensor

aten = torch.ops.aten
NI = NotImplemented


def _pos(g):
    """The growing dim counted from the end (broadcasting aligns from there)."""
    return g.growing_dim - g.dim()


def _keep(g, pos=None):
    """Bool mask of g's valid positions, shaped to broadcast at dim `pos`
    (from the end) of any tensor: [bucket, 1, ..., 1]."""
    pos = _pos(g) if pos is None else pos
    cap = g.capacity
    m = torch.arange(cap, device=g.device) < g._length
    return m.view((cap,) + (1,) * (-pos - 1))


def _fill(data, g, value, pos=None):
    """data (g's bucket, or an op's result over it) with its padding set to value."""
    return torch.where(_keep(g, pos), data, value)


def _lowest(dtype, low=True):
    if dtype.is_floating_point:
        return -math.inf if low else math.inf
    if dtype == torch.bool:
        return not low
    info = torch.iinfo(dtype)
    return info.min if low else info.max


def _derived(data, dim, g):
    return GrowingTensor.derived(data, dim % data.dim(), g._length)


def _uniform(gs):
    """(length, pos) when every growing operand shares them, else None."""
    L, p = gs[0]._length, _pos(gs[0])
    if any(g._length != L or _pos(g) != p or g.capacity != gs[0].capacity for g in gs):
        return None
    return L, p


def _data(x):
    return x.bucket_data if isinstance(x, GrowingTensor) else x


# ---- elementwise --------------------------------------------------------------------------


def _leaves(args, kwargs):
    """The operands of an ATen call: its arguments, one level into lists."""
    for x in (*args, *kwargs.values()):
        if isinstance(x, (list, tuple)):
            yield from x
        else:
            yield x


def _buckets(x):
    if isinstance(x, (list, tuple)):
        return type(x)(_data(y) for y in x)
    return _data(x)


def _pointwise(func, args, kwargs, gs):
    u = _uniform(gs)
    if u is None:
        return NI
    _, p = u
    for x in _leaves(args, kwargs):
        if isinstance(x, torch.Tensor) and not isinstance(x, GrowingTensor) and x.dim() >= -p and x.shape[p] != 1:
            return NI  # a plain operand of the valid length along the growing dim
    r = func(*[_buckets(x) for x in args], **{k: _buckets(x) for k, x in kwargs.items()})
    if not isinstance(r, torch.Tensor) or r.dim() < -p or r.shape[p] != gs[0].capacity:
        raise AssertionError(f"growing dim lost by pointwise {func}")
    return _derived(r, r.dim() + p, gs[0])


# ---- views ------------------------------------------------------------------------------------


def _transpose(x, dim0, dim1):
    nd, d = x.dim(), x.growing_dim
    dim0, dim1 = dim0 % nd, dim1 % nd
    nd_ = dim1 if d == dim0 else dim0 if d == dim1 else d
    return _derived(x.bucket_data.transpose(dim0, dim1), nd_, x)


def _t(x):
    return _transpose(x, 0, 1) if x.dim() == 2 else _derived(x.bucket_data, 0, x)


def _permute(x, dims):
    dims = [dd % x.dim() for dd in dims]
    return _derived(x.bucket_data.permute(dims), dims.index(x.growing_dim), x)


def _unsqueeze(x, dim):
    dim %= x.dim() + 1
    d = x.growing_dim
    return _derived(x.bucket_data.unsqueeze(dim), d + 1 if dim <= d else d, x)


def _squeeze_dims(x, dims):
    d = x.growing_dim
    dims = [dd % x.dim() for dd in dims if x.shape[dd % x.dim()] == 1]
    if d in dims:
        return NI  # a length of 1 squeezed away: the plain view
    return _derived(x.bucket_data.squeeze(tuple(dims)) if dims else x.bucket_data, d - sum(dd < d for dd in dims), x)


def _squeeze(x, dim=None):
    if dim is None:
        return _squeeze_dims(x, list(range(x.dim())))
    return _squeeze_dims(x, dim if isinstance(dim, (list, tuple)) else [dim])


def _expand(x, size, *, implicit=False):
    size = list(size)
    j = len(size) + _pos(x)
    if size[j] not in (-1, x._length):
        return NI
    size[j] = -1
    return _derived(x.bucket_data.expand(size), j, x)


def _view(x, size):
    """A view that keeps the growing dim a dim of its own (the elements
    before and after it the same): the bucket reshaped alike."""
    shape, L, d = list(x.shape), x._length, x.growing_dim
    size = list(size)
    if size.count(-1) == 1:
        rest = math.prod(n for n in size if n != -1)
        if rest == 0:
            return NI
        size[size.index(-1)] = math.prod(shape) // rest
    before, after = math.prod(shape[:d]), math.prod(shape[d + 1:])
    for j, n in enumerate(size):
        if n == L and math.prod(size[:j]) == before and math.prod(size[j + 1:]) == after:
            new = list(size)
            new[j] = x.capacity
            return _derived(x.bucket_data.reshape(new), j, x)
    return NI


def _clone(x, *, memory_format=None):
    return _derived(x.bucket_data.clone(), x.growing_dim, x)


def _slice(x, dim=0, start=None, end=None, step=1):
    if dim % x.dim() == x.growing_dim:
        return NI  # the positions GrowingTensor does not cut itself (a step)
    return _derived(aten.slice.Tensor(x.bucket_data, dim, start, end, step), x.growing_dim, x)


def _select(x, dim, index):
    dim %= x.dim()
    d = x.growing_dim
    if dim == d:
        return NI
    return _derived(x.bucket_data.select(dim, index), d - 1 if dim < d else d, x)


def _split(x, split_size, dim=0):
    if dim % x.dim() == x.growing_dim:
        return NI
    return [_derived(t, x.growing_dim, x) for t in x.bucket_data.split(split_size, dim)]


def _unbind(x, dim=0):
    dim %= x.dim()
    d = x.growing_dim
    if dim == d:
        return NI
    return [_derived(t, d - 1 if dim < d else d, x) for t in x.bucket_data.unbind(dim)]


def _cat(tensors, dim=0):
    tensors = list(tensors)
    if not all(isinstance(t, GrowingTensor) for t in tensors) or _uniform(tensors) is None:
        return NI
    g = tensors[0]
    if any(t.dim() != g.dim() for t in tensors) or dim % g.dim() == g.growing_dim:
        return NI
    return _derived(torch.cat([t.bucket_data for t in tensors], dim), g.growing_dim, g)


# ---- matrix products ----------------------------------------------------------------------


def _product(func, a, b):
    """mm / bmm with a growing operand."""
    ga, gb = isinstance(a, GrowingTensor), isinstance(b, GrowingTensor)
    nd = a.dim()
    if ga and gb:
        if a._length != b._length or a.capacity != b.capacity:
            return NI
        if a.growing_dim == nd - 1 and b.growing_dim == nd - 2:  # a contraction over the growing dim
            return func(_fill(a.bucket_data, a, 0), _fill(b.bucket_data, b, 0))
        if nd == 3 and a.growing_dim == 0 and b.growing_dim == 0:
            return _derived(func(a.bucket_data, b.bucket_data), 0, a)
        return NI
    if ga and a.growing_dim == nd - 2:
        return _derived(func(a.bucket_data, b), nd - 2, a)
    if gb and b.growing_dim == nd - 1:
        return _derived(func(a, b.bucket_data), nd - 1, b)
    return NI


def _mm(a, b):
    return _product(aten.mm.default, a, b)


def _bmm(a, b):
    return _product(aten.bmm.default, a, b)


# ---- reductions -----------------------------------------------------------------------------


def _dims(x, dim):
    nd = x.dim()
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(nd))
    dim = dim if isinstance(dim, (list, tuple)) else [dim]
    return sorted({dd % nd for dd in dim})


def _reduction(kind):
    def reduce(x, dim=None, keepdim=False, *, dtype=None):
        if not isinstance(x, GrowingTensor):
            return NI
        dims, d = _dims(x, dim), x.growing_dim
        kw = {} if kind in ("amax", "amin", "logsumexp") else {"dtype": dtype}
        if kind == "mean" and dtype is None and not (x.dtype.is_floating_point or x.dtype.is_complex):
            return NI  # CPU's error
        if kind in ("amax", "amin") and x.dtype == torch.bool:
            return NI
        op = {"sum": aten.sum.dim_IntList, "mean": aten.mean.dim, "amax": aten.amax.default,
              "amin": aten.amin.default, "logsumexp": aten.logsumexp.default}[kind]
        if d not in dims:
            r = op(x.bucket_data, dims, keepdim, **kw)
            return _derived(r, d if keepdim else d - sum(dd < d for dd in dims), x)
        fill = {"sum": 0, "mean": 0, "amax": _lowest(x.dtype), "amin": _lowest(x.dtype, low=False),
                "logsumexp": -math.inf}[kind]
        data = _fill(x.bucket_data, x, fill)
        if kind != "mean":
            return op(data, dims, keepdim, **kw)
        # the mean of the valid positions: their sum over their count (in float32 for half types)
        out = dtype or x.dtype
        acc = torch.float32 if out in (torch.float16, torch.bfloat16) else out
        r = aten.sum.dim_IntList(data, dims, keepdim, dtype=acc)
        return (r / (x._length * math.prod(x.shape[dd] for dd in dims if dd != d))).to(out)

    return reduce


def _whole(kind):
    def reduce(x, *, dtype=None):
        return _reduction(kind)(x, None, False, dtype=dtype)

    return reduce


def _softmax_like(func):
    def softmax(x, dim, *rest, **kw):
        if not isinstance(x, GrowingTensor):
            return NI
        data = x.bucket_data
        if dim % x.dim() == x.growing_dim:
            data = _fill(data, x, -math.inf)
        return _derived(func(data, dim, *rest, **kw), x.growing_dim, x)

    return softmax


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if not isinstance(x, GrowingTensor) or x.growing_dim >= x.dim() - len(normalized_shape):
        return NI
    return tuple(_derived(t, x.growing_dim, x)
                 for t in aten.native_layer_norm.default(x.bucket_data, normalized_shape, weight, bias, eps))


_HANDLERS = {
    aten.transpose.int: _transpose,
    aten.t.default: _t,
    aten.permute.default: _permute,
    aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.default: _squeeze,
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.expand.default: _expand,
    aten.view.default: _view,
    aten._unsafe_view.default: _view,
    aten.reshape.default: _view,
    aten.clone.default: _clone,
    aten.slice.Tensor: _slice,
    aten.select.int: _select,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split,
    aten.unbind.int: _unbind,
    aten.cat.default: _cat,
    aten.mm.default: _mm,
    aten.bmm.default: _bmm,
    aten.sum.dim_IntList: _reduction("sum"),
    aten.mean.dim: _reduction("mean"),
    aten.amax.default: _reduction("amax"),
    aten.amin.default: _reduction("amin"),
    aten.logsumexp.default: _reduction("logsumexp"),
    aten.sum.default: _whole("sum"),
    aten.mean.default: _whole("mean"),
    aten._softmax.default: _softmax_like(aten._softmax.default),
    aten._log_softmax.default: _softmax_like(aten._log_softmax.default),
    aten._safe_softmax.default: _softmax_like(aten._safe_softmax.default),
    aten.native_layer_norm.default: _layer_norm,
}

# the views' first operand must be the growing one
_FIRST_GROWS = {aten.transpose.int, aten.t.default, aten.permute.default, aten.unsqueeze.default,
                aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.expand.default, aten.view.default,
                aten._unsafe_view.default, aten.reshape.default, aten.clone.default, aten.slice.Tensor,
                aten.select.int, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}


def dispatch(func, args, kwargs):
    """func over the bucket (a GrowingTensor result, or a plain one where the
    growing dim was reduced or contracted), or NotImplemented."""
    gs = [x for x in _leaves(args, kwargs) if isinstance(x, GrowingTensor)]
    if not gs:
        return NI
    h = _HANDLERS.get(func)
    if h is not None:
        if func in _FIRST_GROWS and not (args and isinstance(args[0], GrowingTensor) and len(gs) == 1):
            return NI
        return h(*args, **kwargs)
    if torch.Tag.pointwise in func.tags and not func._schema.is_mutable:
        return _pointwise(func, args, kwargs, gs)
    return NI
