"""Core kernels: factories, copies between devices and dtypes, views,
fills, scalar reads, resize.  Views are PyTorch metadata over a shared
storage (the engine reads a view by its sizes/strides/offset): the view
kernels are PyTorch's own metadata kernels, registered in C++."""
import torch

from .. import _C
from .._dispatch import _cpu_fallback, device_index, register, run, to_dtype, write
from .._dtypes import CODE, dtype_code

aten = torch.ops.aten
_SUPPORTED = set(CODE)


# The view kernels (as_strided, view, _reshape_alias, unfold, set_) are
# PyTorch's own metadata kernels, registered in C++ (csrc/torch/kernels_views.cpp).


def _check_size(size):
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")


# c10's names of the C++ types a Scalar converts to, as its overflow message prints them
_CXX_TYPE = {torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int",
             torch.int64: "int64_t", torch.uint16: "uint16_t", torch.uint32: "uint32_t", torch.uint64: "uint64_t",
             torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float",
             torch.float64: "double", torch.complex64: "c10::complex<float>",
             torch.complex128: "c10::complex<double>"}


def fill_value(value, dtype):
    """A fill value (fill_, full, masked_fill, index_fill; a Python number or
    a 0-d CPU tensor) converted to dtype as CPU's Scalar::to<T> does: c10's
    checked_convert raises RuntimeError ("value cannot be converted to type
    int without overflow") for NaN or inf into an integer type, a value out
    of the type's range (a finite float beyond a float type's max; integers
    into an unsigned type may wrap from down to -max), and a complex value
    with an imaginary part into a real type.  bool takes anything."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if value == 0 or dtype == torch.bool or isinstance(value, bool):
        return value
    if dtype.is_complex and not isinstance(value, complex):
        return value
    bad = False
    if isinstance(value, complex):
        if dtype.is_complex:
            return value
        bad, value = value.imag != 0, value.real
    if dtype.is_floating_point:
        big = torch.finfo(dtype).max
        bad = bad or (value == value and value not in (float("inf"), float("-inf")) and not -big <= value <= big)
    else:
        lim = torch.iinfo(dtype)
        if isinstance(value, float):
            bad = bad or value != value or not lim.min <= value <= lim.max
        elif lim.min == 0:  # unsigned: a negative integer wraps, down to -max
            bad = bad or value > lim.max or value < -lim.max
        else:
            bad = bad or not lim.min <= value <= lim.max
    if bad:
        raise RuntimeError(f"value cannot be converted to type {_CXX_TYPE.get(dtype, dtype)} without overflow")
    return value


def full_tensor(size, value, dtype, device=None):
    """A new tpu tensor filled with `value` on `device` (None: the current one)."""
    value = fill_value(value, dtype)
    size = [int(s) for s in size]
    _check_size(size)
    idx = device_index(device)
    if dtype.is_complex:  # complex values have no scalar input form: upload
        return from_host(torch.full(size, value, dtype=dtype), idx)
    code = dtype_code(dtype)
    if len(size) > _MAX_RANK:  # the engine's ranks stop at 16: the flat fill, viewed
        n = 1
        for d in size:
            n *= d
        return run("full", [(code, value)], [code, 1, n], device=idx)[0].view(size)
    return run("full", [(code, value)], [code, len(size), *size], device=idx)[0]


# empty, empty_strided and resize_ are C++ kernels (csrc/torch/kernels.cpp):
# no device work until a value is needed.


@register("full", out="full.out")
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:  # as torch.full infers it
        dtype = (torch.bool if isinstance(fill_value, bool) else
                 torch.int64 if isinstance(fill_value, int) else torch.get_default_dtype())
    return full_tensor(size, fill_value, dtype, device)


@register(["fill_.Scalar"])
def fill_scalar(self, value):
    value = fill_value(value, self.dtype)
    if self.dim() > _MAX_RANK and self.is_contiguous():  # through the flat view (engine ranks stop at 16)
        write(self.view(-1), value)
        return self
    return write(self, value)


@register(["fill_.Tensor"])
def fill_tensor(self, value):
    if value.dim() != 0:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
        )
    return write(self, value)


@register("zero_")
def zero_(self):
    return fill_scalar(self, 0)


def from_host(src, device_index=None, non_blocking=False):
    """A new tpu tensor holding a copy of the CPU tensor src.  From pinned
    memory with non_blocking=True the copy is asynchronous (as CUDA's): the
    host memory stays held until the device has read it."""
    if src.dtype not in _SUPPORTED:
        raise TypeError(f"tpu does not support dtype {src.dtype}")
    if src.is_conj():
        src = src.resolve_conj()
    if src.is_neg():
        src = src.resolve_neg()
    src = src.contiguous()
    if device_index is None:
        device_index = _C.get_device()
    if src.numel() == 0 and not src.is_complex():
        return full_tensor(src.shape, 0, src.dtype, device_index)
    if src.dim() > _MAX_RANK:  # the engine's arrays stop at rank 16: a flat upload, viewed
        return from_host(src.reshape(-1), device_index, non_blocking).view(src.shape)
    return _C.from_host(src.data_ptr(), tuple(src.shape), dtype_code(src.dtype), device_index, bool(non_blocking))


def _host_copy_to_tpu(src, dst, non_blocking=False):
    """CPU tensor -> tpu tensor dst (broadcast and convert like copy_)."""
    if src.dtype != dst.dtype:
        src = src.to(dst.dtype)
    if dst.numel() == 0:
        return dst
    return write(dst, from_host(src, dst.device.index or 0, non_blocking))


_MAX_RANK = 16  # TPU_MAX_RANK (csrc/base/dtype.h)


def _tpu_copy_to_host(src, dst):
    """tpu tensor -> CPU tensor dst."""
    if src.dtype != dst.dtype:
        src = to_dtype(src, dst.dtype)
    if tuple(src.shape) != tuple(dst.shape):
        src = src.expand(dst.shape)
    if dst.numel() == 0:
        return dst
    if src.dim() > _MAX_RANK and src.is_contiguous():  # a flat read of a high-rank tensor
        src = src.view(-1)
    if dst.is_contiguous() and not dst.is_conj():
        _C.to_host(src, dst.data_ptr(), dst.numel() * dst.element_size())
    else:
        tmp = torch.empty(dst.shape, dtype=dst.dtype)
        _C.to_host(src, tmp.data_ptr(), tmp.numel() * tmp.element_size())
        dst.copy_(tmp)
    return dst


@register("_copy_from")
def _copy_from(self, dst, non_blocking=False):
    src_tpu, dst_tpu = self.device.type == "tpu", dst.device.type == "tpu"
    if src_tpu and dst_tpu:
        if self.device != dst.device:  # device to device
            self = _C.to_device(self, dst.device.index or 0)
        return write(dst, self)
    if src_tpu:
        return _tpu_copy_to_host(self, dst)
    if dst_tpu:
        return _host_copy_to_tpu(self, dst, non_blocking)
    return dst.copy_(self)


@register("_copy_from_and_resize")
def _copy_from_and_resize(self, dst):
    if tuple(dst.shape) != tuple(self.shape):
        dst.resize_(self.shape)
    return _copy_from(self, dst)


@register("copy_")
def copy_(self, src, non_blocking=False):
    # reached when either side is a tpu tensor: self may be the CPU one
    return _copy_from(src, self, non_blocking)


@register("_local_scalar_dense")
def _local_scalar_dense(self):
    host = torch.empty((), dtype=self.dtype)
    _C.to_host(self, host.data_ptr(), host.element_size())
    return host.item()


@register("clone")
def clone(self, *, memory_format=None):
    return run("identity", [self])[0]


@register("_to_copy")
def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if type(self) is not torch.Tensor and isinstance(self, torch.nn.parameter.UninitializedTensorMixin):
        # an uninitialized lazy parameter (Module.to of a lazy module): its
        # Python class refuses .shape; copy a plain alias of the (empty) tensor
        with torch._C.DisableTorchFunctionSubclass():
            self = self.as_subclass(torch.Tensor)
        return _to_copy(self, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
                        non_blocking=non_blocking, memory_format=memory_format)
    dtype = dtype or self.dtype
    if self.device.type != "tpu":  # host -> tpu: one transfer, no fill
        return from_host(self.to(dtype), device_index(device), non_blocking)
    if device is not None and torch.device(device).type != "tpu":
        out = torch.empty(self.shape, dtype=dtype, device=device)
        return _tpu_copy_to_host(self, out)
    if device is not None and device_index(device) != self.device.index:  # device to device
        moved = _C.to_device(self, device_index(device))
        return moved if dtype == self.dtype else to_dtype(moved, dtype)
    if dtype == self.dtype:
        return run("identity", [self])[0]
    return to_dtype(self, dtype)


@register("equal")
def equal(self, other):
    if self.shape != other.shape:
        return False
    return bool(torch.all(torch.eq(self, other)).item())


@register("_has_same_storage_numel")
def _has_same_storage_numel(self, other):
    return self.untyped_storage().nbytes() // self.element_size() == other.untyped_storage().nbytes() // other.element_size()


@register("arange.start_out")
def arange_start_out(start, end, step=1, *, out):
    import math
    vals = [v.item() if isinstance(v, torch.Tensor) else v for v in (start, end, step)]
    start, end, step = vals
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not out.dtype.is_floating_point and int(step) == 0:  # as CPU: the step is cast to the out dtype
        raise ValueError(f"step must be nonzero (arange: step {step} is 0 as {out.dtype})")
    if not all(math.isfinite(float(v)) for v in vals):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    n = int(math.ceil((end - start) / step))
    dt = out.dtype
    is_f = dt.is_floating_point
    # start/step travel as f64 (PyTorch computes ranges in double) except on
    # a TPU, which has no f64
    kind = (torch.float64 if _C.platform() != "tpu" or dt == torch.float64 else torch.float32) if is_f else torch.int64
    res = run("arange", [(dtype_code(kind), float(start) if is_f else int(start)),
                         (dtype_code(kind), float(step) if is_f else int(step))], [dtype_code(dt), n],
              device=out.device.index)[0]
    if tuple(out.shape) != (n,):
        out.resize_([n])
    return write(out, res)


# Conjugate and negative "views" (lazy bits PyTorch sets instead of
# computing): tpu kernels read raw values, so these materialise the result.
@register("_conj")
def _conj(self):
    if not self.is_complex():
        return self
    return _cpu_fallback(aten.conj_physical.default, self)


@register("_neg_view")
def _neg_view(self):
    return torch.neg(self)


@register("narrow_copy", out="narrow_copy.out")
def narrow_copy(self, dim, start, length):
    if dim >= self.dim():  # PyTorch's CPU kernel: a RuntimeError here (IndexError for dim < -rank)
        raise RuntimeError(f"Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false. "
                           f"(narrow_copy: dim {dim}, self of shape {list(self.shape)})")
    return self.narrow(dim, start, length).clone()
