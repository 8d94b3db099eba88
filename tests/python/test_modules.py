"""ModuleInfo regression guard: every ModuleInfo that passed in the committed
baseline for the current eager mode (tests/python/module_baseline.json,
"modes" -> mode -> "pass": outputs, buffers and gradients of inputs and
parameters match PyTorch CPU, no CPU fallback) must still pass.

The full sweep (one command, writes tools/module_results_<mode>.json):

    .venv/bin/python tools/module_sweep.py            # add --write-baseline to refresh the baseline

Here, within CI's time:
  default                        every baseline "pass" module; all its
                                 samples if the baseline's recorded cost fits
                                 TORCH_TPU_MODULE_BUDGET_S (default 120 s
                                 over the workers), else the first K samples
                                 of each mode, K the largest that fits
  TORCH_TPU_MODULE_MAX_SAMPLES=K force the cap (0 = all samples)
  TORCH_TPU_MODULE_SHARD=i/n     modules i, i+n, ... of the sorted module_db
                                 names with ALL their samples (n=4 ~ the full
                                 sweep); baseline "pass" modules are
                                 asserted, the others reported
  TORCH_TPU_MODULE_NAMES=a,b     just these ModuleInfos (all samples)
  TORCH_TPU_MODULE_JOBS          worker processes (default 2)
Comparison and classification rules: tests/python/module_util.py.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import module_util as MU  # noqa: E402
import opinfo_util as U  # noqa: E402


def _baseline():
    try:
        with open(MU.BASELINE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


MODE = os.environ.get("TORCH_TPU_EAGER_MODE", "strict") or "strict"
BASE_FILE = _baseline()
# this mode's section (strict's when the mode has none yet)
BASE = (BASE_FILE or {}).get("modes", {}).get(MODE) or (BASE_FILE or {}).get("modes", {}).get("strict")
PASSING = set(BASE["pass"]) if BASE else set()
ALL = (BASE_FILE or {}).get("all_modules", sorted(PASSING))


JOBS = int(os.environ.get("TORCH_TPU_MODULE_JOBS", "2"))
KEYS, MAX_SAMPLES, PLAN = U.sweep_plan(ALL, PASSING, BASE, JOBS, "TORCH_TPU_MODULE_NAMES", "TORCH_TPU_MODULE_SHARD",
                                       "TORCH_TPU_MODULE_MAX_SAMPLES", "TORCH_TPU_MODULE_BUDGET_S", 120, "modules",
                                       caps=(None, 16, 8, 4, 2, 1),
                                       verified_cap=(BASE or {}).get("meta", {}).get("max_samples"))
_results = {}


@pytest.fixture(scope="module")
def sweep():
    if not _results:
        _results.update(MU.run_sweep(KEYS, jobs=JOBS, max_samples=MAX_SAMPLES, timeout=600))
    return _results


def test_baseline_present():
    assert BASE is not None, f"{MU.BASELINE} missing: run .venv/bin/python tools/module_sweep.py --write-baseline"
    assert BASE["pass"], "the baseline lists no passing module"


GUARDED = [k for k in KEYS if k in PASSING]


@pytest.mark.parametrize("name", GUARDED)
def test_module_still_passes(sweep, name):
    r = sweep.get(name)
    assert r is not None, f"{name}: no result (the sweep lost it)"
    if r["status"] == "pass":
        return
    detail = r.get("error") or r.get("reason") or ""
    if r["status"] == "fallback-pass":
        detail = "now falls back to CPU for " + ", ".join(r.get("fallbacks", {}))
    pytest.fail(f"regression: {name} passed in the baseline, now {r['status']}: {detail}", pytrace=False)


def test_module_report(sweep, capsys):
    """Prints the counts of this run and modules that pass now but are not
    in the baseline (candidates for the next baseline)."""
    counts = U.summarize(sweep)
    new = sorted(k for k, r in sweep.items() if r["status"] == "pass" and k not in PASSING)
    with capsys.disabled():
        print(f"\nmodules ({PLAN}, eager mode {MODE}): "
              f"pass {counts['pass']} fallback-pass {counts['fallback-pass']} fail {counts['fail']} "
              f"skip {counts['skip']} of {len(sweep)}")
        if new:
            print(f"passing but not in the baseline ({len(new)}): {', '.join(new[:30])}")
    assert len(sweep) == len(KEYS)
