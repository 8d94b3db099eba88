"""From what a run recorded (probe.Probe and torch.tpu.metrics()) to the
doctor's report: a dict in the form schema.json describes.

Findings, each with the user's source line, its measured cost (seconds)
and a fix, most costly first:

- ``cpu_fallback``: an op that ran on the CPU (any count is one too many);
  one autograd ran in backward is told at its forward op's line ("in the
  backward of ...": the probe marks each forward call's autograd nodes);
- ``recompile``: programs compiled after the warm-up, grouped by the
  engine's cause with its values taken out (a length growing by one per
  step is one group); the line is the one whose torch calls showed a new
  signature of the cause's kind (a shape, a Python number, a dtype) after
  the warm-up, the first such in program order (where the change entered),
  or a loop's torch.cat among them that grows a tensor requiring grad
  (torch_tpu/_growing.py GRAD_SITES: no_grad or detach is the fix);
- ``host_read`` / ``data_dependent_shape``: a read of a device value, or an
  op whose result shape depends on the data, at the same line in at least
  half of the steady steps (in every one, for a program with no optimizer
  steps, at least 3 times).

Besides: the readiness summary, the programs by what cut them (per steady
step), the slowest programs and the memory peak, and the timeline of one
steady step for the HTML page.
"""
import os
import re

from .probe import WARMUP_STEPS

SCHEMA_ID = "torch_tpu.doctor/1"

_FIX_READ = {
    ".item()": "keep the value on the device (e.g. `total += loss.detach()`) and call .item() every N steps or "
               "after the loop: each .item() waits for the device, and in fused mode it cuts the step's program",
    ".tolist()": "keep per-step values on the device and move them to the host every N steps or after the loop",
    ".cpu()": "keep per-step values on the device and move them to the host every N steps or after the loop",
    ".numpy()": "keep per-step values on the device and move them to the host every N steps or after the loop",
    ".to('cpu')": "keep per-step values on the device and move them to the host every N steps or after the loop",
    "printing a tensor": "print every N steps or after the loop: printing reads the tensor's value from the device",
    "formatting a tensor": "format every N steps or after the loop: formatting reads the tensor's value from the "
                           "device",
    "bool(tensor) (an `if` on a tensor)": "replace the Python `if` on a tensor by torch.where (both branches on "
                                          "the device), or test it every N steps",
    "float(tensor)": "keep the value as a tensor; convert it every N steps or after the loop",
    "int(tensor)": "keep the value as a tensor; convert it every N steps or after the loop",
}
_FIX_SHAPE = ("the result's shape depends on the data, so the host waits for it and every distinct count is a new "
              "program: keep the shape fixed, e.g. `torch.where(mask, x, 0)` and divide by `mask.sum()` instead of "
              "`x[mask]`, or `torch.nonzero_static(x, size=N)` instead of nonzero")


# ---- recompile causes -------------------------------------------------------------

def cause_kind(cause):
    """What a recompile cause (metrics' ``cause`` text) says changed:
    shape, dtype, scalar (an attribute: a Python number baked in), view
    (a view's offset, size or stride), structure, or other."""
    if cause.startswith("graph structure") or "attributes (was" in cause:
        return "structure"
    m = re.search(r"input \d+ (?:\(of [^)]*\))?: ?(\w+)\[([^\]]*)\] \(was (\w+)\[([^\]]*)\]\)", cause)
    if m:
        return "dtype" if m.group(1) != m.group(3) else "shape"
    if re.search(r"(offset|size\[\d+\]|stride\[\d+\]): ", cause):
        return "view"
    if "attribute" in cause:
        return "scalar"
    return "other"


_FIX_RECOMPILE = {
    "shape": "a length that changes every step is a new program every step: pad it to a few fixed sizes "
             "(round up to a bucket, e.g. the next multiple of 64 or power of two, with "
             "torch.nn.functional.pad, and mask the padding) so a handful of programs serve every length",
    "dtype": "the same ops run with another dtype: cast once, before the loop (e.g. `.to(torch.float32)`), "
             "so every step sees the same dtypes",
    "scalar": "a Python number that changes every step is baked into the program as a constant: pass it as a "
              "0-d tensor on the device (`torch.tensor(v, device=x.device)`), or keep it constant",
    "view": "a view at a position that changes every step (x[i] with a changing Python int): index with a "
            "device tensor (torch.index_select(x, 0, idx)) so the position is a program input",
    "structure": "the step runs different ops from one step to the next (Python control flow on changing "
                 "values, or a changing argument form): make every step run the same ops",
    "other": "keep the inputs' shapes, dtypes and argument values the same from one step to the next",
}
_FIX_GROW_GRAD = ("torch.cat here grows a tensor by a piece each step, and one of them requires grad, so autograd "
                  "records every step's cat and each length is a new program: run the loop under torch.no_grad() "
                  "(or torch.inference_mode()), or .detach() what it appends, and the tensor grows in a bucket "
                  "whose programs serve every length")
# which changes of a line's call signatures each cause kind looks for (a
# factory's size is an attribute of its program, and a shape of its result)
_SIG_KINDS = {"shape": ("shape",), "dtype": ("dtype",), "scalar": ("scalar", "shape"), "view": ("scalar", "shape"),
              "structure": ("shape", "scalar", "dtype", "other"), "other": ("shape", "scalar", "dtype", "other")}


def _normalized(cause):
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", cause)


def _culprits(probe, kind):
    """Source lines whose torch calls showed new signatures of `kind`
    after the warm-up, as (file, line, new signatures): the first line in
    program order to show one (where the change entered the step) first,
    then by how many."""
    want = _SIG_KINDS[kind]
    by_line = {}
    for (file, line, _), lc in probe.lines.items():
        n = sum(lc.new[k] for k in want)
        if n:
            first, total = by_line.get((file, line), (lc.first_new, 0))
            by_line[(file, line)] = (min(first, lc.first_new), total + n)
    rows = sorted((first, -n, file, line) for (file, line), (first, n) in by_line.items())
    return [(file, line, -n) for first, n, file, line in rows]


# ---- building the report -----------------------------------------------------------

def _source(file, line):
    try:
        with open(file) as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return text.strip()
    except OSError:
        pass
    return None


def _finding(kind, title, file, line, count, seconds, detail, fix, **extra):
    d = {"kind": kind, "title": title, "file": file, "line": line,
         "code": _source(file, line) if file else None, "count": int(count), "seconds": float(seconds),
         "detail": detail, "fix": fix, "also": []}
    d.update(extra)
    return d


def build(probe, metrics_end, argv, mode, wall_seconds, exit_kind, error, memory_peak, started=None):
    """The report dict (schema.json) of one run."""
    findings = []
    steps = probe.step
    have_steps = steps > 0
    steady_steps = max(0, steps - WARMUP_STEPS) if have_steps else 0

    # -- CPU fallbacks: every one
    for (op, dtype, file, line), (count, seconds) in probe.fallbacks.items():
        short = op.split("::")[-1]
        forward = probe.backward_of.get((op, dtype, file, line))
        where = f" in the backward of {forward}" if forward else ""
        findings.append(_finding(
            "cpu_fallback", f"{short} ran on the CPU ({dtype or 'no tensor'}){where}", file, line, count, seconds,
            f"{op} has no tpu rule: each call copies its inputs to the host, runs on the CPU and copies back"
            f" ({count} calls, {seconds:.3f} s){'; autograd runs it' + where if forward else ''}",
            f"replace {short} by ops that run on tpu, or move it out of the step (precompute it); "
            f"a tpu rule for {op} is the lasting fix (torch_tpu/ops, or a user kernel with torch_tpu.library)",
            op=op, dtype=dtype))

    # -- recompiles after the warm-up: grouped by cause (its values taken
    # out), each group given the source line where changes of its kind
    # entered the step; groups that meet at one line are one finding
    programs = metrics_end["programs"]
    first = probe.warm_programs if steps >= WARMUP_STEPS else len(programs)
    if not have_steps:
        first = 0  # no steps: every recompile counts
    groups = {}
    for p in programs[first:]:
        if not p["recompile"]:
            continue
        key = (p["name"], _normalized(p["cause"]))
        g = groups.setdefault(key, {"program": p["name"], "cause": p["cause"], "count": 0, "seconds": 0.0})
        g["count"] += 1
        g["seconds"] += p["seconds"]
    from .._growing import GRAD_SITES
    grad_sites = {(os.path.realpath(f), l) for f, l in GRAD_SITES}
    grad_sites |= set(GRAD_SITES)
    at_line = {}
    for g in groups.values():
        kind = cause_kind(g["cause"])
        lines = _culprits(probe, kind)
        where = (lines[0][0], lines[0][1]) if lines else (None, None)
        if kind == "shape" and GRAD_SITES:  # a loop's torch.cat that autograd keeps exact: the cause, with its fix
            grad_cat = next(((f, l) for f, l, _ in lines if (f, l) in grad_sites), None)
            if grad_cat is None and not lines:  # no steps to tell lines apart by: the busiest such cat
                grad_cat = max(GRAD_SITES, key=GRAD_SITES.get)
            if grad_cat is not None:
                where = grad_cat
        entry = at_line.setdefault(where, {"groups": [], "lines": lines})
        entry["groups"].append(dict(g, kind=kind))
    for (file, line), entry in at_line.items():
        gs = sorted(entry["groups"], key=lambda g: -g["seconds"])
        kinds = {}
        for g in gs:
            kinds[g["kind"]] = kinds.get(g["kind"], 0) + g["count"]
        kind = max(kinds, key=kinds.get)  # the kind most of the programs show
        top = next(g for g in gs if g["kind"] == kind)
        count, seconds = sum(g["count"] for g in gs), sum(g["seconds"] for g in gs)
        names = ", ".join(dict.fromkeys(g["program"] for g in gs))
        f = _finding(
            "recompile", f"recompiles after the warm-up: {top['kind']} changes every step", file, line, count,
            seconds, f"{count} programs compiled after the warm-up ({seconds:.3f} s): {names}; "
                     f"cause: {top['program']}: {top['cause']}",
            _FIX_GROW_GRAD if (file, line) in grad_sites else _FIX_RECOMPILE[top["kind"]], cause=top["cause"], cause_kind=top["kind"], program=top["program"],
            causes=[{"program": g["program"], "cause": g["cause"], "kind": g["kind"], "count": g["count"],
                     "seconds": g["seconds"]} for g in gs])
        f["also"] = [{"file": a, "line": b, "count": n} for a, b, n in entry["lines"][1:4]]
        findings.append(f)

    # -- host reads and data-dependent shapes in the steady loop
    for (file, line, label), (kind, count, steady_count, seconds, steady_seconds) in probe.reads.items():
        if have_steps:
            if steady_steps == 0 or steady_count < max(1, steady_steps // 2):
                continue
            n, s = steady_count, steady_seconds
        else:
            if count < 3:
                continue
            n, s = count, seconds
        per = f", {n / steady_steps:.2g} per step" if have_steps else ""
        what = "a host read" if kind == "host_read" else "a data-dependent shape"
        findings.append(_finding(
            kind, f"{label}: {what} in the loop", file, line, n, s,
            f"{label} waited for the device {n} times{per} ({s:.3f} s)",
            _FIX_READ.get(label, _FIX_SHAPE) if kind == "host_read" else _FIX_SHAPE, label=label))

    findings.sort(key=lambda f: -f["seconds"])

    # -- summary
    c = metrics_end["compile"]
    warm = probe.warm
    compiles = c["count"] + metrics_end["disk_load"]["count"]
    compiles_after = (compiles - warm["compile"]["count"] - warm["disk_load"]["count"]) if warm else \
        (0 if have_steps else compiles)
    fallbacks = sum(metrics_end["fallbacks"].values())
    compile_wall = c["wall_seconds"]
    warm_wall = (compile_wall - warm["compile"]["wall_seconds"]) if warm else 0.0
    cold_wall = compile_wall - warm_wall
    t0, t1 = probe.t_start, probe.t_end
    cold_span = (probe.warm_time - t0) if warm else (t1 - t0)
    warm_span = (t1 - probe.warm_time) if warm else 0.0
    steps_per_s = progs_per_step = None
    cuts_per_step = None
    step_seconds = []
    if steady_steps > 0:
        # the traced step (the first steady one) waits for the device at its
        # start and end: timed without it where there are others
        skip = 1 if probe.traced is not None and steady_steps >= 2 else 0
        timed = probe.step_times[WARMUP_STEPS - 1 + skip:]
        span = timed[-1] - timed[0]
        steps_per_s = (steady_steps - skip) / span if span > 0 else None
        step_seconds = [b - a for a, b in zip(timed, timed[1:])]
        progs_per_step = (metrics_end["execute"]["count"] - warm["execute"]["count"]) / steady_steps
        cuts_per_step = {k: (v - warm["cuts"].get(k, 0)) / steady_steps for k, v in metrics_end["cuts"].items()
                         if v - warm["cuts"].get(k, 0)}
    summary = {
        "mode": mode,
        "steps": steps,
        "warmup_steps": WARMUP_STEPS if have_steps else 0,
        "steady_steps": steady_steps,
        "warmup_seconds": (probe.warm_time - t0) if warm else None,
        "steps_per_second": steps_per_s,
        "step_seconds": step_seconds,
        "programs_per_step": progs_per_step,
        "compiles": compiles,
        "compiles_after_warmup": compiles_after,
        "fallbacks": fallbacks,
        "host_reads_per_step": (sum(r[2] for r in probe.reads.values()) / steady_steps) if steady_steps else None,
        "compile_seconds": c["seconds"] + metrics_end["disk_load"]["seconds"],
        "compile_share": {"cold": cold_wall / cold_span if cold_span > 0 else 0.0,
                          "warm": warm_wall / warm_span if warm_span > 0 else 0.0},
        "memory_peak_bytes": int(memory_peak),
        "ready": compiles_after == 0 and fallbacks == 0 and not findings,
    }
    slowest = sorted(programs, key=lambda p: -p["execute_seconds"])[:5]
    report = {
        "schema": SCHEMA_ID,
        "program": {"argv": list(argv), "exit": exit_kind, "error": error, "wall_seconds": wall_seconds,
                    "started": started if started is not None else 0.0},
        "summary": summary,
        "findings": findings,
        "cuts": {"total": {k: v for k, v in metrics_end["cuts"].items() if v}, "per_step": cuts_per_step},
        "programs": [{"name": p["name"], "ops": p["ops"], "executions": p["executions"],
                      "execute_seconds": p["execute_seconds"], "compile_seconds": p["seconds"],
                      "source": p["source"]} for p in slowest],
        "timeline": timeline(probe),
    }
    return report


def timeline(probe):
    """The traced steady step as spans (seconds from its start), or None."""
    if probe.traced is None:
        return None
    step, events = probe.traced
    t0 = probe.trace_from
    t1 = probe.step_times[step - 1] if len(probe.step_times) >= step else None
    out = []
    for e in events:
        k = e["kind"]
        if k in ("execute", "compile", "disk_load", "host_wait", "fallback"):
            out.append({"kind": k, "name": e.get("name") or "", "start": e["start"] - t0, "end": e["end"] - t0,
                        "detail": f"{e.get('ops') or ''}"})
        elif k == "flush":
            out.append({"kind": "flush", "name": e.get("name") or "", "start": e["start"] - t0,
                        "end": e["start"] - t0, "detail": e.get("cut") or ""})
    for s, e, label, file, line in probe.read_spans:
        out.append({"kind": "host_read", "name": label, "start": s - t0, "end": e - t0,
                    "detail": f"{os.path.basename(file)}:{line}"})
    end = max([t1 - t0 if t1 else 0.0] + [x["end"] for x in out])
    return {"step": step, "seconds": end, "events": out}
