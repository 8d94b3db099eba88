"""torch.tpu: the device module, shaped like torch.cuda.

Device index, streams, events and the memory API are PyTorch's own
(torch.accelerator, torch.Stream, torch.Event) over the C++ device
interfaces of csrc/torch; this module gives them torch.cuda's names.  Only
what touches the device starts it: is_available() and device_count() do
not load the plugin (the CPU plugin's count is known from the environment).
"""
import contextlib
from dataclasses import dataclass

import torch

from . import _C, _blocks, _engine, _random

# ---- devices ---------------------------------------------------------------------


def is_available():
    return _engine.is_available() and _C.device_count() > 0


def is_initialized():
    return _C.initialized()


def init():
    _C.ensure_started()  # in a bad fork: RuntimeError, as torch.cuda.init()


def __getattr__(name):
    # torch.cuda keeps these as globals that its lazy init sets; PyTorch
    # reads them from any device module (torch.utils.checkpoint saves the
    # device RNG states only when `_initialized` is true).
    if name == "_initialized":
        return _C.initialized()
    if name == "comm":  # torch.tpu.comm, as torch.cuda.comm
        from . import comm

        return comm
    if name == "memory":  # torch.tpu.memory, as torch.cuda.memory (snapshots: torch_tpu/memory.py)
        import sys

        from . import memory

        sys.modules.setdefault("torch.tpu.memory", memory)
        return memory
    if name == "default_generators":
        return tuple(_C.default_generator(i) for i in range(max(device_count(), 1)))
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")


def device_count():
    return _C.device_count() if _engine.is_available() else 0


def _index(device, optional=True):
    if device is None:
        return _C.get_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"Expected a tpu device, but got: {device}")
        return _C.get_device() if device.index is None else device.index
    raise ValueError(f"Expected a torch.device, str or int, got {type(device).__name__}")


def current_device():
    return _C.get_device()


def set_device(device):
    idx = _index(device)
    if idx >= 0:
        _C.set_device(idx)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        self.prev = _C.get_device()
        if self.idx >= 0 and self.idx != self.prev:
            _C.set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev:
            _C.set_device(self.prev)
        return False


class device_of(device):
    """Context manager that makes the device of a tensor current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


def synchronize(device=None):
    """Waits for all work issued to the device (and runs pending fused work)."""
    _C.synchronize()


@dataclass(frozen=True)
class _DeviceProperties:
    name: str
    total_memory: int
    platform: str
    plugin: str
    multi_processor_count: int = 1
    type: str = "tpu"

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_properties(device=None):
    idx = _index(device)
    _C.ensure_started()
    info = _C.memory_info(idx)
    platform = _C.platform()
    return _DeviceProperties(name=f"tpu ({platform} PJRT plugin)", total_memory=info["total_bytes"],
                             platform=platform, plugin=_C.identity())


def get_device_capability(device=None):
    """PJRT devices have no compute capability: (0, 0), as CPU-like devices report."""
    return (0, 0)


def is_bf16_supported(including_emulation=True):
    return True


def _is_in_bad_fork():
    return _C.in_bad_fork()


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


# ---- random numbers (default generator per device) ------------------------------------

default_generator = _random.default_generator
manual_seed = _random.manual_seed
manual_seed_all = _random.manual_seed_all
seed = _random.seed
seed_all = _random.seed_all
initial_seed = _random.initial_seed


def get_rng_state(device="tpu"):
    return _random.get_rng_state(device)


def set_rng_state(new_state, device="tpu"):
    _random.set_rng_state(new_state, device)


def _get_generator(device):
    """The default generator of a tpu device (torch.cuda._get_generator)."""
    return _random.default_generator(device)


def get_rng_state_all():
    return [get_rng_state(d) for d in range(max(device_count(), 1))]


def set_rng_state_all(new_states):
    for d, s in enumerate(new_states):
        set_rng_state(s, d)


# ---- streams and events -------------------------------------------------------------------
# PJRT orders work by data dependencies: every stream of a device shares
# one ordered queue (csrc/torch/device.cpp), and an event completes when the
# work recorded before it has completed on the device.


class _TpuKind(type):
    """isinstance(x, torch.tpu.Stream / Event) for PyTorch's own objects of
    the tpu device: PyTorch's stream and event methods accept only their
    own classes as arguments, so torch.tpu hands those out."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "tpu"


class Stream(metaclass=_TpuKind):
    """torch.tpu.Stream(device=None, priority=0) -> a torch.Stream of tpu."""

    _base = torch.Stream

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # stream_id / device_index / device_type: an existing stream
            return torch.Stream(**kwargs)
        return torch.Stream(device=torch.device("tpu", _index(device)), priority=priority)


class Event(metaclass=_TpuKind):
    """torch.tpu.Event(enable_timing=False, blocking=False, interprocess=False) -> a torch.Event of tpu."""

    _base = torch.Event

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError("tpu: interprocess events are not supported")
        return torch.Event(torch.device("tpu", _C.get_device()), enable_timing=enable_timing, blocking=blocking)


def _wrap_stream(s):
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None):
    return _wrap_stream(torch.accelerator.current_stream(torch.device("tpu", _index(device))))


def default_stream(device=None):
    return Stream(stream_id=0, device_index=_index(device), device_type=current_stream(device).device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """with torch.tpu.stream(s): ... makes s the current stream of its device."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            set_stream(self.prev)
        return False


def stream(stream):
    return StreamContext(stream)


# ---- memory ------------------------------------------------------------------------------
# What this process holds in device buffers (counted by the engine for every
# plugin; there is no caching allocator, so reserved == allocated), and the
# device's capacity from the plugin (the CPU plugin reports none: host RAM
# and MemAvailable stand in).


def _dev(device):
    return torch.device("tpu", _index(device))


def memory_stats(device=None):
    if not _C.initialized():
        return {}
    return torch.accelerator.memory_stats(_dev(device))


def memory_allocated(device=None):
    return torch.accelerator.memory_allocated(_dev(device)) if _C.initialized() else 0


def max_memory_allocated(device=None):
    return torch.accelerator.max_memory_allocated(_dev(device)) if _C.initialized() else 0


def memory_reserved(device=None):
    return torch.accelerator.memory_reserved(_dev(device)) if _C.initialized() else 0


def max_memory_reserved(device=None):
    return torch.accelerator.max_memory_reserved(_dev(device)) if _C.initialized() else 0


def reset_peak_memory_stats(device=None):
    if _C.initialized():
        torch.accelerator.reset_peak_memory_stats(_dev(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None):
    if _C.initialized():
        torch.accelerator.reset_accumulated_memory_stats(_dev(device))


def mem_get_info(device=None):
    """(free, total) bytes of the device."""
    _C.ensure_started()
    return torch.accelerator.get_memory_info(_dev(device))


def empty_cache():
    """Frees device buffers the engine keeps for reuse (recurring scalars)
    and, on the CPU plugin, returns the host memory malloc kept to the system."""
    if _C.initialized():
        torch.accelerator.empty_cache()


def set_per_process_memory_fraction(fraction, device=None):
    """Allocations past fraction * the device's capacity raise torch.OutOfMemoryError."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    idx = _index(device)
    _C.ensure_started()
    _C.set_memory_limit(idx, int(fraction * _C.memory_info(idx)["total_bytes"]))


def get_per_process_memory_fraction(device=None):
    idx = _index(device)
    _C.ensure_started()
    info = _C.memory_info(idx)
    return info["limit_bytes"] / info["total_bytes"] if info["total_bytes"] else 1.0


def memory_summary(device=None, abbreviated=False):
    s = memory_stats(device)
    lines = [f"tpu:{_index(device)} memory ({_C.platform() if _C.initialized() else 'not started'})"]
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocation.all.current",
                "num_device_alloc", "num_device_free"):
        lines.append(f"  {key}: {s.get(key, 0)}")
    return "\n".join(lines)


# ---- engine statistics and modes --------------------------------------------------------------


def cache_stats():
    """Program-cache and runtime counters (hits/misses per tier, compiles,
    compile seconds, bytes, evictions, live buffers ...)."""
    return _C.stats()


def clear_cache(disk=False):
    """Drops compiled programs from memory (and the disk tier with disk=True)."""
    _C.clear_cache(bool(disk))


def live_buffers():
    return _C.stats()["live_buffers"]


def fallback_counts():
    from ._dispatch import fallback_counts as f
    return f()


def metrics():
    """What the engine did since it started or reset_metrics(): compiles and
    recompiles with their causes, program-cache hits per tier, executions
    and device time, host waits, transfers, what cut each program, CPU
    fallbacks, and one record per program (torch_tpu/_metrics.py)."""
    from ._metrics import metrics as m
    return m()


def metrics_report(top=10):
    """metrics() as readable text."""
    from ._metrics import metrics_report as r
    return r(top)


def reset_metrics():
    from ._metrics import reset_metrics as r
    r()


def get_eager_mode():
    return _engine.MODE_NAMES[_C.get_mode()] if _C.initialized() else _engine.MODE_NAMES[_engine.mode_from_env()]


def set_eager_mode(mode):
    if mode not in _engine.MODES:
        raise ValueError(f"eager mode must be one of {sorted(_engine.MODES)}, got {mode!r}")
    _C.ensure_started()
    _C.set_mode(_engine.MODES[mode])
    _blocks.follow_mode(mode == "fused")


@contextlib.contextmanager
def eager_mode(mode):
    """with torch.tpu.eager_mode("fused"): ... runs the block in that mode."""
    prev = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(prev)


# ---- automatic mixed precision ---------------------------------------------------------------


class _Amp:
    """torch.tpu.amp.autocast / GradScaler, as torch.cuda.amp."""

    @staticmethod
    def autocast(enabled=True, dtype=torch.bfloat16, cache_enabled=True):
        return torch.autocast("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    @staticmethod
    def GradScaler(*args, **kwargs):  # noqa: N802 - torch.cuda.amp's name
        return torch.amp.GradScaler("tpu", *args, **kwargs)


amp = _Amp()
