"""`make bench`'s torchtpu section (bench/run.py --only torchtpu, issue 42):
Google's TorchTPU 0.2.0 (PyPI `torch-tpu`) beside torch_tpu on the same
XLA CPU PJRT plugin, in one run, with ratios.

The two projects share the Python name `torch_tpu`, so TorchTPU lives in its
own venv (build/torchtpu-venv, `make torchtpu-env`, requirements-torchtpu.txt:
the same torch 2.13.0, TorchTPU and what it needs to import, with --no-deps)
and every figure is taken in a fresh child process of the right venv:

    cpu     .venv, TORCH_DEVICE_BACKEND_AUTOLOAD=0, PyTorch CPU (reference)
    ours    .venv, torch_tpu, TORCH_TPU_EAGER_MODE=strict | fused
    theirs  build/torchtpu-venv, TORCH_DEVICE_BACKEND_AUTOLOAD=0 (its own
            loader, called below, registers the device; autoload would only
            do so where it finds TPU PCI ids), TPU_LIBRARY_PATH = the plugin's
            xla_cpu_pjrt.so, eager mode DEFER_NEVER (its default) or
            DEFER_AND_FUSE (TORCH_TPU_DEFER_AND_FUSE=1)

Each child starts cold: ours on a fresh TORCH_TPU_CACHE_DIR, TorchTPU with
its disk tier (TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT, off by default) on a
fresh directory.  The children run from a scratch directory, so the repo's
torch_tpu/ never shadows TorchTPU's.

Figures (steady-state ones after a warm-up that compiles):
  op       `c = c + b` on 1k float32: N ops then one sync, per op
  arith    150 elementwise ops (bench run.py's arithmetic cycle: x*y, x+y,
           x-y, maximum, x*0.5, relu) on 256x256 float32, + sync
  sin      `x = sin(x) * 0.5 + 0.1` 50 times (150 ops) on 256x256, + sync
  decode   a KV cache written by hand: 32 decoding steps, each
           `k = torch.cat([k, k_new], 2)` (and v) and attention in plain ops
           (q @ k^T, softmax, @ v; B 4, H 8, D 64, prompt 100) under no_grad,
           one sync at the end: the first 32 steps (a new length every step:
           cold, compiles included) and the same 32 steps again (ms/step)
  train    bench/models.py's GPT (4 layers, d 256, 4 heads, seq 128,
           batch 8, AdamW) with its attention in plain ops (matmul, causal
           mask, softmax: TorchTPU's SDPA does not run on the CPU plugin):
           ms/step; its first step on the empty caches (cold) and the time
           from spawning the process to the end of that step
  coverage the first float32 sample of every OpInfo of torch's op_db
           (forward, no grad; quick: every 30th), ours strict vs TorchTPU
           DEFER_NEVER: ran on the device / ran through the CPU fallback /
           not implemented / other error / crashed the process, and of those
           that ran, how many differ from PyTorch CPU.  Ours: its fallback
           on, counted by torch_tpu.fallback_counts().  TorchTPU: its CPU
           fallback (off by default) off first; an op that raised is run
           again with it on (`execution_mode.enable_cpu_fallback`).
Ratios: ours / theirs for each figure (strict vs DEFER_NEVER, fused vs
DEFER_AND_FUSE; time figures: below 1 = ours faster).  TorchTPU's
torch.compile and its SDPA do not run on the CPU plugin (not measured).
Quick mode: train + op + arith + sin in one child per configuration,
fewer steps and repeats, every 30th OpInfo.
"""
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
OURS_PY = sys.executable  # the bench runs under .venv
VENV = os.path.join(REPO, "build", "torchtpu-venv")
THEIRS_PY = os.path.join(VENV, "bin", "python")
TAG = "TORCHTPU_JSON "

# (side, mode): the configurations, in the order they run
CONFIGS = [("cpu", "cpu"), ("ours", "strict"), ("ours", "fused"), ("theirs", "defer_never"),
           ("theirs", "defer_and_fuse")]
PAIRS = [("strict", "defer_never"), ("fused", "defer_and_fuse")]
MICRO = ("op", "arith", "sin", "decode")


def _name(side, mode):
    return "cpu" if side == "cpu" else f"{side}_{mode}"


# ---- the child: one measurement in a fresh process ------------------------------

def _child_setup(side):
    import warnings
    warnings.simplefilter("ignore")
    import torch
    info = {"torch": torch.__version__}
    if side == "ours":
        import torch_tpu
        info["eager_mode"] = torch.tpu.get_eager_mode() if hasattr(torch.tpu, "get_eager_mode") else \
            os.environ.get("TORCH_TPU_EAGER_MODE")
        info["package"] = os.path.dirname(torch_tpu.__file__)
    elif side == "theirs":
        import importlib.metadata
        import torch_tpu._loader
        torch_tpu._loader._init_device("tpu")
        from torch_tpu._internal import execution_mode
        info["eager_mode"] = str(execution_mode.eager_mode)
        info["version"] = importlib.metadata.version("torch_tpu")
    dev = "cpu" if side == "cpu" else "tpu"
    if dev == "tpu":
        torch.ones(1, device=dev).cpu()  # starts the runtime

    # TorchTPU refuses torch.tpu.synchronize() from user code ("internal to
    # TorchTPU"): it asks for torch.accelerator.synchronize()
    wait = torch.accelerator.synchronize if side == "theirs" else torch.tpu.synchronize if side == "ours" else None

    def sync(*tensors):
        # synchronize(), then a 1-element host read of each tensor: the read
        # is what waits for the device (run.py's _sync, for both projects)
        if dev == "tpu":
            wait()
            for t in tensors:
                t.detach().reshape(-1)[:1].cpu()
    return torch, dev, sync, info


def _op(torch, dev, sync, quick):
    n, reps = (200, 5) if quick else (2000, 15)
    a, b = torch.randn(1000).to(dev), torch.randn(1000).to(dev)

    def run(count):
        c = a
        t0 = time.perf_counter()
        for _ in range(count):
            c = c + b
        sync(c)
        return time.perf_counter() - t0

    t_first = run(20)
    run(n)
    ts = [run(n) / n for _ in range(reps)]
    return {"us_per_op": statistics.median(ts) * 1e6, "runs_us": [round(t * 1e6, 2) for t in ts],
            "first_20_ops_s": t_first, "ops_per_run": n}


def _chain(torch, dev, sync, quick, kind):
    sys.path.insert(0, BENCH)
    import run as bench_run
    reps = 3 if quick else 7
    if kind == "arith":
        ops = bench_run._chain_ops(torch, "arith")
    else:
        ops = [lambda x, y: torch.sin(x), lambda x, y: x * 0.5, lambda x, y: x + 0.1] * 50
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(256, 256, generator=g)
    y0 = torch.rand(256, 256, generator=g) * 0.5
    ref = x0
    for f in ops:
        ref = f(ref, y0)
    x, y = x0.to(dev), y0.to(dev)
    sync(x, y)

    def run():
        r = x
        t0 = time.perf_counter()
        for f in ops:
            r = f(r, y)
        sync(r)
        return time.perf_counter() - t0, r

    t_first, r = run()
    ts = []
    for _ in range(reps):
        t, r = run()
        ts.append(t)
    return {"ms": statistics.median(ts) * 1e3, "runs_ms": [round(t * 1e3, 3) for t in ts],
            "first_run_ms": t_first * 1e3, "ops": len(ops), "max_abs_diff_vs_cpu": float((r.cpu() - ref).abs().max())}


def _decode(torch, dev, sync, quick):
    import math
    steps, B, H, D, P = 32, 4, 8, 64, 100
    g = torch.Generator().manual_seed(0)
    k0, v0 = torch.randn(B, H, P, D, generator=g), torch.randn(B, H, P, D, generator=g)
    new = [tuple(torch.randn(B, H, 1, D, generator=g) for _ in range(3)) for _ in range(steps)]

    def run(to_dev):
        k, v = (k0.to(dev), v0.to(dev)) if to_dev else (k0, v0)
        qs = [tuple(t.to(dev) for t in n) for n in new] if to_dev else new
        sync(k, v)
        t0 = time.perf_counter()
        with torch.no_grad():
            for q, kn, vn in qs:
                k, v = torch.cat([k, kn], 2), torch.cat([v, vn], 2)
                o = ((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))).softmax(-1) @ v
        sync(o)
        return time.perf_counter() - t0, o

    compiles = (lambda: torch.tpu.cache_stats()["compiles"]) if hasattr(torch, "tpu") and \
        hasattr(torch.tpu, "cache_stats") else (lambda: None)
    c0 = compiles()
    t_first, o = run(True)
    c1 = compiles()
    ts = [run(True)[0] for _ in range(2 if quick else 3)]
    _, ref = run(False) if dev != "cpu" else (None, o)
    return {"ms_per_step": statistics.median(ts) * 1e3 / steps, "first_32_steps_s": t_first,
            "runs_ms_per_step": [round(t * 1e3 / steps, 3) for t in ts], "steps": steps,
            "compiles_first_32_steps": None if c0 is None else c1 - c0,
            "compiles_again": None if c0 is None else compiles() - c1,
            "max_abs_diff_vs_cpu": float((o.cpu() - ref).abs().max())}


def _plain_attention(torch):
    """bench/models.py's GPT with F.scaled_dot_product_attention done in plain
    ops (models.py calls it through its module global F)."""
    import math
    import models
    import torch.nn.functional as F

    class PlainF:
        def __getattr__(self, name):
            return getattr(F, name)

        @staticmethod
        def scaled_dot_product_attention(q, k, v, is_causal=False):
            t = q.shape[-2]
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            if is_causal:
                keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
                att = att.masked_fill(~keep, float("-inf"))
            return att.softmax(dim=-1) @ v

    models.F = PlainF()
    return models


def _train(torch, dev, sync, quick, t_spawn):
    sys.path.insert(0, BENCH)
    models = _plain_attention(torch)
    warm, steps = (0, 2) if quick else (3, 10)  # after the cold first step
    model, opt, x, y = models.make_gpt("gpt", dev)
    # TorchTPU's Module.to("tpu") unties shared parameters (the GPT's output
    # head and its token embedding): tie them again, so that both projects
    # train the same model, and say so
    tied = model.head.weight is model.tok.weight
    if not tied:
        copy, model.head.weight = model.head.weight, model.tok.weight
        for group in opt.param_groups:  # no optimizer state yet
            group["params"] = [p for p in group["params"] if p is not copy]
    last = list(model.parameters())[-1]
    times, losses = [], []
    t_ready = time.time() - t_spawn
    for i in range(1 + warm + steps):
        t0 = time.perf_counter()
        loss = models.train_step(model, opt, x, y)
        losses.append(float(loss.item()))
        sync(last)
        dt = time.perf_counter() - t0
        if i == 0:
            first, to_first = dt, time.time() - t_spawn
        elif i > warm:
            times.append(dt)
    ms = statistics.median(times) * 1e3
    return {"ms_per_step": ms, "steps_per_s": 1e3 / ms, "cold_first_step_s": first,
            "spawn_to_first_step_end_s": to_first, "spawn_to_model_ready_s": t_ready,
            "warmup_steps": warm + 1, "steps_timed": steps, "loss_first": losses[0], "loss_last": losses[-1],
            "losses": [round(v, 5) for v in losses], "to_device_kept_tied_weights": tied,
            "runs_ms": [round(t * 1e3, 1) for t in times]}


def _flat_tensors(x, torch):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v, torch)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flat_tensors(v, torch)]
    return []


def _close(out, ref, torch, atol, rtol):
    a, b = _flat_tensors(out, torch), _flat_tensors(ref, torch)
    if len(a) != len(b):
        return False
    for u, v in zip(a, b):
        u = u.detach().cpu()
        if u.shape != v.shape:
            return False
        if u.dtype.is_floating_point or u.dtype.is_complex:
            if not torch.allclose(u.to(v.dtype), v.detach(), atol=atol, rtol=rtol, equal_nan=True):
                return False
        elif not torch.equal(u.to(v.dtype), v.detach()):
            return False
    return True


def _coverage(torch, dev, side, keys):
    """Prints one TAG line per op ({"op", "status", ...}), a "start" line
    before it, so that the parent can name the op that crashed the process."""
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    import opinfo_util as U
    db = U.load_op_db()
    if isinstance(keys, int):  # every keys-th OpInfo, listed for the parent
        keys = sorted(db)[::keys]
        print(TAG + json.dumps({"keys": keys}), flush=True)
    if side == "ours":
        import torch_tpu
        counts = torch_tpu.fallback_counts
    else:
        from torch_tpu._internal import execution_mode

    def attempt(op, sample):
        inp, args, kwargs = U._sample_copy(sample, dev)
        before = counts() if side == "ours" else None
        out = op(inp, *args, **kwargs)
        for t in _flat_tensors(out, torch):  # waits for the device
            t.detach().reshape(-1)[:1].cpu()
        fb = {}
        if side == "ours":
            fb = {k: v - before.get(k, 0) for k, v in counts().items() if v > before.get(k, 0)}
        return out, fb

    for key in keys:
        print(TAG + json.dumps({"start": key}), flush=True)
        op = db[key]
        res = {"op": key}
        try:
            if U.nondeterministic_reason(op) or torch.float32 not in op.supported_dtypes("cpu"):
                raise LookupError("no deterministic float32 sample")
            torch.manual_seed(0)
            sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=False)))
            inp, args, kwargs = U._sample_copy(sample, "cpu")
            torch.manual_seed(0)
            ref = op(inp, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - nothing to compare on the CPU
            res["status"] = "skip"
            res["why"] = U.one_line(e, 160)
            print(TAG + json.dumps(res), flush=True)
            continue
        atol, rtol = U.tolerance(op)
        with torch.no_grad():
            try:
                torch.manual_seed(0)
                out, fb = attempt(op, sample)
                res["status"] = "fallback" if fb else "device"
                if fb:
                    res["fallbacks"] = sorted(fb)
            except Exception as e:  # noqa: BLE001
                msg = U.one_line(e, 200)
                res["error"] = msg
                res["status"] = "not_implemented" if ("not implemented" in msg or isinstance(e, NotImplementedError)) \
                    else "error"
                out = None
                if side == "theirs":
                    execution_mode.enable_cpu_fallback = True
                    try:
                        torch.manual_seed(0)
                        out, _ = attempt(op, sample)
                        res["status"] = "fallback"
                    except Exception as e2:  # noqa: BLE001
                        res["error_with_fallback"] = U.one_line(e2, 200)
                    finally:
                        execution_mode.enable_cpu_fallback = False
            if out is not None:
                try:
                    res["matches_cpu"] = _close(out, ref, torch, atol, rtol)
                except Exception as e:  # noqa: BLE001
                    res["matches_cpu"] = False
                    res["compare_error"] = U.one_line(e, 120)
        print(TAG + json.dumps(res), flush=True)


def child_main(spec):
    t_spawn = spec["t_spawn"]
    torch, dev, sync, info = _child_setup(spec["side"])
    info["spawn_to_device_ready_s"] = time.time() - t_spawn
    quick = spec["quick"]
    out = {"info": info}
    for m in spec["measures"]:
        try:
            if m == "op":
                out[m] = _op(torch, dev, sync, quick)
            elif m in ("arith", "sin"):
                out[m] = _chain(torch, dev, sync, quick, m)
            elif m == "decode":
                out[m] = _decode(torch, dev, sync, quick)
            elif m == "train":
                out[m] = _train(torch, dev, sync, quick, t_spawn)
            elif m == "coverage":
                _coverage(torch, dev, spec["side"], spec["keys"])
        except Exception as e:  # noqa: BLE001 - recorded, the other measures go on
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            out[m] = {"error": f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]}
        print(TAG + json.dumps({"partial": out}, default=str), flush=True)
    if spec["side"] == "ours":
        info["process_compiles"] = torch.tpu.cache_stats()["compiles"]
    print(TAG + json.dumps({"done": out}, default=str), flush=True)


# ---- the parent: children, figures, ratios ----------------------------------------

def plugin_path():
    """The XLA CPU plugin's .so inside TorchTPU's venv (xla-cpu-pjrt)."""
    hits = glob.glob(os.path.join(VENV, "lib", "python*", "site-packages", "xla_plugins", "xla_cpu_pjrt",
                                  "xla_cpu_pjrt.so"))
    return hits[0] if hits else None


def _env(side, mode, cache, measures):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCH_TPU_", "TPU_", "PYTHON")) and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env["PYTHONWARNINGS"] = "ignore"
    if side == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    elif side == "ours":
        env["TORCH_TPU_EAGER_MODE"] = mode
        env["TORCH_TPU_CACHE_DIR"] = cache
        if "coverage" in measures:
            env["TORCH_TPU_CPU_FALLBACK"] = "1"  # counted, as tools/opinfo_sweep.py does
    else:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # its loader is called by hand (_child_setup)
        env["TPU_LIBRARY_PATH"] = plugin_path() or ""
        env["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"] = cache
        if mode == "defer_and_fuse":
            env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
    return env


def _spawn(side, mode, measures, quick, timeout, keys=None):
    """Runs one child; returns (its result dict, its TAG lines)."""
    scratch = tempfile.mkdtemp(prefix="bench_torchtpu_")
    cache = os.path.join(scratch, "cache")
    os.makedirs(cache)
    spec = {"side": side, "measures": list(measures), "quick": quick, "t_spawn": time.time(), "keys": keys}
    py = THEIRS_PY if side == "theirs" else OURS_PY
    lines, err = [], None
    try:
        p = subprocess.run([py, os.path.abspath(__file__), "--child", json.dumps(spec)], cwd=scratch,
                           env=_env(side, mode, cache, measures), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc = "", None
        err = f"child ran over {timeout}s (killed)"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for ln in stdout.splitlines():
        if ln.startswith(TAG):
            try:
                lines.append(json.loads(ln[len(TAG):]))
            except ValueError:
                pass
    res = next((d["done"] for d in reversed(lines) if "done" in d), None)
    if res is None:
        res = next((d["partial"] for d in reversed(lines) if "partial" in d), {})
        if err is None:
            tail = [ln for ln in (stderr or "").strip().splitlines() if ln.strip() and not ln.startswith(" ")]
            err = f"child exited {rc}: " + (tail[-1][:250] if tail else "(no output)")
        for m in measures:
            res.setdefault(m, {"error": err})
    return res, lines


def _coverage_run(side, mode, keys, deadline):
    """Every key once (keys: a list, or n for every n-th OpInfo of op_db,
    which the first child lists); a crash costs the op that was running,
    the child is started again after it.  The keys end up in out["keys"]."""
    results, todo, crashes = {}, keys, 0
    while todo and time.time() < deadline - 20:
        _, lines = _spawn(side, mode, ["coverage"], False, max(30, deadline - time.time()), keys=todo)
        started = None
        for d in lines:
            if "keys" in d:
                keys = d["keys"]
            elif "start" in d:
                started = d["start"]
            elif "op" in d:
                results[d["op"]] = d
                started = None
        if started is None and not any("op" in d for d in lines):
            break  # the child did not get as far as the first op
        if started is not None:
            results[started] = {"op": started, "status": "crash"}
            crashes += 1
        if isinstance(keys, int):
            break  # the child did not get as far as listing them
        todo = [k for k in keys if k not in results]
        if crashes > 25:
            break
    if isinstance(keys, int):
        return {"error": "the coverage child did not list the OpInfos", "keys": []}
    counts = {}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    ran = [r for r in results.values() if r["status"] in ("device", "fallback")]
    out = {"ops": len(keys), "finished": len(results), "counts": counts,
           "ran_but_differs_from_cpu": sum(1 for r in ran if r.get("matches_cpu") is False),
           "differs": sorted(r["op"] for r in ran if r.get("matches_cpu") is False)[:40],
           "not_implemented": sorted(r["op"] for r in results.values() if r["status"] == "not_implemented"),
           "fallback": sorted(r["op"] for r in results.values() if r["status"] == "fallback"),
           "crash": sorted(r["op"] for r in results.values() if r["status"] == "crash")}
    errs = {}
    for r in results.values():
        if r["status"] == "error":
            e = r.get("error", "?")
            errs[e[:90]] = errs.get(e[:90], 0) + 1
    out["errors_by_message"] = dict(sorted(errs.items(), key=lambda kv: -kv[1])[:12])
    if len(results) < len(keys):
        out["error"] = f"{len(keys) - len(results)} ops not reached before the section's deadline"
    out["keys"] = keys
    return out


def theirs_ready():
    """None when TorchTPU's venv can run here, else why not."""
    if not os.path.exists(THEIRS_PY):
        return "build/torchtpu-venv missing (make torchtpu-env)"
    if not plugin_path():
        return "xla_cpu_pjrt.so not found in build/torchtpu-venv"
    return None


def sec_torchtpu(measure, quick, limit):
    t_end = time.time() + limit - 15
    out = {"params": {"quick": quick, "op_numel": 1000, "chain_shape": [256, 256], "chain_ops": 150,
                      "model": "bench/models.py gpt (4L d256 4 heads seq 128 batch 8, AdamW), attention in plain ops",
                      "configs": [_name(s, m) for s, m in CONFIGS]}}
    why = theirs_ready()
    measure(out, "torchtpu_env", lambda: {"ready": why is None, "skip_reason": why, "plugin": plugin_path(),
                                          "venv": os.path.relpath(VENV, REPO)})
    configs = [c for c in CONFIGS if c[0] != "theirs" or why is None]
    if why:
        out["skipped"] = f"TorchTPU side skipped: {why}"

    # one child per figure (quick: one per configuration, the training step
    # first, so that its first step is the cold one either way)
    groups = [("train",) + MICRO] if quick else [("train",)] + [(m,) for m in MICRO]
    for g in groups:
        for side, mode in configs:
            name = _name(side, mode)

            def run_group(side=side, mode=mode, g=g, name=name):
                # PyTorch CPU's GPT steps take seconds each on a loaded machine
                share = 0.12 if quick or g == ("train",) else 0.05
                budget = max(30, min((t_end - time.time()) * share, 600))
                res, _ = _spawn(side, mode, g, quick, budget)
                for m in g:
                    out.setdefault(m, {})[name] = res.get(m, {"error": "not measured"})
                return res.get("info", {})
            measure(out.setdefault("children", {}), f"{name}:{'+'.join(g)}", run_group)
    cpu_loss = _get(out, "train", "cpu", "loss_last")
    for name, fig in (out.get("train") or {}).items():
        if name != "cpu" and isinstance(cpu_loss, float) and isinstance(fig.get("loss_last"), float):
            fig["loss_last_diff_vs_cpu"] = fig["loss_last"] - cpu_loss

    # OpInfo coverage: ours strict vs TorchTPU's default mode, the same ops
    out.setdefault("coverage", {})
    keys = 30 if quick else 1
    cov = [("ours", "strict")] + ([("theirs", "defer_never")] if why is None else [])
    for i, (side, mode) in enumerate(cov):
        share = (t_end - time.time()) / (len(cov) - i)
        fig = measure(out["coverage"], _name(side, mode),
                      lambda side=side, mode=mode, share=share, keys=keys:
                      _coverage_run(side, mode, keys, time.time() + share))
        keys = fig.pop("keys", None) or keys
    out["params"]["opinfo_keys"] = keys if isinstance(keys, int) else len(keys)

    out["ratios"] = ratios(out)
    return out


FIGURES = [("op", "us_per_op"), ("arith", "ms"), ("sin", "ms"), ("decode", "ms_per_step"),
           ("decode", "first_32_steps_s"), ("train", "ms_per_step"),
           ("train", "cold_first_step_s"), ("train", "spawn_to_first_step_end_s")]


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def ratios(out):
    """ours / theirs for each figure and mode pair (time: < 1 = ours faster);
    coverage: ops that ran on the device, ours / theirs."""
    r = {}
    for sec, key in FIGURES:
        for ours, theirs in PAIRS:
            a = (out.get(sec) or {}).get(f"ours_{ours}") or {}
            b = (out.get(sec) or {}).get(f"theirs_{theirs}") or {}
            if isinstance(a.get(key), (int, float)) and isinstance(b.get(key), (int, float)) and b[key]:
                r[f"{sec}.{key}:{ours}/{theirs}"] = a[key] / b[key]
    cov = out.get("coverage") or {}
    a, b = (cov.get("ours_strict") or {}).get("counts"), (cov.get("theirs_defer_never") or {}).get("counts")
    if a and b and b.get("device"):
        r["coverage.device:strict/defer_never"] = a.get("device", 0) / b["device"]
    return r


def markdown_rows(res, cell):
    rows = []
    if res.get("skipped"):
        rows.append(["TorchTPU 0.2.0 beside torch_tpu", "", "", "", res["skipped"]])
    labels = {"op": ("TorchTPU vs ours: `c = c + b`, 1k f32, per op incl. sync share (us)", "us_per_op", "{:.1f}"),
              "arith": ("TorchTPU vs ours: 150-op arithmetic chain, 256x256 (ms)", "ms", "{:.2f}"),
              "sin": ("TorchTPU vs ours: sin(x)*0.5+0.1 x50 (150 ops), 256x256 (ms)", "ms", "{:.2f}"),
              "decode": ("TorchTPU vs ours: KV cache grown by torch.cat, 32 decode steps, again (ms/step)",
                         "ms_per_step", "{:.2f}")}
    r = res.get("ratios") or {}

    def theirs(sec, key, fmt):
        d = res.get(sec) or {}
        return (f"TorchTPU DEFER_NEVER {cell(d.get('theirs_defer_never'), key, fmt)} / DEFER_AND_FUSE "
                f"{cell(d.get('theirs_defer_and_fuse'), key, fmt)}")

    def rat(sec, key):
        parts = []
        for o, t in PAIRS:
            v = r.get(f"{sec}.{key}:{o}/{t}")
            if v is not None:
                parts.append(f"{o}/{'never' if t == 'defer_never' else 'fuse'} {v:.2f}x")
        return ("; ours/theirs " + ", ".join(parts)) if parts else ""

    for sec in MICRO:
        label, key, fmt = labels[sec]
        d = res.get(sec) or {}
        rows.append([label, cell(d.get("cpu"), key, fmt), cell(d.get("ours_strict"), key, fmt),
                     cell(d.get("ours_fused"), key, fmt), theirs(sec, key, fmt) + rat(sec, key)])
    d = res.get("train") or {}
    for key, label, fmt in (("ms_per_step", "GPT train step, plain-op attention (ms/step)", "{:.0f}"),
                            ("cold_first_step_s", "  cold first step, empty caches (s)", "{:.1f}"),
                            ("spawn_to_first_step_end_s", "  process spawn to end of cold first step (s)",
                             "{:.1f}")):
        rows.append([f"TorchTPU vs ours: {label.strip()}" if not label.startswith("  ") else label,
                     cell(d.get("cpu"), key, fmt), cell(d.get("ours_strict"), key, fmt),
                     cell(d.get("ours_fused"), key, fmt), theirs("train", key, fmt) + rat("train", key)])
    cov = res.get("coverage") or {}
    for name, label in (("ours_strict", "ours (strict)"), ("theirs_defer_never", "TorchTPU (DEFER_NEVER)")):
        c = cov.get(name)
        if not isinstance(c, dict):
            continue
        if "counts" not in c:
            rows.append([f"OpInfo first-sample coverage, {label}", "", "", "", c.get("error", "n/a")[:150]])
            continue
        n = c["counts"]
        txt = (f"{n.get('device', 0)} device / {n.get('fallback', 0)} CPU fallback / "
               f"{n.get('not_implemented', 0)} not implemented / {n.get('error', 0)} error / "
               f"{n.get('crash', 0)} crash / {n.get('skip', 0)} skip of {c['ops']}; "
               f"{c['ran_but_differs_from_cpu']} ran but differ from CPU")
        rows.append([f"OpInfo first-sample coverage (f32 fwd), {label}", "", "", "", txt])
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(json.loads(sys.argv[2]))
    else:
        sys.exit("bench/torchtpu.py is a bench/run.py section: .venv/bin/python bench/run.py --only torchtpu")
