"""Compile workers (csrc/runtime/launch.c): programs compile on worker
threads while the program records the next ops; values are CPU's, in any
mode, with or without workers; TORCH_TPU_XLA_FLAGS reaches the compiler and
a compile that fails raises where its value is needed."""
import copy
import os
import subprocess
import sys
import tempfile
import textwrap

import torch


def _programs():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


def test_many_new_programs_recorded_ahead_of_their_compiles_give_cpu_values(tpu):
    torch.manual_seed(0)
    xs = [torch.randn(3, 40 + i) for i in range(24)]  # 24 shapes, a few programs each
    outs = [((x.to(tpu) * 1.5).sin() + x.to(tpu)).sum(-1) for x in xs]  # nothing waits until here
    for x, o in zip(xs, outs):
        torch.testing.assert_close(o.cpu(), ((x * 1.5).sin() + x).sum(-1))


def test_identical_layers_share_one_compile(tpu):
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([torch.nn.Sequential(*[m for _ in range(4) for m in (
        torch.nn.Linear(24, 24), torch.nn.GELU(), torch.nn.LayerNorm(24))]) for _ in range(6)])
    cpu = copy.deepcopy(layers)
    dev = layers.to(tpu)
    x = torch.randn(5, 24)
    with torch.tpu.eager_mode("fused"):
        torch.tpu.synchronize()
        before = _programs()
        h = x.to(tpu)
        for blk in dev:
            h = blk(h)
        got = h.cpu()
        made = _programs() - before
    with torch.no_grad():
        ref = x
        for blk in cpu:
            ref = blk(ref)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # the first layer (with the input), the other five (one compile, joined), what followed
    assert made <= 3, torch.tpu.metrics_report()


def _run(code, **env):
    e = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp(), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=300)


_VALUES = """
import torch
torch.manual_seed(0)
x = torch.randn(7, 9)
y = ((x.to("tpu") @ x.t().to("tpu")).tanh() * 2).cpu()
print("OK", torch.allclose(y, (x @ x.t()).tanh() * 2, rtol=1e-5, atol=1e-5))
"""


def test_without_workers_values_are_the_same():
    for threads in ("0", "1", "2"):
        r = _run(_VALUES, TORCH_TPU_COMPILE_THREADS=threads)
        assert r.returncode == 0 and "OK True" in r.stdout, (threads, r.stderr[-2000:])


def test_xla_flags_reach_the_compiler_and_a_failed_compile_raises_at_the_read():
    r = _run(_VALUES, TORCH_TPU_XLA_FLAGS="xla_backend_optimization_level=1")
    assert r.returncode == 0 and "OK True" in r.stdout, r.stderr[-2000:]
    bad = """
import torch
try:
    x = torch.ones(3, device="tpu")
    y = x + 1                 # the compiles fail on a worker: raised here or at the read
    y.cpu()
except RuntimeError as e:
    print("RAISED", e)
z = torch.zeros(2)            # the process goes on (on the CPU here: every compile fails)
print("ALIVE", z.sum().item())
"""
    r = _run(bad, TORCH_TPU_XLA_FLAGS="xla_no_such_flag=1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RAISED" in r.stdout and "xla_no_such_flag" in r.stdout, r.stdout
    assert "ALIVE 0.0" in r.stdout
