"""An unchanged CUDA training script through torch_tpu.run (issue 25's
figure): examples/cuda_unchanged/bench_cuda.py (a small GPT written the way
CUDA tutorials write it: `.cuda()`, pinned non_blocking copies,
`torch.autocast(device_type="cuda")`, `torch.amp.GradScaler("cuda")`,
`torch.cuda.synchronize()` around each step, `torch.compile` with its own
`--compile` flag) in fresh processes:

- tpu: `torch_tpu.run`'s main (what `python -m torch_tpu.run script` calls)
  with TORCH_TPU_EAGER_MODE=strict, fused, and fused + the script's
  --compile; each on an empty TORCH_TPU_CACHE_DIR (and inductor cache), so
  the first step is a cold start; the engine's counters (torch.tpu.metrics())
  are printed after the script ends;
- PyTorch CPU: the same file under plain `python` (no CUDA on this machine,
  so the script's `device = "cuda" if torch.cuda.is_available() else "cpu"`
  picks the CPU), with the default intra-op threads and with
  OMP_NUM_THREADS=1 (the steadier figure on a loaded machine); full mode
  also times the script's --compile on CPU (Inductor, cold cache);
- the same with autocast bfloat16 (--dtype bfloat16): tpu fused vs CPU.

ms/step: median of the steps after the warm-up; first step: step 0 of the
cold process.  The final loss of each tpu run must agree with the CPU run of
the same dtype (float32: 1e-4 relative, bfloat16: 5e-3): otherwise the
figure records an error.  The `cuda_unchanged` section of bench/run.py, or
alone:

    .venv/bin/python bench/cuda_unchanged.py [--quick] [--json PATH]
"""
import argparse
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
SCRIPT = os.path.join(REPO, "examples", "cuda_unchanged", "bench_cuda.py")

# torch_tpu.run's main as `python -m torch_tpu.run` calls it, then the counters.
# The one instrument: the script's own torch.cuda.synchronize() (torch.tpu's
# under the transfer) also notes the engine's compile and execution counters
# (torch.tpu.cache_stats(), ~4 us), so that the steps after the warm-up can be
# counted apart from the first ones.
RUN_WRAPPER = r"""
import json, sys
import torch, torch_tpu
import torch_tpu.transfer as transfer
import torch_tpu.run as tpu_run
transfer.apply()
_sync, SNAPS = torch.cuda.synchronize, []
def synchronize(device=None):
    _sync(device)
    s = torch.tpu.cache_stats()
    SNAPS.append((s["compiles"], s["executions"]))
torch.cuda.synchronize = synchronize
rc = tpu_run.main(sys.argv[1:])
m = torch.tpu.metrics()
try:
    import torch._dynamo.utils as du
    graphs = int(du.counters["stats"]["unique_graphs"])
except Exception:
    graphs = None
print("CUDA_BENCH_STATS " + json.dumps({
    "rc": rc, "compiles": m["compile"]["count"], "compile_seconds": m["compile"]["seconds"],
    "recompiles": m["compile"]["recompiles"], "disk_loads": m["disk_load"]["count"],
    "executions": m["execute"]["count"], "host_waits": m["host_wait"]["count"],
    "dynamo_graphs": graphs, "fallbacks": torch_tpu.fallback_counts(), "snaps": SNAPS}), flush=True)
"""

TOL = {"float32": 1e-4, "bfloat16": 5e-3}


def _last_json(stdout, prefix=None):
    for ln in reversed(stdout.splitlines()):
        ln = ln.strip()
        if prefix is not None:
            if ln.startswith(prefix):
                return json.loads(ln[len(prefix):])
        elif ln.startswith("{"):
            return json.loads(ln)
    return None


def run_script(target, args, warmup, timeout, eager_mode=None, threads=None):
    """One fresh process of the script: on tpu through torch_tpu.run, or on
    the CPU under plain python.  Returns the figure's dict."""
    cache = tempfile.mkdtemp(prefix="tpu_bench_cuda_")
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=os.path.join(cache, "tpu"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    env.pop("TORCH_TPU_TRANSFER", None)
    if eager_mode:
        env["TORCH_TPU_EAGER_MODE"] = eager_mode
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if target == "tpu":
        cmd = [sys.executable, "-c", RUN_WRAPPER, SCRIPT, *args]
    else:
        # plain python; torch_tpu autoloads with torch but nothing maps cuda
        cmd = [sys.executable, SCRIPT, *args]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the script ran over {timeout:.0f}s (killed)") from None
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.time() - t0
    res = None
    try:
        res = _last_json(r.stdout)
    except ValueError:
        pass
    if r.returncode != 0 or res is None:
        tail = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise RuntimeError(f"script exited {r.returncode}: {tail[0][:250]}")
    ms = res["step_ms"]
    out = {"ms_per_step": statistics.median(ms[warmup:]), "first_step_ms": ms[0], "process_s": wall,
           "final_loss": res["final_loss"], "device_seen_by_script": res["device"],
           "steps": len(ms), "warmup_steps": warmup, "runs_ms": [round(t, 1) for t in ms[warmup:]],
           "cold_cache": True}
    out["steps_per_s"] = 1e3 / out["ms_per_step"]
    if target == "tpu":
        st = _last_json(r.stdout, "CUDA_BENCH_STATS ")
        if st:
            fb = st.pop("fallbacks", None)
            if fb:
                out["fallbacks"] = fb
            st.pop("rc", None)
            snaps = st.pop("snaps", None) or []
            out.update(st)
            # the script synchronizes before and after each step
            if len(snaps) == 2 * len(ms) and len(ms) > warmup:
                after = snaps[1::2]
                out["first_step_compiles"] = after[0][0] - snaps[0][0]
                out["timed_steps_compiles"] = after[-1][0] - after[warmup - 1][0]
                out["programs_run_per_timed_step"] = (after[-1][1] - after[warmup - 1][1]) / (len(ms) - warmup)
        if res["device"] != "cuda":
            raise RuntimeError(f"under torch_tpu.run the script saw device {res['device']!r}, not cuda")
    elif threads:
        out["omp_num_threads"] = threads
    return out


def sec_cuda_unchanged(measure, quick):
    steps, warmup = (14, 4) if quick else (40, 5)
    timeout = 300 if quick else 600
    base = ["--steps", str(steps)]
    out = {"params": {"script": os.path.relpath(SCRIPT, REPO), "model": "GPT 2 layers, d=128, 4 heads, seq 64, "
                      "batch 8, vocab 256, AdamW, grad clipping", "steps": steps, "warmup_steps": warmup,
                      "tpu_launch": "torch_tpu.run (fresh process, empty TORCH_TPU_CACHE_DIR: first step is cold)",
                      "compiled": "TORCH_TPU_EAGER_MODE=fused + the script's --compile (torch.compile default "
                                  "backend)", "loss_tolerance_rel": TOL,
                      "noise": "shared, loaded 2-core machine: times are noisy; counts are not"}}
    figs = [
        ("cpu", lambda: run_script("cpu", base, warmup, timeout)),
        ("cpu_1thread", lambda: run_script("cpu", base, warmup, timeout, threads=1)),
        ("strict", lambda: run_script("tpu", base, warmup, timeout, eager_mode="strict")),
        ("fused", lambda: run_script("tpu", base, warmup, timeout, eager_mode="fused")),
        ("compiled", lambda: run_script("tpu", base + ["--compile"], warmup, timeout, eager_mode="fused")),
        ("cpu_bf16", lambda: run_script("cpu", base + ["--dtype", "bfloat16"], warmup, timeout, threads=1)),
        ("fused_bf16", lambda: run_script("tpu", base + ["--dtype", "bfloat16"], warmup, timeout,
                                          eager_mode="fused")),
    ]
    if not quick:  # Inductor's cold compile of the step takes minutes here
        figs.insert(2, ("cpu_compiled", lambda: run_script("cpu", base + ["--compile"], warmup, timeout,
                                                           threads=1)))
    else:
        out["cpu_compiled"] = {"skipped": "quick mode: Inductor's cold compile of the step takes ~2 min here"}
    for name, fn in figs:
        measure(out, name, fn)
    refs = {"float32": out.get("cpu"), "bfloat16": out.get("cpu_bf16")}
    if not _ok(refs["float32"]):
        refs["float32"] = out.get("cpu_1thread")
    for name in ("strict", "fused", "compiled", "fused_bf16"):
        fig = out.get(name)
        if not _ok(fig):
            continue
        dtype = "bfloat16" if name.endswith("bf16") else "float32"
        ref = refs[dtype]
        for cname in ("cpu", "cpu_1thread") if dtype == "float32" else ("cpu_bf16",):
            if _ok(out.get(cname)):
                fig[f"speedup_vs_{cname}"] = out[cname]["ms_per_step"] / fig["ms_per_step"]
        if not _ok(ref):
            fig["loss_check"] = "no CPU reference"
            continue
        diff = abs(fig["final_loss"] - ref["final_loss"])
        fig["loss_diff_vs_cpu"] = diff
        lim = TOL[dtype] * max(1.0, abs(ref["final_loss"]))
        if not diff <= lim:
            fig["error"] = (f"final loss {fig['final_loss']:.6f} differs from PyTorch CPU's "
                            f"{ref['final_loss']:.6f} by {diff:.2e} (tolerance {lim:.1e})")
    if _ok(out.get("cpu_compiled")) and _ok(out.get("cpu_1thread")):
        d = abs(out["cpu_compiled"]["final_loss"] - out["cpu_1thread"]["final_loss"])
        out["cpu_compiled"]["loss_diff_vs_cpu"] = d
    return out


def _ok(fig):
    return isinstance(fig, dict) and "error" not in fig and "ms_per_step" in fig


def markdown_rows(fig, cell):
    """Rows for bench/results.md: [figure, PyTorch CPU, tpu strict, tpu fused, notes]."""
    label = "unchanged CUDA script via torch_tpu.run (GPT 2L d128 s64 b8, AdamW), ms/step"
    if "error" in fig and not any(k in fig for k in ("cpu", "strict", "fused")):
        return [[label, "error", "", "", fig["error"][:120]]]
    g = {k: fig.get(k) for k in ("cpu", "cpu_1thread", "cpu_compiled", "strict", "fused", "compiled",
                                "cpu_bf16", "fused_bf16")}

    def note_of(k, key, fmt):
        f = g.get(k)
        if not isinstance(f, dict):
            return "n/a"
        if "skipped" in f:
            return "skipped"
        return cell(f, key, fmt)

    def speed(k):
        f = g.get(k)
        v = f.get("speedup_vs_cpu_1thread") if isinstance(f, dict) else None
        return f"{v:.2f}x" if v else "n/a"

    def counts(f):
        if not isinstance(f, dict) or "compiles" not in f:
            return cell(f, "compiles", "{:.0f}")
        ppst = f.get("programs_run_per_timed_step")
        return (f"{f['compiles']} / {f.get('first_step_compiles', '?')} / {f.get('timed_steps_compiles', '?')}; "
                + (f"{ppst:.0f}" if ppst is not None else "?"))

    rows = [[label, cell(g["cpu"], "ms_per_step", "{:.1f}"), cell(g["strict"], "ms_per_step", "{:.1f}"),
             cell(g["fused"], "ms_per_step", "{:.1f}"),
             f"compiled (fused + --compile): {note_of('compiled', 'ms_per_step', '{:.1f}')}; CPU 1 thread "
             f"{note_of('cpu_1thread', 'ms_per_step', '{:.1f}')}, CPU --compile "
             f"{note_of('cpu_compiled', 'ms_per_step', '{:.1f}')}; vs CPU 1 thread: strict {speed('strict')}, "
             f"fused {speed('fused')}, compiled {speed('compiled')}; noisy machine"],
            ["  first step, cold cache (s)", cell(g["cpu"], "first_step_ms", "{:.2f}", 1e-3),
             cell(g["strict"], "first_step_ms", "{:.2f}", 1e-3), cell(g["fused"], "first_step_ms", "{:.2f}", 1e-3),
             f"compiled {cell(g['compiled'], 'first_step_ms', '{:.2f}', 1e-3)}"],
            ["  programs compiled: whole run / first step / timed steps; programs run per timed step", "",
             counts(g["strict"]), counts(g["fused"]), f"compiled {counts(g['compiled'])}"],
            ["  final loss (must match CPU)", cell(g["cpu"], "final_loss", "{:.5f}"),
             cell(g["strict"], "final_loss", "{:.5f}"), cell(g["fused"], "final_loss", "{:.5f}"),
             f"compiled {note_of('compiled', 'final_loss', '{:.5f}')}"],
            ["  autocast bfloat16 (ms/step)", cell(g["cpu_bf16"], "ms_per_step", "{:.1f}"), "",
             cell(g["fused_bf16"], "ms_per_step", "{:.1f}"),
             f"CPU 1 thread; final loss {note_of('cpu_bf16', 'final_loss', '{:.4f}')} / "
             f"{note_of('fused_bf16', 'final_loss', '{:.4f}')}"]]
    return rows


def notes(fig):
    out = []
    if isinstance(fig, dict) and fig.get("error") and not any(k in fig for k in ("cpu", "strict")):
        return [f"- cuda_unchanged: {fig['error']}"]
    for k, v in (fig or {}).items():
        if isinstance(v, dict) and "error" in v:
            out.append(f"- cuda_unchanged/{k}: {v['error']}")
        if isinstance(v, dict) and v.get("fallbacks"):
            fb = ", ".join(f"{a} x{b}" for a, b in list(v["fallbacks"].items())[:8])
            out.append(f"- cuda_unchanged/{k}: ran with CPU fallback for {fb}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    def measure(fig, key, fn):
        try:
            fig[key] = fn()
        except Exception as e:  # noqa: BLE001 - recorded
            fig[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
        return fig[key]

    out = sec_cuda_unchanged(measure, a.quick)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
