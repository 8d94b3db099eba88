"""The disk program cache under contention (issue 28, item 5): processes
compiling and loading the same and different programs into one
TORCH_TPU_CACHE_DIR at once, one killed while it writes an entry
(csrc/runtime/cache.c: temp file + rename, checksums).  No corrupt entry may
ever be loaded (every value equals the CPU's, no reader counts a bad entry),
and nothing may deadlock (every process runs under a deadline)."""
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "cache_worker.py")
sys.path.insert(0, HERE)
import cache_worker  # noqa: E402

DEADLINE = 120  # seconds any one process may take (a few, unloaded)


def _env(cache_dir, **extra):
    e = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir), TORCH_TPU_EAGER_MODE="strict",
             OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e.pop("TORCH_TPU_CACHE_TEST_WRITE_PAUSE_MS", None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def _start(cache_dir, own, **extra):
    return subprocess.Popen([sys.executable, WORKER, str(own)], env=_env(cache_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _kill(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(timeout=30)


def _finish(p, own):
    """Waits for a worker (killing it past the deadline); checks its values
    against the CPU; returns its cache counters."""
    try:
        out, err = p.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        _kill(p)
        out, err = p.communicate()
        raise AssertionError(f"cache worker {own} still running after {DEADLINE}s (deadlock?), killed\n{err[-3000:]}")
    assert p.returncode == 0, f"cache worker {own} exited {p.returncode}\n{err[-3000:]}"
    line = [ln for ln in out.splitlines() if ln.startswith("JSON ")][-1]
    got = json.loads(line[5:])
    for name, fn in cache_worker.programs(own).items():
        want = fn("cpu")
        torch.testing.assert_close(torch.tensor(got["values"][name]), want, msg=lambda m: f"{name}: {m}")
    return got["stats"]


def _temps(d):
    return glob.glob(os.path.join(str(d), "*.tpux.tmp.*"))


def _entries(d):
    return glob.glob(os.path.join(str(d), "*.tpux"))


def test_four_processes_one_killed_mid_write(tmp_path):
    d = tmp_path / "cache"
    procs = []
    try:
        # the victim stops with half of its first entry written (test hook in cache.c)
        victim = _start(d, 3, TORCH_TPU_CACHE_TEST_WRITE_PAUSE_MS=60000)
        procs = [_start(d, own) for own in range(3)] + [victim]
        deadline = time.monotonic() + DEADLINE
        mine = []
        while not mine:
            assert victim.poll() is None, f"victim exited {victim.returncode} before writing: {victim.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the victim never started writing an entry"
            mine = [t for t in _temps(d) if f".tmp.{victim.pid}." in t]
            time.sleep(0.02)
        size_at_kill = os.path.getsize(mine[0])
        _kill(victim)
        stats = [_finish(p, own) for own, p in enumerate(procs[:3])]
        # what the victim left: its half-written temporary file, under a name no reader opens
        assert os.path.exists(mine[0]) and size_at_kill > 0
        assert all(s["disk_errors"] == 0 for s in stats), stats
        # a second generation, all four, loads what the first wrote: no entry is bad
        procs = [_start(d, own) for own in range(4)]
        stats2 = [_finish(p, own) for own, p in enumerate(procs)]
        assert all(s["disk_errors"] == 0 for s in stats2), stats2
        # the shared programs and the survivors' own ones come from the disk
        assert all(s["disk_hits"] >= 5 for s in stats2[:3]), stats2
        assert stats2[3]["disk_hits"] >= 3, stats2
    finally:
        for p in procs:
            _kill(p)


def test_writers_killed_at_random_points(tmp_path):
    """Writers killed at seeded random moments (starting, compiling, writing)
    while two others run the same programs; then every survivor's programs
    and every entry left load and give the CPU's values."""
    d = tmp_path / "cache"
    rng = random.Random(28)
    kills = 0
    for round_ in range(6):
        others = [_start(d, own) for own in (0, 1)]
        victim = _start(d, 2 + round_)
        try:
            time.sleep(rng.uniform(0.8, 2.5))
            if victim.poll() is None:
                kills += 1
            _kill(victim)
            for own, p in zip((0, 1), others):
                s = _finish(p, own)
                assert s["disk_errors"] == 0, s
        finally:
            for p in others + [victim]:
                _kill(p)
    assert kills >= 3, f"only {kills} of 6 victims were still running when killed"
    # every victim's own programs, read back or recompiled: right values, no bad entry
    procs = [(own, _start(d, own)) for own in range(2, 8)]
    try:
        for own, p in procs:
            s = _finish(p, own)
            assert s["disk_errors"] == 0, s
    finally:
        for _, p in procs:
            _kill(p)


def test_dead_writers_stale_temp_files_are_removed(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    stale = d / "0123456789abcdef.tpux.tmp.99999.1234"
    fresh = d / "fedcba9876543210.tpux.tmp.99998.4321"
    for f in (stale, fresh):
        f.write_bytes(b"TPUX0001" + b"\0" * 100)
        os.chmod(f, 0o600)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    # a process's first write scans the directory
    _finish(_start(d, 0), 0)
    assert not stale.exists(), "an hour-old temporary file of a dead writer was kept"
    assert fresh.exists(), "a fresh temporary file (a live writer's) was removed"


@pytest.mark.parametrize("damage", ["truncate_header", "truncate_payload", "flip_payload", "flip_checksum",
                                    "empty"])
def test_damaged_entries_are_recompiled_never_loaded(tmp_path, damage):
    """An entry damaged in place (a copy cut short, a flipped bit, a crash of
    a file system that reordered writes): the checksum or size refuses it."""
    d = tmp_path / "cache"
    _finish(_start(d, 0), 0)
    entries = sorted(_entries(d))
    assert len(entries) >= 5
    for f in entries:
        b = bytearray(open(f, "rb").read())
        if damage == "truncate_header":
            b = b[:20]
        elif damage == "truncate_payload":
            b = b[: len(b) // 2]
        elif damage == "flip_payload":
            b[32 + (len(b) - 40) // 2] ^= 0x10
        elif damage == "flip_checksum":
            b[-1] ^= 0x01
        else:
            b = b""
        with open(f, "wb") as fh:
            fh.write(bytes(b))
    s = _finish(_start(d, 0), 0)
    assert s["disk_hits"] == 0 and s["disk_errors"] == len(entries) and s["compiles"] == len(entries), s
    s = _finish(_start(d, 0), 0)  # the rewritten entries load again
    assert s["disk_errors"] == 0 and s["disk_hits"] == len(entries), s
