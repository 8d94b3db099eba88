"""Indexing kernels (csrc/ops/index.c): cat, index_select, gather, take, the
scatter family, advanced indexing (index / index_put), index_add / copy /
fill, masked_select / masked_scatter, put, and the rearrangements tril /
triu, flip, roll, repeat, unfold_backward.

Semantics that differ from PyTorch CPU, on purpose (see index.c):
- Out-of-range indices are device-side checks in the rules (index.c): the
  error (IndexError or RuntimeError, as PyTorch's CPU kernel) is raised at the
  next host read or synchronize (at the op in debug mode), with no sync while
  nothing is wrong.
- Boolean-mask indexing (x[mask], x[mask] = v with a tensor v, masked_select)
  has a data-dependent result shape: nonzero runs on the device and only its
  count is read on the host (one 8-byte sync), giving integer indices.  The common
  x[mask] = scalar (and += scalar) needs no sync: it is a where().
- stack is PyTorch's own composite (unsqueeze + cat); matmul-style ops live in
  linalg.py, constant_pad_nd in padding.py.
"""
import functools

import torch

from .. import _C
from .._dispatch import _EXACT_DTYPE_OUT, Unsupported, impl, register, run, scalar, supported, write
from .._dtypes import dtype_code, scalar_type_name
from .._growing import cat_or_grow
from .core import fill_value

_MAX_IN = 64  # TPU_OP_MAX_INPUTS


def _dev(t, like):
    """Index tensors may arrive on the CPU (PyTorch allows CPU indices)."""
    if isinstance(t, torch.Tensor) and t.device != like.device:
        return t.to(like.device)
    return t


def _index_dtype_check(index, what):
    if index.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise RuntimeError(f"{what}(): Expected dtype int64 for index")


# ---- cat ------------------------------------------------------------------------------


@register("aten::cat")
def cat(tensors, dim=0):
    if len(tensors) == 2:  # a sequence grown step by step lives in a bucket (torch_tpu/_growing.py)
        return cat_or_grow(tensors, dim, _cat)
    return _cat(tensors, dim)


@register(out="aten::cat.out")
def _cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    dt = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    ref = next((t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)), tensors[0])
    tensors = [_dev(t, ref) for t in tensors]
    if len(tensors) <= _MAX_IN:
        return run("cat", tensors, [dim, dtype_code(dt)])[0]
    # Wider than one op takes: a tree of cats, each level's chunk its own
    # program in fused mode.  In one program XLA flattens the nested
    # concatenates back into one, whose compile time grows faster than its
    # operand count (1,000 operands: 3.5 s, against 0.04 s for 64), while
    # the chunks of one shape are one cached program.
    _C.flush(_C.CUT_WIDE)
    while len(tensors) > _MAX_IN:
        level = []
        for i in range(0, len(tensors), _MAX_IN):
            level.append(run("cat", tensors[i:i + _MAX_IN], [dim, dtype_code(dt)])[0])
            _C.flush(_C.CUT_WIDE)
        tensors = level
    return run("cat", tensors, [dim, dtype_code(dt)])[0]


# ---- gather-like ---------------------------------------------------------------------------


def _wrap_dim(dim, rank):
    r = max(rank, 1)
    if dim < -r or dim >= r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


@register("aten::index_select", out="aten::index_select.out")
def index_select(self, dim, index):
    index = _dev(index, self)
    _index_dtype_check(index, "index_select")
    d = _wrap_dim(dim, self.dim())
    if index.numel() and self.dim() and self.shape[d] == 0:  # no index is in range: CPU says so at once
        if self.dim() > 1:
            raise RuntimeError("index_select(): self indexing axis dim should be positive")
        raise IndexError("index out of range in self")
    if index.numel() and self.dim() > 1 and self.numel() == 0:
        # nothing to gather, so no result would ever sync a device check:
        # CPU's bounds check on the host, at once (one small read)
        size, flat = self.shape[d], index.cpu().reshape(-1)
        bad = ((flat < 0) | (flat >= size)).nonzero()
        if bad.numel():
            raise RuntimeError(f"index_select(): INDICES element is out of DATA bounds, "
                               f"id={int(flat[bad[0, 0]])} axis_dim={size}")
        shape = list(self.shape)
        shape[d] = index.numel()
        return torch.empty(shape, dtype=self.dtype, device=self.device)
    out = run("index_select", [self, index], [dim])[0]
    return out.reshape(()) if self.dim() == 0 else out


@register("aten::gather", out="aten::gather.out")
def gather(self, dim, index, *, sparse_grad=False):
    index = _dev(index, self)
    _index_dtype_check(index, "gather")
    if index.numel() == 0:  # PyTorch checks nothing more for an empty index
        return torch.empty(index.shape, dtype=self.dtype, device=self.device)
    d = _wrap_dim(dim, self.dim())
    return run("gather", [self, index], [dim])[0]


@register("aten::take", out="aten::take.out")
def take(self, index):
    index = _dev(index, self)
    if index.numel() == 0:
        return torch.empty(index.shape, dtype=self.dtype, device=self.device)
    return run("take", [self, index])[0]


# ---- scatter family -------------------------------------------------------------------------

_SCATTER_REDUCE = {None: 0, "add": 1, "multiply": 2}
_SCATTER_REDUCE2 = {"sum": 0, "prod": 1, "mean": 2, "amax": 3, "amin": 4}


def _scatter(self, dim, index, src, reduce):
    index = _dev(index, self)
    _index_dtype_check(index, "scatter")
    if reduce not in _SCATTER_REDUCE:
        raise RuntimeError("reduce argument must be either add or multiply.")
    d = _wrap_dim(dim, self.dim())
    if isinstance(src, torch.Tensor):
        src = _dev(src, self)
        if src.dim() > 0 and src.dtype != self.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    else:
        src = scalar(src, self.dtype)
    return run("scatter", [self, index, src], [dim, _SCATTER_REDUCE[reduce]])[0]


@register("aten::scatter.src", out="aten::scatter.src_out", inplace="aten::scatter_.src")
def scatter_src(self, dim, index, src):
    return _scatter(self, dim, index, src, None)


@register("aten::scatter.value", out="aten::scatter.value_out", inplace="aten::scatter_.value")
def scatter_value(self, dim, index, value):
    return _scatter(self, dim, index, value, None)


@register("aten::scatter.reduce", out="aten::scatter.reduce_out", inplace="aten::scatter_.reduce")
def scatter_reduce_src(self, dim, index, src, *, reduce):
    return _scatter(self, dim, index, src, reduce)


@register("aten::scatter.value_reduce", out="aten::scatter.value_reduce_out", inplace="aten::scatter_.value_reduce")
def scatter_value_reduce(self, dim, index, value, *, reduce):
    return _scatter(self, dim, index, value, reduce)


@register("aten::scatter_add", out="aten::scatter_add.out", inplace="aten::scatter_add_")
def scatter_add(self, dim, index, src):
    index = _dev(index, self)
    _index_dtype_check(index, "scatter_add")
    d = _wrap_dim(dim, self.dim())
    if isinstance(src, torch.Tensor) and src.dtype != self.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype (scatter_add: self "
                           f"{self.dtype}, src {src.dtype})")
    return run("scatter_add", [self, index, _dev(src, self)], [dim])[0]


@register("aten::scatter_reduce.two", out="aten::scatter_reduce.two_out", inplace="aten::scatter_reduce_.two")
def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    if reduce not in _SCATTER_REDUCE2:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin, got " + str(reduce))
    index = _dev(index, self)
    _index_dtype_check(index, "scatter_reduce")
    d = _wrap_dim(dim, self.dim())
    src = _dev(src, self)
    if self.dim() == 0:  # the rule takes rank >= 1: a 0-d scatter is the 1-element one
        return scatter_reduce(self.reshape(1), 0, index.reshape(-1), src.reshape(-1), reduce,
                              include_self=include_self).reshape(())
    return run("scatter_reduce", [self, index, src], [dim, _SCATTER_REDUCE2[reduce], int(bool(include_self))])[0]


def _index_dim_args(self, dim, index, what):
    index = _dev(index, self)
    _index_dtype_check(index, what)
    d = _wrap_dim(dim, self.dim())
    return index


@register("aten::index_add", out="aten::index_add.out", inplace="aten::index_add_")
def index_add(self, dim, index, source, *, alpha=1):
    index = _index_dim_args(self, dim, index, "index_add")
    source = _dev(source, self)
    if self.dim() == 0:  # the rule takes rank >= 1: a 0-d index_add is the 1-element one
        return index_add(self.reshape(1), 0, index.reshape(-1), source.reshape(-1), alpha=alpha).reshape(())
    a = scalar(alpha, torch.float64 if self.dtype.is_floating_point else torch.int64)
    return run("index_add", [self, index, source, a], [dim])[0]


@register("aten::index_reduce", out="aten::index_reduce.out", inplace="aten::index_reduce_")
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    index = _dev(index, self)
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: "
                           f"{scalar_type_name(index.dtype)}")
    d = _wrap_dim(dim, self.dim())
    source = _dev(source, self)
    if self.dim() == 0:  # the rule takes rank >= 1
        return index_reduce(self.reshape(1), 0, index.reshape(-1), source.reshape(-1), reduce,
                            include_self=include_self).reshape(())
    n = index.numel()
    if source.dim() > 0 and n != source.shape[d]:
        raise RuntimeError(f"index_reduce_(): Number of indices ({n}) should be equal to source.size(dim): "
                           f"({source.shape[d]}), for dim: {d}")
    return run("index_reduce", [self, index, source], [d, _SCATTER_REDUCE2[reduce], int(bool(include_self))])[0]


@register("aten::index_copy", out="aten::index_copy.out", inplace="aten::index_copy_")
def index_copy(self, dim, index, source):
    index = _index_dim_args(self, dim, index, "index_copy")
    if self.dim() == 0:  # the rule takes rank >= 1
        return index_copy(self.reshape(1), 0, index.reshape(-1), _dev(source, self).reshape(-1)).reshape(())
    return run("index_copy", [self, index, _dev(source, self)], [dim])[0]


@register(["aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor"],
          out=["aten::index_fill.int_Scalar_out", "aten::index_fill.int_Tensor_out"],
          inplace=["aten::index_fill_.int_Scalar", "aten::index_fill_.int_Tensor"])
def index_fill(self, dim, index, value):
    index = _index_dim_args(self, dim, index, "index_fill")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        if value.device.type == "cpu":  # CPU's kernel takes its item(): the checked Scalar conversion
            fill_value(value, self.dtype)
        value = _dev(value, self)
    else:
        if isinstance(value, complex) and not self.dtype.is_complex:
            raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
        value = scalar(fill_value(value, self.dtype), self.dtype)
    if self.dim() == 0:  # the rule takes rank >= 1
        return run("index_fill", [self.reshape(1), index.reshape(-1), value], [0])[0].reshape(())
    return run("index_fill", [self, index, value], [dim])[0]


# ---- advanced indexing ------------------------------------------------------------------------


def _adv_indices(self, indices):
    """Turns an ATen indices list (None / integer / bool tensors) into present
    flags and integer index tensors on the device.  Bool masks are read on
    the host (nonzero)."""
    flags, tensors = [], []
    dim = 0
    for idx in indices:
        if idx is None:
            flags.append(0)
            dim += 1
            continue
        if idx.dtype in (torch.bool, torch.uint8):
            if idx.dim() == 0:
                raise NotImplementedError("tpu: indexing with a 0-d boolean tensor")
            for j, s in enumerate(idx.shape):
                if dim + j >= self.dim() or self.shape[dim + j] != s:
                    raise IndexError(
                        f"The shape of the mask {list(idx.shape)} at index {j} does not match the shape of the "
                        f"indexed tensor {list(self.shape)} at index {dim + j}")
            nz = idx.nonzero()  # one count read (ops/nonzero.py): the result shape depends on the mask
            for j in range(idx.dim()):
                flags.append(1)
                tensors.append(nz[:, j].contiguous().to(self.device))
            dim += idx.dim()
            continue
        if idx.dtype.is_floating_point or idx.dtype.is_complex:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if dim >= self.dim():
            raise IndexError(f"too many indices for tensor of dimension {self.dim()} (got {dim + 1})")
        if idx.device.type == "cpu":
            _host_bounds_check(idx, dim, self.shape[dim])
        idx = _dev(idx, self)
        flags.append(1)
        tensors.append(idx)
        dim += 1
    if dim > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()} (got {dim})")
    return flags, tensors


def _host_bounds_check(idx, dim, size):
    """An index that is still on the host (a CPU tensor, a Python list) is
    checked there, at the op, as CPU does: IndexError naming the first value
    out of bounds.  Device indices are checked on the device (reported at
    the next host wait, as CUDA's device-side assert)."""
    if idx.numel() == 0:
        return
    bad = (idx >= size) | (idx < -size)
    if bad.any():
        raise IndexError(f"index {int(idx[bad].reshape(-1)[0])} is out of bounds for dimension {dim} with size {size}")


@register("aten::index.Tensor", out="aten::index.Tensor_out")
def index(self, indices):
    flags, tensors = _adv_indices(self, indices)
    if not tensors:
        return self.clone()
    if self.numel() == 0:
        return _index_of_empty(self, flags, tensors)
    return run("index", [self] + tensors, flags)[0]


def _index_of_empty(self, flags, tensors):
    """self has no elements (a gather cannot slice it): the result's shape
    from the meta kernel; an index into a dimension of size 0 is out of
    bounds, as on CPU."""
    meta = _empty_dim_check(self, flags, tensors)
    shape = torch.ops.aten.index.Tensor(torch.empty(self.shape, dtype=self.dtype, device="meta"), meta).shape
    return torch.empty(shape, dtype=self.dtype, device=self.device)


def _empty_dim_check(self, flags, tensors):
    """An index into a dimension of size 0 is out of bounds whatever its
    value: IndexError at once, as on CPU (no device check, no sync).  The
    index tensors as meta tensors, None where flags has none."""
    it = iter(tensors)
    meta = [t.to("meta") if f else None for f in flags for t in ([next(it)] if f else [None])]
    d = 0
    for f, m in zip(flags, meta):
        if f and self.shape[d] == 0 and m.numel() > 0:
            raise IndexError(f"index is out of bounds for dimension {d} with size 0")
        d += 1
    return meta


def _mask_fast_path(self, indices, values, accumulate):
    """x[mask] = scalar (or += scalar) as a where(): no host sync."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype != torch.bool:
        return None
    mask = indices[0]
    if not isinstance(values, torch.Tensor) or values.numel() != 1 or mask.dim() > self.dim():
        return None
    if tuple(mask.shape) != tuple(self.shape[:mask.dim()]):
        return None
    mask = _dev(mask, self).reshape(tuple(mask.shape) + (1,) * (self.dim() - mask.dim()))
    v = _dev(values.reshape(()), self).to(self.dtype)
    if accumulate:
        return self + torch.where(mask, v, torch.zeros((), dtype=self.dtype, device=self.device))
    return torch.where(mask, v, self)


def _index_put(self, indices, values, accumulate):
    if isinstance(values, torch.Tensor) and values.dtype != self.dtype and values.dim() > 0:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got {scalar_type_name(self.dtype)} for the "
            f"destination and {scalar_type_name(values.dtype)} for the source.")
    fast = _mask_fast_path(self, indices, values, accumulate)
    if fast is not None:
        return fast
    flags, tensors = _adv_indices(self, indices)
    if isinstance(values, torch.Tensor) and values.dim() > 0:
        values = _dev(values, self)
    if not tensors:
        return torch.broadcast_to(values, self.shape).to(self.dtype).clone()
    if self.numel() == 0:
        _empty_dim_check(self, flags, tensors)
    return run("index_put", [self, values] + tensors, [int(bool(accumulate))] + flags)[0]


@register("aten::index_put", out="aten::index_put.out")
def index_put(self, indices, values, accumulate=False):
    return _index_put(self, indices, values, accumulate)


def _index_put_inplace(self, indices, values, accumulate=False, unsafe=False):
    write(self, _index_put(self, indices, values, accumulate))
    return self


register(["aten::index_put_", "aten::_index_put_impl_"])(_index_put_inplace)


@register("aten::masked_select", out="aten::masked_select.out")
def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    s = self.expand(shape)
    m = mask.expand(shape)
    if len(shape) == 0:
        s, m = s.reshape(1), m.reshape(1)
    flags, tensors = _adv_indices(s, [m])  # host sync (data-dependent size)
    return run("index", [s] + tensors, flags)[0]


# ---- rearrangements -----------------------------------------------------------------------------


@register("aten::tril", out="aten::tril.out", inplace="aten::tril_")
def tril(self, diagonal=0):
    return run("tril", [self], [int(diagonal)])[0]


@register("aten::triu", out="aten::triu.out", inplace="aten::triu_")
def triu(self, diagonal=0):
    return run("triu", [self], [int(diagonal)])[0]


# CPU's tril/triu out= wants the result's dtype (the meta kernel takes any): _dispatch's exact-dtype list
_EXACT_DTYPE_OUT.update({"tril", "triu"})


@register("aten::flip", out="aten::flip.out")
def flip(self, dims):
    return run("flip", [self], [int(d) for d in dims])[0]


@register("aten::roll", out="aten::roll.out")
def roll(self, shifts, dims=()):
    shifts, dims = [int(s) for s in shifts], [int(d) for d in dims]
    if self.dim() == 0 and dims:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    if self.numel() == 0:
        return self.clone()
    return run("roll", [self], [len(shifts), *shifts, len(dims), *dims])[0]


@register("aten::repeat", out="aten::repeat.out")
def repeat(self, repeats):
    repeats = [int(r) for r in repeats]
    if len(repeats) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    return run("repeat", [self], repeats)[0]


# ---- put / masked_scatter ---------------------------------------------------------------------


@register("aten::put", out="aten::put.out", inplace="aten::put_")
def put(self, index, source, accumulate=False):
    index = _dev(index, self)
    if index.numel() != source.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of elements, but got "
                           f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if self.numel() == 0 or index.numel() == 0:
        return self.clone()
    flat = self.reshape(-1)
    out = run("put", [flat, _dev(source, self).reshape(-1), index.reshape(-1)], [int(bool(accumulate)), 1])[0]
    return out.reshape(self.shape)


@register("aten::masked_scatter", out="aten::masked_scatter.out", inplace="aten::masked_scatter_")
def masked_scatter(self, mask, source):
    """Copies source's leading elements into self where mask is True (in
    row-major order).  The number of True values is read on the host."""
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with dtype " + str(mask.dtype))
    if source.dtype != self.dtype:
        raise RuntimeError("masked_scatter: expected self and source to have same dtypes but got "
                           f"{self.dtype} and {source.dtype}")
    shape = torch.broadcast_shapes(self.shape, mask.shape)  # the out-of-place op broadcasts self with mask
    if tuple(shape) != tuple(self.shape):
        self = self.expand(shape)
    m = _dev(mask, self).expand(shape)
    nz = m.nonzero()  # one count read (data-dependent count)
    n = nz.shape[0]
    if n == 0:
        return self.clone()
    if source.numel() < n:
        raise RuntimeError("masked_scatter: expected source to have at least as many elements as ones in mask")
    vals = _dev(source, self).reshape(-1)[:n]
    if self.dim() == 0:
        return vals.reshape(())
    idx = [nz[:, j].contiguous().to(self.device) for j in range(self.dim())]
    return run("index_put", [self, vals] + idx, [0] + [1] * self.dim())[0]


@register("aten::unfold_backward", out="aten::unfold_backward.out")
def unfold_backward(grad_in, input_sizes, dim, size, step):
    supported(grad_in.dtype)
    sizes = [int(s) for s in input_sizes]
    if not sizes and grad_in.numel() == 1:
        return grad_in.reshape(()).clone()
    if not sizes or grad_in.numel() == 0 or grad_in.dim() != len(sizes) + 1:
        raise Unsupported()
    dim = dim % len(sizes)
    return run("unfold_backward", [grad_in], [dim, int(size), int(step), len(sizes), *sizes])[0]


# ---- tensor_split with a tensor of indices -----------------------------------------
# PyTorch's composite reads the indices on the host and insists they are on
# the CPU; a tpu tensor is read back here (one sync) and given to that same
# composite, so dtype/rank checks and autograd are PyTorch's.  Registered on
# the autograd key too: a composite op's backend kernel is not reached
# through autograd otherwise.
def _tensor_split_tensor(self, tensor_indices_or_sections, dim=0):
    t = tensor_indices_or_sections
    if isinstance(t, torch.Tensor) and t.device.type == "tpu":
        t = t.cpu()
    # PyTorch's C++ composite itself (decompose() would pick a Python
    # decomposition whose checks differ from the CPU's)
    return _SPLIT._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, self, t, dim)


_SPLIT = torch.ops.aten.tensor_split.tensor_indices_or_sections


for _key in ("AutogradPrivateUse1", "PrivateUse1"):
    impl("tensor_split.tensor_indices_or_sections", _tensor_split_tensor, key=_key)
