"""The "first" sections of bench/run.py: cold start, and loops that used to
recompile.  `bench/run.py --only first` runs the group; each figure is its
own section (first_smollm2, first_sd, first_wlm, first_lstmcell,
first_nanogpt, first_clone), and PyTorch CPU is measured in the same run.

Cold = a fresh `python` subprocess (this file, `--child`) with
TORCH_TPU_CACHE_DIR set to a new empty directory; warm = a second fresh
subprocess on the same directory (the disk tier is warm, the process is
not).  Each tpu time comes with the programs compiled and their compile
seconds and the programs loaded from disk, from torch.tpu.metrics() (zeroed
by torch.tpu.reset_metrics() just before the timed part).  Compile seconds
are summed over the engine's compile threads, so they can exceed the wall
time.  The CPU figures run in the section's own process, twice: with
PyTorch's default threads ("cpu") and with one ("cpu_1thread"; on a loaded
2-core machine the default threads can be many times slower); ratios are
given against both, and the targets judged against the faster
("*_vs_faster_cpu").  A child runs within the section's time left (at most
10 minutes) and is killed, with its process group, when it holds more than
60% of the host's memory or the host runs short (TORCH_TPU_BENCH_CHILD_RSS_GIB
sets the bound); what it had finished comes back as "partial".

  smollm2_first16  SmolLM2-135M-Instruct (GGUF, as bench/hf.py loads it),
                   greedy generate of 16 new tokens in fused mode, batch 1
                   and 8: wall seconds of the first generate of the process
                   (model load excluded), cold and warm, vs the CPU's first
                   generate (and a 1-thread one); the tokens compared with
                   the CPU's.  decode_b1: programs compiled (or loaded)
                   after the 2nd call of a LogitsProcessor (there:
                   synchronize + a 1-element read) to the end of a 64-token
                   generate (32 in quick mode), in a cold process.
  sd_tiny          a tiny Stable Diffusion pipeline built from configs
                   (Diffusers), 6 DDIM steps at 32x32: first call, cold and
                   warm, strict and fused, vs CPU's second call; max abs
                   difference of the images.
  wlm_loop         pytorch/examples word_language_model's training loop
                   (2-layer nn.LSTM 200, bptt 35, batch 20, clip 0.25,
                   lr 20): 20 batches (10 in quick mode), cold, strict and
                   fused: wall seconds, compile seconds and their share of
                   the wall time, the last batch's loss beside the CPU's.
  lstmcell_loop    pytorch/examples time_sequence_prediction (two LSTMCells
                   over 1000 time steps, 25 in quick mode; MSE, SGD):
                   3 iterations, fused, cold, vs CPU; RSS after iteration 1
                   and after 3.
  nanogpt_char     a nanoGPT-style character model (4 layers, 4 heads,
                   128 wide, block 64, batch 12, AdamW): warm ms/iter, CPU
                   eager vs tpu fused vs torch.compile(backend="tpu") (its
                   eager parts fused), one process, warm-up excluded.
  fresh_clone_demo `git clone` of this checkout's committed tree, then
                   `make demo` there (its venv is created: slow): wall
                   seconds.  Not in quick mode.

Alone (the children are what the sections start):

    .venv/bin/python bench/first.py --child wlm --args '{"mode": "fused", "batches": 20}' --out /tmp/r.json
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import first_models as fm

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)

TARGETS = {"smollm2_cold_s": 3.0, "smollm2_decode_programs": 4, "sd_cold_s": 5.0, "wlm_compile_share_pct": 10.0,
           "lstmcell_vs_cpu": 1.5, "nanogpt_vs_cpu": 1.2, "fresh_clone_demo_s": 120.0}


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def _ratio(a, b):
    try:
        return a / b
    except (TypeError, ZeroDivisionError):
        return None


def _fmt_err(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


# ---- what a child reports: the engine's compile / disk-load counters ---------------

def _metrics(torch):
    m = torch.tpu.metrics()
    return {"compiles": m["compile"]["count"], "compile_s": m["compile"]["seconds"],
            "compile_wall_s": m["compile"]["wall_seconds"],
            "disk_loads": m["disk_load"]["count"], "disk_load_s": m["disk_load"]["seconds"]}


def _delta(before, after):
    return {k: after[k] - before[k] for k in after}


class _Timed:
    """Zeroes the metrics, times the block; .result: wall_s and the counters."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        self.torch.tpu.reset_metrics()
        self.m0 = _metrics(self.torch)  # zero, unless reset_metrics keeps something
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self.t0
        self.result = dict(wall_s=self.wall_s, **_delta(self.m0, _metrics(self.torch)))
        return False


# ---- the child: one tpu measurement in a fresh process -----------------------------

def _child_smollm2(torch, a):
    tok, model = fm.smollm2()
    inputs = fm.smollm2_inputs(tok, a["batch"]).to("tpu")
    model = model.to("tpu")
    n = a["new_tokens"]
    res = {}
    _progress(stage="model loaded, generating")
    with torch.tpu.eager_mode("fused"):
        if not a.get("count_from_token2"):
            with _Timed(torch) as t:
                out = fm.generate(model, inputs, n)
                out[0, -1].item()
            res.update(t.result)
        else:
            from transformers import LogitsProcessor, LogitsProcessorList

            class CountAt2(LogitsProcessor):
                def __init__(self):
                    self.calls, self.at2 = 0, None

                def __call__(self, input_ids, scores):
                    self.calls += 1
                    if self.calls == 2:
                        torch.tpu.synchronize()
                        scores.reshape(-1)[:1].cpu()  # synchronize() alone does not wait
                        self.at2 = _metrics(torch)
                    return scores

            proc = CountAt2()
            with _Timed(torch) as t:
                out = fm.generate(model, inputs, n, logits_processor=LogitsProcessorList([proc]))
                torch.tpu.synchronize()
                out = out.cpu()
            res.update(t.result)
            after = _delta(proc.at2, _metrics(torch))
            res.update(processor_calls=proc.calls, programs_from_token2=after["compiles"] + after["disk_loads"],
                       compiles_from_token2=after["compiles"], compile_s_from_token2=after["compile_s"],
                       disk_loads_from_token2=after["disk_loads"])
    res["tokens"] = out.cpu().tolist()
    return res


def _child_sd(torch, a, workdir):
    pipe = fm.sd_pipe(torch, workdir)
    pipe.to("tpu")
    _progress(stage="pipeline built, running")
    with torch.tpu.eager_mode(a["mode"]):
        with _Timed(torch) as t:
            img = fm.sd_call(torch, pipe, a["steps"])
    import numpy as np
    path = os.path.join(workdir, f"sd_{a['mode']}.npy")
    np.save(path, img)
    return dict(t.result, image_npy=path)


def _child_wlm(torch, a):
    model, data = fm.wlm_model(torch)
    with torch.tpu.eager_mode(a["mode"]):
        model = model.to("tpu")
        data = data.to("tpu")
        _progress(stage="model on tpu, training")
        with _Timed(torch) as t:
            r = fm.wlm_train(torch, model, data, a["batches"])
    res = dict(t.result, **r)
    res["compile_share_pct"] = 100.0 * res["compile_wall_s"] / res["wall_s"]
    return res


def _child_lstmcell(torch, a):
    import psutil
    proc = psutil.Process()
    model, x, y = fm.lstmcell_model(torch, a["steps"])
    rss = {}

    def on_iter(it):
        torch.tpu.synchronize()
        next(model.parameters()).reshape(-1)[:1].cpu()
        rss[it + 1] = proc.memory_info().rss / 2**20
        _progress(iterations_done=it + 1, seconds=time.perf_counter() - t.t0, rss_mib=rss, **_metrics(torch))

    with torch.tpu.eager_mode(a["mode"]):
        model = model.to("tpu")
        x, y = x.to("tpu"), y.to("tpu")
        _progress(stage="model on tpu, training")
        with _Timed(torch) as t:
            r = fm.lstmcell_train(torch, model, x, y, a["iters"], on_iter)
    last = max(rss)
    return dict(t.result, **r, rss_mib={str(k): round(v, 1) for k, v in rss.items()},
                rss_growth_mib=rss[last] - rss[1], rss_growth_pct=100.0 * (rss[last] - rss[1]) / rss[1])


_OUT = {"path": None, "partial": {}}


def _progress(**kw):
    """What the child has finished so far, in its result file: a child killed
    at its time or memory limit still reports it ("partial")."""
    _OUT["partial"].update(kw)
    if _OUT["path"]:
        with open(_OUT["path"], "w") as f:
            json.dump({"partial": _OUT["partial"]}, f, default=str)


def child_main(kind, a, out_path):
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch_tpu
    _OUT["path"] = out_path
    workdir = os.path.dirname(out_path)
    try:
        if kind == "smollm2":
            res = _child_smollm2(torch, a)
        elif kind == "sd":
            res = _child_sd(torch, a, workdir)
        elif kind == "wlm":
            res = _child_wlm(torch, a)
        elif kind == "lstmcell":
            res = _child_lstmcell(torch, a)
        else:
            raise ValueError(f"unknown child {kind!r}")
        fb = torch_tpu.fallback_counts()
        if fb:
            res["fallbacks"] = dict(fb)
        res["cache_dir"] = os.environ.get("TORCH_TPU_CACHE_DIR")
    except Exception as e:  # noqa: BLE001 - reported to the parent
        res = {"error": _fmt_err(e), "trace": traceback.format_exc().strip().splitlines()[-4:]}
        if _OUT["partial"]:
            res["partial"] = _OUT["partial"]
    with open(out_path, "w") as f:
        json.dump(res, f, default=str)
    return 0 if "error" not in res else 1


# ---- the parent side: children on cold / warm cache dirs ---------------------------

def _rss_limit_bytes():
    """A child whose processes hold more than this is killed (the machine is
    shared; a figure that grows without bound must not take it down):
    TORCH_TPU_BENCH_CHILD_RSS_GIB, else 60% of the host's memory.  A child
    is also killed when the host's available memory falls under 8%."""
    env = os.environ.get("TORCH_TPU_BENCH_CHILD_RSS_GIB")
    if env:
        return float(env) * 2**30
    return 0.6 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _group_rss(proc):
    """Bytes resident in proc and its descendants (psutil), or None."""
    try:
        procs = [proc] + proc.children(recursive=True)
    except Exception:  # noqa: BLE001 - the process has gone
        return None
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except Exception:  # noqa: BLE001
            pass
    return total


def _run_group(cmd, timeout, stdout=subprocess.PIPE, **kw):
    """Runs cmd in its own process group, watching its time and its memory;
    returns {"rc", "stdout", "stderr", "peak_rss_mib", "killed"} where killed
    is None or why the whole group (make's and pip's children too) was killed."""
    import signal
    import threading
    try:
        import psutil
    except ImportError:
        psutil = None
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE if stdout is subprocess.PIPE else subprocess.STDOUT,
                         text=True, start_new_session=True, **kw)
    state = {"peak": 0, "killed": None}
    limit = _rss_limit_bytes()
    done = threading.Event()

    def kill(why):
        state["killed"] = why
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def watch():
        proc = psutil.Process(p.pid)
        while not done.wait(0.5):
            rss = _group_rss(proc)
            if rss is None:
                return
            state["peak"] = max(state["peak"], rss)
            if rss > limit:
                kill(f"its processes held {rss / 2**30:.1f} GiB, over the bench's limit of {limit / 2**30:.1f} GiB "
                     f"(TORCH_TPU_BENCH_CHILD_RSS_GIB)")
                return
            vm = psutil.virtual_memory()
            if vm.available < 0.08 * vm.total:
                kill(f"the host's available memory fell to {vm.available / 2**30:.1f} GiB of {vm.total / 2**30:.1f} "
                     f"(the child held {rss / 2**30:.1f} GiB)")
                return

    w = threading.Thread(target=watch, daemon=True) if psutil is not None else None
    if w:
        w.start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(f"it ran over its {timeout:.0f}s limit")
        out, err = p.communicate()
    done.set()
    if w:
        w.join()
    return {"rc": p.returncode, "stdout": out, "stderr": err, "killed": state["killed"],
            "peak_rss_mib": round(state["peak"] / 2**20, 1) if state["peak"] else None}


class _Runner:
    """Starts the children of one section, each within the section's time left."""

    def __init__(self, limit_s, cap_s=600):
        self.deadline = time.time() + limit_s - 15
        self.cap_s = cap_s
        self.dirs = []
        self.work = tempfile.mkdtemp(prefix="tpu_bench_first_")

    def new_cache(self):
        d = tempfile.mkdtemp(prefix="tpu_bench_cache_")
        self.dirs.append(d)
        return d

    def child(self, kind, args, cache_dir):
        """The child's result, or {"error": ..., "partial": what it finished}."""
        fd, out = tempfile.mkstemp(prefix=f"{kind}_", suffix=".json", dir=self.work)
        os.close(fd)
        timeout = max(10.0, min(self.cap_s, self.deadline - time.time()))
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, PYTHONWARNINGS="ignore")
        env.pop("TORCH_TPU_EAGER_MODE", None)
        t0 = time.perf_counter()
        r = _run_group([sys.executable, os.path.abspath(__file__), "--child", kind, "--args", json.dumps(args),
                        "--out", out], env=env, cwd=REPO, timeout=timeout)
        process_s = time.perf_counter() - t0
        try:
            with open(out) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {}
        if r["killed"]:
            res = {"error": f"child {kind} {args} was killed: {r['killed']}", "partial": res.get("partial")}
        elif "error" not in res and ("partial" in res or not res):
            tail = [ln for ln in (r["stderr"] or "").strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
            res = {"error": f"child {kind} exited {r['rc']}: {tail[0][:250]}", "partial": res.get("partial")}
        elif "error" in res:
            res["error"] = f"child {kind}: {res['error']}"
        if res.get("partial") is None:
            res.pop("partial", None)
        res["process_s"] = process_s
        res["peak_rss_mib"] = r["peak_rss_mib"]
        return res

    def close(self):
        for d in self.dirs + [self.work]:
            shutil.rmtree(d, ignore_errors=True)


def _one_thread(torch, fn):
    """fn with torch.set_num_threads(1): on a loaded 2-core machine PyTorch
    CPU with its default threads can be many times slower than with one
    (its threads wait on each other), so every CPU figure is also taken so."""
    def f():
        prev = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return dict(fn(), threads=1)
        finally:
            torch.set_num_threads(prev)
    return f


def _vs_cpu(fig, keys, cpu, cpu_1thread, tpu_key="wall_s"):
    """fig[k + "_vs_cpu"] and fig[k + "_vs_cpu_1thread"]: tpu time / CPU time."""
    for k in keys:
        v = (fig.get(k) or {}).get(tpu_key)
        fig[f"{k}_vs_cpu"] = _ratio(v, cpu)
        fig[f"{k}_vs_cpu_1thread"] = _ratio(v, cpu_1thread)
        both = [r for r in (fig[f"{k}_vs_cpu"], fig[f"{k}_vs_cpu_1thread"]) if r is not None]
        fig[f"{k}_vs_faster_cpu"] = max(both) if both else None  # what the targets are judged on


def _cold_warm(measure, fig, runner, kind, args, warm=True, post=None):
    """fig["cold"], fig["warm"]: the same child on a new cache dir, then on it again."""
    d = runner.new_cache()

    def run():
        r = runner.child(kind, args, d)
        return post(r) if post and "error" not in r else r

    cold = measure(fig, "cold", run)
    if warm:
        if "error" in cold:
            fig["warm"] = {"error": "not run (the cold run failed)"}
        else:
            measure(fig, "warm", run)


def sec_smollm2(torch, measure, quick, limit_s):
    out = {"figure": "smollm2_first16"}
    batches = (1,) if quick else (1, 8)
    n, n_long = 16, (32 if quick else 64)
    measure(out, "params", lambda: {"new_tokens": n, "decode_tokens": n_long, "batches": list(batches),
                                    "eager_mode": "fused", "greedy": True, "cpu_threads": torch.get_num_threads(),
                                    "targets": {"cold_s": TARGETS["smollm2_cold_s"],
                                                "programs_tokens_2_to_end": TARGETS["smollm2_decode_programs"]}})
    runner = _Runner(limit_s)
    try:
        tok, cpu_model = fm.smollm2()
        for b in batches:
            fig = out.setdefault(f"b{b}", {})
            inputs = fm.smollm2_inputs(tok, b)
            ref = {}

            def cpu():
                with torch.no_grad():
                    t0 = time.perf_counter()
                    o = fm.generate(cpu_model, inputs, n)
                    first = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    fm.generate(cpu_model, inputs, n)
                    second = time.perf_counter() - t0
                ref["tokens"] = o.tolist()
                return {"first_s": first, "second_s": second}

            measure(fig, "cpu", cpu)

            def cpu_1thread():
                with torch.no_grad():
                    t0 = time.perf_counter()
                    fm.generate(cpu_model, inputs, n)
                return {"wall_s": time.perf_counter() - t0}

            measure(fig, "cpu_1thread", _one_thread(torch, cpu_1thread))

            def post(r):
                r["tokens_equal_cpu"] = r.pop("tokens") == ref.get("tokens")
                return r

            _cold_warm(measure, fig, runner, "smollm2", {"batch": b, "new_tokens": n}, post=post)
            _vs_cpu(fig, ("cold", "warm"), fig["cpu"].get("first_s"), fig["cpu_1thread"].get("wall_s"))
            fig["cold_meets_target"] = (fig["cold"].get("wall_s") or 1e9) <= TARGETS["smollm2_cold_s"]

        fig = out.setdefault("decode_b1", {})
        inputs = fm.smollm2_inputs(tok, 1)
        ref = {}

        def cpu_long():
            with torch.no_grad():
                t0 = time.perf_counter()
                o = fm.generate(cpu_model, inputs, n_long)
            ref["tokens"] = o.tolist()
            return {"wall_s": time.perf_counter() - t0, "new_tokens": n_long}

        measure(fig, "cpu", cpu_long)

        def long():
            r = runner.child("smollm2", {"batch": 1, "new_tokens": n_long, "count_from_token2": True},
                             runner.new_cache())
            if "error" not in r:
                r["tokens_equal_cpu"] = r.pop("tokens") == ref.get("tokens")
            return r

        r = measure(fig, "cold", long)
        fig["meets_target"] = (r.get("programs_from_token2") if "error" not in r else 1e9) <= \
            TARGETS["smollm2_decode_programs"]
    finally:
        runner.close()
    return out


def sec_sd(torch, measure, quick, limit_s):
    out = {"figure": "sd_tiny"}
    missing = fm.diffusers_missing()
    if missing:
        out["error"] = missing
        return out
    steps = 6
    measure(out, "params", lambda: {"prompt": fm.SD_PROMPT, "num_inference_steps": steps, "height": 32, "width": 32,
                                    "scheduler": "DDIM", "cpu_threads": torch.get_num_threads(),
                                    "target_cold_s": TARGETS["sd_cold_s"]})
    import numpy as np
    runner = _Runner(limit_s)
    try:
        ref = {}

        def cpu():
            pipe = fm.sd_pipe(torch, runner.work)
            t0 = time.perf_counter()
            fm.sd_call(torch, pipe, steps)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref["image"] = fm.sd_call(torch, pipe, steps)
            return {"wall_s": time.perf_counter() - t0, "first_s": first}

        measure(out, "cpu", cpu)

        def cpu_1thread():
            pipe = fm.sd_pipe(torch, runner.work)
            fm.sd_call(torch, pipe, steps)
            t0 = time.perf_counter()
            fm.sd_call(torch, pipe, steps)
            return {"wall_s": time.perf_counter() - t0}

        measure(out, "cpu_1thread", _one_thread(torch, cpu_1thread))

        def post(r):
            img = np.load(r.pop("image_npy"))
            r["image_shape"] = list(img.shape)
            if "image" in ref:
                r["max_abs_diff"] = float(np.abs(img - ref["image"]).max())
            return r

        for mode in ("strict", "fused"):
            fig = out.setdefault(mode, {})
            _cold_warm(measure, fig, runner, "sd", {"mode": mode, "steps": steps}, post=post)
            _vs_cpu(fig, ("cold", "warm"), out["cpu"].get("wall_s"), out["cpu_1thread"].get("wall_s"))
            fig["cold_meets_target"] = (fig["cold"].get("wall_s") or 1e9) <= TARGETS["sd_cold_s"]
    finally:
        runner.close()
    return out


def sec_wlm(torch, measure, quick, limit_s):
    out = {"figure": "wlm_loop"}
    batches = 10 if quick else 20
    measure(out, "params", lambda: dict(fm.WLM, batches=batches, cpu_threads=torch.get_num_threads(),
                                        update="p.data.add_(p.grad, alpha=-lr) after clip_grad_norm_",
                                        target_compile_share_pct=TARGETS["wlm_compile_share_pct"]))
    runner = _Runner(limit_s)
    try:
        def cpu():
            model, data = fm.wlm_model(torch)
            t0 = time.perf_counter()
            r = fm.wlm_train(torch, model, data, batches)
            return dict(wall_s=time.perf_counter() - t0, **r)

        measure(out, "cpu", cpu)
        measure(out, "cpu_1thread", _one_thread(torch, cpu))
        for mode in ("strict", "fused"):
            fig = out.setdefault(mode, {})
            _cold_warm(measure, fig, runner, "wlm", {"mode": mode, "batches": batches}, warm=False)
            cold = fig["cold"]
            _vs_cpu(fig, ("cold",), out["cpu"].get("wall_s"), out["cpu_1thread"].get("wall_s"))
            if "loss_last" in cold and "loss_last" in out["cpu"]:
                fig["loss_last_abs_diff"] = abs(cold["loss_last"] - out["cpu"]["loss_last"])
            if "compile_share_pct" in cold:
                fig["meets_target"] = cold["compile_share_pct"] <= TARGETS["wlm_compile_share_pct"]
    finally:
        runner.close()
    return out


def sec_lstmcell(torch, measure, quick, limit_s):
    out = {"figure": "lstmcell_loop"}
    steps, iters = (25 if quick else 1000), 3
    measure(out, "params", lambda: {"time_steps": steps, "batch": 97, "hidden": 51, "iterations": iters,
                                    "optimizer": "SGD lr 0.1", "eager_mode": "fused",
                                    "cpu_threads": torch.get_num_threads(),
                                    "target_vs_cpu": TARGETS["lstmcell_vs_cpu"]})
    runner = _Runner(limit_s)
    try:
        def cpu():
            model, x, y = fm.lstmcell_model(torch, steps)
            t0 = time.perf_counter()
            r = fm.lstmcell_train(torch, model, x, y, iters)
            return dict(wall_s=time.perf_counter() - t0, **r)

        measure(out, "cpu", cpu)
        measure(out, "cpu_1thread", _one_thread(torch, cpu))
        fig = out.setdefault("fused", {})
        _cold_warm(measure, fig, runner, "lstmcell", {"mode": "fused", "steps": steps, "iters": iters}, warm=False)
        _vs_cpu(fig, ("cold",), out["cpu"].get("wall_s"), out["cpu_1thread"].get("wall_s"))
        if fig["cold_vs_faster_cpu"] is not None:
            fig["meets_target"] = fig["cold_vs_faster_cpu"] <= TARGETS["lstmcell_vs_cpu"]
        if "loss_last" in fig["cold"] and "loss_last" in out["cpu"]:
            fig["loss_last_abs_diff"] = abs(fig["cold"]["loss_last"] - out["cpu"]["loss_last"])
    finally:
        runner.close()
    return out


def _nanogpt_run(torch, model, dev, batches, warmup, compile_=False):
    model = model.to(dev).tie()
    fwd = torch.compile(model, backend="tpu") if compile_ else model
    opt = torch.optim.AdamW(model.parameters(), lr=fm.NANOGPT["lr"])
    times, lv = [], None
    if dev == "tpu":
        torch.tpu.reset_metrics()
    m_warm = None
    for i, (x, y) in enumerate(batches):
        if i == warmup and dev == "tpu":
            m_warm = _metrics(torch)
        t0 = time.perf_counter()
        x, y = x.to(dev), y.to(dev)
        loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    res = {"ms_per_iter": _median(times) * 1e3, "loss_last": lv, "runs_ms": [round(t * 1e3, 2) for t in times]}
    if dev == "tpu":
        m = _metrics(torch)
        res["warmup"] = m_warm
        res.update(_delta(m_warm, m))  # during the timed iterations
    return res


def sec_nanogpt(torch, measure, quick, limit_s):
    out = {"figure": "nanogpt_char"}
    warmup, timed = 3, (5 if quick else 10)
    measure(out, "params", lambda: dict(fm.NANOGPT, warmup=warmup, timed=timed, cpu_threads=torch.get_num_threads(),
                                        compiled_eager_mode="fused", target_vs_cpu=TARGETS["nanogpt_vs_cpu"],
                                        what="median ms/iter: batch to device, forward, backward, AdamW step, "
                                             "loss.item()"))
    base = fm.nanogpt(torch)
    batches = fm.nanogpt_batches(torch, warmup + timed)
    measure(out, "cpu", lambda: _nanogpt_run(torch, copy.deepcopy(base), "cpu", batches, warmup))
    measure(out, "cpu_1thread", _one_thread(torch, lambda: _nanogpt_run(torch, copy.deepcopy(base), "cpu", batches,
                                                                        warmup)))

    def tpu(compile_):
        def f():
            with torch.tpu.eager_mode("fused"):
                return _nanogpt_run(torch, copy.deepcopy(base), "tpu", batches, warmup, compile_)
        return f

    measure(out, "tpu_fused", tpu(False))
    measure(out, "tpu_compiled", tpu(True))
    _vs_cpu(out, ("tpu_fused", "tpu_compiled"), out["cpu"].get("ms_per_iter"), out["cpu_1thread"].get("ms_per_iter"),
            "ms_per_iter")
    for k in ("tpu_fused", "tpu_compiled"):
        if out[f"{k}_vs_faster_cpu"] is not None:
            out[f"{k}_meets_target"] = out[f"{k}_vs_faster_cpu"] <= TARGETS["nanogpt_vs_cpu"]
    return out


def sec_clone(torch, measure, quick, limit_s):
    out = {"figure": "fresh_clone_demo"}
    if quick:
        out["skipped"] = "not run in quick mode"
        return out
    demo_limit = min(900, limit_s - 60)
    measure(out, "params", lambda: {"source": REPO, "what": "git clone --quiet of the committed tree (not the "
                                    "working tree's changes), then `make demo` in the clone: it creates its venv "
                                    "(slow), builds, runs the demo",
                                    "demo_limit_s": demo_limit, "target_s": TARGETS["fresh_clone_demo_s"]})
    tmp = tempfile.mkdtemp(prefix="tpu_bench_clone_")
    try:
        def run():
            dst = os.path.join(tmp, "fresh")
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
            t0 = time.perf_counter()
            subprocess.run(["git", "clone", "--quiet", REPO, dst], check=True, capture_output=True, text=True,
                           timeout=120)
            clone_s = time.perf_counter() - t0
            log = os.path.join(tmp, "demo.log")
            # as a fresh shell would: no venv of this checkout, no torch_tpu settings
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("VIRTUAL_ENV", "TORCH_TPU_", "PYTHONPATH"))}
            env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                          if p and not os.path.abspath(p).startswith(os.path.join(REPO, ".venv")))
            t0 = time.perf_counter()
            with open(log, "w") as f:
                r = _run_group(["make", "demo"], cwd=dst, env=env, stdout=f, timeout=demo_limit)
            demo_s = time.perf_counter() - t0
            with open(log, errors="replace") as f:
                tail = [ln.rstrip() for ln in f.read().splitlines() if ln.strip()][-6:]
            if r["killed"] or r["rc"] != 0:
                what = f"was killed: {r['killed']}" if r["killed"] else f"exited {r['rc']}"
                raise RuntimeError(f"make demo in the fresh clone {what}: {(tail or ['(no output)'])[-1][:200]}")
            return {"wall_s": demo_s, "clone_s": clone_s, "commit": head, "log_tail": tail,
                    "meets_target": demo_s <= TARGETS["fresh_clone_demo_s"]}

        measure(out, "demo", run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# the sections bench/run.py registers, in the order they run ("first" runs them all)
SECTIONS = {"first_smollm2": sec_smollm2, "first_sd": sec_sd, "first_wlm": sec_wlm, "first_lstmcell": sec_lstmcell,
            "first_nanogpt": sec_nanogpt, "first_clone": sec_clone}


# ---- bench/results.md ---------------------------------------------------------------

def _f(v, fmt="{:.2f}"):
    return "n/a" if v is None else fmt.format(v)


def _run_cell(r, key="wall_s", fmt="{:.2f}"):
    """'12.3 s [41 compiled, 20.1 s]' for a child's run."""
    if not isinstance(r, dict):
        return "n/a"
    if "error" in r:
        return "error"
    s = _f(r.get(key), fmt) + " s" if key.endswith("_s") else _f(r.get(key), fmt)
    s += f" [{r.get('compiles', 0)} compiled, {_f(r.get('compile_s'), '{:.1f}')} s"
    if r.get("disk_loads"):
        s += f"; {r['disk_loads']} from disk"
    s += "]"
    if r.get("fallbacks"):
        s += " (fb)"
    return s


def _cpu_cell(cell, cpu, cpu_1thread, key="wall_s", key_1thread=None, fmt="{:.2f}"):
    """'<default threads> / <1 thread> (1 thr)'."""
    return f"{cell(cpu, key, fmt)} / {cell(cpu_1thread, key_1thread or key, fmt)} (1 thr)"


def _vs(fig, k):
    """'1.23x / 0.98x CPU' (default threads / 1 thread)."""
    return f"{_f(fig.get(k + '_vs_cpu'))}x / {_f(fig.get(k + '_vs_cpu_1thread'))}x CPU"


def _yes(v):
    return "n/a" if v is None else ("yes" if v else "NO")


def _errs(label, fig, notes):
    if not isinstance(fig, dict):
        return
    for k, v in fig.items():
        if isinstance(v, dict) and "error" in v:
            notes.append(f"- {label}/{k}: could not be measured: {v['error']}")
        if isinstance(v, dict) and v.get("fallbacks"):
            fb = ", ".join(f"{a} x{b}" for a, b in list(v["fallbacks"].items())[:8])
            notes.append(f"- {label}/{k}: ran with CPU fallback for {fb}")


def markdown_rows(R, cell):
    """Rows for bench/results.md ([figure, PyTorch CPU, tpu strict, tpu fused, notes]) and notes, for the
    first_* sections present in R (results["sections"])."""
    rows, notes = [], []

    def sec_error(name):
        s = R.get(name) or {}
        if s.get("error"):
            notes.append(f"- {name}: {s['error']}")
        return s

    if "first_smollm2" in R:
        s = sec_error("first_smollm2")
        for b in (1, 8):
            fig = s.get(f"b{b}")
            if not fig:
                continue
            cold, warm = fig.get("cold", {}), fig.get("warm", {})
            rows.append([f"SmolLM2-135M first generate, 16 tokens, batch {b}: cold / warm (s) [compiled, compile s]",
                         _cpu_cell(cell, fig.get("cpu"), fig.get("cpu_1thread"), "first_s", "wall_s"), "",
                         _run_cell(cold) + " / " + _run_cell(warm),
                         f"cold {_vs(fig, 'cold')}, target <= {TARGETS['smollm2_cold_s']:.0f} s "
                         f"({_yes(fig.get('cold_meets_target'))}); tokens == CPU: cold {_yes(cold.get('tokens_equal_cpu'))}"
                         f", warm {_yes(warm.get('tokens_equal_cpu'))}"])
            _errs(f"first_smollm2/b{b}", fig, notes)
        n_long = _get_param(s, "decode_tokens") or 64
        fig = s.get("decode_b1")
        if fig:
            c = fig.get("cold", {})
            rows.append([f"SmolLM2 {n_long}-token generate, batch 1: programs after token 2 (cold)",
                         cell(fig.get("cpu"), "wall_s", "{:.2f}") + " s", "",
                         "error" if "error" in c else
                         f"{c.get('programs_from_token2')} ({c.get('compiles_from_token2')} compiled, "
                         f"{_f(c.get('compile_s_from_token2'), '{:.1f}')} s); whole: {_run_cell(c)}",
                         f"target <= {TARGETS['smollm2_decode_programs']} ({_yes(fig.get('meets_target'))}); "
                         f"tokens == CPU: {_yes(c.get('tokens_equal_cpu'))}"])
            _errs("first_smollm2/decode_b1", fig, notes)

    if "first_sd" in R:
        s = sec_error("first_sd")
        st, fu = s.get("strict", {}), s.get("fused", {})

        def sd_cell(fig):
            return _run_cell(fig.get("cold")) + " / " + _run_cell(fig.get("warm"))

        rows.append(["tiny Stable Diffusion, 6 DDIM steps 32x32, 1st call: cold / warm (s)",
                     _cpu_cell(cell, s.get("cpu"), s.get("cpu_1thread")) + ", 2nd call", sd_cell(st) if st else "",
                     sd_cell(fu) if fu else "",
                     f"cold strict {_vs(st, 'cold')}, fused {_vs(fu, 'cold')}; "
                     f"target <= {TARGETS['sd_cold_s']:.0f} s cold: strict {_yes(st.get('cold_meets_target'))}, "
                     f"fused {_yes(fu.get('cold_meets_target'))}; max abs(image - CPU's): strict "
                     f"{_f(_g(st, 'cold', 'max_abs_diff'), '{:.1e}')}, fused {_f(_g(fu, 'cold', 'max_abs_diff'), '{:.1e}')}"])
        _errs("first_sd", s, notes)
        for m in ("strict", "fused"):
            _errs(f"first_sd/{m}", s.get(m), notes)

    if "first_wlm" in R:
        s = sec_error("first_wlm")
        st, fu = s.get("strict", {}), s.get("fused", {})
        nb = _get_param(s, "batches") or 20

        def share(fig):
            v = _g(fig, "cold", "compile_share_pct")
            return "" if v is None else f"{v:.0f}% compile ({_yes(fig.get('meets_target'))})"

        rows.append([f"word_language_model loop, {nb} batches, cold (s) [compiled, compile s]",
                     _cpu_cell(cell, s.get("cpu"), s.get("cpu_1thread")), _run_cell(st.get("cold")) if st else "",
                     _run_cell(fu.get("cold")) if fu else "",
                     f"cold strict {_vs(st, 'cold')}, fused {_vs(fu, 'cold')}; "
                     f"target compile wall time <= {TARGETS['wlm_compile_share_pct']:.0f}% of wall (time while any "
                     f"compile ran): strict {share(st)}, fused "
                     f"{share(fu)}; last loss CPU {_f(_g(s, 'cpu', 'loss_last'), '{:.4f}')}, strict "
                     f"{_f(_g(st, 'cold', 'loss_last'), '{:.4f}')}, fused {_f(_g(fu, 'cold', 'loss_last'), '{:.4f}')}"])
        _errs("first_wlm", s, notes)
        for m in ("strict", "fused"):
            _errs(f"first_wlm/{m}", s.get(m), notes)

    if "first_lstmcell" in R:
        s = sec_error("first_lstmcell")
        fu = s.get("fused", {})
        c = fu.get("cold", {})
        rows.append([f"time_sequence_prediction, 2 LSTMCells x {_get_param(s, 'time_steps') or 1000} steps, "
                     f"3 iterations, cold (s)", _cpu_cell(cell, s.get("cpu"), s.get("cpu_1thread")), "", _run_cell(c),
                     f"{_vs(fu, 'cold')}, target <= {TARGETS['lstmcell_vs_cpu']}x the faster CPU "
                     f"({_yes(fu.get('meets_target'))}); RSS iter 1 -> 3: {_f(c.get('rss_growth_mib'), '{:+.1f}')} MiB"
                     f" ({_f(c.get('rss_growth_pct'), '{:+.1f}')}%)"])
        _errs("first_lstmcell", s, notes)
        _errs("first_lstmcell/fused", fu, notes)

    if "first_nanogpt" in R:
        s = sec_error("first_nanogpt")
        comp = s.get("tpu_compiled") or {}
        rows.append(["nanoGPT char (4L, 128, block 64, batch 12), AdamW, warm ms/iter [compiled in timed iters]",
                     _cpu_cell(cell, s.get("cpu"), s.get("cpu_1thread"), "ms_per_iter", fmt="{:.1f}"), "",
                     _run_cell(s.get("tpu_fused"), "ms_per_iter", "{:.1f}"),
                     f"fused {_vs(s, 'tpu_fused')} ({_yes(s.get('tpu_fused_meets_target'))}); compiled "
                     f"{_run_cell(comp, 'ms_per_iter', '{:.1f}')} ms, {_vs(s, 'tpu_compiled')} "
                     f"({_yes(s.get('tpu_compiled_meets_target'))}); target <= {TARGETS['nanogpt_vs_cpu']}x the faster CPU"])
        _errs("first_nanogpt", s, notes)

    if "first_clone" in R:
        s = sec_error("first_clone")
        if s.get("skipped"):
            notes.append(f"- first_clone: {s['skipped']}")
        elif s.get("demo"):
            d = s["demo"]
            rows.append(["fresh `git clone` + `make demo` (s), committed tree", "",
                         "error" if "error" in d else f"{d['wall_s']:.0f}", "",
                         f"target <= {TARGETS['fresh_clone_demo_s']:.0f} s ({_yes(d.get('meets_target'))}); "
                         "creates the clone's venv"])
            _errs("first_clone", s, notes)
    return rows, notes


def _g(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _get_param(s, key):
    return _g(s, "params", key)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", required=True, choices=["smollm2", "sd", "wlm", "lstmcell"])
    ap.add_argument("--args", default="{}", help="the child's arguments, JSON")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return child_main(a.child, json.loads(a.args), a.out)


if __name__ == "__main__":
    sys.exit(main())
