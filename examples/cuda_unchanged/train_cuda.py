"""A training script written for CUDA, the way tutorials write it.

Nothing here knows about tpu.  Run it unchanged on tpu with

    .venv/bin/python -m torch_tpu.run examples/cuda_unchanged/train_cuda.py [--steps 50] [--amp]

(or TORCH_TPU_TRANSFER=1 .venv/bin/python examples/cuda_unchanged/train_cuda.py,
or under torchrun with TORCH_TPU_TRANSFER=1 in the environment).  With plain
`python` on a machine without CUDA it falls back to the CPU, as CUDA
programs do."""
import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n=1024, d=32, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    return x, (x @ w).argmax(dim=1)


class Net(nn.Module):
    def __init__(self, d=32, hidden=128, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--amp", action="store_true", help="torch.cuda.amp autocast + GradScaler")
    args = ap.parse_args()

    torch.backends.cudnn.benchmark = True
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} device(s))"
                                 if use_cuda else ""))
    torch.manual_seed(0)
    if use_cuda:
        torch.cuda.manual_seed_all(0)

    model = Net()
    if use_cuda:
        model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    use_amp = args.amp and use_cuda
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    x_all, y_all = make_data()

    if use_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for step in range(args.steps):
        i = (step * args.batch) % len(x_all)
        x, y = x_all[i:i + args.batch], y_all[i:i + args.batch]
        if use_cuda:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.cuda.amp.autocast(enabled=use_amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    if use_cuda:
        end.record()
        torch.cuda.synchronize()
        print(f"{args.steps} steps: {start.elapsed_time(end):.1f} ms (CUDA events), "
              f"memory allocated {torch.cuda.memory_allocated() / 2**20:.2f} MiB, "
              f"peak {torch.cuda.max_memory_allocated() / 2**20:.2f} MiB")
    else:
        print(f"{args.steps} steps: {(time.perf_counter() - t0) * 1e3:.1f} ms")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "checkpoint.pt")
        torch.save(model.state_dict(), path)
        state = torch.load(path, map_location="cuda" if use_cuda else "cpu")
        model.load_state_dict(state)
    with torch.no_grad():
        x, y = x_all.to(device), y_all.to(device)
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
