"""OpInfo regression guard: every OpInfo that passed in the committed
baseline (tests/python/opinfo_baseline.json: values and gradients match
PyTorch CPU, no CPU fallback) must still pass.

The full sweep of every OpInfo (one command, writes tools/opinfo_results.json):

    .venv/bin/python tools/opinfo_sweep.py            # add --write-baseline to refresh the baseline

Here, within CI's time:
  default                      every baseline "pass" op; all its samples if
                               the baseline's recorded cost fits
                               TORCH_TPU_OPINFO_BUDGET_S (default 100 s over
                               the workers), else the first K samples of
                               each, K the largest that fits (deterministic)
  TORCH_TPU_OPINFO_MAX_SAMPLES=K   force the cap (0 = all samples)
  TORCH_TPU_OPINFO_SHARD=i/n   ops i, i+n, ... of the sorted op_db names with
                               ALL their samples (n=8 shards ~ the full sweep);
                               only baseline "pass" ops are asserted, the
                               others are reported
  TORCH_TPU_OPINFO_OPS=a,b     just these OpInfos (all samples)
  TORCH_TPU_OPINFO_JOBS        worker processes (default 2)
Comparison and classification rules: tests/python/opinfo_util.py.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_util as U  # noqa: E402


def _baseline():
    try:
        with open(U.BASELINE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


BASE = _baseline()
PASSING = set(BASE["pass"]) if BASE else set()
ALL = BASE.get("all_ops", sorted(PASSING)) if BASE else []


JOBS = int(os.environ.get("TORCH_TPU_OPINFO_JOBS", "2"))
KEYS, MAX_SAMPLES, PLAN = U.sweep_plan(ALL, PASSING, BASE, JOBS, "TORCH_TPU_OPINFO_OPS", "TORCH_TPU_OPINFO_SHARD",
                                       "TORCH_TPU_OPINFO_MAX_SAMPLES", "TORCH_TPU_OPINFO_BUDGET_S", 100, "ops")
_results = {}


@pytest.fixture(scope="module")
def sweep():
    if not _results:
        _results.update(U.run_sweep(KEYS, jobs=JOBS, max_samples=MAX_SAMPLES, op_timeout=300))
    return _results


def test_baseline_present():
    assert BASE is not None, f"{U.BASELINE} missing: run .venv/bin/python tools/opinfo_sweep.py --write-baseline"
    assert BASE["pass"], "the baseline lists no passing op"


GUARDED = [k for k in KEYS if k in PASSING]


@pytest.mark.parametrize("opname", GUARDED)
def test_opinfo_still_passes(sweep, opname):
    r = sweep.get(opname)
    assert r is not None, f"{opname}: no result (the sweep lost it)"
    if r["status"] == "pass":
        return
    detail = r.get("error") or r.get("reason") or ""
    if r["status"] == "fallback-pass":
        detail = "now falls back to CPU for " + ", ".join(r.get("fallbacks", {}))
    pytest.fail(f"regression: {opname} passed in the baseline, now {r['status']}: {detail}", pytrace=False)


def test_opinfo_report(sweep, capsys):
    """Prints the counts of this run, and ops that pass now but are not in
    the baseline (candidates for the next baseline)."""
    counts = U.summarize(sweep)
    new = sorted(k for k, r in sweep.items() if r["status"] == "pass" and k not in PASSING)
    with capsys.disabled():
        print(f"\nopinfo ({PLAN}, eager mode {os.environ.get('TORCH_TPU_EAGER_MODE', 'strict')}): "
              f"pass {counts['pass']} fallback-pass {counts['fallback-pass']} fail {counts['fail']} "
              f"skip {counts['skip']} of {len(sweep)}")
        if new:
            print(f"passing but not in the baseline ({len(new)}): {', '.join(new[:30])}")
    assert len(sweep) == len(KEYS)
