"""torch.distributed on tpu: the "tpu_dist" backend, DDP, FSDP2, DTensor,
tensor parallel, distributed checkpoints, bad input.

Multi-process tests run tests/python/dist_worker.py on 2 ranks (4 for
HSDP) with torchrun's environment; each rank checks its tpu results against
the same computation on CPU through gloo and against a single-process CPU
run on the full batch (see dist_worker.py).  Every launch has a deadline
and kills its processes on the way out."""
import datetime
import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))
import dist_util  # noqa: E402

ROOT = dist_util.ROOT
# Each launch is designed to take <= 60 s here (about 30 s with a warm
# program cache); a launch is called hung and killed only after twice that,
# since a cold cache in fused mode on this loaded 2-core machine compiles
# every new program at ~2 s each.
DEADLINE = 120


# ---- single process -----------------------------------------------------------------------------

def test_backend_registered_at_import_without_starting_the_engine():
    code = ("import torch, torch.distributed as dist; "
            "print(dist.Backend.TPU_DIST, dist.Backend.TPU, dist.Backend.default_device_backend_map['tpu'], "
            "dist.Backend.backend_capability['tpu_dist'], dist.is_backend_available('tpu'), "
            "torch.tpu.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tpu_dist", "tpu", "tpu_dist", "['tpu',", "'cpu']", "True", "False"], out.stdout


def test_collective_before_init_process_group_raises_as_for_gloo():
    assert not dist.is_initialized()
    for t in (torch.ones(2), torch.ones(2, device="tpu")):  # the same error for cpu (gloo) and tpu
        with pytest.raises(ValueError, match="Default process group has not been initialized"):
            dist.all_reduce(t)
        with pytest.raises(ValueError, match="Default process group has not been initialized"):
            dist.broadcast(t, 0)


@pytest.fixture
def world_of_one():
    """A one-process group in this process (HashStore)."""
    def init(backend, **kw):
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30), **kw)
    yield init
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["tpu_dist", "tpu"])
def test_world_of_one_both_names(world_of_one, name):
    world_of_one(name)
    assert dist.get_backend() == name
    t = torch.arange(6.).reshape(2, 3).to("tpu")
    view = t.t()
    dist.all_reduce(view, op=dist.ReduceOp.MAX)
    out = torch.zeros(2, 3).to("tpu")
    dist.all_gather_into_tensor(out, t)
    torch.testing.assert_close(out.cpu(), torch.arange(6.).reshape(2, 3))
    c = torch.ones(3)  # cpu tensors: the same backend's gloo
    dist.all_reduce(c)
    torch.testing.assert_close(c, torch.ones(3))
    objs = [None]
    dist.all_gather_object(objs, {"a": 1})
    assert objs == [{"a": 1}]


def test_transport_environment_variable(world_of_one, monkeypatch):
    from torch_tpu import _distributed
    assert _distributed.transport() == "host"
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "host")
    assert _distributed.transport() == "host"
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "xla")
    with pytest.raises(NotImplementedError, match="TORCH_TPU_DIST_TRANSPORT=xla"):
        world_of_one("tpu_dist")
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "nccl")
    with pytest.raises(ValueError, match="expected one of auto, host, xla"):
        _distributed.transport()


# ---- several processes ----------------------------------------------------------------------------

def test_collectives_matrix():
    """all_reduce (5 ops) / broadcast / all_gather(_into_tensor) / gather /
    scatter / reduce / reduce_scatter(_tensor) / all_to_all(_single, uneven)
    / send-recv / batch_isend_irecv / coalesced / functional collectives over
    every dtype, several shapes, strided views, sync and async."""
    data = dist_util.run_ok("collectives", nproc=2, timeout=DEADLINE)
    assert all(d["checked"] > 700 for d in data), data


def test_ddp_matches_single_process_and_gloo():
    """Bucketing (several buckets), find_unused_parameters, no_sync with
    gradient_as_bucket_view."""
    data = dist_util.run_ok("ddp", nproc=2, timeout=DEADLINE)
    assert data[0]["buckets"]["bucket_mb=0.005,as_view=True"] > 1


def test_fsdp2_mixed_precision_memory_and_dcp():
    data = dist_util.run_ok("fsdp", nproc=2, timeout=DEADLINE)
    sharded, unsharded, resharded, _ = data[0]["mem"]
    assert unsharded > sharded and resharded < unsharded


def test_tensor_parallel_and_dtensor():
    dist_util.run_ok("tp_dtensor", nproc=2, timeout=DEADLINE)


def test_hsdp_on_a_2d_mesh_four_processes():
    data = dist_util.run_ok("hsdp", nproc=4, timeout=DEADLINE)
    assert data[0]["mesh"] == [2, 2]


def test_mismatched_ranks_raise_and_a_silent_rank_times_out():
    data = dist_util.run_ok("mismatch", nproc=2, timeout=DEADLINE)
    assert data[0]["seconds"] < 30 and "Timed out" in data[0]["hang"]
    assert "Detected mismatch" in data[0]["errors"]["all_reduce shapes"]


def test_a_rank_that_dies():
    res = dist_util.launch("dead_rank", nproc=2, timeout=DEADLINE)
    assert res[1].returncode == 3, res[1]
    assert res[0].returncode == 0, res[0]
    assert len(res[0].data["errors"]) == 2 and res[0].data["seconds"] < 30


def test_example_runs_under_torchrun_and_matches_one_process():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import ddp_train
    steps = 8
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [torchrun, "--nproc-per-node", "2", "--master-port", str(dist_util.free_port()),
               os.path.join(ROOT, "examples", "ddp_train.py"), "--steps", str(steps), "--json", out]
        res = dist_util.launch("torchrun", nproc=1, timeout=DEADLINE, cmd=cmd)
        assert res[0].returncode == 0, res[0]
        with open(out) as f:
            got = json.load(f)
    assert got["world"] == 2 and got["in_sync"]
    ref_losses, ref_params = ddp_train.train("cpu", steps, log=None)  # one process, whole batches
    for i, (a, b) in enumerate(zip(got["losses"], ref_losses)):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), f"step {i}: torchrun {a} vs one process {b}"
    ref_sum = float(torch.cat([v.reshape(-1).double() for v in ref_params.values()]).sum())
    assert abs(got["checksum"] - ref_sum) < 1e-3 * max(1.0, abs(ref_sum))
