"""The doctor's MCP server (python -m torch_tpu.doctor.mcp) driven by the mcp
SDK's own stdio client: every tool is called and its JSON checked against
what the planted examples (examples/doctor/) hold.

Needs the mcp SDK: `make test-doctor` installs requirements-doctor.txt into
build/doctor-site and runs this file with it on PYTHONPATH; without it (as
in `make test`) the file is skipped.  Each tool runs the doctor in a fresh
process, so the file runs in strict mode only."""
import asyncio
import json
import os
import sys

import pytest

mcp = pytest.importorskip("mcp", reason="the mcp SDK is not installed: `make test-doctor` installs "
                                        "requirements-doctor.txt into build/doctor-site and runs this file")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "doctor")
MODE = os.environ.get("TORCH_TPU_EAGER_MODE", "strict").strip().lower() or "strict"
TOOLS = {"diagnose", "list_fallbacks", "explain_recompiles", "suggest_fixes", "tune", "last_report"}

pytestmark = pytest.mark.skipif(MODE != "strict", reason="the MCP server's tools run the doctor in fresh "
                                                         "processes: checked once, in strict mode")


def _line(name, marker):
    with open(os.path.join(EXAMPLES, name + ".py")) as f:
        return next(i for i, text in enumerate(f, 1) if f"# doctor: {marker}" in text)


def _same(a, b):
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def _json(result):
    """A tool's result: its structured content, which the text content repeats as JSON."""
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict), result
    text = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    assert text and json.loads(text[0]) == data
    return data


async def _session_calls(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore", TORCH_TPU_EAGER_MODE="strict")
    params = StdioServerParameters(command=sys.executable, args=["-m", "torch_tpu.doctor.mcp"], env=env, cwd=ROOT)
    out = {}
    with open(tmp_path / "server.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                out["tools"] = {t.name: t for t in (await s.list_tools()).tools}
                call = s.call_tool
                out["no_report"] = await call("last_report", {})
                item = os.path.join(EXAMPLES, "item_per_step.py")
                out["diagnose"] = _json(await call("diagnose", {"script": item, "steps": 7}))
                out["fixes_item"] = _json(await call("suggest_fixes", {}))
                out["last"] = _json(await call("last_report", {}))
                out["fallbacks"] = _json(await call("list_fallbacks", {
                    "script": os.path.join(EXAMPLES, "no_tpu_rule.py"), "steps": 7}))
                out["recompiles"] = _json(await call("explain_recompiles", {
                    "script": os.path.join(EXAMPLES, "growing_seq.py"), "steps": 7}))
                out["fixes_growing"] = _json(await call("suggest_fixes", {}))
                out["tune"] = _json(await call("tune", {"script": os.path.join(EXAMPLES, "clean.py"), "steps": 6}))
                out["last_tune"] = _json(await call("last_report", {}))
                rep = tmp_path / "report.json"
                rep.write_text(json.dumps(out["diagnose"]))
                out["from_file"] = _json(await call("last_report", {"path": str(rep)}))
    return out


def test_mcp_client_calls_every_doctor_tool_over_stdio(tmp_path):
    from torch_tpu.doctor import report, tune

    r = asyncio.run(_session_calls(tmp_path))
    assert set(r["tools"]) == TOOLS
    assert all(r["tools"][n].description for n in TOOLS)
    assert "script" in r["tools"]["diagnose"].input_schema["required"]

    # before any diagnosis: an error result that says what to do, not a crash
    assert r["no_report"].is_error and "diagnose" in r["no_report"].content[0].text

    # diagnose: the full report, valid against schema.json, naming the planted .item()
    d = r["diagnose"]
    report.validate(d)
    f = next(f for f in d["findings"] if f["kind"] == "host_read")
    item = os.path.join(EXAMPLES, "item_per_step.py")
    assert _same(f["file"], item) and f["line"] == _line("item_per_step", "item") and f["fix"]
    assert r["last"] == d

    # suggest_fixes on the last report: the same line as an edit to make
    fx = r["fixes_item"]
    assert fx["ready"] is False and fx["fixes"][0]["line"] == f["line"] and fx["fixes"][0]["fix"] == f["fix"]

    # list_fallbacks: the op with no tpu rule, its dtype and line
    fb = r["fallbacks"]
    assert fb["total_calls"] == 7 and fb["target"] == 0 and len(fb["fallbacks"]) == 1
    one = fb["fallbacks"][0]
    assert one["op"].startswith("aten::_linalg_eigvals") and one["dtype"] == "float32"
    assert one["line"] == _line("no_tpu_rule", "fallback") and one["count"] == 7 and one["fix"]

    # explain_recompiles: the growing length, what changed and where
    rc = r["recompiles"]
    assert rc["compiles_after_warmup"] > 0 and rc["recompiles"]
    g = rc["recompiles"][0]
    assert g["changed"] == "shape" and g["line"] == _line("growing_seq", "growing") and "pad" in g["fix"]
    assert {t["target"] for t in r["fixes_growing"]["targets_not_met"]} == {"compiles_after_warmup"}

    # tune: the table and the best, as the CLI's --json gives it
    t = r["tune"]
    tune.validate(t)
    assert {c["name"] for c in tune.CANDIDATES} <= {c["name"] for c in t["candidates"]}
    assert all(c["steady_ms"] > 0 for c in t["candidates"])
    assert t["best"]["name"] == min(t["candidates"], key=lambda c: c["steady_ms"])["name"]
    assert r["last_tune"] == t

    # last_report(path): a report file written by --json
    assert r["from_file"] == d
