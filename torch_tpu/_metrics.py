"""torch.tpu.metrics(), metrics_report(), reset_metrics(): what the engine
did and why it compiled (csrc/runtime/metrics.h keeps the figures), and
TORCH_TPU_LOG's recompile and compile logs."""
import os

from . import _C

# TORCH_TPU_LOG=recompiles,compiles (comma-separated; "info" is the plugin's
# own start-up log, handled by _engine)
_LOG_FLAGS = {"recompiles": 1, "recompile": 1, "compiles": 2, "compile": 2, "all": 3, "debug": 3}


def log_flags_from_env():
    flags = 0
    for word in os.environ.get("TORCH_TPU_LOG", "").lower().replace(";", ",").split(","):
        flags |= _LOG_FLAGS.get(word.strip(), 0)
    return flags


def configure_log():
    _C.set_log(log_flags_from_env())


def metrics():
    """A dict of what the engine did since it started (or reset_metrics()):

    - ``compile``: programs compiled (``count``, ``seconds`` summed over the
      compiles: workers compile side by side), the wall time while any
      compile or disk load ran (``wall_seconds``), and how many of them
      recompiled an earlier program's structure (``recompiles``);
      ``disk_load``: programs loaded from the disk tier instead;
    - ``cache``: program-cache hits and misses per tier, entries and bytes;
    - ``execute``: programs run (``count``) and their device time
      (``device_seconds``, from completion times);
    - ``host_wait``: the host waiting for device values (reads, synchronize);
    - ``transfer``: ``to_device`` / ``to_host`` / ``device_to_device`` copies
      and bytes;
    - ``cuts``: programs run, by what cut the pending graph there (``op`` in
      strict mode; ``host_read``, ``layer``, ``optimizer_step`` ... in fused);
    - ``fallbacks``: ops that ran on the CPU, per op;
    - ``recompile_causes``: each distinct cause (the first message) and how
      many compiles it caused;
    - ``programs``: one dict per program made, in order (name, ops, source,
      seconds, executions, execute_seconds, recompile, cause).
    """
    from ._dispatch import fallback_counts
    m = _C.metrics()
    s = _C.stats() if _C.initialized() else {}
    return {
        "compile": {"count": m["compiles"], "seconds": m["compile_seconds"], "recompiles": m["recompiles"],
                    "wall_seconds": m["build_wall_seconds"]},
        "disk_load": {"count": m["disk_loads"], "seconds": m["disk_load_seconds"]},
        "cache": {k: s.get(k, 0) for k in ("mem_hits", "mem_misses", "disk_hits", "disk_misses", "mem_entries",
                                           "mem_bytes", "disk_entries", "disk_bytes", "evictions",
                                           "disk_evictions")},
        "execute": {"count": m["executions"], "device_seconds": m["execute_seconds"]},
        "host_wait": {"count": m["host_waits"], "seconds": m["host_wait_seconds"]},
        "transfer": {"to_device": {"count": m["to_device"], "bytes": m["to_device_bytes"]},
                     "to_host": {"count": m["to_host"], "bytes": m["to_host_bytes"]},
                     "device_to_device": {"count": m["device_copies"], "bytes": m["device_copy_bytes"]}},
        "cuts": m["cuts"],
        "ops_recorded": s.get("ops_recorded", 0),
        "fallbacks": fallback_counts(),
        "recompile_causes": [{"cause": t, "count": n} for t, n in _C.recompile_causes() if n],
        "programs": _C.programs(),
    }


def reset_metrics():
    """Zeroes the counters (programs already made are still known, so a
    later compile is still told apart from a recompile)."""
    from ._dispatch import reset_fallback_counts
    _C.metrics_reset()
    reset_fallback_counts()


def _bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def metrics_report(top=10):
    """metrics() as readable text: totals, recompile causes, and the
    programs that took longest to compile."""
    m = metrics()
    c, d, ca, e, h, t = m["compile"], m["disk_load"], m["cache"], m["execute"], m["host_wait"], m["transfer"]
    lines = ["torch_tpu metrics"]
    lines.append(f"  compiles        {c['count']:>8} in {c['seconds']:.2f} s, {c['wall_seconds']:.2f} s of wall time "
                 f"with disk loads ({c['recompiles']} recompiles)")
    lines.append(f"  disk-tier loads {d['count']:>8} in {d['seconds']:.2f} s")
    lines.append(f"  program cache   memory {ca['mem_hits']} hits / {ca['mem_misses']} misses, "
                 f"disk {ca['disk_hits']} hits / {ca['disk_misses']} misses, {ca['mem_entries']} programs held")
    lines.append(f"  executions      {e['count']:>8}, device time {e['device_seconds']:.3f} s")
    lines.append(f"  host waits      {h['count']:>8}, {h['seconds']:.3f} s")
    lines.append(f"  transfers       to device {t['to_device']['count']} ({_bytes(t['to_device']['bytes'])}), "
                 f"to host {t['to_host']['count']} ({_bytes(t['to_host']['bytes'])}), "
                 f"device to device {t['device_to_device']['count']} ({_bytes(t['device_to_device']['bytes'])})")
    cuts = ", ".join(f"{k} {v}" for k, v in m["cuts"].items() if v)
    lines.append(f"  programs cut at {cuts or '-'}")
    fb = ", ".join(f"{k} {v}" for k, v in sorted(m["fallbacks"].items(), key=lambda kv: -kv[1]))
    lines.append(f"  CPU fallbacks   {fb or '-'}")
    if m["recompile_causes"]:
        lines.append("  recompile causes (compiles, first message):")
        for rc in sorted(m["recompile_causes"], key=lambda r: -r["count"])[:top]:
            lines.append(f"    {rc['count']:>6}  {rc['cause']}")
    progs = sorted(m["programs"], key=lambda p: -p["seconds"])[:top]
    if progs:
        lines.append(f"  programs by compile time (top {len(progs)} of {len(m['programs'])}):")
        lines.append("    seconds  source    execs    ops  name")
        for p in progs:
            lines.append(f"    {p['seconds']:7.3f}  {p['source']:8} {p['executions']:>6} {p['ops']:>6}  {p['name']}")
    return "\n".join(lines)
