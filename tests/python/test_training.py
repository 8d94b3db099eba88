"""Training parity: the same model, data and seed on tpu and on CPU give the
same losses step by step and the same parameters after training."""
import copy
import math
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

LOSS_RTOL = 2e-4   # relative, per step (float32 reductions run in a different order)
PARAM_ATOL = 2e-4


def test_readme_loop_runs_unchanged_on_tpu_and_matches_cpu():
    import train_mlp
    cpu_losses, cpu_acc, cpu_model = train_mlp.train("cpu", steps=30, log=None)
    tpu_losses, tpu_acc, tpu_model = train_mlp.train("tpu", steps=30, log=None)
    for i, (a, b) in enumerate(zip(cpu_losses, tpu_losses)):
        assert math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5), f"step {i}: cpu {a} tpu {b}"
    assert tpu_losses[-1] < tpu_losses[0] * 0.7
    for p, q in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-3, rtol=1e-3)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.0), nn.Linear(32, 32), nn.Tanh(),
                                 nn.Linear(32, 5))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        # no conv bias before batch norm: its gradient is pure rounding noise
        # that Adam would amplify into a meaningless comparison
        self.c1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.c1(x))))
        x = F.relu(self.bn2(self.c2(x)))
        x = self.avg(x)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def _data(kind, step):
    g = torch.Generator().manual_seed(1000 + step)
    if kind == "mlp":
        return torch.randn(8, 16, generator=g), torch.randint(0, 5, (8,), generator=g)
    if kind == "cnn":
        return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
    idx = torch.randint(0, 50, (4, 16), generator=g)
    return idx, torch.roll(idx, -1, dims=1)


def _loss(kind, model, x, y):
    out = model(x)
    if kind == "gpt":
        return F.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1), ignore_index=3, label_smoothing=0.1)
    return F.cross_entropy(out, y)


def _train(kind, model, device, opt_name, steps):
    model = model.to(device)
    if opt_name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for s in range(steps):
        x, y = _data(kind, s)
        opt.zero_grad()
        loss = _loss(kind, model, x.to(device), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt"])
@pytest.mark.parametrize("opt_name", ["adamw", "sgd"])
def test_training_parity_with_cpu(kind, opt_name):
    torch.manual_seed(0)
    model = {"mlp": MLP, "cnn": CNN, "gpt": GPT}[kind]()
    ref = copy.deepcopy(model)
    steps = 20
    cpu_losses, cpu_model = _train(kind, ref, "cpu", opt_name, steps)
    tpu_losses, tpu_model = _train(kind, model, "tpu", opt_name, steps)
    for i, (a, b) in enumerate(zip(cpu_losses, tpu_losses)):
        assert math.isclose(a, b, rel_tol=LOSS_RTOL * (1 + i), abs_tol=1e-5), f"{kind}/{opt_name} step {i}: cpu {a} tpu {b}"
    for (n, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=PARAM_ATOL * 10, rtol=1e-3, msg=n)
    for (n, b), q in zip(cpu_model.named_buffers(), tpu_model.buffers()):
        torch.testing.assert_close(q.cpu(), b, atol=1e-4, rtol=1e-4, msg=n)


def test_changing_learning_rate_does_not_recompile():
    model = MLP().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    compiles = []
    for s in range(6):
        x, y = _data("mlp", s)
        opt.zero_grad()
        F.cross_entropy(model(x.to("tpu")), y.to("tpu")).backward()
        opt.step()
        sched.step()
        torch.tpu.synchronize()
        compiles.append(torch.tpu.cache_stats()["mem_misses"])
    assert compiles[-1] == compiles[2], f"programs compiled per step: {compiles}"
