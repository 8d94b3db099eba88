"""Ray Train on tpu, run by tests/ray/test_ray_train.py in .venv-ray.

A local Ray cluster (2 CPUs, no dashboard, a small object store) runs
ray.train.torch.TorchTrainer with 2 workers of one CPU each and
TorchConfig(backend="tpu_dist") (Ray's own TPU resources need a Cloud TPU
slice: use_tpu=True wants its topology); ray.train.torch's get_device /
prepare_model / prepare_data_loader put the model and batches on
tpu:LOCAL_RANK (torch_tpu/integrations/ray.py), and DDP averages the
gradients.  Each worker writes its final
parameters (on cpu) to OUT_DIR/rank<r>.pt and a few facts to
OUT_DIR/rank<r>.json; the test compares them with a single-process CPU run.

    python ray_train_worker.py OUT_DIR
"""
import json
import os
import sys

import torch

SEED = 0
N = 32          # samples: each worker's DistributedSampler takes 16 of them
D_IN, D_HIDDEN = 8, 16
STEPS = 4
LR = 0.1
MOMENTUM = 0.9


def make_data():
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(N, D_IN, generator=g)
    y = torch.sin(x.sum(1, keepdim=True)) + 0.1 * torch.randn(N, 1, generator=g)
    return x, y


def make_model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(D_IN, D_HIDDEN), torch.nn.Tanh(), torch.nn.Linear(D_HIDDEN, 1))


def shard_indices(rank, world_size):
    """The samples DistributedSampler(shuffle=False) gives a rank (N divisible
    by world_size): rank, rank + world_size, ..."""
    return list(range(rank, N, world_size))


def train_cpu(indices=None, steps=STEPS):
    """The reference: one process on cpu, the full batch (or `indices`), the
    same initial parameters, loss, optimizer and steps."""
    x, y = make_data()
    if indices is not None:
        x, y = x[indices], y[indices]
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _counts(m):
    return {"compiles": m["compile"]["count"], "executions": m["execute"]["count"],
            "host_waits": m["host_wait"]["count"], "to_host": m["transfer"]["to_host"]["count"],
            "fallbacks": sum(m["fallbacks"].values()) if isinstance(m["fallbacks"], dict) else len(m["fallbacks"])}


def train_loop_per_worker(config):
    import torch.distributed as dist
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    x, y = make_data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=N // world)
    loader = ray.train.torch.prepare_data_loader(loader)
    model = ray.train.torch.prepare_model(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    batch_devices = set()
    losses = []
    for _ in range(STEPS):
        for xb, yb in loader:  # one batch per worker per step
            batch_devices.add(str(xb.device))
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach().cpu()))
    params = model.module if hasattr(model, "module") else model
    state = {k: v.detach().cpu().clone() for k, v in params.state_dict().items()}
    out = config["out_dir"]
    torch.save(state, os.path.join(out, f"rank{rank}.pt"))
    facts = {
        "rank": rank,
        "world_size": world,
        "backend": dist.get_backend(),
        "get_device": str(device),
        "param_device": str(next(params.parameters()).device),
        "ddp": type(model).__name__,
        "batch_devices": sorted(batch_devices),
        "losses": losses,
        "local_rank": os.environ.get("LOCAL_RANK"),
        "tpu_current_device": torch.tpu.current_device(),
        "metrics": _counts(torch.tpu.metrics()),
    }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(facts, f)
    ray.train.report({"loss": losses[-1]})


def main(out_dir):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    # Small on 2 cores: 2 CPUs for the 2 workers, no dashboard, an 80 MiB
    # object store (Ray's minimum is 75 MiB).
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False,
             object_store_memory=80 * 1024 * 1024, configure_logging=False)
    try:
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"out_dir": out_dir},
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
            torch_config=TorchConfig(backend="tpu_dist"),
            run_config=RunConfig(storage_path=os.path.join(out_dir, "ray_results"), name="tpu_ddp"),
        )
        result = trainer.fit()
        print("ray train result:", result.metrics, "error:", result.error, flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
