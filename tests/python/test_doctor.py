"""python -m torch_tpu.doctor on the planted examples (examples/doctor/):
each report names its problem, the source line the example marks with a
`# doctor: <marker>` comment, and a fix, and nothing else; the clean
example's report has no finding; reports validate against schema.json.

The doctor runs each example in a subprocess (a fresh engine: its counters
and program records are the process's).  Those runs take a few seconds
each, so they run in one eager mode (strict, or unset); the fused-mode
suite runs the one that checks fused mode's cut reporting."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from torch_tpu.doctor import findings, report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "doctor")
MODE = os.environ.get("TORCH_TPU_EAGER_MODE", "strict").strip().lower() or "strict"
STEPS = 7  # 3 warm-up steps, 4 steady ones

strict_only = pytest.mark.skipif(MODE != "strict", reason="the doctor's subprocess runs are checked once, in strict "
                                                          "mode (the fused suite checks fused mode's cuts)")
_runs = {}


def _doctor(name, mode, html=False, tmp_dir=None):
    """The JSON report of `python -m torch_tpu.doctor --steps STEPS` on
    examples/doctor/<name>.py in eager mode `mode` (run once per test session)."""
    key = (name, mode, html)
    if key not in _runs:
        out = os.path.join(tmp_dir, f"{name}-{mode}.json")
        cmd = [sys.executable, "-m", "torch_tpu.doctor", "--quiet", "--steps", str(STEPS), "--json", out]
        if html:
            cmd += ["--html", out[:-5] + ".html"]
        env = dict(os.environ, TORCH_TPU_EAGER_MODE=mode, PYTHONWARNINGS="ignore")
        p = subprocess.run(cmd + [os.path.join(EXAMPLES, name + ".py")], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        with open(out) as f:
            rep = json.load(f)
        if html:
            with open(out[:-5] + ".html") as f:
                rep["_html"] = f.read()
        _runs[key] = rep
    return _runs[key]


def _marker_line(name, marker):
    with open(os.path.join(EXAMPLES, name + ".py")) as f:
        lines = [i for i, text in enumerate(f, 1) if f"# doctor: {marker}" in text]
    assert len(lines) == 1, f"{name}.py marks {marker!r} {len(lines)} times"
    return lines[0]


def _same_file(a, b):
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


PLANTED = [
    # example, marker, finding kinds that must be at the marked line
    ("growing_seq", "growing", {"recompile"}),
    ("item_per_step", "item", {"host_read"}),
    ("no_tpu_rule", "fallback", {"cpu_fallback"}),
    ("python_float", "float", {"recompile"}),
    ("bool_mask", "mask", {"data_dependent_shape", "recompile"}),
]


@strict_only
@pytest.mark.parametrize("name,marker,kinds", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_problem_is_named_at_its_line_with_a_fix(name, marker, kinds, tmp_path_factory):
    rep = _doctor(name, "strict", tmp_dir=str(tmp_path_factory.getbasetemp()))
    report.validate(rep)
    path, line = os.path.join(EXAMPLES, name + ".py"), _marker_line(name, marker)
    found = {f["kind"] for f in rep["findings"]}
    assert kinds <= found, (kinds, rep["findings"])
    for f in rep["findings"]:
        # the planted problem, and nothing that is not there
        assert _same_file(f["file"], path) and f["line"] == line, f
        assert f["fix"] and f["count"] > 0 and f["seconds"] >= 0
        assert f"# doctor: {marker}" in f["code"]
    assert not rep["summary"]["ready"]
    s = rep["summary"]
    assert s["steps"] == STEPS and s["steady_steps"] == STEPS - s["warmup_steps"] > 0
    if "recompile" in kinds:
        # the engine's own count of programs made after the warm-up agrees
        assert s["compiles_after_warmup"] >= sum(f["count"] for f in rep["findings"] if f["kind"] == "recompile") > 0
    if "cpu_fallback" in kinds:
        f = next(f for f in rep["findings"] if f["kind"] == "cpu_fallback")
        assert f["op"].startswith("aten::_linalg_eigvals") and f["dtype"] == "float32"
        assert s["fallbacks"] == f["count"] == STEPS  # one call per step, all of them at the line
        assert f["seconds"] > 0
    if "host_read" in kinds:
        f = next(f for f in rep["findings"] if f["kind"] == "host_read")
        assert f["label"] == ".item()" and f["count"] == s["steady_steps"]


@strict_only
def test_a_cache_grown_with_grad_is_named_at_its_cat_with_no_grad_as_the_fix(tmp_path_factory):
    """Generation without torch.no_grad() whose cache requires grad: every
    length compiles anew; the one finding is at the cat, with the fix."""
    name = "grad_cache"
    out = os.path.join(str(tmp_path_factory.getbasetemp()), name + ".json")
    p = subprocess.run([sys.executable, "-m", "torch_tpu.doctor", "--quiet", "--json", out,
                        os.path.join(EXAMPLES, name + ".py")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TORCH_TPU_EAGER_MODE="strict", PYTHONWARNINGS="ignore"))
    assert p.returncode == 0, p.stderr[-3000:]
    with open(out) as f:
        rep = json.load(f)
    report.validate(rep)
    line = _marker_line(name, "cache")
    assert [f["kind"] for f in rep["findings"]] == ["recompile"], rep["findings"]
    f = rep["findings"][0]
    assert _same_file(f["file"], os.path.join(EXAMPLES, name + ".py")) and f["line"] == line, f
    assert f["cause_kind"] == "shape" and "torch.no_grad()" in f["fix"] and "detach" in f["fix"], f
    assert f["count"] >= 10  # a program set per length


@strict_only
def test_a_fallback_autograd_runs_in_backward_is_named_at_the_forward_line(tmp_path_factory):
    """Issue 50 item 4: linalg.eig's gradient runs _linalg_solve_ex on the
    CPU in backward, where no user frame is on the stack: the finding is at
    the eig line, "in the backward of linalg_eig" (it had no line)."""
    rep = _doctor("eig_backward", "strict", tmp_dir=str(tmp_path_factory.getbasetemp()))
    report.validate(rep)
    path, line = os.path.join(EXAMPLES, "eig_backward.py"), _marker_line("eig_backward", "eig")
    by_op = {f["op"]: f for f in rep["findings"] if f["kind"] == "cpu_fallback"}
    assert set(by_op) == {"aten::linalg_eig", "aten::_linalg_solve_ex"}, rep["findings"]
    for f in rep["findings"]:
        assert _same_file(f["file"], path) and f["line"] == line, f
    assert "backward" not in by_op["aten::linalg_eig"]["title"]
    bwd = by_op["aten::_linalg_solve_ex"]
    assert bwd["title"].endswith("in the backward of linalg_eig") and bwd["count"] == STEPS, bwd


@strict_only
def test_recompile_findings_say_what_changed(tmp_path_factory):
    d = str(tmp_path_factory.getbasetemp())
    growing = next(f for f in _doctor("growing_seq", "strict", tmp_dir=d)["findings"] if f["kind"] == "recompile")
    assert growing["cause_kind"] == "shape" and "pad" in growing["fix"]
    # the cause the engine logged shows the length growing (new > old)
    shapes = [re.search(r"\[([\d,]+)\] \(was \w+\[([\d,]+)\]\)", c["cause"]) for c in growing["causes"]]
    assert any(m and sum(map(int, m.group(1).split(","))) > sum(map(int, m.group(2).split(","))) for m in shapes)
    baked = next(f for f in _doctor("python_float", "strict", tmp_dir=d)["findings"] if f["kind"] == "recompile")
    assert baked["cause_kind"] == "scalar" and "tensor" in baked["fix"] and "attribute" in baked["cause"]


@strict_only
def test_clean_example_gets_a_clean_report_and_an_html_page(tmp_path_factory):
    rep = _doctor("clean", "strict", html=True, tmp_dir=str(tmp_path_factory.getbasetemp()))
    page = rep.pop("_html")
    report.validate(rep)
    s = rep["summary"]
    assert rep["findings"] == []
    assert s["ready"] and s["compiles_after_warmup"] == 0 and s["fallbacks"] == 0 and s["compiles"] > 0
    assert s["mode"] == "strict" and s["steps_per_second"] > 0 and s["programs_per_step"] >= 1
    assert rep["cuts"]["per_step"]["op"] == s["programs_per_step"]  # strict: one program per op
    tl = rep["timeline"]
    assert tl["step"] == s["warmup_steps"] + 1 and any(e["kind"] == "execute" for e in tl["events"])
    # one self-contained page: the timeline as inline SVG, nothing fetched
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</html>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page) and "<script" not in page


@pytest.mark.skipif(MODE != "fused", reason="checks fused mode's cuts: runs in the fused suite")
def test_fused_report_names_the_host_read_cut_and_its_line(tmp_path_factory):
    rep = _doctor("bool_mask", "fused", tmp_dir=str(tmp_path_factory.getbasetemp()))
    report.validate(rep)
    per_step = rep["cuts"]["per_step"]
    assert rep["summary"]["mode"] == "fused"
    # the mask's read cuts the step's graph once per step, beside the step's own cut
    assert per_step["host_read"] >= 1 and per_step["optimizer_step"] == 1
    line = _marker_line("bool_mask", "mask")
    f = next(f for f in rep["findings"] if f["kind"] == "data_dependent_shape")
    assert f["line"] == line and f["count"] == rep["summary"]["steady_steps"]


def test_engine_recompile_causes_are_classified():
    """cause_kind on causes the engine writes now (not on copied text)."""
    x = torch.randn(8, 16, device="tpu")
    torch.tpu.synchronize()
    before = len(torch.tpu.metrics()["programs"])
    for n in (5, 6, 7):
        torch.tpu.synchronize()
        (x[:, :n].exp() * 2).cpu()
    for p in (2.1, 2.2, 2.3):
        torch.nn.functional.normalize(x, p=p).cpu()
    causes = [p["cause"] for p in torch.tpu.metrics()["programs"][before:] if p["recompile"]]
    kinds = {findings.cause_kind(c) for c in causes}
    assert "shape" in kinds or "view" in kinds, causes
    assert any("float attribute" in c and findings.cause_kind(c) == "scalar" for c in causes), causes


def test_schema_validator_rejects_what_the_schema_does_not_allow():
    rep = {"schema": "torch_tpu.doctor/1", "program": {"argv": ["x.py"], "exit": "completed", "error": None,
                                                       "wall_seconds": 1.0, "started": 0.0}}
    with pytest.raises(ValueError, match="has no 'summary'"):
        report.validate(rep)
    rep["program"]["exit"] = "crashed"
    with pytest.raises(ValueError, match="not one of"):
        report.validate(rep["program"], report.schema()["properties"]["program"])
    try:
        import jsonschema  # optional: the schema itself is valid JSON Schema
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(report.schema())


@strict_only
def test_tune_measures_every_candidate_and_picks_the_fastest_steady_step(tmp_path):
    """--tune on the clean example: every candidate configuration has positive
    measured times (steady step, cold and warm start) and compiles, the table
    validates against tune_schema.json, and the best is the candidate with the
    smallest steady step time in that table, given as environment variables."""
    from torch_tpu.doctor import tune

    out = str(tmp_path / "tune.json")
    cmd = [sys.executable, "-m", "torch_tpu.doctor", "--tune", "--quiet", "--steps", "6", "--json", out,
           os.path.join(EXAMPLES, "clean.py")]
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_EAGER_MODE"}
    p = subprocess.run(cmd, cwd=ROOT, env=dict(env, PYTHONWARNINGS="ignore"), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    with open(out) as f:
        res = json.load(f)
    tune.validate(res)
    rows = {r["name"]: r for r in res["candidates"]}
    assert {c["name"] for c in tune.CANDIDATES} <= set(rows)
    for r in res["candidates"]:
        assert r["error"] is None, r
        assert r["steady_ms"] > 0 and r["cold_start_s"] > 0 and r["warm_start_s"] > 0, r
        assert len(r["steady_ms_runs"]) == 2 and r["compiles"] > 0 and r["fallbacks"] == 0, r
    assert rows["strict"]["env"] == {"TORCH_TPU_EAGER_MODE": "strict"}
    assert rows["fused"]["env"] == {"TORCH_TPU_EAGER_MODE": "fused"}
    fastest = min(res["candidates"], key=lambda r: r["steady_ms"])
    best = res["best"]
    assert best["name"] == fastest["name"] and best["env"] == fastest["env"]
    assert best["set"] == " ".join(f"{k}={v}" for k, v in fastest["env"].items())
    assert any("torch.compile" in g for g in res["gaps"])


def test_tune_adds_the_graph_size_knob_only_where_fused_was_cut_at_the_size_bound(monkeypatch):
    """The candidate list grows by TORCH_TPU_FUSED_MAX_NODES only when the fused
    run's programs were cut at the size bound (the one case the knob changes);
    the best is the smallest steady step time (no processes: _measure is stubbed)."""
    from torch_tpu.doctor import tune

    def fake(cut):
        times = {"strict": 5.0, "fused": 4.0, tune.LARGER_GRAPHS["name"]: 3.0}

        def measure(index, cand, program, steps, timeout, base_env, workdir, log):
            assert not any(k in base_env for k in ("TORCH_TPU_EAGER_MODE", "TORCH_TPU_CACHE_DIR"))
            return {"name": cand["name"], "env": dict(cand["env"]), "steady_ms": times[cand["name"]],
                    "cold_start_s": 1.0, "warm_start_s": 0.5, "compiles": 3, "compiles_after_warmup": 0,
                    "fallbacks": 0, "steady_ms_runs": [times[cand["name"]]] * 2, "error": None,
                    "cuts_per_step": {"size_bound": 2.0, "optimizer_step": 1.0} if cut and cand["name"] == "fused"
                    else {"optimizer_step": 1.0}}
        return measure

    monkeypatch.setenv("TORCH_TPU_EAGER_MODE", "debug")  # the caller's own setting does not leak
    monkeypatch.setattr(tune, "_measure", fake(cut=False))
    res = tune.tune(["x.py"])
    tune.validate(res)
    assert [r["name"] for r in res["candidates"]] == ["strict", "fused"] and res["best"]["name"] == "fused"
    assert res["best"]["set"] == "TORCH_TPU_EAGER_MODE=fused" and res["best"]["speedup_vs_default"] == 5.0 / 4.0
    monkeypatch.setattr(tune, "_measure", fake(cut=True))
    res = tune.tune(["x.py"])
    tune.validate(res)
    assert [r["name"] for r in res["candidates"]] == ["strict", "fused", tune.LARGER_GRAPHS["name"]]
    assert res["best"]["env"] == {"TORCH_TPU_EAGER_MODE": "fused", "TORCH_TPU_FUSED_MAX_NODES": "32768"}
    assert "TORCH_TPU_FUSED_MAX_NODES=32768" in tune.text(res)
