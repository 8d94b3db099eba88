"""One rank of the dead-rank tests: `python rank_worker.py ddp|fsdp VICTIM`
under torchrun's environment (tests/python/dist_util.py launches it).

Rank VICTIM SIGKILLs itself in the middle of a training step (DDP: inside
backward, from a gradient hook, while buckets are being reduced; FSDP2:
inside forward, from a layer's pre-forward hook, between all-gathers).  Every
other rank must raise from that step within the group's timeout, then free
what it holds on the device; it reports the exception and the figures."""
import datetime
import gc
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TIMEOUT = float(os.environ.get("FAULT_GROUP_TIMEOUT", "10"))
KILL_STEP = 2


def report(data):
    with open(os.path.join(os.environ["TPU_DIST_OUT"], f"rank{RANK}.json"), "w") as f:
        json.dump(data, f)


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Net(torch.nn.Module):
    def __init__(self, d=32, layers=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        for l in self.layers:
            x = torch.tanh(l(x))
        return self.head(x)


def build(kind, dev, victim, step):
    torch.manual_seed(0)
    model = Net().to(dev)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        # small buckets: several allreduces per backward, the kill lands between them
        net = DDP(model, bucket_cap_mb=0.001)
        if RANK == victim:
            model.layers[1].weight.register_hook(lambda g: die() if step[0] == KILL_STEP else g)
    else:
        from torch.distributed.fsdp import fully_shard
        for l in model.layers:
            fully_shard(l)
        fully_shard(model)
        net = model
        if RANK == victim:
            model.layers[1].register_forward_pre_hook(lambda m, a: die() if step[0] == KILL_STEP else None)
    return model, net


def main():
    kind, victim = sys.argv[1], int(sys.argv[2])
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=TIMEOUT))
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated(dev)
    step = [0]
    model, net = build(kind, dev, victim, step)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    err = None
    t0 = None
    try:
        for s in range(5):
            step[0] = s
            g = torch.Generator().manual_seed(1000 * s + RANK)
            x, y = torch.randn(8, 32, generator=g).to(dev), torch.randint(0, 4, (8,), generator=g).to(dev)
            t0 = time.monotonic()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - reported to the test, which judges the type
        # keep its description, not the exception: its traceback holds the
        # step's frames (the loss, its graph, the parameters)
        err = (type(e).__name__, [c.__name__ for c in type(e).__mro__], str(e)[:2000])
    took = time.monotonic() - t0
    during = torch.tpu.memory_allocated(dev)
    # cleanup: what a training script's handler does before exiting or restarting
    del model, net, opt
    loss = x = y = None
    gc.collect()
    try:
        torch.tpu.synchronize()
    except Exception:  # noqa: BLE001 - the failed step's error may surface once more here
        pass
    gc.collect()
    after = torch.tpu.memory_allocated(dev)
    report({"error_type": err[0] if err else None, "error_mro": err[1] if err else [],
            "error": err[2] if err else None, "step": step[0], "seconds": took,
            "mem_base": base, "mem_during": during, "mem_after": after})
    sys.stdout.flush()
    os._exit(0)  # the group is broken: destroy_process_group would wait for the dead peer


if __name__ == "__main__":
    main()
