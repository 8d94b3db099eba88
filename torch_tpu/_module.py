"""torch.tpu: the device module, shaped like torch.cuda."""
import contextlib
import threading

import torch

from . import _C, _engine, _random

_current = threading.local()


def is_available():
    return _engine.is_available()


def is_initialized():
    return _C.initialized()


def init():
    _engine.ensure_initialized()


def device_count():
    return _C.device_count() if is_available() else 0


def current_device():
    return getattr(_current, "index", 0)


def set_device(device):
    idx = torch.device(device).index if not isinstance(device, int) else device
    idx = 0 if idx is None else idx
    n = device_count()
    if not 0 <= idx < max(n, 1):
        raise RuntimeError(f"tpu: invalid device index {idx} ({n} available)")
    _current.index = idx


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, dev):
        self.idx = torch.device(dev).index if not isinstance(dev, int) else dev
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        set_device(self.idx or 0)

    def __exit__(self, *exc):
        set_device(self.prev)
        return False


def synchronize(device=None):
    """Runs pending work and waits for the device."""
    _C.synchronize()


def get_device_name(device=None):
    return f"tpu ({_C.platform()} PJRT plugin)"


def get_device_properties(device=None):
    return {"name": get_device_name(device), "platform": _C.platform(), "plugin": _C.identity()}


def _is_in_bad_fork():
    return False


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


manual_seed = _random.manual_seed
manual_seed_all = _random.manual_seed_all
seed = _random.seed


def seed_all():
    for d in range(max(device_count(), 1)):
        _random.seed(d)


def initial_seed():
    return _random.initial_seed(current_device())


def get_rng_state(device="tpu"):
    d = torch.device(device).index or 0 if not isinstance(device, int) else device
    return _random.get_rng_state(d)


def set_rng_state(new_state, device="tpu"):
    d = torch.device(device).index or 0 if not isinstance(device, int) else device
    _random.set_rng_state(new_state, d)


def get_rng_state_all():
    return [get_rng_state(d) for d in range(max(device_count(), 1))]


def set_rng_state_all(states):
    for d, s in enumerate(states):
        set_rng_state(s, d)


# ---- memory and cache statistics ------------------------------------------------

def cache_stats():
    """Program-cache and runtime counters (hits/misses per tier, compiles,
    compile seconds, bytes, evictions, live buffers ...)."""
    return _C.stats()


def clear_cache(disk=False):
    """Drops compiled programs from memory (and the disk tier with disk=True)."""
    _C.clear_cache(bool(disk))


def memory_stats(device=None):
    s = _C.stats()
    return {"live_buffers": s["live_buffers"], "live_storages": s["live_storages"], "live_values": s["live_values"]}


def live_buffers():
    return _C.stats()["live_buffers"]


def fallback_counts():
    from ._dispatch import fallback_counts as f
    return f()


def empty_cache():
    pass


# ---- eager modes ------------------------------------------------------------------

def get_eager_mode():
    return _engine.MODE_NAMES[_C.get_mode()]


def set_eager_mode(mode):
    if mode not in _engine.MODES:
        raise ValueError(f"eager mode must be one of {sorted(_engine.MODES)}, got {mode!r}")
    _C.set_mode(_engine.MODES[mode])


@contextlib.contextmanager
def eager_mode(mode):
    """with torch.tpu.eager_mode("fused"): ... runs the block in that mode."""
    prev = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(prev)
