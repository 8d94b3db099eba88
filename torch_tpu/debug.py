"""torch_tpu.debug: what a call did on the device.

``explain(fn, *args, **kwargs)`` runs ``fn`` once with the engine's timeline
on (csrc/runtime/trace.h) and returns an :class:`Explanation`: every
program the call ran, in order, with its name (which ops it holds), its op
count, what cut the pending graph there (``op`` in strict mode; in fused
mode ``host_read``, ``synchronize``, ``layer``, ``optimizer_step``,
``size_bound``, ``fallback``, ``loop``, ``wide_op`` ...), where it came
from (``compiled``, ``disk`` tier, ``memory`` tier hit, or ``joined`` a
compile of the same program already under way), its compile seconds and
device time; the CPU fallbacks; host waits and transfers.  ``print()`` it
for a table.  Work pending before the call is run first and not counted;
the call ends with a synchronize, so its programs are all complete.

Program dumps are separate: ``TORCH_TPU_DUMP_DIR=d`` writes each program's
StableHLO (``d/<key>.mlir``) and its op list and compile time
(``d/<key>.txt``); ``Program.key`` is that ``<key>``.
"""
from collections import Counter
from dataclasses import dataclass, field

from . import _C, _trace

__all__ = ["explain", "Explanation", "Program"]


@dataclass
class Program:
    key: str
    name: str
    ops: int
    cut: str            # what cut the pending graph there
    source: str         # "compiled", "disk", "memory" (a cache hit), "joined" (a compile under way)
    compile_seconds: float = 0.0
    device_seconds: float = 0.0  # from its completion callback (metrics.h's device time)
    executed: bool = False


@dataclass
class Explanation:
    result: object
    programs: list = field(default_factory=list)
    fallbacks: Counter = field(default_factory=Counter)
    host_waits: int = 0
    host_wait_seconds: float = 0.0
    transfers: dict = field(default_factory=dict)  # kind -> [count, bytes]
    events: list = field(default_factory=list)      # the raw timeline

    @property
    def cuts(self):
        return Counter(p.cut for p in self.programs)

    @property
    def compiles(self):
        return sum(p.source == "compiled" for p in self.programs)

    def __str__(self):
        n = len(self.programs)
        by_src = Counter(p.source for p in self.programs)
        lines = [f"explain: {n} program{'s' if n != 1 else ''} run ("
                 + ", ".join(f"{v} {k}" for k, v in by_src.items()) + f"), "
                 f"{sum(p.ops for p in self.programs)} ops"]
        if self.programs:
            lines.append("    #  cut             ops  source    compile s  device ms  key               name")
            for i, p in enumerate(self.programs):
                lines.append(f"  {i:>3}  {p.cut or '-':<14} {p.ops:>5}  {p.source:<8} {p.compile_seconds:>9.3f}"
                             f"  {p.device_seconds * 1e3:>9.3f}  {p.key}  {p.name}")
        cuts = ", ".join(f"{k} {v}" for k, v in self.cuts.items())
        lines.append(f"  cuts: {cuts or '-'}")
        fb = ", ".join(f"{k} {v}" for k, v in self.fallbacks.most_common())
        lines.append(f"  CPU fallbacks: {fb or '-'}")
        lines.append(f"  host waits: {self.host_waits} ({self.host_wait_seconds * 1e3:.3f} ms)")
        tr = ", ".join(f"{k} {c} ({b} bytes)" for k, (c, b) in self.transfers.items())
        lines.append(f"  transfers: {tr or '-'}")
        return "\n".join(lines)

    __repr__ = __str__


def summarize(events, result=None):
    """An Explanation of a list of timeline events (torch_tpu._trace)."""
    ex = Explanation(result=result, events=events)
    built = {}       # key -> (source, seconds) of compiles/loads in this window
    hits = Counter()  # key -> memory-tier hits not yet given to a flush
    for e in events:
        if e["kind"] in ("compile", "disk_load"):
            src, s = built.get(e["key"], (None, 0.0))
            built[e["key"]] = ("compiled" if e["kind"] == "compile" else "disk", s + e["end"] - e["start"])
    pending = {}  # key -> programs of flushes waiting for their execution
    for e in events:
        k = e["kind"]
        if k == "flush":
            p = Program(key=e["key"], name=e["name"], ops=e["ops"], cut=e["cut"], source="joined")
            ex.programs.append(p)
            pending.setdefault(e["key"], []).append(p)
        elif k == "cache_hit":
            hits[e["key"]] += 1
            for p in reversed(pending.get(e["key"], [])):
                if p.source == "joined":
                    p.source = "memory"
                    break
        elif k == "execute":
            q = pending.get(e["key"])
            if q:
                p = q.pop(0)
                p.executed = True
                p.device_seconds = e["end"] - e["start"]
                if not p.name:
                    p.name = e["name"]
        elif k == "fallback":
            ex.fallbacks[e["name"]] += 1
        elif k == "host_wait":
            ex.host_waits += 1
            ex.host_wait_seconds += e["end"] - e["start"]
        elif k in ("to_device", "to_host", "device_copy"):
            c = ex.transfers.setdefault(k, [0, 0])
            c[0] += 1
            c[1] += e["bytes"]
    # the first flush of a key built here is the one that compiled it
    seen = set()
    for p in ex.programs:
        if p.key in built and p.key not in seen and p.source == "joined":
            p.source, p.compile_seconds = built[p.key]
            seen.add(p.key)
    return ex


def explain(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) and returns an Explanation of the programs
    it ran (``.result`` is what fn returned).  See the module's doc."""
    if _trace.active() or _C.trace_active():
        raise RuntimeError("torch_tpu.debug.explain: the engine's timeline is already in use "
                           "(a torch.profiler session with the tpu activity, or another explain)")
    _trace.start()
    try:
        result = fn(*args, **kwargs)
    finally:
        events = _trace.stop()
    return summarize(events, result)
