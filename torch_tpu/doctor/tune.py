"""python -m torch_tpu.doctor --tune [--steps N] script.py args...: which
configuration runs the program fastest.

Each candidate runs the program's first N optimizer steps (default 8: the
3 warm-up steps and 5 steady ones) under the doctor, in a fresh process
(``python -m torch_tpu.doctor --quiet --sync-steps --steps N --json FILE``
with the candidate's environment: each step waits for the device at its
end, as bench/run.py's train figure does, so that a mode whose host runs
ahead of the device is not timed by its host), twice: first on a new, empty program cache
directory (``TORCH_TPU_CACHE_DIR``: the cold start, every program
compiled), then again on the same directory (the warm start, programs
loaded from the disk tier).  The table has, per candidate:

- steady step time (ms): the median of the run's steady steps (after the
  warm-up, the doctor's ``summary.step_seconds``), the lower of the two
  runs (load from other processes and a compile left after the warm-up
  only add to it); the best is chosen by it;
- cold start (s): from spawning the process to the end of the warm-up
  steps, on the empty cache; warm start: the same on the filled one;
- compiles (cold run), compiles after the warm-up and CPU fallbacks.

The candidates (kept short: each costs two fresh processes):

- ``strict``: ``TORCH_TPU_EAGER_MODE=strict`` (the default), one program
  per op;
- ``fused``: ``TORCH_TPU_EAGER_MODE=fused``, ops recorded and run as one
  program at host reads, sync, an optimizer step, a model layer;
- ``fused, larger graphs``: ``TORCH_TPU_FUSED_MAX_NODES`` at 4x its default,
  added only where the fused run's programs were cut at the size bound
  (``cuts`` has ``size_bound``), the one case the knob changes.

Not candidates: ``debug`` (every op waits: never faster);
``TORCH_TPU_DEVICE_CHECKS=0`` (faster by the flags' cost, but a bad index
is then not reported: a trade the user makes, not a tuning);
``TORCH_TPU_COMPILE_THREADS`` (changes cold start only);
``torch.compile(backend="tpu")``: the doctor cannot wrap a script's model
from outside without changing the script, so it is listed in ``gaps``
with the one-line change to try by hand.

The environment a candidate runs in is the caller's less every knob the
candidates set (so a ``TORCH_TPU_EAGER_MODE`` already exported does not
leak into the strict run) plus the candidate's.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TUNE_SCHEMA_ID = "torch_tpu.doctor.tune/1"
DEFAULT_STEPS = 8
FUSED_MAX_NODES_DEFAULT = 8192

# knobs the candidates set; cleared from the caller's environment first
_KNOBS = ("TORCH_TPU_EAGER_MODE", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_FUSED_MAX_NODES", "TORCH_TPU_CACHE_DIR")

CANDIDATES = [
    {"name": "strict", "env": {"TORCH_TPU_EAGER_MODE": "strict"}},
    {"name": "fused", "env": {"TORCH_TPU_EAGER_MODE": "fused"}},
]
LARGER_GRAPHS = {"name": "fused, larger graphs",
                 "env": {"TORCH_TPU_EAGER_MODE": "fused",
                         "TORCH_TPU_FUSED_MAX_NODES": str(4 * FUSED_MAX_NODES_DEFAULT)}}

GAPS = [
    "torch.compile(backend=\"tpu\"): the doctor cannot wrap the script's model from outside; "
    "try `model = torch.compile(model, backend=\"tpu\")` in the script and run --tune again to compare",
]


def _run_once(program, env, steps, timeout, workdir, tag):
    """One fresh process under the doctor; returns (report or None, error, spawn time)."""
    out = os.path.join(workdir, f"{tag}.json")
    cmd = [sys.executable, "-m", "torch_tpu.doctor", "--quiet", "--sync-steps", "--steps", str(steps), "--json",
           out] + list(program)
    t_spawn = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"ran over {timeout:.0f} s (killed)", t_spawn
    if not os.path.exists(out):
        tail = [ln for ln in (p.stderr or "").strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        return None, f"the doctor exited {p.returncode}: {tail[0][:300]}", t_spawn
    with open(out) as f:
        rep = json.load(f)
    if rep["program"]["exit"] == "error":
        return rep, f"the program raised: {rep['program']['error']}", t_spawn
    return rep, None, t_spawn


def _measure(index, cand, program, steps, timeout, base_env, workdir, log):
    cache = tempfile.mkdtemp(prefix="tpu_tune_cache_", dir=workdir)
    env = dict(base_env, **cand["env"], TORCH_TPU_CACHE_DIR=cache)
    row = {"name": cand["name"], "env": dict(cand["env"]), "steady_ms": None, "cold_start_s": None,
           "warm_start_s": None, "compiles": None, "compiles_after_warmup": None, "fallbacks": None,
           "steady_ms_runs": [], "cuts_per_step": None, "error": None}
    reports = []
    for run in ("cold", "warm"):
        tag = f"{index}-{run}"
        rep, err, t_spawn = _run_once(program, env, steps, timeout, workdir, tag)
        if err:
            row["error"] = f"{run} run: {err}"
            break
        s = rep["summary"]
        if not s["step_seconds"]:
            row["error"] = (f"{run} run: no steady step timed ({s['steps']} optimizer steps; --tune needs a training "
                            f"loop of more than {s['warmup_steps']} + 1 steps: raise --steps)")
            break
        row["steady_ms_runs"].append(1e3 * statistics.median(s["step_seconds"]))
        # spawn -> the program's start (Python, torch, torch_tpu, the doctor) + its warm-up steps
        row[f"{run}_start_s"] = (rep["program"]["started"] - t_spawn) + s["warmup_seconds"]
        reports.append(rep)
        log(f"  {cand['name']:<22} {run}: {row['steady_ms_runs'][-1]:8.1f} ms/step, "
            f"start {row[f'{run}_start_s']:.1f} s, {s['compiles']} compiles")
    if reports:
        s = reports[0]["summary"]
        row["compiles"] = s["compiles"]
        row["compiles_after_warmup"] = max(r["summary"]["compiles_after_warmup"] for r in reports)
        row["fallbacks"] = s["fallbacks"]
        row["cuts_per_step"] = reports[0]["cuts"]["per_step"]
    if not row["error"]:
        row["steady_ms"] = min(row["steady_ms_runs"])
    shutil.rmtree(cache, ignore_errors=True)
    return row


def tune(program, steps=DEFAULT_STEPS, timeout=600.0, log=None):
    """Runs every candidate on program (``["script.py", args...]`` or
    ``["-m", "module", args...]``) and returns the tune result (the dict
    tune_schema.json describes)."""
    log = log or (lambda msg: None)
    base_env = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    t0 = time.perf_counter()
    rows = []
    workdir = tempfile.mkdtemp(prefix="tpu_tune_")
    try:
        cands = list(CANDIDATES)
        i = 0
        while i < len(cands):
            row = _measure(i, cands[i], program, steps, timeout, base_env, workdir, log)
            rows.append(row)
            if (cands[i]["name"] == "fused" and (row["cuts_per_step"] or {}).get("size_bound")
                    and LARGER_GRAPHS not in cands):
                cands.append(LARGER_GRAPHS)
            i += 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ok = [r for r in rows if r["steady_ms"] is not None]
    best = min(ok, key=lambda r: r["steady_ms"]) if ok else None
    result = {
        "schema": TUNE_SCHEMA_ID,
        "program": list(program),
        "steps": steps,
        "candidates": rows,
        "best": None,
        "gaps": list(GAPS),
        "seconds": time.perf_counter() - t0,
    }
    if best is not None:
        default = next((r for r in ok if r["name"] == "strict"), None)
        result["best"] = {
            "name": best["name"], "env": dict(best["env"]),
            "set": " ".join(f"{k}={v}" for k, v in best["env"].items()),
            "speedup_vs_default": (default["steady_ms"] / best["steady_ms"]) if default else None,
        }
    return result


def text(result):
    """The tune result as a table for the terminal."""
    out = [f"torch_tpu doctor --tune: {' '.join(result['program'])}",
           f"  {len(result['candidates'])} configurations, {result['steps']} steps each, fresh processes, "
           f"cold and warm program cache ({result['seconds']:.0f} s)", ""]
    head = f"  {'configuration':<22} {'steady ms/step':>14} {'cold start s':>12} {'warm start s':>12} " \
           f"{'compiles':>8} {'after warm-up':>13} {'fallbacks':>9}"
    out.append(head)

    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"
    for r in result["candidates"]:
        mark = " *" if result["best"] and r["name"] == result["best"]["name"] else ""
        out.append(f"  {r['name'] + mark:<22} {num(r['steady_ms'], '.1f'):>14} {num(r['cold_start_s'], '.2f'):>12} "
                   f"{num(r['warm_start_s'], '.2f'):>12} {num(r['compiles'], 'd'):>8} "
                   f"{num(r['compiles_after_warmup'], 'd'):>13} {num(r['fallbacks'], 'd'):>9}")
        if r["error"]:
            out.append(f"      error: {r['error']}")
    out.append("")
    b = result["best"]
    if b:
        sp = f" ({b['speedup_vs_default']:.2f}x the default's steady step)" if b["speedup_vs_default"] else ""
        out.append(f"best: {b['name']}{sp}; run with:")
        out.append(f"  {b['set']} python -m torch_tpu.run {' '.join(result['program'])}")
    else:
        out.append("best: none (every configuration failed)")
    for g in result["gaps"]:
        out.append(f"not measured: {g}")
    return "\n".join(out)


TUNE_SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_schema.json")


def schema():
    with open(TUNE_SCHEMA_PATH) as f:
        return json.load(f)


def validate(result):
    from .report import validate as check
    check(result, schema())
