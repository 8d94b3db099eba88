"""ModuleInfo regression guard: every ModuleInfo that passed in the committed
baseline (tests/python/module_baseline.json: outputs, buffers and gradients
of inputs and parameters match PyTorch CPU, no CPU fallback) must still
pass.

The full sweep (one command, writes tools/module_results.json):

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
import fnmatch
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


BASE = _baseline()
PASSING = set(BASE["pass"]) if BASE else set()
ALL = BASE.get("all_modules", sorted(PASSING)) if BASE else []


def _plan():
    """(modules to run, max samples per module and mode, description)."""
    shard = os.environ.get("TORCH_TPU_MODULE_SHARD", "").strip()
    names = os.environ.get("TORCH_TPU_MODULE_NAMES", "").strip()
    if names:
        pats = [p.strip() for p in names.split(",") if p.strip()]
        keys = sorted({k for k in ALL for p in pats if fnmatch.fnmatchcase(k, p)} | {p for p in pats if "*" not in p})
        return keys, None, f"modules {names}"
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        if not (0 <= i < n):
            raise ValueError(f"TORCH_TPU_MODULE_SHARD={shard!r}: want i/n with 0 <= i < n")
        return sorted(ALL)[i::n], None, f"shard {i}/{n}"
    env = os.environ.get("TORCH_TPU_MODULE_MAX_SAMPLES", "").strip()
    if env:
        ms = int(env)
        return sorted(PASSING), (ms if ms > 0 else None), f"baseline pass modules, <= {ms} samples each"
    ms = _cap_for_budget()
    return sorted(PASSING), ms, "baseline pass modules, " + ("all samples" if ms is None else f"<= {ms} samples each")


def _cap_for_budget():
    """The largest per-mode sample cap whose estimated run time (from the
    baseline sweep's per-module cost, over the workers) fits the budget."""
    budget = float(os.environ.get("TORCH_TPU_MODULE_BUDGET_S", "120"))
    jobs = int(os.environ.get("TORCH_TPU_MODULE_JOBS", "2"))
    cost = BASE.get("cost", {}) if BASE else {}
    for cap in (None, 16, 8, 4, 2, 1):
        est = 0.0
        for k in PASSING:
            c = cost.get(k) or {}
            sec, n = c.get("seconds") or 1.0, max(c.get("samples") or 1, 1)
            est += sec if cap is None else sec * min(1.0, cap / n)
        if est / max(jobs, 1) <= budget:
            return cap
    return 1


KEYS, MAX_SAMPLES, PLAN = _plan()
_results = {}


@pytest.fixture(scope="module")
def sweep():
    if not _results:
        jobs = int(os.environ.get("TORCH_TPU_MODULE_JOBS", "2"))
        _results.update(MU.run_sweep(KEYS, jobs=jobs, max_samples=MAX_SAMPLES, timeout=600))
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
        print(f"\nmodules ({PLAN}, eager mode {os.environ.get('TORCH_TPU_EAGER_MODE', 'strict')}): "
              f"pass {counts['pass']} fallback-pass {counts['fallback-pass']} fail {counts['fail']} "
              f"skip {counts['skip']} of {len(sweep)}")
        if new:
            print(f"passing but not in the baseline ({len(new)}): {', '.join(new[:30])}")
    assert len(sweep) == len(KEYS)
