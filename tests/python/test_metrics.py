"""torch.tpu.metrics() / metrics_report() and TORCH_TPU_LOG=recompiles: what
was compiled and why, counted by the engine (csrc/runtime/metrics.c)."""
import os
import subprocess
import sys
import tempfile
import textwrap

import torch

SCRIPT = textwrap.dedent("""
    import torch
    for n in (37, 38, 39):                      # one program, then two recompiles of it
        x = torch.ones(n, device="tpu")
        (x + 1).cpu()
    src = torch.arange(400., device="tpu")
    for k in (2, 3):                            # a view with another stride
        (src[1::k] * 3).cpu()
    m = torch.tpu.metrics()
    print("CAUSES", [(c["cause"], c["count"]) for c in m["recompile_causes"]])
""")


def _run(env_extra):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp(), TORCH_TPU_EAGER_MODE="strict", **env_extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)


def test_recompile_log_names_the_changed_input_once_per_cause():
    r = _run({"TORCH_TPU_LOG": "recompiles"})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("torch_tpu recompile:")]
    add = [ln for ln in lines if " add: " in ln]
    # 38 and 39 recompile the same way (input 0's shape): printed once, counted twice
    assert len(add) == 1, lines
    assert "input 0" in add[0] and "float32[38]" in add[0] and "(was float32[37])" in add[0], add[0]
    stride = [ln for ln in lines if "stride[0]" in ln]
    assert stride and "view_read" in stride[0], lines
    causes = dict(eval(r.stdout.split("CAUSES", 1)[1]))
    assert any("float32[38]" in c and n == 2 for c, n in causes.items()), causes


def test_without_the_log_nothing_is_printed():
    r = _run({"TORCH_TPU_LOG": ""})
    assert r.returncode == 0, r.stderr
    assert "torch_tpu recompile" not in r.stderr


def test_metrics_count_compiles_executions_transfers_and_waits(tpu):
    torch.tpu.reset_metrics()
    x = torch.randn(123, 7)                      # a shape no other test uses
    t = x.to(tpu)
    y = (t * 2 + 1).cpu()
    torch.testing.assert_close(y, x * 2 + 1)
    m = torch.tpu.metrics()
    assert m["transfer"]["to_device"]["count"] >= 1 and m["transfer"]["to_device"]["bytes"] >= x.numel() * 4
    assert m["transfer"]["to_host"]["bytes"] >= x.numel() * 4
    assert m["host_wait"]["count"] >= 1
    assert m["execute"]["count"] >= 1
    assert m["compile"]["count"] + m["disk_load"]["count"] >= 1
    names = [p["name"] for p in m["programs"]]
    assert any("mul" in n for n in names) and any("add" in n for n in names), names
    for p in m["programs"]:
        assert p["source"] in ("compiled", "disk") and p["ops"] >= 1
    torch.tpu.reset_metrics()
    m = torch.tpu.metrics()
    assert m["execute"]["count"] == 0 and m["compile"]["count"] == 0 and m["transfer"]["to_host"]["count"] == 0


def test_fused_programs_are_counted_by_what_cut_them(tpu):
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(2)])
    def block():  # a layer that records more ops than the cut's minimum (_blocks.MIN_NODES)
        return torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(16, 16), torch.nn.GELU(),
                                                                   torch.nn.LayerNorm(16))])
    stack = torch.nn.ModuleList([block() for _ in range(3)]).to(tpu)
    layers = layers.to(tpu)
    opt = torch.optim.SGD(list(layers.parameters()) + list(stack.parameters()), lr=0.1)
    x = torch.randn(4, 16, device=tpu)
    with torch.tpu.eager_mode("fused"):
        torch.tpu.synchronize()
        torch.tpu.reset_metrics()
        for _ in range(2):
            h = layers(x)
            for blk in stack:
                h = blk(h)
            loss = h.square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        loss.item()
    cuts = torch.tpu.metrics()["cuts"]
    assert cuts["optimizer_step"] >= 2, cuts
    assert cuts["layer"] >= 3, cuts
    assert cuts["op"] == 0, cuts


def test_metrics_report_is_readable(tpu):
    (torch.ones(3, device=tpu) + 2).cpu()
    text = torch.tpu.metrics_report()
    assert text.startswith("torch_tpu metrics")
    for word in ("compiles", "executions", "host waits", "transfers", "programs cut at"):
        assert word in text, text
