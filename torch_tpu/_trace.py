"""The engine's timeline (csrc/runtime/trace.h) as Python dicts, shared by
torch_tpu.debug.explain and torch_tpu.profiler.

A session starts the engine's trace, and ``stop()`` waits for the device
(so every execution issued inside has completed and been recorded), stops
it and returns the events, oldest first.  Times are the engine's clock
(CLOCK_MONOTONIC seconds, ``_C.clock_now()``).  One session at a time:
a second start drops what the first had not taken."""
from . import _C

_FIELDS = ("kind", "device", "cut", "ops", "start", "end", "rec_start", "rec_end", "key", "seq", "tag", "bytes",
           "name", "first_tag")
_active = []


def cut_name(code):
    names = _C.cut_names()
    return names[code] if 0 <= code < len(names) else None


def start():
    _C.ensure_started()
    # what was pending before belongs to no session
    _C.synchronize()
    _C.trace_start()
    _active.append(True)


def stop():
    """Waits for the device, stops the trace and returns its events."""
    try:
        if _C.initialized():
            _C.synchronize()
    finally:
        _C.trace_stop()
        if _active:
            _active.pop()
    return take()


def take():
    out = []
    for t in _C.trace_take():
        e = dict(zip(_FIELDS, t))
        e["key"] = f"{e['key']:016x}" if e["key"] else None
        e["cut"] = cut_name(e["cut"]) if e["cut"] >= 0 else None
        if e["device"] < 0:
            e["device"] = 0
        out.append(e)
    return out


def active():
    return bool(_active)
