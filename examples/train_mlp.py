"""The README's loop: an ordinary PyTorch training script; only the device
string says "tpu".  Run: .venv/bin/python examples/train_mlp.py [device]"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n=512, d=20, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y


def train(device="tpu", steps=50, seed=0, log=print):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x_all, y_all = make_data()
    losses = []
    for step in range(steps):
        i = (step * 64) % 512
        x, y = x_all[i:i + 64].to(device), y_all[i:i + 64].to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log and step % 10 == 0:
            log(f"step {step:3d}  loss {losses[-1]:.4f}")
    with torch.no_grad():
        acc = (model(x_all.to(device)).argmax(1).cpu() == y_all).float().mean().item()
    return losses, acc, model


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "tpu"
    losses, acc, _ = train(device)
    print(f"device {device}: final loss {losses[-1]:.4f}, train accuracy {acc:.3f}")
