"""Unchanged CUDA programs on tpu: ``import torch_tpu.transfer``.

Importing this module (or ``python -m torch_tpu.run script.py``, or
``TORCH_TPU_TRANSFER=1`` in the environment of a program that imports torch)
maps what a CUDA program says onto the tpu device, at the Python entry
points where CUDA names reach torch:

- device strings ``"cuda"`` / ``"cuda:N"`` and ``torch.device("cuda"[, N])``:
  ``torch.device`` becomes a constructor that returns a tpu device for a cuda
  one (``isinstance(x, torch.device)`` still holds for every device); the
  tensor factories (``torch.zeros(..., device=)`` ...), ``Tensor.new_*``,
  ``Tensor.to``, ``Tensor.cuda``, ``Module.cuda``, ``torch.Generator``,
  ``torch.set_default_device`` and ``torch.load``'s ``map_location`` (and
  checkpoints saved on cuda, loaded with none) rewrite cuda to tpu.
- ``torch.cuda.*``: availability, devices, synchronize, memory, streams,
  events, seeds, properties are torch.tpu's; ``torch.cuda.amp.autocast`` /
  ``GradScaler``, ``torch.autocast(device_type="cuda")`` and
  ``torch.amp.GradScaler("cuda")`` are tpu autocast and scaling.
- ``init_process_group("nccl")`` / ``new_group(backend="nccl")``: tpu_dist.
- ``tensor.is_cuda``: true for tpu tensors where a program asks.

Why not a TorchFunctionMode that rewrites every call's device: it runs a
Python frame for every op (measured: +0.6..1.1 us per op in strict mode,
+1 us (+60%) in fused mode on this VM), while these entry points cost only
where a device is named (a factory, ``.to``).

PyTorch's own modules keep seeing the truth: ``torch.cuda.is_available()``,
``device_count()``, ``is_initialized()`` and ``Tensor.is_cuda`` answer as
before when the caller is a ``torch.*`` module, so PyTorch's CUDA-only
paths (cuDNN RNNs, Triton checks, CUDA graphs) are not taken for tpu
tensors.  What has no tpu meaning (CUDA graphs, custom allocators, NVML
queries, jiterator ...) raises NotImplementedError naming the call.  What
was mapped is logged once, in one line (a UserWarning).
"""
import functools
import sys
import warnings

import torch

_applied = False
_RealDevice = torch.device
_RealGenerator = torch.Generator
_ORIGINALS = {}  # "owner.name" -> the original object, for restore()
MAPPED = {}  # what a CUDA name became: "torch.cuda.synchronize" -> "torch.tpu.synchronize"


# ---- devices -----------------------------------------------------------------------------


def map_device(d):
    """cuda -> tpu for a device string or torch.device; anything else unchanged."""
    t = type(d)
    if t is str:
        if d.startswith("cuda"):
            return "tpu" + d[4:]
        return d
    if t is _RealDevice and d.type == "cuda":
        return _RealDevice("tpu", d.index) if d.index is not None else _RealDevice("tpu")
    return d


def _is_cuda_device(d):
    t = type(d)
    return (t is str and d.startswith("cuda")) or (t is _RealDevice and d.type == "cuda")


def _from_torch(frame):
    """Whether the frame runs PyTorch's own code (torch, torch.*)."""
    name = frame.f_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.")


class _DeviceType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._real)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._real)

    # equal to (and hashed as) the type it stands for: PyTorch's code
    # compares types (torch.fx's code generator: `obj != torch.device`)
    def __eq__(cls, other):
        return other is cls or other is cls._real

    def __ne__(cls, other):
        return not _DeviceType.__eq__(cls, other)

    def __hash__(cls):
        return hash(cls._real)


class device(metaclass=_DeviceType):  # noqa: N801 - torch.device's name
    """torch.device under the transfer: torch.device("cuda", 1) is tpu:1."""

    _real = _RealDevice

    def __new__(cls, *args, **kwargs):
        d = _RealDevice(*args, **kwargs)
        return map_device(d)


class Generator(metaclass=_DeviceType):
    """torch.Generator under the transfer: Generator(device="cuda") is a tpu generator."""

    _real = _RealGenerator

    def __new__(cls, device="cpu"):
        return _RealGenerator(map_device(device))


def _device_kwarg(fn):
    """Wraps a factory: its device= keyword is mapped."""

    @functools.wraps(fn)
    def factory(*args, **kwargs):
        d = kwargs.get("device")
        if d is not None and _is_cuda_device(d):
            kwargs["device"] = map_device(d)
        return fn(*args, **kwargs)

    factory._tpu_transfer_original = fn
    return factory


def _device_arg(fn, pos=0):
    """Wraps a function whose device is positional argument `pos` or device=."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > pos and _is_cuda_device(args[pos]):
            args = args[:pos] + (map_device(args[pos]),) + args[pos + 1:]
        d = kwargs.get("device")
        if d is not None and _is_cuda_device(d):
            kwargs["device"] = map_device(d)
        return fn(*args, **kwargs)

    wrapper._tpu_transfer_original = fn
    return wrapper


_FACTORIES = (
    "arange", "range", "linspace", "logspace", "empty", "empty_like", "empty_permuted", "empty_strided",
    "eye", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like", "rand", "rand_like", "randn",
    "randn_like", "randint", "randint_like", "randperm", "normal", "tensor", "as_tensor", "asarray",
    "scalar_tensor", "tril_indices", "triu_indices", "from_file", "bartlett_window", "blackman_window",
    "hamming_window", "hann_window", "kaiser_window", "sparse_coo_tensor", "sparse_csr_tensor",
    "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor", "sparse_compressed_tensor",
)
_TENSOR_FACTORIES = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")


def _tpu_target(device):
    """Tensor.cuda / Module.cuda's device argument as a tpu device."""
    if device is None:
        return _RealDevice("tpu", torch.tpu.current_device())
    if isinstance(device, int):
        return _RealDevice("tpu", device)
    d = _RealDevice(map_device(device)) if isinstance(device, str) else map_device(device)
    if d.type != "tpu":
        raise ValueError(f"Invalid device, must be cuda device, got {device}")
    return d if d.index is not None else _RealDevice("tpu", torch.tpu.current_device())


# ---- tensors and modules --------------------------------------------------------------------

_tensor_to = torch.Tensor.to
_is_cuda = torch._C.TensorBase.is_cuda


def _to(self, *args, **kwargs):
    # the hot one (PyTorch calls .to everywhere): checks inlined, and no
    # keyword dict passed on when there is none
    if args:
        a = args[0]
        t = type(a)
        if (t is str and a[:4] == "cuda") or (t is _RealDevice and a.type == "cuda"):
            args = (map_device(a),) + args[1:]
    if kwargs:
        d = kwargs.get("device")
        if d is not None and _is_cuda_device(d):
            kwargs["device"] = map_device(d)
        return _tensor_to(self, *args, **kwargs)
    return _tensor_to(self, *args)


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    return _tensor_to(self, device=_tpu_target(device), non_blocking=non_blocking, memory_format=memory_format)


def _module_cuda(self, device=None):
    target = _tpu_target(device)
    return self._apply(lambda t: _tensor_to(t, target))


def _tensor_is_cuda(self):
    if _is_cuda.__get__(self):
        return True
    return self.device.type == "tpu" and not _from_torch(sys._getframe(1))


def _map_location(loc):
    if loc is None:
        return _restore_cuda_on_tpu
    if isinstance(loc, dict):
        return {k: map_device(v) for k, v in loc.items()}
    if callable(loc):
        def restore(storage, location):
            out = loc(storage, location)
            return out if out is not None else _restore_cuda_on_tpu(storage, location)
        return restore
    return map_device(loc)


def _restore_cuda_on_tpu(storage, location):
    """Storages saved on cuda:N load on tpu:N; others where they were (None: the default)."""
    if location.startswith("cuda"):
        return storage.to(device=_RealDevice("tpu" + location[4:]))
    return None


def _load(f, map_location=None, *args, **kwargs):
    return _torch_load(f, _map_location(map_location), *args, **kwargs)


_torch_load = torch.load


# ---- torch.cuda ------------------------------------------------------------------------------


def _cuda_is_available():
    if _from_torch(sys._getframe(1)):
        return False
    return torch.tpu.is_available()


def _cuda_device_count():
    if _from_torch(sys._getframe(1)):
        return 0
    return torch.tpu.device_count()


def _cuda_is_initialized():
    if _from_torch(sys._getframe(1)):
        return False
    return torch.tpu.is_initialized()


class _CudaLikeProperties:
    """torch.tpu's device properties with the fields CUDA programs read
    (major/minor 0: no compute capability)."""

    major = 0
    minor = 0
    is_integrated = False
    is_multi_gpu_board = False

    def __init__(self, props):
        self._props = props

    def __getattr__(self, name):
        return getattr(self._props, name)

    def __repr__(self):
        return repr(self._props)


def _cuda_get_device_properties(device=None):
    return _CudaLikeProperties(torch.tpu.get_device_properties(map_device(device)))


def _cuda_classes():
    """torch.cuda.Stream / torch.cuda.device: torch.tpu's, taking cuda devices."""
    tpu = torch.tpu

    class Stream(tpu.Stream):
        def __new__(cls, device=None, priority=0, **kwargs):
            return tpu.Stream.__new__(cls, map_device(device), priority, **kwargs)

    class device(tpu.device):  # noqa: N801 - torch.cuda's name
        def __init__(self, device):
            super().__init__(map_device(device))

    return {"Stream": Stream, "device": device}


# torch.cuda name -> torch.tpu name (device arguments mapped), or a callable
_CUDA_TO_TPU = {
    "init": "init", "current_device": "current_device", "set_device": "set_device", "device": "device",
    "device_of": "device_of", "synchronize": "synchronize", "get_device_name": "get_device_name",
    "get_device_capability": "get_device_capability", "is_bf16_supported": "is_bf16_supported",
    "manual_seed": "manual_seed", "manual_seed_all": "manual_seed_all", "seed": "seed", "seed_all": "seed_all",
    "initial_seed": "initial_seed", "get_rng_state": "get_rng_state", "set_rng_state": "set_rng_state",
    "get_rng_state_all": "get_rng_state_all", "set_rng_state_all": "set_rng_state_all",
    "Stream": "Stream", "Event": "Event", "StreamContext": "StreamContext", "stream": "stream",
    "current_stream": "current_stream", "default_stream": "default_stream", "set_stream": "set_stream",
    "memory_allocated": "memory_allocated", "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved", "max_memory_reserved": "max_memory_reserved",
    "memory_cached": "memory_reserved", "max_memory_cached": "max_memory_reserved",
    "reset_peak_memory_stats": "reset_peak_memory_stats", "reset_max_memory_allocated": "reset_max_memory_allocated",
    "reset_max_memory_cached": "reset_peak_memory_stats",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats", "memory_stats": "memory_stats",
    "memory_summary": "memory_summary", "mem_get_info": "mem_get_info", "empty_cache": "empty_cache",
    "set_per_process_memory_fraction": "set_per_process_memory_fraction",
    "get_per_process_memory_fraction": "get_per_process_memory_fraction",
}
_CUDA_CALLABLES = {
    "is_available": _cuda_is_available,
    "device_count": _cuda_device_count,
    "is_initialized": _cuda_is_initialized,
    "get_device_properties": _cuda_get_device_properties,
    "is_current_stream_capturing": lambda: False,  # tpu never captures a CUDA graph
    "ipc_collect": lambda: None,  # no memory shared with other processes to free
    "is_tf32_supported": lambda: False,
}
# No tpu meaning: calling them raises, naming the call.
_CUDA_UNMAPPABLE = (
    "CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables", "CUDAPluggableAllocator",
    "change_current_allocator", "caching_allocator_alloc", "caching_allocator_delete", "caching_allocator_enable",
    "caching_allocator_disabled", "get_allocator_backend", "MemPool", "use_mem_pool", "ExternalStream",
    "get_stream_from_external", "current_blas_handle", "current_solver_handle", "can_device_access_peer",
    "get_arch_list", "get_gencode_flags", "list_gpu_processes", "utilization", "temperature", "power_draw",
    "clock_rate", "memory_usage", "device_memory_used", "memory_snapshot", "memory_stats_as_nested_dict",
    "host_memory_stats", "host_memory_stats_as_nested_dict", "reset_peak_host_memory_stats",
    "reset_accumulated_host_memory_stats", "set_sync_debug_mode", "get_sync_debug_mode", "cudart",
    "check_error", "GreenContext",
)


def _unmappable(qualname, what=""):
    def call(*args, **kwargs):
        raise NotImplementedError(
            f"{qualname}: no tpu equivalent (torch_tpu.transfer maps CUDA calls to tpu, and this one has no "
            f"meaning there{what}); remove the call or guard it when running on tpu")

    call.__name__ = qualname.rsplit(".", 1)[-1]
    call.__qualname__ = qualname
    return call


# ---- autocast, GradScaler, distributed ---------------------------------------------------------


def _autocast_type(device_type):
    return "tpu" if device_type == "cuda" else device_type


def _map_backend(backend):
    """"nccl" -> "tpu_dist"; "cpu:gloo,cuda:nccl" -> "cpu:gloo,tpu:tpu_dist"."""
    if backend is None:
        return None
    s = str(backend)
    if ":" not in s:
        return "tpu_dist" if s.lower() == "nccl" else backend
    parts = []
    for item in s.split(","):
        dev, _, be = item.partition(":")
        dev = "tpu" if dev.strip() == "cuda" else dev.strip()
        be = "tpu_dist" if be.strip().lower() == "nccl" else be.strip()
        parts.append(f"{dev}:{be}")
    return ",".join(parts)


def _wrap_init_process_group(fn):
    @functools.wraps(fn)
    def init_process_group(backend=None, *args, **kwargs):
        if "device_id" in kwargs and _is_cuda_device(kwargs["device_id"]):
            kwargs["device_id"] = map_device(kwargs["device_id"])
        return fn(_map_backend(backend), *args, **kwargs)

    init_process_group._tpu_transfer_original = fn
    return init_process_group


def _wrap_new_group(fn):
    @functools.wraps(fn)
    def new_group(*args, **kwargs):
        if len(args) > 2:
            args = args[:2] + (_map_backend(args[2]),) + args[3:]
        if "backend" in kwargs:
            kwargs["backend"] = _map_backend(kwargs["backend"])
        return fn(*args, **kwargs)

    new_group._tpu_transfer_original = fn
    return new_group


# ---- applying ----------------------------------------------------------------------------------


def _set(owner, owner_name, name, value, target=None):
    key = f"{owner_name}.{name}"
    if key not in _ORIGINALS:
        _ORIGINALS[key] = (owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                           else getattr(owner, name, _MISSING))
    setattr(owner, name, value)
    if target is not None:
        MAPPED[key] = target


_MISSING = object()


def apply():
    """Applies the mapping (idempotent).  Returns MAPPED."""
    global _applied
    if _applied:
        return MAPPED
    _applied = True
    tpu = torch.tpu

    # `with torch.device(...)` recognises factories by identity in a set it
    # builds once: built now, it holds PyTorch's functions, not our wrappers
    from torch.utils import _device as device_ctx

    device_ctx._device_constructors()
    _set(torch, "torch", "device", device, "torch.device (cuda -> tpu)")
    _set(torch, "torch", "Generator", Generator, "torch.Generator (cuda -> tpu)")
    for name in _FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            _set(torch, "torch", name, _device_kwarg(fn), f"torch.{name}(device=tpu)")
    for name in _TENSOR_FACTORIES:
        _set(torch.Tensor, "torch.Tensor", name, _device_kwarg(getattr(torch.Tensor, name)),
             f"Tensor.{name}(device=tpu)")
    _set(torch, "torch", "set_default_device", _device_arg(torch.set_default_device), "torch.set_default_device")
    _set(torch.Tensor, "torch.Tensor", "to", functools.wraps(_tensor_to)(_to), "Tensor.to(tpu)")
    _set(torch.Tensor, "torch.Tensor", "cuda", _tensor_cuda, "Tensor.tpu")
    _set(torch.Tensor, "torch.Tensor", "is_cuda", property(_tensor_is_cuda), "Tensor.is_tpu")
    _set(torch.nn.Module, "torch.nn.Module", "cuda", _module_cuda, "Module.tpu")
    _set(torch, "torch", "load", functools.wraps(_torch_load)(_load), "torch.load(map_location cuda -> tpu)")
    from torch import serialization

    _set(serialization, "torch.serialization", "load", torch.load)

    cuda = torch.cuda
    classes = _cuda_classes()
    for name, target in _CUDA_TO_TPU.items():
        fn = classes.get(name) or getattr(tpu, target)
        if not isinstance(fn, type):
            fn = _device_arg(fn)
        _set(cuda, "torch.cuda", name, fn, f"torch.tpu.{target}")
    for name, fn in _CUDA_CALLABLES.items():
        _set(cuda, "torch.cuda", name, fn, f"torch.tpu ({name})")
    for name in _CUDA_UNMAPPABLE:
        if hasattr(cuda, name):
            _set(cuda, "torch.cuda", name, _unmappable(f"torch.cuda.{name}"))

    # autocast and GradScaler: torch.cuda.amp's classes call these with "cuda"
    from torch.amp import autocast_mode, grad_scaler

    ac_init = autocast_mode.autocast.__init__

    @functools.wraps(ac_init)
    def autocast_init(self, device_type, *args, **kwargs):
        ac_init(self, _autocast_type(device_type), *args, **kwargs)

    _set(autocast_mode.autocast, "torch.amp.autocast", "__init__", autocast_init, "torch.autocast('tpu')")
    gs_init = grad_scaler.GradScaler.__init__

    @functools.wraps(gs_init)
    def scaler_init(self, device="cuda", *args, **kwargs):
        gs_init(self, _autocast_type(device), *args, **kwargs)

    _set(grad_scaler.GradScaler, "torch.amp.GradScaler", "__init__", scaler_init, "torch.amp.GradScaler('tpu')")
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
        _set(torch, "torch", name, _device_arg(getattr(torch, name)), f"torch.{name}('tpu')")
    # custom_fwd(device_type="cuda", cast_inputs=...) casts the tensors of its device type
    cast = autocast_mode._cast
    _set(autocast_mode, "torch.amp.autocast_mode", "_cast",
         functools.wraps(cast)(lambda value, device_type, dtype: cast(value, _autocast_type(device_type), dtype)))
    avail = _device_arg(autocast_mode.is_autocast_available)
    _set(autocast_mode, "torch.amp.autocast_mode", "is_autocast_available", avail)
    _set(torch.amp, "torch.amp", "is_autocast_available", avail)

    if torch.distributed.is_available():
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        ipg = _wrap_init_process_group(c10d.init_process_group)
        ng = _wrap_new_group(c10d.new_group)
        for owner, oname in ((dist, "torch.distributed"), (c10d, "torch.distributed.distributed_c10d")):
            _set(owner, oname, "init_process_group", ipg, "init_process_group('nccl' -> 'tpu_dist')")
            _set(owner, oname, "new_group", ng, "new_group('nccl' -> 'tpu_dist')")
            _set(owner, oname, "is_nccl_available", lambda: True, "tpu_dist")

    n_unmapped = sum(1 for n in _CUDA_UNMAPPABLE if hasattr(cuda, n))
    # one line (a warning with no source line under it), once per process
    warnings.warn_explicit(
        "CUDA runs on tpu: 'cuda'/'cuda:N' and torch.device('cuda') -> tpu, .cuda(), "
        f"torch.cuda.* ({len(_CUDA_TO_TPU) + len(_CUDA_CALLABLES)} calls) -> torch.tpu, autocast/GradScaler "
        f"'cuda' -> 'tpu', backend 'nccl' -> 'tpu_dist'; {n_unmapped} torch.cuda calls with no tpu meaning raise",
        UserWarning, "torch_tpu.transfer", 0, module="torch_tpu.transfer")
    return MAPPED


def applied():
    return _applied


def restore():
    """Undoes apply() (for tests and tools that need the plain torch back)."""
    global _applied
    for owner, name, value in reversed(list(_ORIGINALS.values())):
        if value is _MISSING:
            try:
                delattr(owner, name)
            except AttributeError:
                pass
        else:
            setattr(owner, name, value)
    _ORIGINALS.clear()
    MAPPED.clear()
    _applied = False


apply()
