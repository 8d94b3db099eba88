"""Tiered compiles (runtime/execute.c, cache.c, launch.c; issue 42 item 3):
a program is first built at -O0 (about half the compile time of -O1 on
XLA's CPU compiler) and, when it keeps running and is large enough to care,
built again at -O1 beside the work; the memory tier swaps the builds, the
disk tier keeps the -O1 build, and the next process loads it directly.
Opt-in (TORCH_TPU_TIERED=1).  Each case runs in a fresh process with a
fresh cache directory."""
import json
import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import json, sys, time, torch, torch_tpu
n = int(sys.argv[1])
x = torch.rand(n, n).to("tpu")
w = torch.rand(n, n).to("tpu")
ref = None
vals = []
for i in range(8):
    y = torch.tanh(x @ w) * 0.5 + x.sin()  # one program in fused mode, several in strict
    vals.append(y.sum().item())
for _ in range(200):  # the promotion compiles beside the work: wait for it
    if torch.tpu.cache_stats()["promotions"] or n * n <= 16384:
        break
    time.sleep(0.05)
for i in range(3):
    y = torch.tanh(x @ w) * 0.5 + x.sin()
    vals.append(y.sum().item())
c = (torch.tanh(x.cpu() @ w.cpu()) * 0.5 + x.cpu().sin()).sum().item()
s = torch.tpu.cache_stats()
print("RESULT " + json.dumps({"vals": vals, "cpu": c, "compiles": s["compiles"], "promotions": s["promotions"],
                              "disk_hits": s["disk_hits"]}))
"""


def _run(cache, n, **env):
    e = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache), TORCH_TPU_TIERED="1")
    e.update(env)
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(n)], env=e, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _same_values(r):
    for v in r["vals"]:
        assert v == pytest.approx(r["cpu"], rel=1e-4)


def test_a_running_program_is_promoted_and_the_next_process_loads_the_full_build(tmp_path):
    first = _run(tmp_path, 256)
    _same_values(first)
    assert first["promotions"] >= 1, first
    again = _run(tmp_path, 256)  # the -O1 builds are on disk: loaded, nothing compiled or promoted
    _same_values(again)
    assert again["compiles"] == 0 and again["promotions"] == 0 and again["disk_hits"] >= 1, again


def test_small_programs_stay_quick(tmp_path):
    r = _run(tmp_path, 64)  # 4096 elements: -O0 runs as fast, never promoted
    _same_values(r)
    assert r["promotions"] == 0, r


def test_tiers_off(tmp_path):
    r = _run(tmp_path, 256, TORCH_TPU_TIERED="0")
    _same_values(r)
    assert r["promotions"] == 0, r
