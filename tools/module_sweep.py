"""ModuleInfo sweep of the tpu device against PyTorch CPU.

Full sweep (every ModuleInfo of torch's module_db supporting float32,
outputs, buffers and gradients of inputs and parameters, train and eval
where they differ), writes tools/module_results_<eager mode>.json:

    .venv/bin/python tools/module_sweep.py

Options:
    --jobs N             worker processes (default 2)
    --shard i/n          only modules i, i+n, i+2n ... of the sorted list
    --modules a,b,c      only these ModuleInfos (names like nn.LSTM; prefix* ok)
    --max-samples K      at most K ModuleInputs per module and mode
    --out PATH           results file (default tools/module_results_<mode>.json)
    --write-baseline     also write this eager mode's section of
                         tests/python/module_baseline.json (test_modules.py
                         guards its "pass" modules in that mode)
    --quiet              no per-module lines
The eager mode is the environment's (TORCH_TPU_EAGER_MODE, default strict).
Fused mode compiles one program per sample (strict and debug reuse per-op
programs across samples): a cold fused sweep of every sample takes hours
(nn.LinearCrossEntropyLoss has 857 samples); use --max-samples there.
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


def write_baseline(mode, doc, results):
    """Replaces this eager mode's section of tests/python/module_baseline.json
    (the other modes' sections are kept)."""
    try:
        with open(MU.BASELINE) as f:
            base = json.load(f)
    except (OSError, ValueError):
        base = {}
    base["_doc"] = ("Per eager mode: the ModuleInfos that passed (outputs, buffers and gradients match CPU, no CPU "
                    "fallback) in a sweep of every module; tests/python/test_modules.py fails if one of them stops "
                    "passing in that mode. Regenerate a mode: TORCH_TPU_EAGER_MODE=<mode> .venv/bin/python "
                    "tools/module_sweep.py --write-baseline [--max-samples K]")
    base.setdefault("modes", {})[mode] = {
        "meta": doc["meta"],
        "counts": doc["counts"],
        "pass": sorted(k for k, r in results.items() if r["status"] == "pass"),
        "fallback-pass": {k: sorted(r.get("fallbacks", {})) for k, r in sorted(results.items())
                          if r["status"] == "fallback-pass"},
        "fail": {k: r.get("error") for k, r in sorted(results.items()) if r["status"] == "fail"},
        "skip": {k: r.get("reason") for k, r in sorted(results.items()) if r["status"] == "skip"},
        # cost of each passing module in this sweep (test_modules.py sizes its default run with it)
        "cost": {k: {"seconds": r.get("seconds"), "samples": r.get("samples")}
                 for k, r in sorted(results.items()) if r["status"] == "pass"},
    }
    base["all_modules"] = sorted(set(base.get("all_modules", [])) | set(results))
    base["modes"] = dict(sorted(base["modes"].items()))
    with open(MU.BASELINE, "w") as f:
        json.dump(base, f, indent=1)
        f.write("\n")
    n = len(base["modes"][mode]["pass"])
    print(f"baseline ({mode}): {n} passing ModuleInfos -> {os.path.relpath(MU.BASELINE, REPO)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TORCH_TPU_MODULE_JOBS", "2")))
    ap.add_argument("--shard", default=None)
    ap.add_argument("--modules", default=None)
    ap.add_argument("--max-samples", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one module may take")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import warnings
    warnings.simplefilter("ignore")
    import torch
    keys = select(MU.load_module_db().keys(), a.modules, a.shard)
    mode = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
    a.out = a.out or os.path.join(REPO, "tools", f"module_results_{mode}.json")
    print(f"module sweep: {len(keys)} ModuleInfos, {a.jobs} workers, eager mode {mode}", flush=True)
    t0 = time.time()
    results = MU.run_sweep(keys, jobs=a.jobs, max_samples=a.max_samples, timeout=a.timeout,
                           log=U.progress_log(len(keys), a.quiet))
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
    U.print_summary(doc, "ModuleInfos", elapsed, a.out)
    if a.write_baseline:
        if a.shard or a.modules:
            print("--write-baseline needs every module (no --shard/--modules); not written")
            return 2
        write_baseline(mode, doc, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
