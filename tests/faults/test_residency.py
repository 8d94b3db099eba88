"""Bounded residency of compiled programs (issue 37): one process that
compiles thousands of distinct programs keeps its memory maps under the
program cache's bound (TORCH_TPU_CACHE_MAX_MAPS) and its RSS flat once the
bound is reached; programs evicted from memory come back from the disk
tier (a load, not a compile) with the right values; a compile that fails
for lack of memory sheds half the memory tier and retries once, then
raises a RuntimeError naming the program, and the process keeps working.
Each process runs under a deadline (tests/faults/residency_worker.py)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "residency_worker.py")


def _env(cache_dir, **extra):
    e = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in ("TORCH_TPU_CACHE_MAX_MAPS", "TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM", "TORCH_TPU_EAGER_MODE"):
        e.pop(k, None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def _run(args, env, deadline):
    r = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=deadline)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r


def _programs(tmp_path, mode, n, bound, reload, deadline):
    r = _run([WORKER, mode, str(n), "--reload", str(reload)],
             _env(tmp_path / "cache", TORCH_TPU_CACHE_MAX_MAPS=bound), deadline)
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _check_bounded(out, stderr, bound, per_program_slack):
    s = out["samples"]
    assert out["cache"]["mem_max_maps"] == bound
    # the bound was reached (else this test tests nothing) and said so once
    assert out["cache"]["map_evictions"] > 0, s
    assert stderr.count("least recently used programs left the memory cache") == 1, stderr[-2000:]
    # maps are counted every 8 inserts: at most 8 programs' maps over the bound
    over = [x for x in s if x["maps"] > bound + 8 * per_program_slack]
    assert not over, (bound, over)
    assert out["maps_end"] <= bound + 8 * per_program_slack
    # RSS flat once the bound is reached: what later programs add is freed
    # with those they push out
    first = next(i for i, x in enumerate(s) if x["map_evictions"] > 0)
    growth = s[-1]["rss_mib"] - s[first]["rss_mib"]
    assert growth < 64, (growth, s)
    # the first shapes left memory long ago: they load from the disk tier,
    # no compile, values checked again by the worker
    assert out["reload_compiles"] == 0 and out["reload_disk_loads"] > 0, out


def test_6000_programs_strict_stay_under_the_map_bound(tmp_path):
    out, err = _programs(tmp_path, "strict", 6000, 6000, 50, deadline=600)
    assert out["compiles"] == 6000, out
    _check_bounded(out, err, 6000, per_program_slack=10)
    print(f"\nstrict: 6000 programs in {out['seconds']} s, maps at most {max(x['maps'] for x in out['samples'])}, "
          f"RSS {out['samples'][0]['rss_mib']} -> {out['samples'][-1]['rss_mib']} MiB, "
          f"{out['cache']['map_evictions']} evicted, 50 reloaded in {out['reload_seconds']} s")


def test_fused_programs_stay_under_the_map_bound(tmp_path):
    out, err = _programs(tmp_path, "fused", 500, 3000, 20, deadline=600)
    _check_bounded(out, err, 3000, per_program_slack=60)


def test_compiled_graphs_stay_under_the_map_bound(tmp_path):
    out, err = _programs(tmp_path, "compile", 300, 3000, 10, deadline=600)
    _check_bounded(out, err, 3000, per_program_slack=60)


def test_default_map_bound_is_a_third_of_max_map_count(tmp_path):
    with open("/proc/sys/vm/max_map_count") as f:
        limit = int(f.read())
    r = _run(["-c", "import torch, torch_tpu; (torch.ones(3, device='tpu') * 2).cpu(); "
                    "print(torch.tpu.cache_stats()['mem_max_maps'])"], _env(tmp_path / "cache"), 120)
    assert int(r.stdout.strip().splitlines()[-1]) == limit // 3


ENOMEM_SCRIPT = textwrap.dedent("""
    import torch, torch_tpu
    # twenty programs held first (one program each in both modes: an upload
    # is a transfer), then compiles 21 (and 22) fail
    ok = all((torch.arange(float(n)).to("tpu") * 2).cpu().tolist() == [2.0 * i for i in range(n)]
             for n in range(1, 21))
    held = torch.tpu.cache_stats()["mem_entries"]
    x = torch.arange(7.0)
    try:
        got = (x.to("tpu") * 5 - 1).cpu()
        print("RESULT", ok and got.tolist() == (x * 5 - 1).tolist())
    except RuntimeError as e:
        print("RAISED", type(e).__name__, str(e).replace("\\n", " "))
    # the process keeps working: a new program compiles and runs
    print("AFTER", (x.to("tpu") + 100).cpu().tolist() == (x + 100).tolist())
    print("SHED", torch.tpu.cache_stats()["memory_evictions"], held)
""")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_compile_failing_for_memory_sheds_and_retries_once(tmp_path, mode):
    # compile 21 fails once: half of the 20 programs held go, the retry compiles
    r = _run(["-c", ENOMEM_SCRIPT], _env(tmp_path / "c1", TORCH_TPU_EAGER_MODE=mode,
                                          TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM="20,1"), 120)
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    assert lines["RESULT"] == "True" and lines["AFTER"] == "True", r.stdout
    shed, held = map(int, lines["SHED"].split())
    assert held == 20 and shed == 10, r.stdout


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_compile_failing_for_memory_twice_raises_and_process_goes_on(tmp_path, mode):
    r = _run(["-c", ENOMEM_SCRIPT], _env(tmp_path / "c2", TORCH_TPU_EAGER_MODE=mode,
                                          TORCH_TPU_CACHE_TEST_COMPILE_ENOMEM="20,2"), 120)
    out = r.stdout
    assert "RAISED RuntimeError" in out, out
    msg = out.split("RAISED RuntimeError", 1)[1].splitlines()[0]
    assert "failed for lack of host memory" in msg and "Cannot allocate memory" in msg, msg
    assert "sub" in msg or "mul" in msg, msg  # the program's description: its ops
    assert "memory maps" in msg, msg
    assert "AFTER True" in out, out
