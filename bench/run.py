"""torch_tpu benchmark harness (`make bench` runs it).

    .venv/bin/python bench/run.py                 # everything, ~10-15 min on 2 cores
    TORCH_TPU_BENCH_QUICK=1 .venv/bin/python bench/run.py   # short mode (~2-3 min)
    .venv/bin/python bench/run.py --only op_latency,chain   # some sections

Writes bench/results.json and bench/results.md (the table is also printed).

Figures (each a median of repeated runs; the figures compared in one row are
taken in the same process, one after the other):
  op_latency   `c = c + b` on 1k float32: PyTorch CPU, tpu strict (one op
               pipelined: N ops + one sync, / N; and one op + sync), tpu
               fused (per op recorded, and the flush of the recorded graph)
  chain        150 elementwise ops (x*y, x+y, sin, ...) on f32 2000x2000 with
               a sync at the end: tpu strict vs tpu fused, PyTorch CPU
  train        GPT-style training step (bench/models.py: 4 layers, d=256,
               4 heads, seq 128, batch 8, AdamW): PyTorch CPU, tpu strict,
               tpu fused: ms/step and steps/s, warm-up excluded
  device_checks  the fused GPT training step with the device-side error
               flags and with TORCH_TPU_DEVICE_CHECKS=0, alternating fresh
               processes: the flags' cost in percent
  startup      fresh subprocess, time to the end of the first training step:
               cold disk cache (new TORCH_TPU_CACHE_DIR) vs warm (same dir)
  memory       small GPT training loop: peak RSS, current RSS and
               torch.tpu.cache_stats()["live_buffers"] at steps 100 and 300
  import       `python -c "import torch"` with torch_tpu installed (autoload)
               vs TORCH_DEVICE_BACKEND_AUTOLOAD=0: wall time and peak RSS,
               alternating runs, medians
  transfer     host -> device GB/s for 64 MiB: pageable vs pinned memory
               (`.to("tpu", non_blocking=True)` + synchronize), beside a CPU
               copy of the same bytes (clone) as the host's own bandwidth
  pjrt         build/bench_pjrt (the C engine's PJRT benchmark) if present;
               its JSON (bench/pjrt_results.json) is folded in
  hf           Hugging Face (bench/hf.py): SmolLM2-135M generate tokens/s,
               batch 1 and 8, PyTorch CPU eager and Inductor vs tpu fused and
               compiled; all-MiniLM-L6-v2 sentences/s (needs the hf extra and
               the weight packages)
  dist         torch.distributed (bench/dist.py), 2 processes: all_reduce bus
               GB/s for 1/16/64 MiB, tpu_dist (host transport) vs gloo on CPU
               tensors; DDP step of the bench GPT, 2 processes vs 1
               (per-sample throughput ratio)
  kernels      the bench GPT with RMSNorm for LayerNorm (bench/kernels.py):
               the custom-op RMSNorm kernel of examples/custom_rmsnorm.py vs
               the same norm in built-in ops, fused training step, same run
  cuda_unchanged  an unchanged CUDA-style training script
               (examples/cuda_unchanged/bench_cuda.py, bench/cuda_unchanged.py)
               through torch_tpu.run: tpu strict / fused / compiled vs the
               same file on PyTorch CPU, fresh processes, cold cache; ms/step,
               first step, compiles, final losses (must match CPU)
  residency    one process compiling 1,000 / 3,000 / 6,000 distinct programs
               (bench/residency.py): peak memory maps, RSS and wall time with
               the program cache's map bound on and off; an evicted
               program's reload from the disk tier vs its first compile
  first        (a group: first_smollm2, first_sd, first_wlm, first_lstmcell,
               first_nanogpt, first_clone; bench/first.py) cold start and
               loops that used to recompile: a fresh process on an empty
               TORCH_TPU_CACHE_DIR (cold) and again on it (warm), with the
               programs compiled and compile seconds beside each tpu time:
               SmolLM2 first 16 tokens, a tiny Stable Diffusion pipeline,
               word_language_model's and time_sequence_prediction's loops,
               nanoGPT char ms/iter, `git clone` + `make demo` (full mode)
  doctor       the doctor's own overhead (bench/doctor.py, issue 40: <= 10%):
               examples/doctor/bench_gpt.py (the bench GPT) for the same
               steps under `python -m torch_tpu.run` and under
               `python -m torch_tpu.doctor`, fresh processes side by side on
               a warm program cache; loop and process time ratios
  torchtpu     Google's TorchTPU 0.2.0 beside torch_tpu on the same plugin
               (bench/torchtpu.py, its venv: `make torchtpu-env`; skipped,
               with the reason, without it): per-op latency, two 150-op
               elementwise chains, the bench GPT step with plain-op attention
               and its cold first step, OpInfo first-sample coverage; ours
               strict/fused vs its DEFER_NEVER/DEFER_AND_FUSE, PyTorch CPU,
               fresh processes, ratios ours / theirs
Each section runs in its own subprocess with a time limit: a missing op, an
exception or a crash is recorded as the figure's "error" and the harness
goes on. Ops that ran on the CPU through torch_tpu's fallback during a tpu
figure are recorded with it ("fallbacks").
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
QUICK = os.environ.get("TORCH_TPU_BENCH_QUICK", "") not in ("", "0")

FIRST = ["first_smollm2", "first_sd", "first_wlm", "first_lstmcell", "first_nanogpt", "first_clone"]
SECTIONS = ["op_latency", "chain", "chain_arith", "train", "device_checks", "startup", "memory", "import", "transfer", "pjrt", "hf", "dist", "lstm", "kernels", "cuda_unchanged", "residency", "doctor", "torchtpu"] + FIRST
# names --only accepts for several sections
GROUPS = {"first": FIRST}
# seconds each section may take before it is killed (full mode; quick: /2)
LIMITS = {"op_latency": 120, "chain": 240, "chain_arith": 180, "train": 420, "device_checks": 420, "startup": 300, "memory": 240,
          "import": 240, "transfer": 180, "pjrt": 180, "hf": 1500, "dist": 900, "lstm": 600, "kernels": 300,
          # bench/cuda_unchanged.py: 7-8 fresh processes, each compiling from an empty cache
          "cuda_unchanged": 1500,
          # bench/residency.py: two processes compiling 6000 programs each (~2 min each)
          "residency": 900,
          # bench/doctor.py: 3 (quick, strict) / 7 fresh processes per mode (full: strict and fused, 2-5 min on 2 busy cores)
          "doctor": 900,
          # bench/torchtpu.py: ~25 fresh processes of two venvs, then an OpInfo sweep per project
          "torchtpu": 1800,
          # bench/first.py: fresh processes that compile everything (tens of seconds each, several per
          # section); first_clone: `make demo` in a fresh clone gets 15 minutes
          "first_smollm2": 2400, "first_sd": 1200, "first_wlm": 1200, "first_lstmcell": 1200,
          "first_nanogpt": 900, "first_clone": 1020}


def median(xs):
    return statistics.median(xs) if xs else None


def _fmt_err(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


# ---- helpers that run inside a section's subprocess -------------------------------

def _torch():
    import warnings
    warnings.filterwarnings("ignore", message="tpu: .* has no tpu kernel")
    import torch
    import torch_tpu  # noqa: F401
    return torch


def _sync(dev, *tensors):
    """torch.tpu.synchronize(), then a 1-element host read of each tensor
    given: synchronize() alone returns before the device has finished (the
    engine awaits buffers only on reads), so the read is what waits."""
    import torch
    if dev == "tpu":
        torch.tpu.synchronize()
        for t in tensors:
            t.detach().reshape(-1)[:1].cpu()


class _Fallbacks:
    """Counts aten ops that ran on the CPU through the fallback in a block."""

    def __enter__(self):
        import torch_tpu
        self.before = torch_tpu.fallback_counts()
        self.ops = {}
        return self

    def __exit__(self, *exc):
        import torch_tpu
        after = torch_tpu.fallback_counts()
        for k, v in after.items():
            d = v - self.before.get(k, 0)
            if d > 0:
                self.ops[k] = d
        return False


_PARTIAL = {"path": None, "root": None}


def _save_partial():
    """The section's results so far, so that a section killed at its time
    limit still reports the figures it finished (and the one it was in)."""
    if _PARTIAL["path"] and _PARTIAL["root"] is not None:
        tmp = _PARTIAL["path"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_PARTIAL["root"], f, indent=1, default=str)
        os.replace(tmp, _PARTIAL["path"])


def _measure(fig, key, fn):
    """fig[key] = fn() with its fallbacks; an exception becomes fig[key]["error"]."""
    if _PARTIAL["root"] is None:
        _PARTIAL["root"] = fig
    fig[key] = {"error": "not finished: the section was killed at its time limit while measuring this"}
    _save_partial()
    try:
        with _Fallbacks() as fb:
            val = fn()
        if not isinstance(val, dict):
            val = {"value": val}
        if fb.ops:
            val["fallbacks"] = fb.ops
        fig[key] = val
    except Exception as e:  # noqa: BLE001 - recorded, the harness goes on
        fig[key] = {"error": _fmt_err(e), "trace": traceback.format_exc().strip().splitlines()[-4:]}
    _save_partial()
    return fig[key]


def _mode(name):
    import torch
    return torch.tpu.eager_mode(name)


# ---- sections ---------------------------------------------------------------------

def sec_op_latency():
    torch = _torch()
    n = 200 if QUICK else 2000
    reps = 5 if QUICK else 15
    fused_k = 100
    out = {"params": {"numel": 1000, "dtype": "float32", "ops_per_run": n, "repeats": reps,
                      "fused_ops_per_flush": fused_k}}

    def chain_time(a, b, count, dev):
        c = a
        t0 = time.perf_counter()
        for _ in range(count):
            c = c + b
        _sync(dev, c)
        return time.perf_counter() - t0

    def cpu():
        a, b = torch.randn(1000), torch.randn(1000)
        chain_time(a, b, 50, "cpu")
        ts = [chain_time(a, b, n, "cpu") / n for _ in range(reps)]
        return {"us_per_op": median(ts) * 1e6, "runs_us": [t * 1e6 for t in ts]}

    def strict():
        with _mode("strict"):
            a, b = torch.randn(1000).to("tpu"), torch.randn(1000).to("tpu")
            chain_time(a, b, 20, "tpu")  # compile + warm
            ts = [chain_time(a, b, n, "tpu") / n for _ in range(reps)]
            single = []
            for _ in range(reps * 10):
                t0 = time.perf_counter()
                c = a + b
                _sync("tpu", c)
                single.append(time.perf_counter() - t0)
            del c
            return {"us_per_op": median(ts) * 1e6, "runs_us": [t * 1e6 for t in ts],
                    "one_op_plus_sync_us": median(single) * 1e6}

    def fused():
        with _mode("fused"):
            a, b = torch.randn(1000).to("tpu"), torch.randn(1000).to("tpu")
            rec, flush = [], []
            for i in range(reps + 2):
                c = a
                t0 = time.perf_counter()
                for _ in range(fused_k):
                    c = c + b
                t1 = time.perf_counter()
                _sync("tpu", c)
                t2 = time.perf_counter()
                if i >= 2:  # first flushes compile the graph
                    rec.append((t1 - t0) / fused_k)
                    flush.append(t2 - t1)
            c.cpu()
            return {"us_per_op_recorded": median(rec) * 1e6, "flush_us": median(flush) * 1e6,
                    "us_per_op_total": (median(rec) + median(flush) / fused_k) * 1e6}

    _measure(out, "cpu", cpu)
    _measure(out, "strict", strict)
    _measure(out, "fused", fused)
    return out


def _chain_ops(torch, kind="mixed"):
    if kind == "mixed":
        # alternate a tensor-tensor op, another, a transcendental: stays in [-1, 1]
        cycle = [lambda x, y: x * y, lambda x, y: x + y, lambda x, y: torch.sin(x),
                 lambda x, y: x - y, lambda x, y: x * y, lambda x, y: torch.cos(x)]
    else:
        # arithmetic only (memory-bound per op): stays bounded
        cycle = [lambda x, y: x * y, lambda x, y: x + y, lambda x, y: x - y,
                 lambda x, y: torch.maximum(x, y), lambda x, y: x * 0.5, lambda x, y: torch.relu(x)]
    return [cycle[i % len(cycle)] for i in range(150)]


_CHAIN_CYCLES = {"mixed": "x*y, x+y, sin(x), x-y, x*y, cos(x)",
                 "arith": "x*y, x+y, x-y, maximum(x,y), x*0.5, relu(x)"}


def sec_chain_arith():
    return sec_chain("arith")


def sec_chain(kind="mixed"):
    torch = _torch()
    reps = 3 if QUICK else 7
    ops = _chain_ops(torch, kind)
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(2000, 2000, generator=g)
    y0 = torch.rand(2000, 2000, generator=g) * 0.5
    out = {"params": {"shape": [2000, 2000], "dtype": "float32", "ops": len(ops), "repeats": reps,
                      "op_cycle": _CHAIN_CYCLES[kind]}}
    ref = {}

    def run(x, y, dev):
        t0 = time.perf_counter()
        for f in ops:
            x = f(x, y)
        _sync(dev, x)
        return time.perf_counter() - t0, x

    def cpu():
        run(x0, y0, "cpu")
        ts = []
        for _ in range(reps):
            t, r = run(x0, y0, "cpu")
            ts.append(t)
        ref["cpu"] = r
        return {"ms": median(ts) * 1e3, "runs_ms": [t * 1e3 for t in ts]}

    def tpu(mode):
        def f():
            with _mode(mode):
                x, y = x0.to("tpu"), y0.to("tpu")
                torch.tpu.synchronize()
                t_first, r = run(x, y, "tpu")  # compiles
                ts = []
                for _ in range(reps):
                    t, r = run(x, y, "tpu")
                    ts.append(t)
                res = {"ms": median(ts) * 1e3, "runs_ms": [t * 1e3 for t in ts], "first_run_ms": t_first * 1e3}
                if "cpu" in ref:
                    res["max_abs_diff_vs_cpu"] = float((r.cpu() - ref["cpu"]).abs().max())
                return res
        return f

    _measure(out, "cpu", cpu)
    _measure(out, "strict", tpu("strict"))
    _measure(out, "fused", tpu("fused"))
    try:
        out["fused_speedup_vs_strict"] = out["strict"]["ms"] / out["fused"]["ms"]
    except (KeyError, TypeError, ZeroDivisionError):
        pass
    return out


def _train_run(torch, dev, mode, warmup, steps, cfg="gpt"):
    sys.path.insert(0, BENCH)
    from models import make_gpt, n_params, train_step
    ctx = _mode(mode) if dev == "tpu" else _null()
    with ctx:
        model, opt, x, y = make_gpt(cfg, dev)
        last_param = list(model.parameters())[-1]
        times, losses = [], []
        t_first = None
        c0 = torch.tpu.cache_stats()["compiles"] if dev == "tpu" else 0
        first_compiles = None
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            loss = train_step(model, opt, x, y)
            lv = float(loss.item())
            _sync(dev, last_param)
            dt = time.perf_counter() - t0
            if i == 0:
                t_first = dt
                if dev == "tpu":
                    first_compiles = torch.tpu.cache_stats()["compiles"] - c0
            if i >= warmup:
                times.append(dt)
            losses.append(lv)
    ms = median(times) * 1e3
    return {"ms_per_step": ms, "steps_per_s": 1e3 / ms, "first_step_s": t_first, "first_step_compiles": first_compiles,
            "steps_timed": steps,
            "warmup_steps": warmup, "loss_first": losses[0], "loss_last": losses[-1], "params": n_params(model),
            "runs_ms": [round(t * 1e3, 2) for t in times]}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def sec_train():
    torch = _torch()
    sys.path.insert(0, BENCH)
    from models import CONFIGS
    warm = 2 if QUICK else 3
    steps = 3 if QUICK else 15
    out = {"params": dict(CONFIGS["gpt"], optimizer="AdamW", warmup_steps=warm, timed_steps=steps)}
    out["params"]["cpu_threads"] = torch.get_num_threads()
    _measure(out, "cpu", lambda: _train_run(torch, "cpu", None, warm, steps))

    def one_thread():
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _train_run(torch, "cpu", None, warm, steps)
        finally:
            torch.set_num_threads(n)

    # on a loaded 2-core machine PyTorch's intra-op threads fight the load;
    # one thread is the steadier CPU reference
    _measure(out, "cpu_1thread", one_thread)
    _measure(out, "strict", lambda: _train_run(torch, "tpu", "strict", warm, steps))
    _measure(out, "fused", lambda: _train_run(torch, "tpu", "fused", warm, steps))
    # the 2-layer model of the "tpu" device issue
    _measure(out, "cpu_2l", lambda: _train_run(torch, "cpu", None, warm, steps, cfg="gpt-2l"))
    _measure(out, "strict_2l", lambda: _train_run(torch, "tpu", "strict", warm, steps, cfg="gpt-2l"))
    _measure(out, "fused_2l", lambda: _train_run(torch, "tpu", "fused", warm, steps, cfg="gpt-2l"))
    return out


CHECKS_CHILD = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {bench!r})
import torch, torch_tpu, run
print("CHECKS_JSON " + json.dumps(run._train_run(torch, "tpu", "fused", {warm}, {steps})))
"""


def sec_device_checks():
    """The fused GPT training step with the device-side error flags
    (issue: <= 5% cost) and without (TORCH_TPU_DEVICE_CHECKS=0), each in
    its own process, alternated."""
    warm, steps, reps = (2, 3, 1) if QUICK else (3, 10, 4)
    out = {"params": {"model": "gpt", "eager_mode": "fused", "warmup_steps": warm, "timed_steps": steps,
                      "repeats": reps}}
    code = CHECKS_CHILD.format(bench=BENCH, warm=warm, steps=steps)
    runs = {"on": [], "off": []}

    def child(flag):
        env = dict(os.environ, TORCH_TPU_DEVICE_CHECKS="1" if flag == "on" else "0")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("CHECKS_JSON ")]
        if not line:
            raise RuntimeError(f"child failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
        return json.loads(line[0][len("CHECKS_JSON "):])

    for _ in range(reps):
        for flag in ("on", "off"):
            runs[flag].extend(child(flag)["runs_ms"])
    for flag in ("on", "off"):
        out[flag] = {"ms_per_step": median(runs[flag]), "runs_ms": runs[flag]}
    out["overhead_pct"] = 100.0 * (out["on"]["ms_per_step"] / out["off"]["ms_per_step"] - 1.0)
    return out


STARTUP_CHILD = r"""
import os, sys, time, json
t_start = time.time()
import warnings
warnings.filterwarnings("ignore")
import torch, torch_tpu
sys.path.insert(0, {bench!r})
from models import make_gpt, train_step
t_import = time.time()
model, opt, x, y = make_gpt("gpt", "tpu")
loss = train_step(model, opt, x, y)
lv = loss.item()
torch.tpu.synchronize()
list(model.parameters())[-1].reshape(-1)[:1].cpu()  # synchronize() alone does not wait
t_end = time.time()
s = torch.tpu.cache_stats()
print("STARTUP_JSON " + json.dumps(dict(t_start=t_start, t_import=t_import, t_end=t_end, loss=lv,
      compiles=s["compiles"], disk_hits=s["disk_hits"], mem_misses=s["mem_misses"],
      compile_seconds=s["compile_seconds"], fallbacks=torch_tpu.fallback_counts())))
"""


def sec_startup():
    reps = 1 if QUICK else 3
    mode = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
    out = {"params": {"model": "gpt", "repeats": reps, "eager_mode": mode,
                      "what": "wall time from spawning `python` to the end of the first training step "
                              "(loss.item() + synchronize)"}}
    code = STARTUP_CHILD.format(bench=BENCH)

    def child(cache_dir):
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, TORCH_TPU_EAGER_MODE=mode, PYTHONWARNINGS="ignore")
        t0 = time.time()
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=LIMITS["startup"] / 2, cwd=REPO)
        t1 = time.time()
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("STARTUP_JSON ")), None)
        if r.returncode != 0 or line is None:
            tail = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise RuntimeError(f"child exited {r.returncode}: {tail[0][:250]}")
        d = json.loads(line[len("STARTUP_JSON "):])
        return {"to_first_step_end_s": d["t_end"] - t0, "import_s": d["t_import"] - t0,
                "first_step_s": d["t_end"] - d["t_import"], "process_s": t1 - t0, "compiles": d["compiles"],
                "disk_hits": d["disk_hits"], "compile_seconds": d["compile_seconds"], "fallbacks": d["fallbacks"]}

    cold, warm = [], []
    errors = []
    for _ in range(reps):
        d = tempfile.mkdtemp(prefix="tpu_bench_cache_")
        try:
            try:
                cold.append(child(d))
            except Exception as e:  # noqa: BLE001
                errors.append(("cold", _fmt_err(e)))
                continue
            try:
                warm.append(child(d))
            except Exception as e:  # noqa: BLE001
                errors.append(("warm", _fmt_err(e)))
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def agg(runs):
        if not runs:
            return None
        res = {k: median([r[k] for r in runs]) for k in ("to_first_step_end_s", "import_s", "first_step_s",
                                                        "compiles", "disk_hits", "compile_seconds")}
        res["runs_s"] = [round(r["to_first_step_end_s"], 3) for r in runs]
        fb = runs[-1].get("fallbacks")
        if fb:
            res["fallbacks"] = fb
        return res

    for name, runs in (("cold", cold), ("warm", warm)):
        a = agg(runs)
        if a is None:
            why = [e for k, e in errors if k == name]
            out[name] = {"error": why[0] if why else "not run (the cold run failed)"}
        else:
            out[name] = a
    if errors:
        out["errors"] = errors
    return out


def sec_memory():
    torch = _torch()
    sys.path.insert(0, BENCH)
    from models import CONFIGS, make_gpt, train_step
    marks = (30, 60) if QUICK else (100, 300)
    out = {"params": dict(CONFIGS["gpt-small"], steps=list(marks))}

    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def peak_mb():
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def loop(mode):
        def f():
            with _mode(mode):
                model, opt, x, y = make_gpt("gpt-small", "tpu")
                snap = {}
                t0 = time.perf_counter()
                for i in range(1, marks[-1] + 1):
                    loss = train_step(model, opt, x, y)
                    if i % 10 == 0:
                        loss.item()
                    if i in marks:
                        _sync("tpu", loss, *model.parameters())
                        st = torch.tpu.cache_stats()
                        snap[i] = {"rss_mb": rss_mb(), "peak_rss_mb": peak_mb(),
                                   "live_buffers": st["live_buffers"],
                                   # the scalar cache (bounded, direct-mapped) fills up over
                                   # the first hundreds of steps; the rest are tensors
                                   "scalar_cache_entries": st.get("scalar_cache_entries", 0),
                                   "live_buffers_excl_scalar_cache":
                                       st["live_buffers"] - st.get("scalar_cache_entries", 0),
                                   "live_storages": st.get("live_storages")}
                dt = time.perf_counter() - t0
                a, b = snap[marks[0]], snap[marks[1]]

                def growth(k):
                    return 100.0 * (b[k] - a[k]) / a[k] if a[k] else None

                return {f"step{marks[0]}": a, f"step{marks[1]}": b,
                        "rss_growth_pct": growth("rss_mb"), "peak_rss_growth_pct": growth("peak_rss_mb"),
                        "live_buffers_growth_pct": growth("live_buffers"),
                        "live_buffers_excl_scalar_cache_growth_pct": growth("live_buffers_excl_scalar_cache"),
                        "loop_s": dt, "loss_last": float(loss.item())}
        return f

    _measure(out, "strict", loop("strict"))
    _measure(out, "fused", loop("fused"))
    return out


IMPORT_CHILD = r"""
import resource, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
print("IMPORT", t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def sec_import():
    reps = 6 if QUICK else 10
    out = {"params": {"repeats": reps, "what": "import torch: in-process seconds and peak RSS (MiB), "
                                                "torch_tpu autoloaded vs TORCH_DEVICE_BACKEND_AUTOLOAD=0"}}
    runs = {"with_torch_tpu": [], "without": []}
    # as on a user's machine: bytecode cached (here in a private prefix, so
    # an environment with PYTHONDONTWRITEBYTECODE=1 does not recompile the
    # checkout's modules on every run); one untimed run of each first
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "torch_tpu_bench_pycache")
    for i in range(reps + 1):
        for name, extra in (("with_torch_tpu", {}), ("without", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})):
            env = dict(base, **extra)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", IMPORT_CHILD], env=env, capture_output=True, text=True,
                               timeout=60, cwd="/")
            wall = time.perf_counter() - t0
            line = next((ln for ln in r.stdout.splitlines() if ln.startswith("IMPORT ")), None)
            if r.returncode or not line:
                raise RuntimeError(f"import child failed: {r.stderr.strip()[-200:]}")
            _, t_imp, rss = line.split()
            if i:
                runs[name].append((float(t_imp), wall, float(rss)))
    for name, rs in runs.items():
        out[name] = {"import_s": median([r[0] for r in rs]), "process_s": median([r[1] for r in rs]),
                     "peak_rss_mib": median([r[2] for r in rs]), "runs_import_s": [round(r[0], 3) for r in rs]}
    w, wo = out["with_torch_tpu"], out["without"]
    out["import_time_overhead_pct"] = 100.0 * (w["import_s"] / wo["import_s"] - 1)
    out["process_time_overhead_pct"] = 100.0 * (w["process_s"] / wo["process_s"] - 1)
    out["rss_overhead_mib"] = w["peak_rss_mib"] - wo["peak_rss_mib"]
    return out


def sec_transfer():
    torch = _torch()
    reps = 5 if QUICK else 15
    nbytes = 64 << 20
    out = {"params": {"bytes": nbytes, "repeats": reps}}
    src = torch.randn(nbytes // 4)
    pinned = src.pin_memory()
    torch.ones(1, device="tpu").cpu()

    def gbps(fn):
        fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        t = median(ts)
        return {"GBps": nbytes / t / 1e9, "ms": t * 1e3}

    def up(t):
        def f():
            y = t.to("tpu", non_blocking=True)
            torch.tpu.synchronize()
            return y
        return f

    _measure(out, "cpu_clone", lambda: gbps(lambda: src.clone()))
    _measure(out, "pageable", lambda: gbps(up(src)))
    _measure(out, "pinned", lambda: gbps(up(pinned)))
    y = pinned.to("tpu", non_blocking=True)
    torch.tpu.synchronize()
    out["pinned_copy_correct"] = bool(torch.equal(y.cpu(), src))
    try:
        out["pinned_vs_pageable"] = out["pinned"]["GBps"] / out["pageable"]["GBps"]
    except (KeyError, TypeError, ZeroDivisionError):
        pass
    return out


def sec_pjrt():
    exe = os.path.join(REPO, "build", "bench_pjrt")
    src = os.path.join(REPO, "bench", "c", "bench_pjrt.c")
    dst = os.path.join(BENCH, "pjrt_results.json")
    out = {"binary": os.path.relpath(exe, REPO)}
    if not os.path.exists(exe) and os.path.exists(src):
        r = subprocess.run(["make", "-s", "build/bench_pjrt"], cwd=REPO, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            out["error"] = "make build/bench_pjrt failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:250]
            return out
    if not os.path.exists(exe):
        out["error"] = "build/bench_pjrt not present (bench/c/bench_pjrt.c not written yet)"
        return out
    import sysconfig
    env = dict(os.environ, TORCH_TPU_SITE_DIRS=sysconfig.get_paths()["purelib"])
    tmp = dst + ".tmp"
    t0 = time.time()
    r = subprocess.run([exe, tmp], cwd=REPO, env=env, capture_output=True, text=True, timeout=LIMITS["pjrt"] - 10)
    out["seconds"] = round(time.time() - t0, 1)
    if r.returncode != 0 or not os.path.exists(tmp):
        out["error"] = f"bench_pjrt exited {r.returncode}: " + (
            [ln for ln in (r.stderr + r.stdout).strip().splitlines() if ln.strip()] or ["?"])[-1][:250]
        return out
    os.replace(tmp, dst)
    with open(dst) as f:
        out["results"] = json.load(f)
    return out


def sec_hf():
    torch = _torch()
    sys.path.insert(0, BENCH)
    import hf
    return hf.sec_hf(torch, _measure, QUICK)


def sec_dist():
    torch = _torch()
    sys.path.insert(0, BENCH)
    import dist
    return dist.sec_dist(torch, _measure, QUICK)


def sec_lstm():
    torch = _torch()
    sys.path.insert(0, BENCH)
    import lstm
    return lstm.sec_lstm(torch, QUICK)


def sec_kernels():
    torch = _torch()
    sys.path.insert(0, BENCH)
    import kernels
    return kernels.measure(torch, 5 if QUICK else 10)


def sec_cuda_unchanged():
    sys.path.insert(0, BENCH)
    import cuda_unchanged
    return cuda_unchanged.sec_cuda_unchanged(_measure, QUICK)


def sec_residency():
    sys.path.insert(0, BENCH)
    import residency
    return residency.measure(_measure, QUICK)


def sec_doctor():
    sys.path.insert(0, BENCH)
    import doctor
    return doctor.sec_doctor(_measure, QUICK)


def sec_torchtpu():
    sys.path.insert(0, BENCH)
    import torchtpu
    return torchtpu.sec_torchtpu(_measure, QUICK, LIMITS["torchtpu"] // (2 if QUICK else 1))


def _sec_first(name):
    def sec():
        torch = _torch()
        sys.path.insert(0, BENCH)
        import first
        return first.SECTIONS[name](torch, _measure, QUICK, LIMITS[name] // (2 if QUICK else 1))
    return sec


FUNCS = {"torchtpu": sec_torchtpu, "doctor": sec_doctor, "residency": sec_residency, "lstm": sec_lstm, "kernels": sec_kernels, "cuda_unchanged": sec_cuda_unchanged, "hf": sec_hf, "op_latency": sec_op_latency, "chain": sec_chain, "chain_arith": sec_chain_arith, "train": sec_train, "device_checks": sec_device_checks, "startup": sec_startup,
         "memory": sec_memory, "import": sec_import, "transfer": sec_transfer, "pjrt": sec_pjrt, "dist": sec_dist,
         **{name: _sec_first(name) for name in FIRST}}


# ---- the parent: one subprocess per section, the report ----------------------------

def run_section(name):
    limit = LIMITS[name] // (2 if QUICK else 1)
    fd, path = tempfile.mkstemp(prefix=f"bench_{name}_", suffix=".json")
    os.close(fd)
    t0 = time.time()
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--section", name, "--section-out", path],
                           cwd=REPO, capture_output=True, text=True, timeout=limit)
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, ValueError):
            tail = [ln for ln in (r.stderr or "").strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
            res = {"error": f"section process exited {r.returncode}: {tail[0][:300]}"}
    except subprocess.TimeoutExpired:
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {}
        res["error"] = f"section ran over its {limit}s limit (killed); figures finished before are kept"
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    res["section_seconds"] = round(time.time() - t0, 1)
    return res


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _cell(fig, key, fmt, scale=1.0):
    if fig is None:
        return "n/a"
    if "error" in fig:
        return "error"
    v = fig.get(key)
    if v is None:
        return "n/a"
    s = fmt.format(v * scale)
    if fig.get("fallbacks"):
        s += " (fb)"
    return s


def _load(v):
    return f"{v[0]:.1f}" if v else "?"


def markdown(results):
    R = results["sections"]
    rows = []
    notes = []

    def err_note(label, fig):
        if isinstance(fig, dict) and "error" in fig:
            notes.append(f"- {label}: could not be measured: {fig['error']}")
        if isinstance(fig, dict) and fig.get("fallbacks"):
            fb = ", ".join(f"{k} x{v}" for k, v in list(fig["fallbacks"].items())[:8])
            notes.append(f"- {label}: ran with CPU fallback for {fb}")

    op = R.get("op_latency", {})
    if op.get("error"):
        notes.append(f"- op_latency: {op['error']}")
    rows.append(["`c = c + b`, 1k f32, per op (us)", _cell(op.get("cpu"), "us_per_op", "{:.2f}"),
                 _cell(op.get("strict"), "us_per_op", "{:.1f}"),
                 _cell(op.get("fused"), "us_per_op_recorded", "{:.1f}") + " rec",
                 "strict: N ops + 1 sync; fused: record only"])
    rows.append(["one op + sync + 1-element host read (us)", "", _cell(op.get("strict"), "one_op_plus_sync_us", "{:.1f}"), "", ""])
    rows.append([f"fused flush of {_get(op, 'params', 'fused_ops_per_flush') or 100} recorded ops (us)", "", "",
                 _cell(op.get("fused"), "flush_us", "{:.0f}"),
                 "fused total per op: " + _cell(op.get("fused"), "us_per_op_total", "{:.1f}") + " us"])
    for k in ("cpu", "strict", "fused"):
        err_note(f"op_latency/{k}", op.get(k))

    ch = R.get("chain", {})
    if ch.get("error"):
        notes.append(f"- chain: {ch['error']}")
    sp = ch.get("fused_speedup_vs_strict")
    rows.append(["150-op elementwise chain, 2000x2000 f32 (ms), 1/3 sin/cos", _cell(ch.get("cpu"), "ms", "{:.1f}"),
                 _cell(ch.get("strict"), "ms", "{:.1f}"), _cell(ch.get("fused"), "ms", "{:.1f}"),
                 f"fused {sp:.1f}x vs strict" if sp else ""])
    for k in ("cpu", "strict", "fused"):
        err_note(f"chain/{k}", ch.get(k))
    ca = R.get("chain_arith", {})
    if ca.get("error"):
        notes.append(f"- chain_arith: {ca['error']}")
    sp = ca.get("fused_speedup_vs_strict")
    rows.append(["150-op elementwise chain, 2000x2000 f32 (ms), arithmetic only", _cell(ca.get("cpu"), "ms", "{:.1f}"),
                 _cell(ca.get("strict"), "ms", "{:.1f}"), _cell(ca.get("fused"), "ms", "{:.1f}"),
                 f"fused {sp:.1f}x vs strict" if sp else ""])
    for k in ("cpu", "strict", "fused"):
        err_note(f"chain_arith/{k}", ca.get(k))

    tr = R.get("train", {})
    if tr.get("error"):
        notes.append(f"- train: {tr['error']}")
    rows.append(["GPT train step, 4L d256 s128 b8, AdamW (ms/step)", _cell(tr.get("cpu"), "ms_per_step", "{:.0f}"),
                 _cell(tr.get("strict"), "ms_per_step", "{:.0f}"), _cell(tr.get("fused"), "ms_per_step", "{:.0f}"),
                 "median of timed steps, warm-up excluded"])
    rows.append(["  PyTorch CPU with 1 intra-op thread (ms/step)", _cell(tr.get("cpu_1thread"), "ms_per_step", "{:.0f}"),
                 "", "", f"default threads: {_get(tr, 'params', 'cpu_threads')}"])
    rows.append(["  steps/s", _cell(tr.get("cpu"), "steps_per_s", "{:.2f}"),
                 _cell(tr.get("strict"), "steps_per_s", "{:.2f}"), _cell(tr.get("fused"), "steps_per_s", "{:.2f}"),
                 ""])
    rows.append(["  first step incl. compile (s)", _cell(tr.get("cpu"), "first_step_s", "{:.2f}"),
                 _cell(tr.get("strict"), "first_step_s", "{:.2f}"), _cell(tr.get("fused"), "first_step_s", "{:.2f}"),
                 ""])
    rows.append(["GPT train step, 2L d256 s128 b8, AdamW (ms/step)", _cell(tr.get("cpu_2l"), "ms_per_step", "{:.0f}"),
                 _cell(tr.get("strict_2l"), "ms_per_step", "{:.0f}"), _cell(tr.get("fused_2l"), "ms_per_step", "{:.0f}"),
                 "the tpu device issue's model"])
    for k in ("cpu", "cpu_1thread", "strict", "fused", "cpu_2l", "strict_2l", "fused_2l"):
        err_note(f"train/{k}", tr.get(k))

    dc = R.get("device_checks", {})
    if dc.get("error"):
        notes.append(f"- device_checks: {dc['error']}")
    if dc.get("overhead_pct") is not None:
        rows.append(["GPT train step, fused: device-side checks on / off (ms/step)", "", "",
                     f"{dc['on']['ms_per_step']:.0f} / {dc['off']['ms_per_step']:.0f}",
                     f"checks cost {dc['overhead_pct']:+.1f}% (TORCH_TPU_DEVICE_CHECKS=0 turns them off)"])

    st = R.get("startup", {})
    if st.get("error"):
        notes.append(f"- startup: {st['error']}")
    mode = _get(st, "params", "eager_mode") or "strict"
    rows.append([f"start-up to end of 1st train step, cold disk cache (s)", "", *(
        [_cell(st.get("cold"), "to_first_step_end_s", "{:.2f}"), ""] if mode != "fused" else
        ["", _cell(st.get("cold"), "to_first_step_end_s", "{:.2f}")]),
        f"compiles: {_cell(st.get('cold'), 'compiles', '{:.0f}')}"])
    rows.append([f"start-up, warm disk cache (s)", "", *(
        [_cell(st.get("warm"), "to_first_step_end_s", "{:.2f}"), ""] if mode != "fused" else
        ["", _cell(st.get("warm"), "to_first_step_end_s", "{:.2f}")]),
        f"disk hits: {_cell(st.get('warm'), 'disk_hits', '{:.0f}')}, compiles: "
        f"{_cell(st.get('warm'), 'compiles', '{:.0f}')}"])
    for k in ("cold", "warm"):
        err_note(f"startup/{k}", st.get(k))

    me = R.get("memory", {})
    if me.get("error"):
        notes.append(f"- memory: {me['error']}")
    marks = _get(me, "params", "steps") or [100, 300]
    for label, key, fmt in (("peak RSS (MB)", "peak_rss_mb", "{:.0f}"), ("live_buffers", "live_buffers", "{:.0f}"),
                            ("live_buffers less scalar cache", "live_buffers_excl_scalar_cache", "{:.0f}")):
        vals = []
        for m in ("strict", "fused"):
            fig = me.get(m)
            if not isinstance(fig, dict) or "error" in fig:
                vals.append("error" if isinstance(fig, dict) else "n/a")
                continue
            a, b = fig.get(f"step{marks[0]}", {}), fig.get(f"step{marks[1]}", {})
            g = fig.get({"peak_rss_mb": "peak_rss_growth_pct", "live_buffers": "live_buffers_growth_pct"}.get(
                key, "live_buffers_excl_scalar_cache_growth_pct"))
            gs = f"{g:+.1f}%" if g is not None else "n/a"
            vals.append(f"{fmt.format(a.get(key, float('nan')))} -> {fmt.format(b.get(key, float('nan')))} ({gs})")
        rows.append([f"memory: {label}, step {marks[0]} -> {marks[1]}", "", vals[0], vals[1], "small GPT loop"])
    for k in ("strict", "fused"):
        err_note(f"memory/{k}", me.get(k))

    im = R.get("import", {})
    if im.get("error"):
        notes.append(f"- import: {im['error']}")
    if "with_torch_tpu" in im:
        rows.append(["`import torch` (s), torch_tpu autoloaded vs not", _cell(im.get("without"), "import_s", "{:.3f}"),
                     _cell(im.get("with_torch_tpu"), "import_s", "{:.3f}"), "",
                     f"{im.get('import_time_overhead_pct', float('nan')):+.1f}% time, "
                     f"{im.get('rss_overhead_mib', float('nan')):+.1f} MiB peak RSS"])
    tf = R.get("transfer", {})
    if tf.get("error"):
        notes.append(f"- transfer: {tf['error']}")
    if "pageable" in tf:
        rows.append(["host -> device 64 MiB (GB/s): pageable / pinned", _cell(tf.get("cpu_clone"), "GBps", "{:.2f}") +
                     " (CPU clone)", _cell(tf.get("pageable"), "GBps", "{:.2f}") + " / " +
                     _cell(tf.get("pinned"), "GBps", "{:.2f}"), "",
                     f"pinned {tf.get('pinned_vs_pageable', float('nan')):.2f}x pageable"])
        for k in ("cpu_clone", "pageable", "pinned"):
            err_note(f"transfer/{k}", tf.get(k))

    pj = R.get("pjrt", {})
    if "error" in pj:
        notes.append(f"- pjrt: {pj['error']}")
    pres = pj.get("results") or {}
    if pres:
        def pv(k, sub="median"):
            v = pres.get(k)
            return v.get(sub) if isinstance(v, dict) else v
        cells = []
        for k, label, unit in (("compile_one_op_ms", "compile one op", "ms"),
                               ("execute_one_op_1k_f32_us", "execute one op 1k f32", "us"),
                               ("h2d_64MiB_GBps", "h2d 64MiB", "GB/s"), ("d2h_64MiB_GBps", "d2h 64MiB", "GB/s")):
            v = pv(k)
            if v is not None:
                cells.append(f"{label} {v:.3g} {unit}")
        rows.append(["C engine (build/bench_pjrt), medians", "", "; ".join(cells), "", ""])

    hfr = R.get("hf", {})
    if hfr:
        sys.path.insert(0, BENCH)
        import hf
        if hfr.get("error"):
            notes.append(f"- hf: {hfr['error']}")
        rows.extend(hf.markdown_rows(hfr, _cell))
        for group in ("smollm2_b1", "smollm2_b8", "minilm"):
            for k, v in (hfr.get(group) or {}).items():
                err_note(f"hf/{group}/{k}", v)

    dsr = R.get("dist", {})
    if dsr:
        sys.path.insert(0, BENCH)
        import dist
        if dsr.get("error"):
            notes.append(f"- dist: {dsr['error']}")
        rows.extend(dist.markdown_rows(dsr, _cell))
        for k in ("allreduce", "ddp_1proc", "ddp_2proc"):
            err_note(f"dist/{k}", dsr.get(k))

    lsr = R.get("lstm", {})
    if lsr:
        sys.path.insert(0, BENCH)
        import lstm
        rows.extend(lstm.markdown_rows(lsr, _cell))

    ksr = R.get("kernels", {})
    if ksr:
        sys.path.insert(0, BENCH)
        import kernels
        rows.extend(kernels.markdown_rows(ksr, _cell))

    cur = R.get("cuda_unchanged", {})
    if cur:
        sys.path.insert(0, BENCH)
        import cuda_unchanged
        rows.extend(cuda_unchanged.markdown_rows(cur, _cell))
        notes.extend(cuda_unchanged.notes(cur))

    rsr = R.get("residency", {})
    if rsr:
        sys.path.insert(0, BENCH)
        import residency
        rows.extend(residency.markdown_rows(rsr, _cell))
        for k in ("bound_on", "bound_off"):
            err_note(f"residency/{k}", rsr.get(k))

    dor = R.get("doctor", {})
    if dor:
        sys.path.insert(0, BENCH)
        import doctor
        if dor.get("error"):
            notes.append(f"- doctor: {dor['error']}")
        rows.extend(doctor.markdown_rows(dor, _cell))

    ttr = R.get("torchtpu", {})
    if ttr:
        sys.path.insert(0, BENCH)
        import torchtpu
        if ttr.get("error"):
            notes.append(f"- torchtpu: {ttr['error']}")
        rows.extend(torchtpu.markdown_rows(ttr, _cell))

    if any(k in R for k in FIRST):
        sys.path.insert(0, BENCH)
        import first
        frows, fnotes = first.markdown_rows(R, _cell)
        rows.extend(frows)
        notes.extend(fnotes)

    head = ["figure", "PyTorch CPU", "tpu strict", "tpu fused", "notes"]
    lines = [f"# torch_tpu benchmarks ({'quick' if results['meta']['quick'] else 'full'} mode)", "",
             f"{results['meta']['date']}, torch {results['meta'].get('torch')}, "
             f"{results['meta']['cpus']} CPUs, PJRT plugin: {results['meta'].get('platform', '?')}, "
             f"git {str(results['meta'].get('git_commit'))[:10]}, load average at start/end "
             f"{_load(results['meta'].get('loadavg_start'))} / {_load(results['meta'].get('loadavg_end'))}", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")
    lines.append("(fb) = some aten op ran on the CPU through the fallback during that figure.")
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated sections: " + ",".join(SECTIONS) +
                    "; groups: " + ", ".join(f"{g} ({' '.join(v)})" for g, v in GROUPS.items()))
    ap.add_argument("--section", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--section-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.path.join(BENCH, "results.json"))
    a = ap.parse_args()

    if a.section:  # child
        _PARTIAL["path"] = a.section_out
        try:
            res = FUNCS[a.section]()
        except Exception as e:  # noqa: BLE001
            res = {"error": _fmt_err(e), "trace": traceback.format_exc().strip().splitlines()[-4:]}
        with open(a.section_out, "w") as f:
            json.dump(res, f, indent=1, default=str)
        return 0

    names = SECTIONS if not a.only else [s.strip() for s in a.only.split(",") if s.strip()]
    names = [m for n in names for m in GROUPS.get(n, [n])]
    for n in names:
        if n not in FUNCS:
            ap.error(f"unknown section {n!r}; sections: {', '.join(SECTIONS)}")
    meta = {"quick": QUICK, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
            "machine": platform.machine(), "python": platform.python_version(),
            "eager_mode_env": os.environ.get("TORCH_TPU_EAGER_MODE", ""),
            "loadavg_start": os.getloadavg()}
    try:
        meta["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                            text=True, timeout=10).stdout.strip()
        r = subprocess.run([sys.executable, "-c", "import warnings; warnings.simplefilter('ignore'); import torch, "
                            "torch_tpu; print(torch.__version__); print(torch.tpu.get_device_name())"],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
        v = r.stdout.strip().splitlines()
        meta["torch"], meta["platform"] = (v + ["?", "?"])[:2]
    except Exception as e:  # noqa: BLE001
        meta["torch"] = f"? ({_fmt_err(e)})"
    results = {"meta": meta, "sections": {}}
    t0 = time.time()
    for n in names:
        print(f"== {n} ...", flush=True)
        res = run_section(n)
        results["sections"][n] = res
        status = res.get("error", "ok")
        print(f"   {n}: {status} ({res['section_seconds']}s)", flush=True)
    meta["total_seconds"] = round(time.time() - t0, 1)
    meta["loadavg_end"] = os.getloadavg()
    out_md = os.path.splitext(a.out)[0] + ".md"
    if a.only and os.path.exists(a.out):
        # keep the other sections of a previous full run
        try:
            with open(a.out) as f:
                prev = json.load(f)
            for k, v in prev.get("sections", {}).items():
                results["sections"].setdefault(k, v)
        except (OSError, ValueError):
            pass
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1, default=str)
        f.write("\n")
    md = markdown(results)
    with open(out_md, "w") as f:
        f.write(md)
    print()
    print(md)
    print(f"results: {os.path.relpath(a.out, REPO)}, {os.path.relpath(out_md, REPO)} "
          f"({meta['total_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
