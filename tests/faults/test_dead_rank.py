"""A rank dies mid-step (issue 28, item 1): one rank SIGKILLs itself inside a
DDP step (during backward, between bucket all-reduces) or an FSDP2 step
(during forward, between all-gathers), on 2 and 4 processes over tpu_dist.
Every other rank must raise DistBackendError (a RuntimeError) naming the
dead rank, well within the group's timeout, and after its cleanup hold no
more device memory than a run that never failed."""
import os
import sys

import pytest

import dist_util

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "rank_worker.py")
GROUP_TIMEOUT = 10  # seconds (rank_worker.py's group)
DEADLINE = 150


def _launch(kind, nproc, victim):
    return dist_util.launch(f"{kind} kill {victim}", nproc=nproc, timeout=DEADLINE,
                            env={"FAULT_GROUP_TIMEOUT": GROUP_TIMEOUT, "TORCH_TPU_EAGER_MODE": "strict"},
                            cmd=[sys.executable, WORKER, kind, str(victim)])


_CLEAN = {}


def _clean_after(kind, nproc):
    """Device bytes a rank still holds after the same cleanup in a run where
    nobody died (the engine's cached constants), per rank."""
    if (kind, nproc) not in _CLEAN:
        res = _launch(kind, nproc, -1)
        assert all(r.returncode == 0 and r.data and r.data["error_type"] is None for r in res), res
        _CLEAN[kind, nproc] = [r.data["mem_after"] for r in res]
    return _CLEAN[kind, nproc]


@pytest.mark.parametrize("kind,nproc,victim", [("ddp", 2, 1), ("fsdp", 2, 0), ("ddp", 4, 2), ("fsdp", 4, 3)])
def test_survivors_raise_naming_the_dead_rank_and_free_memory(kind, nproc, victim):
    res = _launch(kind, nproc, victim)
    assert res[victim].returncode == -9, f"the victim did not die by SIGKILL: {res[victim]}"
    clean = _clean_after(kind, nproc)
    for r in res:
        if r.rank == victim:
            continue
        assert r.returncode == 0 and r.data, r
        d = r.data
        assert d["error_type"] == "DistBackendError" and "RuntimeError" in d["error_mro"], d
        assert d["step"] == 2, f"rank {r.rank} failed at step {d['step']}, the kill was at step 2"
        assert f"rank {victim} (pid " in d["error"] and "died" in d["error"], d["error"]
        assert d["seconds"] < GROUP_TIMEOUT, f"rank {r.rank} took {d['seconds']:.1f}s to notice"
        assert d["mem_during"] > 0
        assert d["mem_after"] <= clean[r.rank] + 64, (
            f"rank {r.rank} holds {d['mem_after']} device bytes after cleanup (a clean run: {clean[r.rank]})")
