"""python -m torch_tpu.doctor.mcp: the doctor as an MCP server (stdio), for
coding agents.

Needs the ``mcp`` Python SDK (requirements-doctor.txt, an optional
dependency: ``make test-doctor`` installs it into build/doctor-site;
``PYTHONPATH=build/doctor-site python -m torch_tpu.doctor.mcp``).  An
agent's MCP configuration names the command, e.g.
``{"command": ".venv/bin/python", "args": ["-m", "torch_tpu.doctor.mcp"],
"env": {"PYTHONPATH": "build/doctor-site"}}``.

Tools (each returns one JSON object, as structured content and as text):

- ``diagnose(script, args, steps, seconds, module, eager_mode)``: runs the
  program under the doctor and returns its report (schema.json);
- ``list_fallbacks(script?)``: the ops that ran on the CPU, with line,
  dtype, count, seconds and fix;
- ``explain_recompiles(script?)``: compiles, compiles after the warm-up,
  the compile share of wall time, and each group of recompiles with its
  cause, what changed, the line and the fix;
- ``suggest_fixes(script?)``: every finding as an edit to make (file, line,
  the line's text, the fix), most costly first, and the readiness targets
  not met;
- ``tune(script, args, steps, module)``: the --tune table and the best
  configuration's environment variables (tune.py);
- ``last_report(path?)``: the last report or tune result this server made,
  or a report file written by ``--json``.

A failure the agent can act on (no script, no report yet, a program that
left no report) is a tool error whose text says what to do.  The tools
that take ``script?`` diagnose it first when it is given, and otherwise
answer from the last report.  Each program runs in a fresh
process (``python -m torch_tpu.doctor``): the engine's counters are a
process's, and the server's stdout is the protocol's.
"""
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from . import tune as tune_mod

server = MCPServer("torch_tpu-doctor", instructions=(
    "torch_tpu doctor: runs a PyTorch program on tpu with the engine's recording on and says what makes it slow "
    "(CPU fallbacks, recompiles, host reads), at which source line, and the fix; tunes the eager mode and knobs. "
    "Call diagnose (or tune) on a script first; list_fallbacks, explain_recompiles and suggest_fixes then read "
    "that report."))

_state = {"last": None, "last_kind": None}
RUN_TIMEOUT = float(os.environ.get("TORCH_TPU_DOCTOR_MCP_TIMEOUT", "900"))


def _program(script, args, module):
    if not script:
        raise ToolError("torch_tpu doctor: no script given (script: a path, or a module name with module=true)")
    return (["-m", script] if module else [script]) + [str(a) for a in (args or [])]


def _run_doctor(program, steps, seconds, eager_mode):
    fd, out = tempfile.mkstemp(prefix="tpu_doctor_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "torch_tpu.doctor", "--quiet", "--json", out]
    if steps:
        cmd += ["--steps", str(int(steps))]
    if seconds:
        cmd += ["--seconds", str(float(seconds))]
    env = dict(os.environ)
    if eager_mode:
        if eager_mode not in ("strict", "fused", "debug"):
            raise ToolError(f"torch_tpu doctor: eager_mode {eager_mode!r} is not strict, fused or debug")
        env["TORCH_TPU_EAGER_MODE"] = eager_mode
    try:
        try:
            p = subprocess.run(cmd + program, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise ToolError(f"torch_tpu doctor on {' '.join(program)} ran over {RUN_TIMEOUT:.0f} s (killed; "
                            f"TORCH_TPU_DOCTOR_MCP_TIMEOUT sets the limit): give fewer steps") from e
        if os.path.getsize(out) == 0:
            tail = "\n".join((p.stderr or "").strip().splitlines()[-8:])
            raise ToolError(f"torch_tpu doctor on {' '.join(program)} exited {p.returncode} with no report:\n"
                               f"{tail}")
        with open(out) as f:
            rep = json.load(f)
    finally:
        os.unlink(out)
    _state["last"], _state["last_kind"] = rep, "report"
    return rep


def _report(script, args, steps, module):
    if script:
        return _run_doctor(_program(script, args, module), steps, None, None)
    if _state["last_kind"] != "report":
        raise ToolError("torch_tpu doctor: no report yet: give a script (or call diagnose first)")
    return _state["last"]


def _where(f):
    return {"file": f["file"], "line": f["line"], "code": f["code"]}


@server.tool(structured_output=True)
def diagnose(script: str, args: list[str] | None = None, steps: int | None = 8, seconds: float | None = None,
             module: bool = False, eager_mode: str | None = None) -> dict[str, Any]:
    """Run a PyTorch program (a script path, or a module name with module=true) on tpu under the doctor for its
    first `steps` optimizer steps (3 of them warm-up) or `seconds`, and return the report: findings most costly
    first (kind, file, line, code, count, seconds, detail, fix), the readiness summary, programs per step by what
    cut them, the slowest programs and a steady step's timeline.  eager_mode: strict (default), fused or debug."""
    return _run_doctor(_program(script, args, module), steps, seconds, eager_mode)


@server.tool(structured_output=True)
def list_fallbacks(script: str | None = None, args: list[str] | None = None, steps: int | None = 8,
                   module: bool = False) -> dict[str, Any]:
    """The ops that ran on the CPU through torch_tpu's fallback (no tpu rule): op, dtype, source line, calls,
    seconds and the fix.  Diagnoses `script` first when given, else reads the last report."""
    rep = _report(script, args, steps, module)
    fb = [dict(_where(f), op=f["op"], dtype=f["dtype"], count=f["count"], seconds=f["seconds"], fix=f["fix"])
          for f in rep["findings"] if f["kind"] == "cpu_fallback"]
    return {"program": rep["program"]["argv"], "fallbacks": fb, "total_calls": rep["summary"]["fallbacks"],
            "target": 0}


@server.tool(structured_output=True)
def explain_recompiles(script: str | None = None, args: list[str] | None = None, steps: int | None = 8,
                       module: bool = False) -> dict[str, Any]:
    """Why the program compiled after its warm-up: each group of recompiles with the engine's cause, what
    changed (shape, dtype, scalar, view, structure), the source line where it entered, count, seconds and the
    fix; and the compile counts and share of wall time, cold and warm.  Diagnoses `script` first when given,
    else reads the last report."""
    rep = _report(script, args, steps, module)
    s = rep["summary"]
    groups = [dict(_where(f), changed=f["cause_kind"], cause=f["cause"], program=f["program"], count=f["count"],
                   seconds=f["seconds"], causes=f["causes"], also=f["also"], fix=f["fix"])
              for f in rep["findings"] if f["kind"] == "recompile"]
    return {"program": rep["program"]["argv"], "compiles": s["compiles"],
            "compiles_after_warmup": s["compiles_after_warmup"], "target_after_warmup": 0,
            "compile_seconds": s["compile_seconds"], "compile_share": s["compile_share"], "recompiles": groups}


@server.tool(structured_output=True)
def suggest_fixes(script: str | None = None, args: list[str] | None = None, steps: int | None = 8,
                  module: bool = False) -> dict[str, Any]:
    """Every finding as an edit to make, most costly first: file, line, the line's text, what is wrong, its
    measured cost and the fix; and the readiness targets not met (compiles after the warm-up, CPU fallbacks).
    Diagnoses `script` first when given, else reads the last report."""
    rep = _report(script, args, steps, module)
    s = rep["summary"]
    fixes = [dict(_where(f), kind=f["kind"], problem=f["title"], seconds=f["seconds"], count=f["count"],
                  fix=f["fix"]) for f in rep["findings"]]
    unmet = []
    if s["compiles_after_warmup"]:
        unmet.append({"target": "compiles_after_warmup", "value": s["compiles_after_warmup"], "goal": 0})
    if s["fallbacks"]:
        unmet.append({"target": "fallbacks", "value": s["fallbacks"], "goal": 0})
    return {"program": rep["program"]["argv"], "ready": s["ready"], "fixes": fixes, "targets_not_met": unmet,
            "mode": s["mode"], "steps_per_second": s["steps_per_second"]}


@server.tool(structured_output=True)
def tune(script: str, args: list[str] | None = None, steps: int = tune_mod.DEFAULT_STEPS,
         module: bool = False) -> dict[str, Any]:
    """Run the program's first `steps` optimizer steps under each candidate configuration (strict, fused, and
    the engine's knobs that apply) in fresh processes, cold and warm program cache; return the table (steady
    ms/step, cold and warm start, compiles) and the best configuration as environment variables to set."""
    res = tune_mod.tune(_program(script, args, module), steps=steps, timeout=RUN_TIMEOUT)
    _state["last"], _state["last_kind"] = res, "tune"
    return res


@server.tool(structured_output=True)
def last_report(path: str | None = None) -> dict[str, Any]:
    """The last report (or tune result) this server made, or the report JSON at `path` (what
    `python -m torch_tpu.doctor --json FILE` wrote)."""
    if path:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise ToolError(f"torch_tpu doctor: cannot read the report {path}: {e}") from e
    if _state["last"] is None:
        raise ToolError("torch_tpu doctor: no report yet (call diagnose or tune first)")
    return _state["last"]


def main():
    server.run("stdio")


if __name__ == "__main__":
    main()
