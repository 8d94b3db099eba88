"""Fused eager specifics and the two-tier program cache."""
import copy
import glob
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_tpu import _C


def test_fused_training_loop_compiles_a_bounded_number_of_programs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(4, 8).to("tpu")
    y = torch.randint(0, 3, (4,)).to("tpu")
    with torch.tpu.eager_mode("fused"):
        start = torch.tpu.cache_stats()["mem_misses"]
        misses = []
        for step in range(1000):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if step % 100 == 0:
                loss.item()  # a host read every 100 steps flushes the graph
                misses.append(torch.tpu.cache_stats()["mem_misses"] - start)
    # after the first window every window is the same program(s): nothing compiles
    assert misses[2] == misses[-1], f"programs kept compiling: {misses}"
    assert misses[-1] <= 10, f"too many programs for one loop: {misses}"


class _Layer(nn.Module):
    """Two residual MLPs: 22 ops, a small transformer layer's count."""
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.fc3, self.fc4 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        x = x + self.fc2(F.gelu(self.fc1(self.ln1(x))))
        return x + self.fc4(torch.tanh(self.fc3(self.ln2(x))))


class _Stack(nn.Module):
    def __init__(self, d=16, n=6):
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.layers = nn.ModuleList(_Layer(d) for _ in range(n))
        self.out = nn.Linear(d, 3)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


@pytest.mark.parametrize("seq", [5, 6, 7])
def test_fused_cuts_after_each_layer_of_a_stack_and_compiles_one_layer(seq):
    """Fused mode runs the pending graph after each layer of a ModuleList:
    the identical layers are one program (one compile per new input shape,
    not one per layer or one for the whole stack), with CPU's values and
    gradients."""
    torch.manual_seed(0)
    cpu = _Stack()
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, seq, 4)
    with torch.tpu.eager_mode("fused"):
        s0 = torch.tpu.cache_stats()
        out = tpu(x.to("tpu"))
        torch.tpu.synchronize()  # programs run once compiled (compile workers): count them after
        s1 = torch.tpu.cache_stats()
        out.sum().backward()
        got = out.cpu()
    # six runs: the input projection with layer 1, then layers 2..6, one
    # program; the seventh is the output projection synchronize ran
    assert s1["executions"] - s0["executions"] == 7, (s0, s1)
    assert s1["mem_misses"] - s0["mem_misses"] <= 3, (s0, s1)
    ref = cpu(x)
    ref.sum().backward()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    for (n, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_fused_layer_cut_skips_small_blocks_and_compiled_graphs():
    """A ModuleList of one-op blocks stays in its caller's graph; under
    torch.compile the hook is dead code (no graph break)."""
    heads = nn.ModuleList(nn.Linear(4, 2) for _ in range(3)).to("tpu")
    x = torch.randn(3, 4).to("tpu")
    with torch.tpu.eager_mode("fused"):
        s0 = torch.tpu.cache_stats()["executions"]
        ys = [h(x) for h in heads]
        assert torch.tpu.cache_stats()["executions"] == s0
        torch.testing.assert_close(torch.stack(ys).cpu(), torch.stack([h.cpu()(x.cpu()) for h in heads]))
        heads.to("tpu")
        model = _Stack().to("tpu")
        compiled = torch.compile(model, backend="tpu", fullgraph=True)
        xt = torch.randn(2, 5, 4)
        torch.testing.assert_close(compiled(xt.to("tpu")).cpu(), model.cpu()(xt), rtol=1e-5, atol=1e-5)


def test_fused_interleaved_host_reads_are_correct():
    with torch.tpu.eager_mode("fused"):
        a = torch.zeros(4, device="tpu")
        ref = torch.zeros(4)
        for i in range(20):
            a = a * 0.5 + i
            ref = ref * 0.5 + i
            if i % 3 == 0:
                assert torch.allclose(a.cpu(), ref)
                assert a[1].item() == pytest.approx(ref[1].item())
        assert torch.allclose(a.cpu(), ref)


def test_fused_inplace_on_views_inside_pending_graph():
    with torch.tpu.eager_mode("fused"):
        c = torch.arange(16.0).reshape(4, 4)
        t = c.to("tpu")
        for x in (c, t):
            r = x[1:3]
            old = x.clone()
            r.mul_(2)
            x.t()[0].add_(1)
            y = old + x  # reads the pre-write value through `old`
            x[0] = y[3]
        assert torch.equal(t.cpu(), c)
        assert torch.tpu.cache_stats()["pending_nodes"] == 0


def test_fused_fallback_op_in_the_middle_of_a_graph():
    with torch.tpu.eager_mode("fused"):
        c = torch.arange(6.0)
        t = c.to("tpu")
        a, b = t * 2, c * 2
        # an op with no tpu kernel: its inputs are flushed and copied to CPU
        a = torch.special.i0(a)
        b = torch.special.i0(b)
        torch.testing.assert_close((a + 1).cpu(), b + 1)


def test_changing_python_scalar_does_not_recompile():
    t = torch.ones(8, device="tpu")
    t.cpu()  # materialised (in fused mode the fill is part of the first graph)
    (t * 0.5).cpu()
    before = torch.tpu.cache_stats()["mem_misses"]
    for i in range(10):
        (t * (0.1 * i + 0.01)).cpu()
    assert torch.tpu.cache_stats()["mem_misses"] == before


def _run(code, cache_dir, extra_env=None):
    # the cache tests count programs: strict mode makes one per op whatever
    # mode the suite runs in
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(cache_dir), "TORCH_TPU_EAGER_MODE": "strict",
           **(extra_env or {})}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


_PROGRAM = """
import torch
x = torch.arange(12.0).reshape(3, 4).to("tpu")
y = (x.t() @ x).relu().sum(0) * 3
print("RESULT", y.cpu().tolist())
s = torch.tpu.cache_stats()
print("STATS", s["disk_hits"], s["compiles"], s["disk_errors"])
"""


def _parse(out):
    res = [l for l in out.splitlines() if l.startswith("RESULT")][0]
    hits, compiles, errors = map(int, [l for l in out.splitlines() if l.startswith("STATS")][0].split()[1:])
    return res, hits, compiles, errors


def test_second_process_hits_the_disk_tier(tmp_path):
    r1, h1, c1, _ = _parse(_run(_PROGRAM, tmp_path))
    assert c1 > 0
    r2, h2, c2, _ = _parse(_run(_PROGRAM, tmp_path))
    assert r1 == r2
    assert c2 == 0 and h2 >= c1, f"second process compiled {c2}, disk hits {h2}"


_WORKLOAD = """
import torch
k = {k}
xs = [torch.randn(k + i, 3, device="tpu") for i in range(15)]   # 15 shapes: 15+ programs
print("RESULT", [round(float((x * 2).sin().sum()), 3) for x in xs][:3])
s = torch.tpu.cache_stats()
print("STATS", s["disk_hits"], s["compiles"], s["disk_errors"])
"""


def test_a_second_workload_does_not_evict_the_first(tmp_path):
    # default bounds: the disk tier is bounded by bytes, not a small count
    a = _WORKLOAD.format(k=300)
    b = _WORKLOAD.format(k=700)
    _, _, ca, _ = _parse(_run(a, tmp_path))
    _, _, cb, _ = _parse(_run(b, tmp_path))
    assert ca > 15 and cb > 15
    _, hits, compiles, _ = _parse(_run(a, tmp_path))
    assert compiles == 0 and hits >= ca


def test_corrupt_or_foreign_cache_files_are_ignored_and_replaced(tmp_path):
    r1, _, c1, _ = _parse(_run(_PROGRAM, tmp_path))
    files = sorted(glob.glob(str(tmp_path / "*.tpux")))
    assert files
    with open(files[0], "r+b") as f:  # flip bytes in the payload
        f.seek(60)
        f.write(b"\xff\x00\xff\x00garbage")
    with open(files[1], "wb") as f:  # truncated
        f.write(b"TPUX0001")
    r2, _, c2, errors = _parse(_run(_PROGRAM, tmp_path))
    assert r1 == r2
    assert errors >= 2 and c2 >= 2
    r3, _, c3, errors3 = _parse(_run(_PROGRAM, tmp_path))
    assert r3 == r1 and c3 == 0 and errors3 == 0


def test_two_processes_fill_one_directory_at_once(tmp_path):
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_EAGER_MODE": "strict"}
    procs = [subprocess.Popen([sys.executable, "-c", _PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    assert _parse(outs[0][0])[0] == _parse(outs[1][0])[0]
    assert not glob.glob(str(tmp_path / "*.tmp.*"))
    r3, h3, c3, _ = _parse(_run(_PROGRAM, tmp_path))
    assert c3 == 0


def test_cache_bounds_evict(tmp_path):
    code = """
    import torch
    x = torch.ones(4, device="tpu")
    for i in range(12):
        x = x.reshape(-1)[: 4].reshape(2, 2).sum(0) if i % 2 else (x.reshape(-1)[:2] * (i + 1)).repeat(2)
        x.cpu()
    s = torch.tpu.cache_stats()
    print("EV", s["evictions"], s["mem_entries"], s["disk_evictions"], s["disk_entries"])
    """
    out = _run(code, tmp_path, {"TORCH_TPU_CACHE_MAX_ENTRIES": "3", "TORCH_TPU_DISK_CACHE_MAX_ENTRIES": "4"})
    ev, entries, dev, dentries = map(int, [l for l in out.splitlines() if l.startswith("EV")][0].split()[1:])
    assert entries <= 3 and ev > 0
    assert dentries <= 4 and dev > 0
    assert len(glob.glob(str(tmp_path / "*.tpux"))) <= 4


def test_clear_cache_empties_memory_tier():
    (torch.ones(3, device="tpu") * 2).cpu()
    torch.tpu.clear_cache()
    assert torch.tpu.cache_stats()["mem_entries"] == 0
    assert torch.equal((torch.ones(3, device="tpu") * 2).cpu(), torch.full((3,), 2.0))
