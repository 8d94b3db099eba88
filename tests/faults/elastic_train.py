"""A training script for the elastic-restart test, run under
`torchrun --max-restarts 1 --nproc-per-node 2`:

    elastic_train.py --work DIR --steps 9 --every 3 [--kill-step 7 --kill-rank 1]
                     [--backend B] [--wrap fsdp|ddp]

FSDP2 (or DDP) with Adam over the group init_process_group(B) makes:
"tpu_dist" by default, "" for no backend named (the README's recipe: tpu
tensors to tpu_dist, cpu tensors -- DCP's metadata, barriers -- to
PyTorch's gloo), or a "cpu:gloo,tpu:tpu_dist" string; every `--every` steps a distributed
checkpoint (torch.distributed.checkpoint: the sharded model and optimizer
state, and the step) goes to DIR/ckpt/step_N, and DIR/latest names it (rank 0
writes it after the save's barrier, by rename).  A start resumes from
DIR/latest when it exists.  On the first attempt (TORCHELASTIC_RESTART_COUNT
0) rank --kill-rank SIGKILLs itself at step --kill-step; torchrun then stops
the others and starts the group again.  At the end rank 0 saves the full
parameters to DIR/final.pt; every attempt leaves DIR/attempts/<n>.rank<r>
saying where it started."""
import argparse
import datetime
import os
import signal

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import torch_tpu  # noqa: F401


class Stack(torch.nn.Module):
    def __init__(self, d=32, layers=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        for l in self.layers:
            x = torch.tanh(l(x))
        return self.head(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--kill-step", type=int, default=-1)
    ap.add_argument("--kill-rank", type=int, default=1)
    ap.add_argument("--backend", default="tpu_dist")
    ap.add_argument("--wrap", choices=["fsdp", "ddp"], default="fsdp")
    a = ap.parse_args()
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.tpu.set_device(local)
    dev = torch.device("tpu", local)
    timeout = datetime.timedelta(seconds=30)
    if a.backend:
        dist.init_process_group(a.backend, timeout=timeout)
    else:
        dist.init_process_group(timeout=timeout)

    torch.manual_seed(0)
    model = Stack().to(dev)
    if a.wrap == "fsdp":
        for l in model.layers:
            fully_shard(l)
        fully_shard(model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    start = 0
    latest = os.path.join(a.work, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": torch.zeros((), dtype=torch.int64)}
        dcp.load(state, checkpoint_id=os.path.join(a.work, "ckpt", name))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"])
    os.makedirs(os.path.join(a.work, "attempts"), exist_ok=True)
    with open(os.path.join(a.work, "attempts", f"{attempt}.rank{rank}"), "w") as f:
        f.write(str(start))

    for step in range(start, a.steps):
        g = torch.Generator().manual_seed(1000 + step)
        x, y = torch.randn(4 * world, 32, generator=g), torch.randint(0, 4, (4 * world,), generator=g)
        x, y = x[rank * 4:(rank + 1) * 4].to(dev), y[rank * 4:(rank + 1) * 4].to(dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if attempt == 0 and step == a.kill_step and rank == a.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)  # dies mid-step: the others wait in backward's collectives
        loss.backward()
        opt.step()
        opt.zero_grad()
        done = step + 1
        if done % a.every == 0 and done < a.steps:
            msd, osd = get_state_dict(model, opt)
            name = f"step_{done}"
            dcp.save({"model": msd, "optim": osd, "step": torch.tensor(done, dtype=torch.int64)},
                     checkpoint_id=os.path.join(a.work, "ckpt", name))
            dist.barrier()
            if rank == 0:
                with open(latest + ".tmp", "w") as f:
                    f.write(name)
                os.replace(latest + ".tmp", latest)
            dist.barrier()

    inner = model.module if a.wrap == "ddp" else model
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone()
            for k, v in inner.state_dict().items()}
    if rank == 0:
        torch.save(full, os.path.join(a.work, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
