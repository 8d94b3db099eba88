"""Bad-input sweep: every OpInfo's error_inputs on the tpu against PyTorch CPU
(does the tpu raise the exception type the CPU raises?).

    .venv/bin/python tools/error_inputs_sweep.py            # all, writes tools/error_inputs_results.json

Options:
    --jobs N             worker processes (default 2)
    --shard i/n          only ops i, i+n, ... of the sorted list
    --ops a,b,c          only these OpInfos (name or name.variant; prefix* ok)
    --max-inputs K       at most K error inputs per op
    --out PATH           results file (default tools/error_inputs_results.json)
    --all-modes          run in strict, debug and fused eager mode (default:
                         the environment's TORCH_TPU_EAGER_MODE, else strict)
    --write-baseline     all modes, and write tests/python/error_inputs_baseline.json
                         (the inputs that pass in every mode; test_error_inputs.py
                         guards them)
    --quiet              no per-op lines
Outcomes and rules: tests/python/error_inputs_util.py.  The report lists the
failures grouped by kind (accepted silently / wrong exception type / crash)
and op.
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

import error_inputs_util as E  # noqa: E402
import opinfo_util as U  # noqa: E402
from opinfo_sweep import select  # noqa: E402

BASELINE = os.path.join(REPO, "tests", "python", "error_inputs_baseline.json")


MODES = ("strict", "debug", "fused")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TORCH_TPU_OPINFO_JOBS", "2")))
    ap.add_argument("--shard", default=None)
    ap.add_argument("--ops", default=None)
    ap.add_argument("--max-inputs", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "tools", "error_inputs_results.json"))
    ap.add_argument("--all-modes", action="store_true", help="run in strict, debug and fused mode")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--op-timeout", type=float, default=300)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    import warnings
    warnings.simplefilter("ignore")
    import torch
    db = U.load_op_db()
    keys = select(E.error_keys(db), a.ops, a.shard)
    env_mode = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
    # the baseline guards what passes in every mode (the modes differ: debug
    # mode runs the index adapters' host-side bounds checks)
    modes = MODES if (a.all_modes or a.write_baseline) else (env_mode,)
    by_mode = {}
    t_all = time.time()
    for mode in modes:
        print(f"error_inputs sweep: {len(keys)} OpInfos, {a.jobs} workers, eager mode {mode}", flush=True)
        t0 = time.time()
        done = [0]

        def log(r):
            done[0] += 1
            if not a.quiet:
                extra = "  " + (r.get("error") or r.get("reason") or "")[:150] if r["status"] != "pass" else ""
                print(f"[{done[0]:4d}/{len(keys)} {time.time() - t0:5.0f}s] {r['status']:5s} {r['op']}{extra}",
                      flush=True)

        env = dict(os.environ, TORCH_TPU_EAGER_MODE=mode)
        results = U.run_sweep(keys, jobs=a.jobs, max_samples=a.max_inputs, op_timeout=a.op_timeout, log=log,
                              runner="error_inputs_util", env=env)
        print()
        counts = E.report(results)
        print(f"\n(eager mode {mode}: {len(keys)} OpInfos, {time.time() - t0:.0f}s)\n", flush=True)
        by_mode[mode] = (results, counts, round(time.time() - t0, 1))
    elapsed = time.time() - t_all
    meta = {"torch": torch.__version__, "eager_modes": list(modes), "git_commit": U.git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": platform.machine(), "ops": len(keys),
            "max_inputs": a.max_inputs, "shard": a.shard, "seconds": round(elapsed, 1)}
    doc = {"meta": meta,
           "modes": {m: {"counts": c, "seconds": sec, "failures": E.group_failures(r),
                         "results": {k: r[k] for k in sorted(r)}} for m, (r, c, sec) in by_mode.items()}}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"-> {os.path.relpath(a.out, REPO)}")
    if a.write_baseline:
        if a.shard or a.ops or a.max_inputs:
            print("--write-baseline needs the full sweep (no --shard/--ops/--max-inputs); not written")
            return 2
        ok = None
        for r, _, _ in by_mode.values():
            got = {k: E.outcome_of(v)[0] for k, v in r.items()}
            ok = got if ok is None else {k: ok.get(k, set()) & got.get(k, set()) for k in set(ok) | set(got)}
        base = {
            "_doc": "Error inputs (OpInfo.error_inputs, by index) on which the tpu raised the CPU's exception "
                    "type in every eager mode; tests/python/test_error_inputs.py fails if one of them stops "
                    "doing so. The failures of each mode are listed for the record. Regenerate: "
                    ".venv/bin/python tools/error_inputs_sweep.py --write-baseline",
            "meta": meta,
            "counts": {m: c for m, (_, c, _) in by_mode.items()},
            "pass": {k: sorted(v) for k, v in sorted(ok.items()) if v},
            "fail": {m: {k: [{kk: f.get(kk) for kk in ("i", "kind", "cpu", "tpu")} for f in E.outcome_of(v)[1]]
                         for k, v in sorted(r.items()) if E.outcome_of(v)[1]}
                     for m, (r, _, _) in by_mode.items()},
            "all_ops": sorted(keys),
        }
        with open(BASELINE, "w") as f:
            json.dump(base, f, indent=1)
            f.write("\n")
        print(f"baseline: {sum(len(v) for v in base['pass'].values())} inputs passing in every mode, "
              f"in {len(base['pass'])} ops -> {os.path.relpath(BASELINE, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
