"""ModuleInfo sweep of the tpu device against PyTorch CPU.

Full sweep (every ModuleInfo of torch's module_db supporting float32,
outputs, buffers and gradients of inputs and parameters, train and eval
where they differ), writes tools/module_results.json:

    .venv/bin/python tools/module_sweep.py

Options:
    --jobs N             worker processes (default 2)
    --shard i/n          only modules i, i+n, i+2n ... of the sorted list
    --modules a,b,c      only these ModuleInfos (names like nn.LSTM; prefix* ok)
    --max-samples K      at most K ModuleInputs per module and mode
    --out PATH           results file (default tools/module_results.json)
    --write-baseline     also write tests/python/module_baseline.json
                         (test_modules.py guards its "pass" modules)
    --quiet              no per-module lines
The eager mode is the environment's (TORCH_TPU_EAGER_MODE, default strict).
Comparison and classification rules: tests/python/module_util.py.
"""
import argparse
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "tools"))

import module_util as MU  # noqa: E402
import opinfo_util as U  # noqa: E402
from opinfo_sweep import select  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TORCH_TPU_MODULE_JOBS", "2")))
    ap.add_argument("--shard", default=None)
    ap.add_argument("--modules", default=None)
    ap.add_argument("--max-samples", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "tools", "module_results.json"))
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one module may take")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import warnings
    warnings.simplefilter("ignore")
    import torch
    keys = select(MU.load_module_db().keys(), a.modules, a.shard)
    mode = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
    print(f"module sweep: {len(keys)} ModuleInfos, {a.jobs} workers, eager mode {mode}", flush=True)
    t0 = time.time()
    done = [0]

    def log(r):
        done[0] += 1
        if a.quiet:
            return
        extra = ""
        if r["status"] == "fail":
            extra = "  " + (r.get("error") or "")[:160]
        elif r["status"] == "fallback-pass":
            extra = "  fallback: " + ",".join(r.get("fallbacks", {}))[:160]
        elif r["status"] == "skip":
            extra = "  " + (r.get("reason") or "")[:120]
        print(f"[{done[0]:4d}/{len(keys)} {time.time() - t0:6.0f}s] {r['status']:13s} {r['op']}{extra}", flush=True)

    results = MU.run_sweep(keys, jobs=a.jobs, max_samples=a.max_samples, timeout=a.timeout, log=log)
    counts = U.summarize(results)
    elapsed = time.time() - t0
    kinds = U.failure_kinds(results)
    doc = {
        "meta": {
            "torch": torch.__version__,
            "eager_mode": mode,
            "git_commit": U.git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": platform.machine(),
            "modules": len(keys),
            "max_samples": a.max_samples,
            "shard": a.shard,
            "seconds": round(elapsed, 1),
            "tolerance_default": {"atol": MU.BASE_ATOL, "rtol": MU.BASE_RTOL},
            "tolerance_overrides": {k: {"atol": v[0], "rtol": v[1], "why": v[2]} for k, v in MU.TOLERANCE.items()},
        },
        "counts": counts,
        "fallback_ops": U.fallback_table(results),
        "failure_kinds": kinds,
        "results": {k: results[k] for k in sorted(results)},
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"\npass {counts['pass']}  fallback-pass {counts['fallback-pass']}  fail {counts['fail']}  "
          f"skip {counts['skip']}  ({len(keys)} ModuleInfos, {elapsed:.0f}s) -> {os.path.relpath(a.out, REPO)}")
    if kinds:
        print("failures by kind:")
        for e, ks in list(kinds.items())[:12]:
            print(f"  {len(ks):3d}  {e}   [{', '.join(ks[:4])}{', ...' if len(ks) > 4 else ''}]")
    fb = doc["fallback_ops"]
    if fb:
        print("fallbacks (aten op: modules): " + ", ".join(f"{k} ({v})" for k, v in list(fb.items())[:15]))
    if a.write_baseline:
        if a.shard or a.modules or a.max_samples:
            print("--write-baseline needs the full sweep (no --shard/--modules/--max-samples); not written")
            return 2
        base = {
            "_doc": "ModuleInfos that passed (outputs, buffers and gradients match CPU, no CPU fallback) in the "
                    "full sweep; tests/python/test_modules.py fails if one of them stops passing. "
                    "Regenerate: .venv/bin/python tools/module_sweep.py --write-baseline",
            "meta": doc["meta"],
            "counts": counts,
            "pass": sorted(k for k, r in results.items() if r["status"] == "pass"),
            "fallback-pass": {k: sorted(r.get("fallbacks", {})) for k, r in sorted(results.items())
                              if r["status"] == "fallback-pass"},
            "fail": {k: r.get("error") for k, r in sorted(results.items()) if r["status"] == "fail"},
            "skip": {k: r.get("reason") for k, r in sorted(results.items()) if r["status"] == "skip"},
            "all_modules": sorted(results),
            # cost of each passing module in this sweep (test_modules.py sizes its default run with it)
            "cost": {k: {"seconds": r.get("seconds"), "samples": r.get("samples")}
                     for k, r in sorted(results.items()) if r["status"] == "pass"},
        }
        with open(MU.BASELINE, "w") as f:
            json.dump(base, f, indent=1)
            f.write("\n")
        print(f"baseline: {len(base['pass'])} passing ModuleInfos -> {os.path.relpath(MU.BASELINE, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
