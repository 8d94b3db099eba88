"""torch.tpu.memory: memory snapshots in the format torch.cuda's memory
visualizer reads.

    torch.tpu.memory._record_memory_history()          # start recording
    ... run the model ...
    torch.tpu.memory._dump_snapshot("snapshot.pickle")
    # python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o trace.html
    # (or drag the pickle into https://pytorch.org/memory_viz)

What is recorded (csrc/torch/memory_history.cpp): every tpu storage PyTorch
allocates and frees (tensors, parameters, gradients, optimizer state: each
storage is one allocation at its own device address, the address
``data_ptr()`` shows) with the Python stack of the thread that made or freed
it.  The engine has no caching allocator, so a segment is one allocation
(one block): "reserved" is "allocated".  Bytes are a storage's size, which
the device holds once a value has been written (an allocated storage that
was never written holds no buffer yet; its block is ``inactive``).  Device
buffers the engine holds for itself (values of the pending graph, the
device-side error state) are not PyTorch allocations and not shown.
"""
import pickle
import sys

from . import _C

__all__ = ["_record_memory_history", "_snapshot", "_dump_snapshot", "memory_summary"]


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False, **kwargs):
    """As ``torch.cuda.memory._record_memory_history``: ``enabled`` "all" or
    "state" records (on starting, what an earlier recording kept is
    cleared), None stops (the record stays for ``_snapshot``).
    ``stacks`` "python" or "all" keep the Python stack of each event (there
    are no C++ frames to add); None or "none"-like values keep none.
    ``max_entries`` bounds the trace (the oldest events go first).
    ``device`` and ``context`` are accepted for compatibility (one record
    covers every tpu device; stacks are kept for allocations and frees)."""
    if enabled not in (None, False, "all", "state", True):
        raise ValueError(f"_record_memory_history: enabled must be 'all', 'state' or None, not {enabled!r}")
    if stacks not in (None, "python", "all", "cpp"):
        raise ValueError(f"_record_memory_history: stacks must be 'python', 'all' or None, not {stacks!r}")
    if enabled and (not isinstance(max_entries, int) or max_entries <= 0):
        raise ValueError(f"_record_memory_history: max_entries must be a positive int, not {max_entries!r}")
    if enabled or clear_history:
        _C.ensure_started()
    on = bool(enabled)
    n = min(int(max_entries), 2 ** 62) if on else -1
    if enabled == "state":
        n = 1  # keep the live allocations' stacks, not the trace
    _C._memory_history_record(on, n, stacks in ("python", "all"))


def _frames(frames):
    return [{"filename": f["filename"], "line": f["line"], "name": f["name"]} for f in frames]


def _snapshot(device=None):
    """A dict with ``segments`` (the live allocations, each a segment of one
    block, with the stack that made it if it was made while recording) and
    ``device_traces`` (one list per device: ``segment_alloc``/``alloc`` and
    ``free_requested``/``free_completed``/``segment_free`` events with
    ``addr``, ``size``, ``time_us``, ``frames``), as torch.cuda.memory's."""
    if not _C.initialized():
        return {"segments": [], "device_traces": [], "allocator_settings": {}, "external_annotations": []}
    entries, live_frames = _C._memory_history()
    ndev = max(_C.device_count(), 1)
    segments = []
    for address, nbytes, dev, has_value in sorted(_C._live_storages(), key=lambda s: s[0]):
        if nbytes == 0:
            continue
        frames = _frames(live_frames.get(address, []))
        state = "active_allocated" if has_value else "inactive"
        active = nbytes if has_value else 0
        segments.append({
            "device": dev, "address": address, "total_size": nbytes, "allocated_size": active,
            "active_size": active, "requested_size": active, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
            "blocks": [{"address": address, "size": nbytes, "requested_size": nbytes if has_value else 0,
                        "state": state, "frames": frames}],
        })
    traces = [[] for _ in range(ndev)]
    for action, address, nbytes, dev, t, frames in entries:
        frames = _frames(frames)
        tr = traces[dev if 0 <= dev < ndev else 0]
        ev = {"addr": address, "size": nbytes, "stream": 0, "time_us": t, "frames": frames}
        if action == "oom":  # the request that failed (no address), as CUDA's
            tr.append({"action": "oom", "addr": 0, "size": nbytes, "device_free": 0, "stream": 0, "time_us": t,
                       "frames": frames})
        elif action == "alloc":
            tr.append(dict(ev, action="segment_alloc"))
            tr.append(dict(ev, action="alloc"))
        else:
            tr.append(dict(ev, action="free_requested"))
            tr.append(dict(ev, action="free_completed"))
            tr.append(dict(ev, action="segment_free"))
    if device is not None:
        from ._module import _index
        idx = _index(device)
        segments = [s for s in segments if s["device"] == idx]
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"backend": "torch_tpu (one segment per storage, no caching)"},
            "external_annotations": []}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Writes ``_snapshot()`` to filename (pickle), for
    ``python -m torch.cuda._memory_viz trace_plot filename -o out.html``."""
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def memory_summary(device=None, abbreviated=False):
    """torch.tpu.memory_summary(), with the largest live allocations and,
    when recorded, where they were made."""
    from . import _module
    text = _module.memory_summary(device, abbreviated)
    if not _C.initialized():
        return text
    live = sorted((s for s in _C._live_storages() if s[3]), key=lambda s: -s[1])[:5]
    if not live:
        return text
    frames = _C._memory_history()[1] if _C._memory_history_recording() else {}
    lines = [text, "  largest live allocations:"]
    for address, nbytes, dev, _ in live:
        where = ""
        fr = [f for f in frames.get(address, []) if "torch_tpu" not in f["filename"]
              and "/torch/" not in f["filename"]]
        if fr:
            where = f"  ({fr[0]['filename']}:{fr[0]['line']} in {fr[0]['name']})"
        lines.append(f"    tpu:{dev} 0x{address:x}  {nbytes} bytes{where}")
    return "\n".join(lines)
