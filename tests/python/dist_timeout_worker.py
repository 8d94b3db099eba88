"""One rank of tests/python/test_dist_timeout.py:
`python dist_timeout_worker.py BACKEND GROUP` under torchrun's environment
(dist_util.launch starts it).

The group is made with a long timeout (120 s); _set_pg_timeout then sets
2 s (GROUP "default": the default group; "new": a group from new_group
with the same backend).  A collective with both ranks still works; then
rank 1 stays alive but never calls again, and rank 0's all_reduce on tpu
must raise within about the new timeout.  Rank 0 reports the seconds it
took, the error and every warning _set_pg_timeout gave."""
import datetime
import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import torch_tpu  # noqa: F401

RANK = int(os.environ["RANK"])
OUT = os.environ["TPU_DIST_OUT"]
SHORT = 2.0


def report(data):
    with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
        json.dump(data, f)


def main(backend, which):
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(None if backend == "none" else backend, timeout=datetime.timedelta(seconds=120))
    group = None if which == "default" else dist.new_group(backend=None if backend == "none" else backend)
    dev = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c10d._set_pg_timeout(datetime.timedelta(seconds=SHORT), group)
    warned = [str(w.message) for w in caught]
    g = group if group is not None else c10d._get_default_group()
    ours = sorted(str(d) for d in g._device_types if g._get_backend(d).name() == "tpu_dist")
    t = torch.ones(4, device=dev)
    dist.all_reduce(t, group=group)  # both ranks: works with the new timeout
    assert t.cpu().tolist() == [2.0] * 4, t
    if RANK == 1:  # silent: alive, never calls again
        for _ in range(600):
            if os.path.exists(os.path.join(OUT, "rank0.json")):
                break
            time.sleep(0.1)
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(t, group=group)
        msg = None
    except RuntimeError as e:
        msg = str(e)
    report({"seconds": time.monotonic() - start, "error": msg and msg[:800], "warnings": warned,
            "tpu_dist_devices": ours})
    os._exit(0)  # the group is broken: no destroy (it would wait for the peer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
