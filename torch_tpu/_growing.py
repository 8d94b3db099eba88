"""Tensors that grow along one dimension inside a bucketed buffer.

A decoding loop grows its sequences one position per step: the KV cache,
the token ids, the attention mask, the position ids.  Every new length is a
new shape, and on a compiled device a new shape is a new program.  Here the
data lives in a buffer whose length along the growing dim is a bucket
(a power of two, at least MIN_BUCKET) and only the first `length`
positions are valid.  Appending writes into the buffer at a position that
is a runtime value of the program (a view's offset is a program input), so
every step of a bucket runs the same programs; a buffer is reallocated
only when a bucket fills.

Two users:
- `GrowingBuffer`: a buffer and its valid length, for code that computes on
  the whole bucket itself and masks what lies beyond (the KV cache layer of
  torch_tpu.integrations.generation: attention over the bucket with the
  causal mask hiding the unwritten positions, as a static cache does).
- `GrowingTensor`: a tensor subclass that looks exactly like the valid part
  ([..., length, ...]) to the code around it and keeps its buffer inside:
  `torch.cat([g, t], dim)` appends in place, slices and selects that stay
  inside the valid part are views of the buffer, `F.pad` up to the bucket is
  the buffer with the rest masked, a dtype conversion converts the buffer;
  any other op sees the valid part as an ordinary view (and then compiles
  for its length, as it would have anyway).
"""
import os
import sys
import weakref

import torch
from torch.utils._pytree import tree_map

MIN_BUCKET = 64
# a loop's torch.cat (see cat_or_grow) makes a GrowingTensor (0: never)
CAT_GROWS = os.environ.get("TORCH_TPU_GROWING_CAT", "1") != "0"


def bucket(n, at_least=0):
    """The buffer length that holds n positions: a power of two, at least
    MIN_BUCKET and at_least."""
    n = max(int(n), int(at_least), MIN_BUCKET)
    return 1 << (n - 1).bit_length()


class GrowingBuffer:
    """`data` holds `length` valid positions along `dim`, followed by room."""

    __slots__ = ("data", "dim", "length")

    def __init__(self, data, dim, length):
        self.data = data
        self.dim = dim % data.dim()
        self.length = length

    @classmethod
    def empty_like(cls, t, dim, length_hint=0):
        """A buffer shaped like t with a bucket of room along dim, zeros."""
        dim %= t.dim()
        shape = list(t.shape)
        shape[dim] = bucket(max(t.shape[dim], length_hint))
        return cls(t.new_zeros(shape), dim, 0)

    @property
    def capacity(self):
        return self.data.shape[self.dim]

    def valid(self):
        """The valid positions: a view of the buffer."""
        return self.data.narrow(self.dim, 0, self.length)

    def reserve(self, n):
        """Room for n positions (a bigger bucket, the valid part copied)."""
        if n <= self.capacity:
            return
        shape = list(self.data.shape)
        shape[self.dim] = bucket(n)
        data = self.data.new_zeros(shape)
        data.narrow(self.dim, 0, self.length).copy_(self.valid())
        self.data = data

    def write(self, start, t):
        """Writes t at positions [start, start + t.shape[dim]) (start <= length),
        growing the buffer when a bucket fills; the length becomes the end."""
        n = t.shape[self.dim]
        self.reserve(start + n)
        self.data.narrow(self.dim, start, n).copy_(t)
        self.length = start + n

    def append(self, t):
        self.write(self.length, t)


class _Shared:
    """A buffer shared by every GrowingTensor made from it; `end` is the
    length the newest of them holds (appends beyond an older one's length
    would overwrite the newer's positions, so that one copies first).  A
    buffer an op computed (`own` False: an op's result over a bucket, or a
    view of another buffer) is never appended to in place."""

    __slots__ = ("buf", "end", "own")

    def __init__(self, buf, own=True):
        self.buf = buf
        self.end = buf.length
        self.own = own


def _same_place(kwargs, data):
    """A _to_copy that only changes the dtype (same device and layout)."""
    dev = kwargs.get("device")
    if dev is not None:
        dev = torch.device(dev)
        if dev.type != data.device.type or dev.index not in (None, data.device.index):
            return False
    return (set(kwargs) <= {"dtype", "device", "layout", "pin_memory", "non_blocking", "memory_format"} and
            kwargs.get("layout") in (None, torch.strided) and not kwargs.get("pin_memory"))


def _ragged_dispatch(func, args, kwargs):
    global _ragged_dispatch
    from ._ragged import dispatch  # imports this module: bound at first use
    _ragged_dispatch = dispatch
    return dispatch(func, args, kwargs)


_LAYOUT_READERS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                   torch.ops.aten.as_strided.default}


class GrowingTensor(torch.Tensor):
    """The first `length` positions of a bucketed buffer along `dim`, as a
    tensor of that shape (see the module's docstring)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, shared, length):
        buf = shared.buf
        size = list(buf.data.shape)
        size[buf.dim] = length
        return torch.Tensor._make_wrapper_subclass(cls, size, dtype=buf.data.dtype, device=buf.data.device,
                                                   requires_grad=False)

    def __init__(self, shared, length):
        self._shared = shared
        self._length = length

    @classmethod
    def wrap(cls, t, dim, length_hint=0):
        """A growing copy of t (its positions along dim valid, room for a
        bucket of at least length_hint)."""
        buf = GrowingBuffer.empty_like(t, dim, length_hint)
        buf.write(0, t)
        return cls(_Shared(buf), buf.length)

    @classmethod
    def derived(cls, data, dim, length):
        """An op's result over a bucket: its first `length` positions along
        dim are the value, the rest is whatever the op made of the padding."""
        return cls(_Shared(GrowingBuffer(data, dim, length), own=False), length)

    @property
    def growing_dim(self):
        return self._shared.buf.dim

    @property
    def capacity(self):
        return self._shared.buf.capacity

    @property
    def bucket_data(self):
        return self._shared.buf.data

    def valid(self):
        """The valid part: an ordinary view of the buffer."""
        return self._shared.buf.data.narrow(self.growing_dim, 0, self._length)

    # what the user sees, saves or lists is the valid part, as a plain tensor
    def __repr__(self, *, tensor_contents=None):
        return repr(self.valid())

    def __reduce_ex__(self, proto):
        return self.valid().contiguous().__reduce_ex__(proto)

    def tolist(self):
        return self.valid().tolist()

    def _append(self, t):
        sh, buf = self._shared, self._shared.buf
        if sh.end != self._length or not sh.own:  # an older tensor of the buffer, or an op's: copy first
            new = GrowingBuffer(buf.data.narrow(buf.dim, 0, self._length).clone(), buf.dim, self._length)
            new.reserve(max(buf.capacity, 2 * self._length))
            sh = _Shared(new)
        sh.buf.append(t)
        sh.end = sh.buf.length
        return GrowingTensor(sh, sh.buf.length)

    def _positions(self, dim, start, end, step):
        """The slice [start:end:step] of the growing dim, normalised, or None."""
        n = self._length
        start = 0 if start is None else (start + n if start < 0 else start)
        end = n if end is None else (end + n if end < 0 else min(end, n))
        if step != 1 or not (0 <= start <= end <= n):
            return None
        return start, end

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        aten = torch.ops.aten
        g = args[0] if args and isinstance(args[0], GrowingTensor) else None
        if g is not None:
            d = g.growing_dim
            data = g._shared.buf.data
            if func is aten.slice.Tensor:
                dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % g.dim()
                start = args[2] if len(args) > 2 else kwargs.get("start")
                end = args[3] if len(args) > 3 else kwargs.get("end")
                step = args[4] if len(args) > 4 else kwargs.get("step", 1)
                if dim == d:
                    r = g._positions(dim, start, end, step)
                    if r is not None:
                        return data.narrow(d, r[0], r[1] - r[0])
                elif (start in (None, 0)) and (end is None or end >= g.shape[dim]) and step == 1:
                    return GrowingTensor(g._shared, g._length)  # a whole other dim: nothing to cut
            elif func is aten.select.int and (args[1] % g.dim()) == d:
                i = args[2] + g._length if args[2] < 0 else args[2]
                if 0 <= i < g._length:
                    return data.select(d, i)
            elif func in (aten.alias.default, aten.detach.default):
                return GrowingTensor(g._shared, g._length)  # views are new tensors
            elif func is aten._to_copy.default and _same_place(kwargs, data):
                # own=False: .to() of the same dtype is the buffer itself
                sh = _Shared(GrowingBuffer(data.to(kwargs.get("dtype") or data.dtype), d, g._length), own=False)
                return GrowingTensor(sh, g._length)
            elif func is aten.constant_pad_nd.default:
                pad = list(args[1])
                value = args[2] if len(args) > 2 else kwargs.get("value", 0)
                # (0, p) on the last dim up to exactly the bucket: the buffer, masked past the valid part
                nd = g.dim()
                if d == nd - 1 and len(pad) == 2 and pad[0] == 0 and g._length + pad[1] == data.shape[d]:
                    pos = torch.arange(data.shape[d], device=data.device)
                    keep = pos < g._length
                    return torch.where(keep, data, torch.full((), value, dtype=data.dtype, device=data.device))
        if func is aten.cat.default:
            tensors = list(args[0])
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            first = tensors[0] if tensors else None
            if isinstance(first, GrowingTensor) and len(tensors) == 2 and \
                    not isinstance(tensors[1], GrowingTensor) and dim % first.dim() == first.growing_dim and \
                    tensors[1].dtype == first.dtype and tensors[1].device == first.device and \
                    all(tensors[1].shape[i] == first.shape[i] for i in range(first.dim()) if i != first.growing_dim):
                return first._append(tensors[1])

        out = _ragged_dispatch(func, args, kwargs)  # on the whole bucket, masked where the padding would count
        if out is not NotImplemented:
            return out

        def plain(x):
            return x.valid() if isinstance(x, GrowingTensor) else x

        if func is not torch.ops.aten.as_strided.default:
            try:
                return func(*tree_map(plain, args), **tree_map(plain, kwargs))
            except RuntimeError:
                if func not in _LAYOUT_READERS:
                    raise
        # a view the valid part's bucket strides refuse, or an as_strided: the
        # tensor claims contiguous strides, so these read a contiguous copy
        def dense(x):
            return x.valid().contiguous() if isinstance(x, GrowingTensor) else x

        return func(*tree_map(dense, args), **kwargs)


_GROWN = {}  # id -> (weakref, dim): plain cat results that a later cat may grow again
_VIEWS = {}  # id -> (weakref, _Shared, length): GrowingTensors handed out as plain views (to_views)
_GROWTH_SITES = set()  # (file, line) of user code that grew a tensor by cat: a loop's cat
GRAD_SITES = {}  # (file, line) -> times a loop's cat there stayed exact: an input required grad (the doctor)
_HERE = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def _growth_dim(tensors, dim):
    """The dim along which cat(tensors, dim) extends a tpu tensor by a
    shorter piece; else None."""
    if not CAT_GROWS or len(tensors) != 2:
        return None
    a, b = tensors
    if type(a) is not torch.Tensor or type(b) is not torch.Tensor or a.dim() == 0 or a.dim() != b.dim() or \
            a.dtype != b.dtype or a.device != b.device or a.is_sparse or a.is_quantized:
        return None
    d = dim % a.dim()
    if not 0 < b.shape[d] < a.shape[d] or any(a.shape[i] != b.shape[i] for i in range(a.dim()) if i != d):
        return None
    return d


def _caller_site():
    """(file, line) of the nearest frame outside torch and torch_tpu."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_HERE):
        f = f.f_back
    return None if f is None else (f.f_code.co_filename, f.f_lineno)


def _remember(out, d):
    key = id(out)
    _GROWN[key] = (weakref.ref(out, lambda _r, key=key: _GROWN.pop(key, None)), d)


def cat_or_grow(tensors, dim, plain_cat):
    """torch.cat(tensors, dim): a GrowingTensor for a loop's cat, else
    plain_cat's result.  A loop's cat extends a tensor by a shorter piece
    (a KV cache, a token list, a history extended by a step) where neither
    requires grad (with grad mode on or off; a cat autograd must record
    stays exact, its line kept in GRAD_SITES), where the tensor is what a cat of the same dim made
    (its previous step), or at a line of user code that grew a tensor so
    before (a loop run again: bucketed from its first step).  A one-off cat
    -- padding, a rotary half, a header -- stays a plain tensor.  The
    bucket holds twice the tensor's length (at least MIN_BUCKET), so the
    next steps append in place and the ops over it run on the bucket
    (torch_tpu/_ragged.py): one program set per bucket, not per length."""
    d = _growth_dim(tensors, dim)
    if d is None:
        return plain_cat(tensors, dim)
    a, b = tensors
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        # exact (autograd records every step's cat), so each length is a
        # new program: a loop's cat here is remembered for the doctor's fix
        seen = _GROWN.get(id(a))
        if seen is not None and seen[0]() is a and seen[1] == d:
            site = _caller_site()
            if site is not None:
                GRAD_SITES[site] = GRAD_SITES.get(site, 0) + 1
        out = plain_cat(tensors, dim)
        _remember(out, d)
        return out
    view = _VIEWS.get(id(a))
    if view is not None and view[0]() is a and view[1].buf.dim == d:  # a compiled graph's grown output
        return GrowingTensor(view[1], view[2])._append(b)
    site = _caller_site()
    seen = _GROWN.get(id(a))
    if (seen is not None and seen[0]() is a and seen[1] == d) or site in _GROWTH_SITES:
        if site is not None:
            _GROWTH_SITES.add(site)
        return GrowingTensor.wrap(a, d, 2 * a.shape[d])._append(b)
    out = plain_cat(tensors, dim)
    _remember(out, d)
    return out


def _as_view(x):
    if not isinstance(x, GrowingTensor):
        return x
    v = x.valid()
    key = id(v)
    _VIEWS[key] = (weakref.ref(v, lambda _r, key=key: _VIEWS.pop(key, None)), x._shared, x._length)
    return v


def to_views(out):
    """A compiled graph's outputs with each GrowingTensor as its plain valid
    view: dynamo sees plain tensors (a subclass it cannot trace would break
    the next call's graph), and from_views makes them growing again."""
    if isinstance(out, (list, tuple)):
        return type(out)(_as_view(x) for x in out)
    return _as_view(out)


def from_views(args):
    """args with each plain view that to_views handed out growing again."""
    if not _VIEWS:
        return args
    def back(x):
        e = _VIEWS.get(id(x))
        return GrowingTensor(e[1], e[2]) if e is not None and e[0]() is x else x
    return [back(x) for x in args]


def unwrap(x):
    """A plain tensor for a GrowingTensor (its valid part, contiguous); x else."""
    return x.valid().contiguous() if isinstance(x, GrowingTensor) else x
