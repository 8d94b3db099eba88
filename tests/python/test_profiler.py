"""torch.profiler with the tpu activity (csrc/torch/profiler.cpp, a Kineto
activity profiler registered through PyTorch's PrivateUse1 extension point):
program executions on the device's timeline with their device time, linked
to the op that ran them; compiles with their cache tier, transfers with
bytes, host waits and CPU fallbacks; key_averages' device column; a chrome
trace Perfetto can open (its schema checked here); schedule and
tensorboard_trace_handler.  Values are checked against PyTorch CPU and the
device times against the engine's own metrics."""
import copy
import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

import torch_tpu  # noqa: F401

MODE = os.environ.get("TORCH_TPU_EAGER_MODE", "strict")
ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
DEVICE_PID = 1000  # the tpu's process in the trace (profiler.cpp device_pid)


def _model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return m, torch.randn(8, 16)


def _step(m, opt, x):
    opt.zero_grad()
    loss = m(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def _check_schema(trace):
    """What Perfetto's JSON importer needs (Chrome trace event format)."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    for e in trace["traceEvents"]:
        assert isinstance(e, dict)
        ph = e.get("ph")
        assert ph in {"X", "B", "E", "i", "I", "M", "s", "t", "f", "C", "b", "e", "n"}, e
        assert isinstance(e.get("name"), str), e
        assert isinstance(e.get("pid"), (int, str)) and isinstance(e.get("tid", 0), (int, str)), e
        if ph != "M":
            assert isinstance(e.get("ts"), (int, float)), e
        if ph == "X":
            assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, e
        if "args" in e:
            assert isinstance(e["args"], dict)


def _tpu_events(trace):
    return [e for e in trace["traceEvents"] if e.get("pid") == DEVICE_PID and e.get("ph") == "X"]


def _trace_of(prof, tmp_path, name="trace.json"):
    path = tmp_path / name
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    _check_schema(trace)
    return trace


def test_training_step_programs_device_time_and_trace(tmp_path):
    m, x = _model()
    mt = copy.deepcopy(m).to("tpu")
    opt_c, opt_t = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(mt.parameters(), lr=0.1)
    xt = x.to("tpu")
    assert _step(mt, opt_t, xt) == pytest.approx(_step(m, opt_c, x), rel=1e-5)  # warm: programs compiled
    torch.tpu.synchronize()  # the update's programs run before the profile (item() waits for the loss only)
    before = torch.tpu.metrics()
    with profile(activities=ACTS) as prof:
        with record_function("train_step"):
            loss = _step(mt, opt_t, xt)
    after = torch.tpu.metrics()
    assert loss == pytest.approx(_step(m, opt_c, x), rel=1e-5)
    for p, q in zip(m.parameters(), mt.parameters()):
        assert torch.allclose(p, q.cpu(), atol=1e-6)
    trace = _trace_of(prof, tmp_path)
    # the device is a process of its own, named, with its rows
    meta = {(e["name"], e["pid"]): e["args"] for e in trace["traceEvents"] if e.get("ph") == "M"}
    assert meta[("process_name", DEVICE_PID)]["name"] == "tpu:0"
    progs = [e for e in _tpu_events(trace) if e["name"].startswith("tpu program: ")]
    n_exec = after["execute"]["count"] - before["execute"]["count"]
    assert len(progs) == n_exec >= 1
    # each program's span is the engine's device time for it (the same completion callbacks)
    dev_us = (after["execute"]["device_seconds"] - before["execute"]["device_seconds"]) * 1e6
    assert sum(e["dur"] for e in progs) == pytest.approx(dev_us, rel=1e-3, abs=2.0)
    for e in progs:
        assert e["cat"] == "kernel" and e["tid"] == 0
        assert e["args"]["ops"] >= 1 and len(e["args"]["program"]) == 16
        if " ops: " in e["name"]:  # (a single op with view plumbing is named by the op alone)
            assert e["name"].startswith(f"tpu program: {e['args']['ops']} ops: ")
    if MODE == "fused":
        # one program holds the step up to the optimizer's update; the ops recorded
        # into it (forward, backward, update) lie in its recording window
        step_prog = [e for e in progs if e["args"].get("cut") == "optimizer_step"]
        assert len(step_prog) == 1 and step_prog[0]["args"]["ops"] >= 10
        base_us = trace["baseTimeNanoseconds"] / 1000
        lo = step_prog[0]["args"]["recorded_from_us"] - base_us
        hi = step_prog[0]["args"]["recorded_to_us"] - base_us
        ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") in ("aten::addmm", "aten::mm")
               and e.get("pid") != DEVICE_PID]
        assert len(ops) >= 3
        # ... and their correlation ids (the trace's "External id") follow its first op's
        first = step_prog[0]["args"]["first_correlation"]
        assert all(e["args"]["External id"] >= first for e in ops)
        # (an op starts before its node is recorded, so its span reaches into the window)
        assert all(lo - 1 <= e["ts"] + e["dur"] and e["ts"] <= hi + 1 for e in ops), \
            (lo, hi, [(e["name"], e["ts"], e["dur"]) for e in ops])
        # the host read of the loss: a wait and 4 bytes to the host
        assert any(e["name"] == "tpu copy device to host" and e["args"]["bytes"] == 4 for e in _tpu_events(trace))
        assert any(e["name"] == "tpu host wait" for e in _tpu_events(trace))
    # key_averages: the programs' rows have device time, the table sorts by it
    ka = {e.key: e for e in prof.key_averages()}
    prog_rows = [e for k, e in ka.items() if k.startswith("tpu program: ")]
    assert sum(e.self_device_time_total for e in prog_rows) == pytest.approx(sum(e["dur"] for e in progs),
                                                                          rel=1e-3, abs=2.0)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "Self TPU" in table and "tpu program: " in table
    # the user annotation is there, and the host-side tpu events do not make its time negative
    assert ka["train_step"].self_cpu_time_total >= 0


def test_programs_link_to_the_op_that_ran_them(tmp_path):
    a = torch.randn(64, 64)
    at = a.to("tpu")
    (at @ at).sum().item()  # compiled before the profile
    with profile(activities=ACTS) as prof:
        v = (at @ at).sum().item()
    assert v == pytest.approx(float((a @ a).sum()), rel=1e-4)
    trace = _trace_of(prof, tmp_path)
    progs = [e for e in _tpu_events(trace) if e["name"].startswith("tpu program: ")]
    assert progs and all("correlation" in e["args"] for e in progs)
    # Kineto links each to a CPU op: its device time shows on that op's row
    ka = prof.key_averages()
    linked = [e for e in ka if not e.key.startswith("tpu ") and e.self_device_time_total > 0]
    assert linked, prof.key_averages().table(sort_by="self_device_time_total", row_limit=8)
    if MODE == "fused":
        # the host read (item) flushed the matmul and the sum into one program
        row = {e.key: e for e in ka}["aten::_local_scalar_dense"]
        # the ops recorded into it: correlation ids from the program's first op's to the read's
        (prog,) = progs
        lo, hi = prog["args"]["first_correlation"], prog["args"]["correlation"]
        cpu = {e["name"]: e["args"]["External id"] for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("pid") != DEVICE_PID and "External id" in e.get("args", {})}
        assert lo <= cpu["aten::mm"] < cpu["aten::sum"] <= hi
        assert row.self_device_time_total == pytest.approx(sum(e["dur"] for e in progs), rel=1e-3, abs=2.0)
    else:
        assert {e.key for e in linked} >= {"aten::mm", "aten::sum"}


def test_compiles_cache_tiers_transfers_and_fallbacks(tmp_path):
    x = torch.randn(5, 5)
    with profile(activities=ACTS) as prof:
        xt = x.to("tpu")
        y = (xt * 3.25 + 0.125).cos()  # a new program (these constants: not seen before)
        z = y.cpu()
        e = torch.linalg.eigvals(xt + 1)  # no tpu kernel: a CPU fallback
        y2 = ((xt * 3.25 + 0.125).cos()).cpu()  # the same program again: a memory-tier hit
    assert torch.allclose(z, (x * 3.25 + 0.125).cos(), atol=1e-6) and torch.equal(z, y2)
    assert torch.allclose(torch.sort(e.cpu().real).values, torch.sort(torch.linalg.eigvals(x + 1).real).values,
                          atol=1e-4)
    ev = _tpu_events(_trace_of(prof, tmp_path))
    names = [e["name"] for e in ev]
    built = [n for n in names if n.startswith(("tpu compile (cache miss): ", "tpu load (disk tier hit): "))]
    assert built, names
    assert any(n.startswith("tpu memory tier hit: ") for n in names), names
    up = [e for e in ev if e["name"] == "tpu copy host to device"]
    assert up and up[0]["args"]["bytes"] == 25 * 4
    down = [e["args"]["bytes"] for e in ev if e["name"] == "tpu copy device to host"]
    assert down.count(25 * 4) >= 2
    assert "tpu CPU fallback: aten::_linalg_eigvals" in names
    flushes = [e for e in ev if e["name"].startswith("tpu flush (")]
    assert flushes and all(e["args"]["cut"] in torch_tpu._C.cut_names() for e in flushes)


def test_schedule_and_tensorboard_trace_handler(tmp_path):
    m, x = _model()
    mt, xt = m.to("tpu"), x.to("tpu")
    opt = torch.optim.SGD(mt.parameters(), lr=0.01)
    d = tmp_path / "tb"
    with profile(activities=ACTS, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(d))) as prof:
        for _ in range(5):
            _step(mt, opt, xt)
            prof.step()
    files = [f for f in os.listdir(d) if f.endswith(".json") or f.endswith(".json.gz")]
    assert len(files) == 1, files
    with open(d / files[0]) as f:
        trace = json.load(f)
    _check_schema(trace)
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == 2
    progs = [e for e in _tpu_events(trace) if e["name"].startswith("tpu program: ")]
    assert progs
    if MODE == "fused":
        assert sum(e["args"].get("cut") == "optimizer_step" for e in progs) == 2


def test_profiler_and_explain_share_the_timeline_one_at_a_time():
    from torch_tpu.debug import explain
    with profile(activities=ACTS):
        with pytest.raises(RuntimeError, match="already in use"):
            explain(lambda: None)
    ex = explain(lambda: (torch.ones(2, device="tpu") * 2).cpu())
    assert torch.equal(ex.result, torch.full((2,), 2.0))


def test_cpu_only_profile_records_no_tpu_events(tmp_path):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (torch.ones(4, device="tpu") + 1).cpu()
    assert not torch_tpu._C.trace_active()
    assert _tpu_events(_trace_of(prof, tmp_path)) == []


def test_a_device_side_error_pending_when_a_profile_starts_is_reported_once():
    x = torch.arange(6.0, device="tpu")
    idx = torch.tensor([40], device="tpu")
    try:
        torch.take(x, idx)  # out of range: a device-side check, pending (debug mode raises here)
    except IndexError:
        assert torch.tpu.get_eager_mode() == "debug"
        return
    # the profile's start waits for the device and meets the failure: it is kept
    # for the user's synchronize, not consumed
    with profile(activities=ACTS):
        with pytest.raises(IndexError, match="tried to access index 40"):
            torch.tpu.synchronize()
        torch.tpu.synchronize()  # reported once
    assert not torch.autograd.profiler._is_profiler_enabled
