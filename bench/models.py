"""Models for bench/run.py: a GPT-style decoder (nn.Embedding, pre-LayerNorm
blocks with causal F.scaled_dot_product_attention and a GELU MLP, tied
output head, cross-entropy loss) and its training step with AdamW."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, mlp_ratio=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=1024, d=256, heads=4, layers=4, seq=128):
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


CONFIGS = {
    # the benchmark's model: 4 layers, d=256, 4 heads, seq 128, batch 8
    "gpt": dict(vocab=1024, d=256, heads=4, layers=4, seq=128, batch=8),
    # the "tpu" device issue's figure: 2 layers, d=256, seq 128, batch 8
    "gpt-2l": dict(vocab=1024, d=256, heads=4, layers=2, seq=128, batch=8),
    # the memory-growth loop (hundreds of steps)
    "gpt-small": dict(vocab=256, d=64, heads=2, layers=2, seq=32, batch=4),
}


def make_gpt(name="gpt", device="cpu", seed=0):
    cfg = dict(CONFIGS[name])
    batch = cfg.pop("batch")
    torch.manual_seed(seed)
    model = GPT(**cfg)
    g = torch.Generator().manual_seed(seed + 1)
    data = torch.randint(0, cfg["vocab"], (batch, cfg["seq"] + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    return model, opt, x.to(device), y.to(device)


def train_step(model, opt, x, y):
    """One step; returns the loss tensor (still on the device)."""
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    opt.step()
    return loss


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def flops_per_step(name="gpt"):
    """Approximate training FLOPs per step (6 * params * tokens + attention)."""
    c = CONFIGS[name]
    d, L, T, B, V = c["d"], c["layers"], c["seq"], c["batch"], c["vocab"]
    params = L * 12 * d * d + V * d
    attn = L * 2 * 2 * T * T * d
    return 3 * (2 * params * B * T + attn * B) if math.isfinite(d) else 0
