"""tpu_dist honours torch.distributed's _set_pg_timeout (torch_tpu/
_distributed.py wraps it; c10d_backend.cpp setTimeout): a group made with a
120 s timeout, set to 2 s after creation, raises a collective whose peer
never joins within about 2 s, with no "only supported for either nccl or
gloo" warning, for the default group and a new_group, made with no backend
named (tpu:tpu_dist,cpu:gloo) or with "tpu_dist" for both devices.  Two
processes (tests/python/dist_timeout_worker.py through dist_util.launch).
"""
import os
import sys

import pytest

import dist_util

WORKER = os.path.join(dist_util.HERE, "dist_timeout_worker.py")
SHORT = 2.0


@pytest.mark.parametrize("backend,group", [("none", "default"), ("tpu_dist", "default"), ("tpu_dist", "new")])
def test_set_pg_timeout_bounds_a_collective_whose_peer_never_joins(backend, group):
    res = dist_util.launch("set_pg_timeout", nproc=2, timeout=90,
                           cmd=[sys.executable, WORKER, backend, group])
    bad = [r for r in res if r.returncode != 0]
    assert not bad, "\n".join(repr(r) for r in bad)
    data = res[0].data
    assert data is not None, repr(res[0])
    assert data["error"] is not None, "the collective with a silent peer returned"
    assert "Timed out" in data["error"] or "timeout" in data["error"].lower(), data["error"]
    # within about the new timeout (the group's own was 120 s)
    assert 0.8 * SHORT <= data["seconds"] < SHORT + 8, data
    assert data["tpu_dist_devices"] == (["cpu", "tpu"] if backend == "tpu_dist" else ["tpu"]), data
    assert not data["warnings"], data["warnings"]
    for r in res:
        assert "only supported for either nccl or gloo" not in r.output, r.output
