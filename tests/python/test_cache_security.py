"""The disk tier of the program cache loads compiled code: it trusts only a
directory and entries that no other user could have written (csrc/runtime/
cache.c, "Trust").  Each test runs a fresh process on a real directory and
checks that the program's values stay right (compared with the CPU), what the
disk tier did, and the files' modes."""
import glob
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

_PROGRAM = """
import torch
x = torch.arange(12.0).reshape(3, 4).to("tpu")
y = (x.t() @ x).relu().sum(0) * 3
print("RESULT", y.cpu().tolist())
s = torch.tpu.cache_stats()
print("STATS", s["disk_hits"], s["compiles"], s["disk_writes"], s["disk_refused"])
"""


def _expected():
    x = torch.arange(12.0).reshape(3, 4)
    return ((x.t() @ x).relu().sum(0) * 3).tolist()


def _run(cache_dir):
    # strict mode whatever the suite's mode: the counts are per program
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(cache_dir), "TORCH_TPU_EAGER_MODE": "strict"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_PROGRAM)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    res = eval([ln for ln in lines if ln.startswith("RESULT")][0][len("RESULT "):])  # a list literal we printed
    hits, compiles, writes, refused = map(int, [ln for ln in lines if ln.startswith("STATS")][0].split()[1:])
    assert res == _expected(), f"wrong values {res}"
    return dict(hits=hits, compiles=compiles, writes=writes, refused=refused, stderr=r.stderr)


def _entries(d):
    return sorted(glob.glob(os.path.join(str(d), "*.tpux")))


def test_new_cache_directory_and_entries_are_private(tmp_path):
    d = tmp_path / "a" / "cache"
    old = os.umask(0)  # even with a permissive umask in the parent
    try:
        r = _run(d)
    finally:
        os.umask(old)
    assert r["writes"] > 0 and r["refused"] == 0
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for f in _entries(d):
        st = os.lstat(f)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777])
def test_group_or_world_writable_cache_dir_is_refused(tmp_path, mode):
    d = tmp_path / "shared"
    d.mkdir()
    r0 = _run(d.parent / "private")  # fills another dir: the programs exist
    assert r0["writes"] > 0
    os.chmod(d, mode)
    r = _run(d)  # values still right (checked in _run)
    assert r["refused"] == 1 and r["hits"] == 0 and r["writes"] == 0 and r["compiles"] > 0
    assert "disk cache is disabled" in r["stderr"] and "writable by group or others" in r["stderr"]
    assert r["stderr"].count("program cache directory") == 1, "warned more than once"
    assert _entries(d) == []


def test_planted_entries_are_not_loaded(tmp_path):
    d = tmp_path / "cache"
    r1 = _run(d)
    files = _entries(d)
    assert len(files) >= 2, files
    # 1: a valid entry that anyone could have rewritten
    os.chmod(files[0], 0o666)
    # 2: a symlink to a (valid) entry outside the directory
    outside = tmp_path / "outside.tpux"
    os.rename(files[1], outside)
    os.symlink(outside, files[1])
    r2 = _run(d)
    assert r2["refused"] == 2, r2
    assert r2["compiles"] == 2 and r2["hits"] == r1["compiles"] - 2
    assert r2["stderr"].count("refused program cache entry") == 1, "warned more than once"
    # the refused entries were replaced by private files; the link's target is untouched
    for f in files[:2]:
        st = os.lstat(f)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert os.path.isfile(outside) and not os.path.islink(outside)
    r3 = _run(d)
    assert r3["refused"] == 0 and r3["compiles"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another owner needs root")
def test_entry_of_another_owner_is_not_loaded(tmp_path):
    d = tmp_path / "cache"
    r1 = _run(d)
    f = _entries(d)[0]
    os.chown(f, 65534, 65534)
    r2 = _run(d)
    assert r2["refused"] == 1 and r2["compiles"] == 1 and r2["hits"] == r1["compiles"] - 1
    assert os.stat(f).st_uid == os.geteuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another owner needs root")
def test_cache_dir_of_another_owner_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    r = _run(d)
    assert r["refused"] == 1 and r["writes"] == 0 and r["hits"] == 0
    assert "owned by uid 65534" in r["stderr"]
