"""Program dumps (TORCH_TPU_DUMP_DIR) and torch_tpu.debug.explain: which
programs a call ran, their ops, what cut each one, where each came from;
checked against the engine's own counters, PyTorch CPU's values and the
program text itself."""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu.debug import explain

MODE = os.environ.get("TORCH_TPU_EAGER_MODE", "strict")


def _mlp():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x = torch.randn(5, 8)
    return m, x


def _step_fn(m, x, opt):
    def step():
        opt.zero_grad()
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_explain_training_step_programs_cuts_and_values():
    m, x = _mlp()
    import copy
    mt = copy.deepcopy(m).to("tpu")
    opt_c = torch.optim.SGD(m.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(mt.parameters(), lr=0.1)
    step_c, step_t = _step_fn(m, x, opt_c), _step_fn(mt, x.to("tpu"), opt_t)
    before = torch.tpu.metrics()
    ex1 = explain(step_t)
    after = torch.tpu.metrics()
    # the loss is CPU's
    assert ex1.result == pytest.approx(step_c(), rel=1e-5, abs=1e-6)
    assert ex1.programs and all(p.executed for p in ex1.programs)
    # every compile in the window is one program the explanation says it compiled
    compiled_here = after["compile"]["count"] - before["compile"]["count"]
    loaded_here = after["disk_load"]["count"] - before["disk_load"]["count"]
    assert sum(p.source == "compiled" for p in ex1.programs) == compiled_here
    assert sum(p.source == "disk" for p in ex1.programs) == loaded_here
    assert after["execute"]["count"] - before["execute"]["count"] == len(ex1.programs)
    # each program's op count and name are its record's
    recs = {f"{p['key']:016x}" if isinstance(p.get("key"), int) else p.get("key"): p for p in after["programs"]}
    for p in ex1.programs:
        assert p.ops >= 1 and p.name
        if p.key in recs:
            assert recs[p.key]["ops"] == p.ops and recs[p.key]["name"] == p.name
    if MODE == "fused":
        # forward+backward+update up to the optimizer step: one program cut there
        # (plus the host read of the loss, which reads a value that program made)
        assert ex1.cuts["optimizer_step"] == 1
        assert set(ex1.cuts) <= {"optimizer_step", "host_read", "layer", "synchronize"}
        big = max(ex1.programs, key=lambda p: p.ops)
        assert big.ops >= 10 and "+" in big.name and big.name.startswith(f"{big.ops} ops:")
    else:
        assert set(ex1.cuts) == {"op"}
        assert all(p.ops <= 4 for p in ex1.programs)
    # the same step again: nothing compiles, every program a memory-tier hit
    ex2 = explain(step_t)
    assert ex2.result == pytest.approx(step_c(), rel=1e-5, abs=1e-6)
    assert ex2.compiles == 0
    assert [p.source for p in ex2.programs] == ["memory"] * len(ex2.programs)
    assert [p.key for p in ex2.programs] == [p.key for p in ex1.programs]
    text = str(ex2)
    n = len(ex2.programs)
    assert f"{n} program{'s' if n != 1 else ''} run ({n} memory)" in text
    for p in ex2.programs:
        assert p.key in text


def test_explain_host_read_fallback_and_transfers():
    x = torch.randn(6, 6)
    xt = x.to("tpu")

    def fn():
        y = (xt * 2 + 1).sum()
        v = y.item()
        e = torch.linalg.eigvals(xt * 1.0)  # no tpu kernel: runs on the CPU
        return v, e.cpu()

    ex = explain(fn)
    v, e = ex.result
    assert v == pytest.approx(float((x * 2 + 1).sum()), rel=1e-5)
    ref = torch.linalg.eigvals(x)
    assert torch.allclose(torch.sort(e.real).values, torch.sort(ref.real).values, atol=1e-4)
    assert ex.fallbacks["aten::_linalg_eigvals"] == 1
    if MODE == "fused":
        assert ex.cuts["host_read"] >= 1
        assert ex.cuts["fallback"] >= 1
        first = ex.programs[0]
        assert first.cut == "host_read" and "mul" in first.name and "sum" in first.name
    # 4 bytes of the loss went to the host, and the fallback's input and result crossed
    assert ex.transfers["to_host"][0] >= 2
    assert ex.transfers["to_host"][1] >= 4 + 36 * 4
    assert ex.transfers["to_device"][0] >= 1
    assert ex.host_waits >= 1
    assert "aten::_linalg_eigvals 1" in str(ex)


def test_explain_nested_is_refused_and_errors_propagate():
    def boom():
        raise ValueError("inner failure")
    with pytest.raises(ValueError, match="inner failure"):
        explain(boom)
    # the timeline was stopped: a new explain works
    ex = explain(lambda: (torch.ones(3, device="tpu") + 1).cpu())
    assert torch.equal(ex.result, torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="already in use"):
        explain(lambda: explain(lambda: None))


_DUMP_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = a.to("tpu")
    y = (t.exp() * 3).sum(1)
    out = y.cpu()
    assert torch.allclose(out, (a.exp() * 3).sum(1))
    torch.tpu.synchronize()
    progs = [{"key": p["key"], "name": p["name"], "ops": p["ops"], "seconds": p["seconds"]}
             for p in torch.tpu.metrics()["programs"]]
    print("PROGS=" + json.dumps(progs))
""")


def test_dump_dir_writes_stablehlo_op_list_and_compile_time(tmp_path):
    d = tmp_path / "dumps"
    env = dict(os.environ, TORCH_TPU_DUMP_DIR=str(d), TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", _DUMP_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    progs = json.loads(r.stdout.split("PROGS=")[1])
    assert progs
    files = sorted(os.listdir(d))
    for p in progs:
        key = p["key"] if isinstance(p["key"], str) else f"{p['key']:016x}"
        assert f"{key}.mlir" in files and f"{key}.txt" in files, (key, files)
        text = (d / f"{key}.mlir").read_text()
        assert text.startswith(f"// torch_tpu program {key}\n")
        assert "func.func public @main" in text and "stablehlo." in text
        meta = dict(line.split(": ", 1) for line in (d / f"{key}.txt").read_text().splitlines())
        assert meta["key"] == key and meta["name"] == p["name"] and int(meta["ops"]) == p["ops"]
        assert float(meta["seconds"]) == pytest.approx(p["seconds"], rel=1e-3, abs=1e-5)
        assert meta["source"] == "compiled"  # a fresh disk tier
        ops = meta["op_list"].split()
        assert len(ops) == p["ops"]
    # the exp/mul/sum ops are in some program's op list, and exp is in its text
    all_ops = {o for p in progs for o in (d / f"{p['key'] if isinstance(p['key'], str) else format(p['key'], '016x')}.txt").read_text().split("op_list: ")[1].split()}
    assert {"exp", "mul", "sum"} <= all_ops
    assert any(re.search(r"stablehlo\.exponential", (d / f).read_text()) for f in files if f.endswith(".mlir"))
    # XLA's optimized program, where the plugin gives it (the XLA CPU plugin: a
    # serialized HloModuleProtoWithConfig, which names XLA's fused computations)
    opt = [f for f in files if f.endswith(".pb")]
    if torch_tpu._C.platform() == "cpu":
        assert len(opt) == len(progs)
        assert all(f.split(".")[0] in {p["key"] if isinstance(p["key"], str) else f"{p['key']:016x}" for p in progs}
                   for f in opt)
        assert any(b"exponential" in (d / f).read_bytes() for f in opt)
    # no temporary files left
    assert not [f for f in files if ".tmp." in f]


def test_dump_dir_unwritable_warns_once_and_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = dict(os.environ, TORCH_TPU_DUMP_DIR=str(blocker / "sub"), TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    script = "import torch, torch_tpu\nprint((torch.ones(3, device='tpu') * 2).sum().item())\n"
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "6.0"
    assert r.stderr.count("TORCH_TPU_DUMP_DIR") == 1
