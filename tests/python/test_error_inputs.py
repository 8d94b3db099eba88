"""Bad-input regression guard: every error input (OpInfo.error_inputs) on
which the tpu raised the exception type the CPU raises in every eager mode,
in the committed baseline (tests/python/error_inputs_baseline.json), must
still do so in this run's mode.

The full sweep, with the report of the failures by kind and op:

    .venv/bin/python tools/error_inputs_sweep.py        # --write-baseline to refresh the baseline

Here:
  default                            every OpInfo with error_inputs (all of them: ~1 min)
  TORCH_TPU_ERROR_INPUTS_SHARD=i/n   ops i, i+n, ... of the sorted list
  TORCH_TPU_ERROR_INPUTS_OPS=a,b     just these OpInfos (prefix* ok)
  TORCH_TPU_OPINFO_JOBS              worker processes (default 2)
Outcomes and rules: tests/python/error_inputs_util.py.
"""
import fnmatch
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import error_inputs_util as E  # noqa: E402
import opinfo_util as U  # noqa: E402

BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "error_inputs_baseline.json")


def _baseline():
    try:
        with open(BASELINE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


BASE = _baseline()
PASSING = {k: set(v) for k, v in (BASE or {}).get("pass", {}).items()}
ALL = (BASE or {}).get("all_ops", sorted(PASSING))


def _plan():
    ops = os.environ.get("TORCH_TPU_ERROR_INPUTS_OPS", "").strip()
    shard = os.environ.get("TORCH_TPU_ERROR_INPUTS_SHARD", "").strip()
    if ops:
        pats = [p.strip() for p in ops.split(",") if p.strip()]
        keys = sorted({k for k in ALL for p in pats if fnmatch.fnmatchcase(k, p)} | {p for p in pats if "*" not in p})
        return keys, f"ops {ops}"
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        if not (0 <= i < n):
            raise ValueError(f"TORCH_TPU_ERROR_INPUTS_SHARD={shard!r}: want i/n with 0 <= i < n")
        return ALL[i::n], f"shard {i}/{n}"
    return ALL, "all"


KEYS, PLAN = _plan()
_results = {}


@pytest.fixture(scope="module")
def sweep():
    if not _results:
        jobs = int(os.environ.get("TORCH_TPU_OPINFO_JOBS", "2"))
        _results.update(U.run_sweep(KEYS, jobs=jobs, op_timeout=300, runner="error_inputs_util"))
    return _results


def test_baseline_present():
    assert BASE is not None, f"{BASELINE} missing: run .venv/bin/python tools/error_inputs_sweep.py --write-baseline"
    assert PASSING, "the baseline lists no passing error input"


GUARDED = [k for k in KEYS if k in PASSING]


@pytest.mark.parametrize("opname", GUARDED)
def test_error_inputs_still_raise_as_on_cpu(sweep, opname):
    r = sweep.get(opname)
    assert r is not None, f"{opname}: no result (the sweep lost it)"
    ok, failures = E.outcome_of(r)
    lost = sorted(PASSING[opname] - ok)
    if not lost:
        return
    why = {f["i"]: f for f in failures}
    lines = []
    for i in lost:
        f = why.get(i) or (failures[0] if failures and failures[0]["i"] is None else {})
        kind = f.get("kind", "not compared any more")
        lines.append(f"#{i}: {kind} (CPU {f.get('cpu')}, tpu {f.get('tpu', 'nothing')}: {f.get('tpu_msg', '')})")
    pytest.fail(f"regression: {opname} error inputs that raised as on CPU no longer do:\n  " + "\n  ".join(lines),
                pytrace=False)


def test_error_inputs_report(sweep, capsys):
    """Prints this run's counts, the failures by kind and op, and the inputs
    that pass now but not in the baseline (candidates for the next baseline)."""
    assert len(sweep) == len(KEYS)
    new = {k: sorted(E.outcome_of(r)[0] - PASSING.get(k, set())) for k, r in sweep.items()}
    new = {k: v for k, v in new.items() if v}
    with capsys.disabled():
        print(f"\nerror_inputs ({PLAN}, eager mode {os.environ.get('TORCH_TPU_EAGER_MODE', 'strict')}):")
        E.report(sweep, out=lambda s: print("  " + s), per_op=3)
        if new:
            print("  passing but not in the baseline: " + ", ".join(f"{k} {v}" for k, v in sorted(new.items())))
