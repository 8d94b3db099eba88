"""OpInfo sweep of the tpu device against PyTorch CPU.

Full sweep (every OpInfo of torch's op_db, float32 samples, values and
gradients), writes tools/opinfo_results.json:

    .venv/bin/python tools/opinfo_sweep.py

Options:
    --jobs N             worker processes (default 2)
    --shard i/n          only ops i, i+n, i+2n ... of the sorted op list
    --ops a,b,c          only these OpInfos (name or name.variant; prefix* ok)
    --max-samples K      at most K samples per op
    --out PATH           results file (default tools/opinfo_results.json)
    --write-baseline     also write tests/python/opinfo_baseline.json
                         (the ops that "pass"; test_opinfo.py guards them)
    --quiet              no per-op lines
The eager mode is the environment's (TORCH_TPU_EAGER_MODE, default strict).
Classification and comparison rules: tests/python/opinfo_util.py.
"""
import argparse
import fnmatch
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import opinfo_util as U  # noqa: E402


def select(all_keys, ops=None, shard=None):
    keys = sorted(all_keys)
    if ops:
        pats = [p.strip() for p in ops.split(",") if p.strip()]
        keys = [k for k in keys if any(fnmatch.fnmatchcase(k, p) or k == p for p in pats)]
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        keys = keys[i::n]
    return keys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TORCH_TPU_OPINFO_JOBS", "2")))
    ap.add_argument("--shard", default=None)
    ap.add_argument("--ops", default=None)
    ap.add_argument("--max-samples", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "tools", "opinfo_results.json"))
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--op-timeout", type=float, default=600)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import warnings
    warnings.simplefilter("ignore")
    import torch
    db = U.load_op_db()
    keys = select(db.keys(), a.ops, a.shard)
    mode = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
    print(f"opinfo sweep: {len(keys)} OpInfos, {a.jobs} workers, eager mode {mode}", flush=True)
    t0 = time.time()
    results = U.run_sweep(keys, jobs=a.jobs, max_samples=a.max_samples, op_timeout=a.op_timeout,
                          log=U.progress_log(len(keys), a.quiet))
    counts = U.summarize(results)
    elapsed = time.time() - t0
    doc = {
        "meta": {
            "torch": torch.__version__,
            "eager_mode": mode,
            "git_commit": U.git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": platform.machine(),
            "ops": len(keys),
            "max_samples": a.max_samples,
            "shard": a.shard,
            "seconds": round(elapsed, 1),
            "tolerance_default": {"atol": U.BASE_ATOL, "rtol": U.BASE_RTOL},
        },
        "counts": counts,
        "fallback_ops": U.fallback_table(results),
        "results": {k: results[k] for k in sorted(results)},
    }
    doc["failure_kinds"] = U.failure_kinds(results)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    U.print_summary(doc, "OpInfos", elapsed, a.out)
    if a.write_baseline:
        if a.shard or a.ops or a.max_samples:
            print("--write-baseline needs the full sweep (no --shard/--ops/--max-samples); not written")
            return 2
        base = {
            "_doc": "OpInfos that passed (values+grads match CPU, no CPU fallback) in the full sweep; "
                    "tests/python/test_opinfo.py fails if one of them stops passing. "
                    "Regenerate: .venv/bin/python tools/opinfo_sweep.py --write-baseline",
            "meta": doc["meta"],
            "counts": counts,
            "pass": sorted(k for k, r in results.items() if r["status"] == "pass"),
            "fallback-pass": sorted(k for k, r in results.items() if r["status"] == "fallback-pass"),
            "fail": sorted(k for k, r in results.items() if r["status"] == "fail"),
            "all_ops": sorted(results),
            # cost of each passing op in this sweep (test_opinfo.py sizes its default run with it)
            "cost": {k: {"seconds": r.get("seconds"), "samples": r.get("samples")}
                     for k, r in sorted(results.items()) if r["status"] == "pass"},
        }
        with open(U.BASELINE, "w") as f:
            json.dump(base, f, indent=1)
            f.write("\n")
        print(f"baseline: {len(base['pass'])} passing OpInfos -> {os.path.relpath(U.BASELINE, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
