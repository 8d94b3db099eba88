"""torch_tpu.doctor: runs a program with the engine's recording on and says
what makes it slow on tpu, at which line of the program, and what to change.

    python -m torch_tpu.doctor [--steps N] [--seconds S] [--json FILE] [--html FILE] script.py [args...]
    python -m torch_tpu.doctor --tune [--steps N] [--json FILE] script.py [args...]   (tune.py)
    python -m torch_tpu.doctor [options] -m package.module [args...]

The program runs as ``python -m torch_tpu.run`` runs it (CUDA programs
mapped onto tpu by torch_tpu.transfer), in this process.  A step is one
``optimizer.step()``; the first three are the warm-up (probe.py).  The report (text; the
dict ``diagnose`` returns, in the form ``schema.json`` describes; an HTML
page) lists findings most costly first, each with the program's source
line, its measured cost and a fix: ops run through the CPU fallback,
recompiles after the warm-up grouped by cause, host reads and
data-dependent shapes in the steady loop.  Then a readiness summary (eager
mode, steps/s, programs per step, compiles after the warm-up and fallbacks,
both with target 0), the programs per step by what cut them, the slowest
programs and the memory peak.  probe.py says how each is recorded,
findings.py how each is judged.

``diagnose`` can be called once per process: the engine's counters, the
program records the recompile causes come from and the program cache are
the process's.
"""
import os
import sys
import time
import traceback

__all__ = ["diagnose", "main"]


def _mode():
    name = os.environ.get("TORCH_TPU_EAGER_MODE", "strict").strip().lower() or "strict"
    return "debug" if os.environ.get("TPU_LAUNCH_BLOCKING", "") == "1" else name


def diagnose(argv, steps=None, seconds=None, timeline=True, sync_steps=False):
    """Runs the program argv (``["script.py", args...]`` or ``["-m",
    "module", args...]``) under the doctor and returns the report dict."""
    import torch

    from .. import _C, run
    from .._metrics import metrics
    from . import findings, probe as probe_mod

    probe = probe_mod.Probe(steps=steps, seconds=seconds, timeline=timeline, sync_steps=sync_steps)
    exit_kind, error = "completed", None
    saved_argv, saved_path0 = list(sys.argv), sys.path[0] if sys.path else None
    started = time.time()
    t0 = time.perf_counter()
    probe.start()
    try:
        rc = run.main(list(argv))
        if rc:
            exit_kind, error = "error", f"torch_tpu.run returned {rc}"
    except probe_mod.StopRun:
        exit_kind = probe.stopped_by or "steps"
    except SystemExit as e:
        if e.code not in (None, 0):
            exit_kind, error = "error", f"SystemExit({e.code!r})"
    except BaseException as e:  # the program's own failure: reported, with what ran before it
        exit_kind, error = "error", f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finally:
        try:
            probe.stop()
        finally:
            sys.argv = saved_argv
            if saved_path0 is not None:
                sys.path[0] = saved_path0
    wall = time.perf_counter() - t0
    m = metrics()
    peak = torch.tpu.max_memory_allocated() if _C.initialized() else 0
    return findings.build(probe, m, argv, _mode(), wall, exit_kind, error, peak, started=started)


def main(argv=None):
    from .__main__ import main as cli
    return cli(argv)
