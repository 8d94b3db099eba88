"""The XLA CPU plugin's device capacity (csrc/runtime/memory.c): the plugin
reports none, its memory is the host's RAM, and what sizes itself from a
device's memory (vLLM's and SGLang's KV caches, accelerate) must take a
share of the machine: TORCH_TPU_CPU_MEMORY, else half the RAM, at most
16 GiB.  mem_get_info, get_device_properties and the out-of-memory check
agree on it.  Each case runs in a fresh process (the capacity is read once,
when the engine starts)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu  # noqa: F401

pytestmark = pytest.mark.skipif(torch.tpu.get_device_properties(0).platform != "cpu",
                                reason="the capacity of the XLA CPU plugin's device")

GiB = 1 << 30


def _run(code, capacity=None):
    env = dict(os.environ)
    env.pop("TORCH_TPU_CPU_MEMORY", None)
    if capacity is not None:
        env["TORCH_TPU_CPU_MEMORY"] = capacity
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=300)
    return r


def test_default_capacity_is_half_the_ram_at_most_16_gib():
    r = _run("""
        import torch, torch_tpu
        free, total = torch.tpu.mem_get_info()
        print(total, free, torch.tpu.get_device_properties(0).total_memory)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    total, free, props = map(int, r.stdout.split())
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert total == props == min(ram // 2, 16 * GiB)
    assert 0 < free <= total


def test_set_capacity_is_reported_counted_and_enforced():
    r = _run("""
        import torch, torch_tpu
        free0, total = torch.tpu.mem_get_info()
        a = torch.ones(64 << 20, device="tpu")  # 256 MiB
        torch.tpu.synchronize()
        free1, _ = torch.tpu.mem_get_info()
        print(total, free0, free1)
        try:
            torch.empty(200 << 20, device="tpu")  # 800 MiB more: past 1 GiB
        except torch.OutOfMemoryError as e:
            print("OOM", str(e).replace(chr(10), " "))
        print(float(a[-1]))
    """, capacity="1GiB")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    total, free0, free1 = map(int, lines[0].split())
    assert total == GiB and free0 == GiB
    assert GiB - (256 << 20) - (1 << 20) <= free1 <= GiB - (256 << 20)  # and a few scalars
    assert lines[1].startswith("OOM") and "total capacity of 1.00 GiB" in lines[1]
    assert "TORCH_TPU_CPU_MEMORY" in lines[1]
    assert lines[2] == "1.0"  # what was allocated before is intact


@pytest.mark.parametrize("value,want", [("512MiB", 512 << 20), ("2G", 2 * GiB), ("3000000000", 3000000000)])
def test_capacity_sizes(value, want):
    r = _run("import torch, torch_tpu; print(torch.tpu.mem_get_info()[1])", capacity=value)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == want


def test_bad_capacity_is_a_clear_error():
    r = _run("import torch, torch_tpu; torch.ones(1, device='tpu')", capacity="lots")
    assert r.returncode != 0
    assert "TORCH_TPU_CPU_MEMORY='lots'" in r.stderr and "20GiB" in r.stderr
