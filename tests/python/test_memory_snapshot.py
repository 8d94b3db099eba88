"""torch.tpu.memory: _record_memory_history / _snapshot / _dump_snapshot in
torch.cuda's format (read back by torch.cuda._memory_viz), memory_summary,
and an out-of-memory message naming the largest live allocations."""
import base64
import inspect
import os
import pickle
import re
import subprocess
import sys

import pytest
import torch

import torch_tpu  # noqa: F401

TPU = "tpu"
HERE = os.path.abspath(__file__)


def _line():
    return inspect.currentframe().f_back.f_lineno


def _mine(trace):
    """The events of this file's own lines (the innermost frame of ours)."""
    out = []
    for e in trace:
        fr = [f for f in e["frames"] if os.path.abspath(f["filename"]) == HERE]
        if fr:
            out.append((e["action"], e["size"], fr[0]["line"], fr[0]["name"]))
    return out


@pytest.fixture
def recording():
    torch.tpu.memory._record_memory_history()
    try:
        yield
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)


def test_trace_is_the_known_sequence_of_allocs_and_frees_with_stacks(recording):
    la = _line() + 1
    a = torch.empty(256, device=TPU)            # 1024 bytes
    lb = _line() + 1
    b = torch.empty(1000, device=TPU)           # 4000 bytes
    lc = _line() + 1
    c = torch.empty(10, dtype=torch.float64, device=TPU)  # 80 bytes
    ld = _line() + 1
    del a
    le = _line() + 1
    c = None
    s = torch.tpu.memory._snapshot()
    got = [(act, size, line) for act, size, line, name in _mine(s["device_traces"][0])
           if name == "test_trace_is_the_known_sequence_of_allocs_and_frees_with_stacks"]
    assert got == [
        ("segment_alloc", 1024, la), ("alloc", 1024, la),
        ("segment_alloc", 4000, lb), ("alloc", 4000, lb),
        ("segment_alloc", 80, lc), ("alloc", 80, lc),
        ("free_requested", 1024, ld), ("free_completed", 1024, ld), ("segment_free", 1024, ld),
        ("free_requested", 80, le), ("free_completed", 80, le), ("segment_free", 80, le),
    ]
    # addresses are the tensors' data_ptr(); b is live: a segment of one block, with its stack
    seg = [g for g in s["segments"] if g["address"] == b.data_ptr()]
    assert len(seg) == 1 and seg[0]["total_size"] == 4000 and len(seg[0]["blocks"]) == 1
    blk = seg[0]["blocks"][0]
    assert blk["address"] == b.data_ptr() and blk["size"] == 4000
    assert any(os.path.abspath(f["filename"]) == HERE and f["line"] == lb for f in blk["frames"])
    # the freed ones are not segments any more
    addrs = {g["address"] for g in s["segments"]}
    allocs = [e for e in s["device_traces"][0] if e["action"] == "alloc"]
    freed = {e["addr"] for e in s["device_traces"][0] if e["action"] == "free_completed"}
    assert freed and not (freed & addrs)
    assert all(e["addr"] in addrs or e["addr"] in freed for e in allocs if e["size"])
    # written values are active; an empty() never written holds no buffer yet
    assert blk["state"] == "inactive"
    b.fill_(1.0)
    assert torch.equal(b.cpu(), torch.ones(1000))
    blk2 = [g for g in torch.tpu.memory._snapshot()["segments"] if g["address"] == b.data_ptr()][0]["blocks"][0]
    assert blk2["state"] == "active_allocated"


def test_training_step_allocations_match_parameter_and_grad_sizes(recording):
    torch.manual_seed(0)
    m = torch.nn.Linear(32, 16).to(TPU)
    x = torch.randn(8, 32, device=TPU)
    m(x).sum().backward()
    torch.tpu.synchronize()
    s = torch.tpu.memory._snapshot()
    live = {g["address"]: g["total_size"] for g in s["segments"]}
    # parameters, their grads and the input are live, with their sizes
    for t in (m.weight, m.bias, m.weight.grad, m.bias.grad, x):
        assert live.get(t.data_ptr()) == t.numel() * t.element_size(), t.shape
    # their bytes are part of the trace's allocations
    alloc_sizes = [e["size"] for e in s["device_traces"][0] if e["action"] == "alloc"]
    assert 16 * 32 * 4 in alloc_sizes and 8 * 32 * 4 in alloc_sizes


def test_dump_snapshot_renders_with_memory_viz(tmp_path, recording):
    keep = [torch.ones(1 << k, device=TPU) for k in range(4, 12)]
    for t in keep[::2]:
        del t
    keep = keep[1::2]
    path = tmp_path / "snapshot.pickle"
    torch.tpu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert set(snap) >= {"segments", "device_traces"}
    html = tmp_path / "out.html"
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    page = html.read_text()
    payload = base64.b64decode(re.search(r'"base64": "([^"]+)"', page).group(1))
    assert pickle.loads(payload) == snap  # the page embeds the snapshot whole
    # the text views read it too: every alloc of ours is in the trace listing
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    n_alloc = sum(e["action"] == "alloc" for e in snap["device_traces"][0])
    assert n_alloc >= len(keep) * 2 and r.stdout.count(" = cudaMalloc(") == n_alloc
    from torch.cuda import _memory_viz
    text = _memory_viz.segsum(snap)
    assert f"segments: {len(snap['segments'])}" in text
    # the flame graph's input: the live bytes, per block, add up to the segments'
    flame = _memory_viz.memory(snap, format_flamegraph=lambda s: s)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in flame.splitlines() if line) == \
        sum(g["total_size"] for g in snap["segments"])
    sizes = [g["total_size"] for g in snap["segments"]]
    for t in keep:
        assert t.numel() * 4 in sizes


def test_max_entries_keeps_the_newest_and_none_stops(recording):
    torch.tpu.memory._record_memory_history(max_entries=4)
    ts = [torch.empty(10 + i, device=TPU) for i in range(10)]
    s = torch.tpu.memory._snapshot()
    allocs = [e["size"] for e in s["device_traces"][0] if e["action"] == "alloc"]
    assert allocs == [4 * (10 + i) for i in range(6, 10)]
    torch.tpu.memory._record_memory_history(enabled=None)
    more = torch.empty(77, device=TPU)
    s2 = torch.tpu.memory._snapshot()
    assert [e for e in s2["device_traces"][0] if e["size"] == 77 * 4] == []
    # live allocations are segments whether or not they were recorded
    assert any(g["address"] == more.data_ptr() and g["frames"] == [] for g in s2["segments"])
    del ts


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="enabled"):
        torch.tpu.memory._record_memory_history(enabled="sometimes")
    with pytest.raises(ValueError, match="stacks"):
        torch.tpu.memory._record_memory_history(stacks="fortran")
    with pytest.raises(ValueError, match="max_entries"):
        torch.tpu.memory._record_memory_history(max_entries=0)
    assert not torch_tpu._C._memory_history_recording()


def test_memory_summary_names_largest_live_allocation(recording):
    ln = _line() + 1
    big = torch.ones(1 << 16, device=TPU)
    big.sum().item()
    text = torch.tpu.memory.memory_summary()
    assert f"0x{big.data_ptr():x}  {1 << 18} bytes" in text
    assert f"test_memory_snapshot.py:{ln} in test_memory_summary_names_largest_live_allocation" in text


def test_out_of_memory_names_largest_live_allocations():
    big = torch.ones(1 << 20, device=TPU)  # 4 MiB, written
    assert big.sum().item() == float(1 << 20)
    total = torch_tpu._C.memory_info(0)["total_bytes"]
    used = torch.tpu.memory_allocated()
    torch.tpu.set_per_process_memory_fraction((used + (1 << 20)) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError) as ei:
            o = torch.ones(1 << 23, device=TPU)  # 32 MiB
            o[-1].item()
        msg = str(ei.value)
        assert "Largest live allocations: 4.00 MiB at " + hex(big.data_ptr()) in msg
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.ones(4, device=TPU).sum().item() == 4.0


def test_out_of_memory_while_recording_names_where_and_is_in_the_trace(recording):
    ln = _line() + 1
    big = torch.ones(1 << 20, device=TPU)  # 4 MiB, written
    assert big.sum().item() == float(1 << 20)
    total = torch_tpu._C.memory_info(0)["total_bytes"]
    used = torch.tpu.memory_allocated()
    torch.tpu.set_per_process_memory_fraction((used + (1 << 20)) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError) as ei:
            o = torch.ones(1 << 23, device=TPU)  # 32 MiB
            o[-1].item()
        msg = str(ei.value)
        assert f"0x{big.data_ptr():x} made at {HERE}:{ln} in " \
               "test_out_of_memory_while_recording_names_where_and_is_in_the_trace" in msg
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    ooms = [e for e in torch.tpu.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["size"] == 32 << 20
    assert any(os.path.abspath(f["filename"]) == HERE for f in ooms[0]["frames"])
