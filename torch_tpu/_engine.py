"""Loading the C engine: plugin discovery (at import, without loading
anything) and the runtime's start on first use (the plugin, then the
kernels): `import torch` costs nothing for programs that never touch tpu."""
import importlib.util
import os
import sys
import sysconfig
import threading

from . import _C, _blocks

MODES = {"strict": 0, "debug": 1, "fused": 2}
MODE_NAMES = {v: k for k, v in MODES.items()}

_init_error = None


def _site_dirs():
    dirs = []
    spec = importlib.util.find_spec("xla_plugins")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            dirs.append(os.path.dirname(loc))
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.append(p)
    dirs.extend(p for p in sys.path if p and os.path.isdir(p))
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return ":".join(out)


def mode_from_env():
    if os.environ.get("TPU_LAUNCH_BLOCKING", "") == "1":
        return MODES["debug"]
    name = os.environ.get("TORCH_TPU_EAGER_MODE", "strict").strip().lower() or "strict"
    if name not in MODES:
        raise ValueError(f"TORCH_TPU_EAGER_MODE={name!r}: expected one of debug, strict, fused")
    return MODES[name]


def cache_dir_from_env():
    d = os.environ.get("TORCH_TPU_CACHE_DIR")
    if d is None:
        return os.path.join(os.path.expanduser("~"), ".cache", "torch_tpu")
    return d or None  # empty string disables the disk tier


def _int_env(name, default):
    v = os.environ.get(name)
    return int(v) if v else default


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4,
               "tib": 1 << 40}


def host_capacity_from_env():
    """TORCH_TPU_CPU_MEMORY: the XLA CPU plugin's device capacity, bytes or
    a size such as 20GiB / 8G / 512MiB (0 or unset: half the host's RAM, at
    most 16 GiB)."""
    v = os.environ.get("TORCH_TPU_CPU_MEMORY", "").strip()
    if not v:
        return 0
    import re
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)", v)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"TORCH_TPU_CPU_MEMORY={v!r}: expected bytes or a size such as 20GiB, 8G, 512MiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def num_devices():
    """TORCH_TPU_NUM_DEVICES; else, under torchrun (LOCAL_WORLD_SIZE), one
    device per local process, so that tpu:LOCAL_RANK names this process's
    device as cuda:LOCAL_RANK does; else 1."""
    n = _int_env("TORCH_TPU_NUM_DEVICES", 0)
    return n if n > 0 else max(_int_env("LOCAL_WORLD_SIZE", 1), 1)


class _quiet_stderr:
    """The XLA plugin logs informational lines to fd 2 while it starts; they
    are hidden unless TORCH_TPU_LOG=info (or debug).  Errors still come back
    as exceptions."""

    def __enter__(self):
        self.saved = None
        if os.environ.get("TORCH_TPU_LOG", "").lower() in ("info", "debug", "verbose"):
            return self
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
        return False


def ensure_initialized():
    """Starts the engine on first use; raises RuntimeError naming what to set
    or install when no plugin can be loaded."""
    global _init_error
    if _C.initialized():
        return
    if _init_error is not None:
        raise RuntimeError(_init_error)
    try:
        plugin = _C.find_plugin(_site_dirs())
        mode = mode_from_env()
        with _quiet_stderr():
            _C.init(
                plugin,
                num_devices=num_devices(),
                mode=mode,
                cache_dir=cache_dir_from_env(),
                fused_max_nodes=_int_env("TORCH_TPU_FUSED_MAX_NODES", 0),
                mem_max_entries=_int_env("TORCH_TPU_CACHE_MAX_ENTRIES", 0),
                mem_max_bytes=_int_env("TORCH_TPU_CACHE_MAX_BYTES", 0),
                mem_max_maps=_int_env("TORCH_TPU_CACHE_MAX_MAPS", 0),
                disk_max_entries=_int_env("TORCH_TPU_DISK_CACHE_MAX_ENTRIES", 0),
                disk_max_bytes=_int_env("TORCH_TPU_DISK_CACHE_MAX_BYTES", 0),
                device_checks=os.environ.get("TORCH_TPU_DEVICE_CHECKS", "1") != "0",
                donation=os.environ.get("TORCH_TPU_DONATION", "1") != "0",
                host_memory_cache=os.environ.get("TORCH_TPU_CPU_MEMORY_CACHE", "1") != "0",
                compile_threads=_int_env("TORCH_TPU_COMPILE_THREADS", -1),
                host_capacity=host_capacity_from_env(),
            )
    except Exception as e:  # keep the reason for every later call
        _init_error = (
            f"torch_tpu could not start its PJRT engine: {e}\n"
            "Set TORCH_TPU_PJRT_PLUGIN=/path/to/a/pjrt_plugin.so, or install the CPU plugin "
            "with `pip install xla-cpu-pjrt==0.0.1`."
        )
        raise RuntimeError(_init_error) from None
    _blocks.follow_mode(mode == MODES["fused"])
    from . import _metrics
    _metrics.configure_log()


def configure():
    """At import: where the plugin is (a few stat calls, no dlopen), told to
    the C++ layer with the device count known without starting it."""
    global _plugin
    try:
        _plugin = _C.find_plugin(_site_dirs())
        error = None
    except Exception as e:  # noqa: BLE001 - kept for every later call
        _plugin, error = None, str(e)
        if os.environ.get("TORCH_TPU_PJRT_PLUGIN"):  # asked for explicitly: say so now
            import warnings
            warnings.warn(f"torch_tpu: {error}", RuntimeWarning, stacklevel=3)
    hint = -1
    if _plugin and "xla_cpu" in os.path.basename(_plugin):
        hint = num_devices()
    _C._configure(_plugin, error, hint)


_plugin = None
_start_lock = threading.RLock()
_starting = False


def start():
    """Starts the engine and registers the kernels (first use of the
    device).  Idempotent; called by the C++ layer under the GIL."""
    global _starting
    with _start_lock:
        if _starting or (_C.initialized() and _kernels_loaded):
            return
        _starting = True
        try:
            ensure_initialized()
            _load_kernels()
        finally:
            _starting = False


_kernels_loaded = False


def _load_kernels():
    global _kernels_loaded
    if _kernels_loaded:
        return
    _kernels_loaded = True
    from . import ops  # noqa: F401  (kernels register on import)
    from . import _autocast
    _autocast.register()


def is_available():
    """A plugin was found (it is loaded on first use)."""
    return _plugin is not None or _C.initialized()
