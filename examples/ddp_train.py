"""Data-parallel training on tpu: a CUDA DDP script with the device string
changed.  Run with torchrun (one process per device):

    .venv/bin/torchrun --nproc-per-node 2 examples/ddp_train.py [--steps 30]

Every rank trains on its slice of each global batch; DDP averages the
gradients across ranks (the "tpu_dist" backend), so the run matches one
process training on the whole batch."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def make_data(n=512, d=20, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    return x, (x @ w).argmax(dim=1)


def make_model():
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def train(device, steps=30, batch=64, rank=0, world=1, log=print):
    """Trains on rank's slice of each global batch (all of it when world=1);
    returns the losses of the global batches and the final parameters."""
    torch.manual_seed(0)
    model = make_model().to(device)
    if world > 1:
        model = DDP(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x_all, y_all = make_data()
    per = batch // world
    losses = []
    for step in range(steps):
        i = (step * batch) % len(x_all)
        x = x_all[i + rank * per:i + (rank + 1) * per].to(device)
        y = y_all[i + rank * per:i + (rank + 1) * per].to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        # the global batch's loss: the mean of the ranks' losses
        global_loss = loss.detach().clone()
        if world > 1:
            dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        losses.append(global_loss.item())
        if log and rank == 0 and step % 10 == 0:
            log(f"step {step:3d}  loss {losses[-1]:.4f}")
    params = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return losses, params


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--json", help="rank 0 writes the losses here")
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.tpu.set_device(local_rank)            # as torch.cuda.set_device(local_rank)
    dist.init_process_group()                   # tpu tensors -> tpu_dist, cpu tensors -> gloo
    device = torch.device("tpu", local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()

    losses, params = train(device, args.steps, args.batch, rank, world)
    # every rank holds the same parameters
    flat = torch.cat([v.reshape(-1).float() for v in params.values()]).to(device)
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    in_sync = all(torch.equal(g.cpu(), flat.cpu()) for g in gathered)
    if rank == 0:
        print(f"{world} processes: loss {losses[0]:.4f} -> {losses[-1]:.4f}; parameters in sync: {in_sync}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"losses": losses, "in_sync": in_sync, "world": world,
                           "checksum": float(flat.double().sum().cpu())}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
