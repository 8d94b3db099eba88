"""A small GPT trained the way CUDA tutorials write it, timed per step.

Nothing here knows about tpu: `device = "cuda" if torch.cuda.is_available()
else "cpu"`, `.cuda()`, pinned batches copied with `non_blocking=True`,
`torch.autocast(device_type="cuda")` with a `torch.amp.GradScaler("cuda")`,
`torch.cuda.synchronize()` around each timed step, `torch.compile` when
`--compile` is given.  `make bench`'s `cuda_unchanged` section
(bench/cuda_unchanged.py) runs it through

    .venv/bin/python -m torch_tpu.run examples/cuda_unchanged/bench_cuda.py [--steps 20] [--compile]

and with plain `python` (no CUDA here, so on the CPU, as the same script
runs on a laptop).  The last line is one JSON object: the device, each
step's milliseconds and loss, the final loss."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def batches(steps, batch, seq, vocab, seed=0):
    """Deterministic token batches made on the CPU (a data loader's job):
    a noisy copy task, so the loss falls."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        x[:, 1:] = torch.where(torch.rand(batch, seq, generator=g) < 0.8, x[:, :-1], x[:, 1:])
        yield x[:, :-1].contiguous(), x[:, 1:].contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="autocast dtype (float32: autocast off)")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    args = ap.parse_args()

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if "cuda" in device else "cpu"
    torch.manual_seed(0)
    if device == "cuda":
        torch.cuda.manual_seed_all(0)

    model = GPT(args.vocab, args.seq, args.d, args.heads, args.layers)
    if device == "cuda":
        model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    dtype = getattr(torch, args.dtype)
    scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16" and device == "cuda"))
    step_fn = torch.compile(model) if args.compile else model

    step_ms, losses = [], []
    for step, (x, y) in enumerate(batches(args.steps, args.batch, args.seq, args.vocab)):
        if device == "cuda":
            x, y = x.pin_memory().cuda(non_blocking=True), y.pin_memory().cuda(non_blocking=True)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type=device_type, dtype=dtype, enabled=(args.dtype != "float32")):
            loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        lv = loss.item()
        if device == "cuda":
            torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(lv)
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {lv:.4f}  {step_ms[-1]:.1f} ms", flush=True)
    assert all(math.isfinite(v) for v in losses), losses
    print(json.dumps({"device": device, "compile": args.compile, "dtype": args.dtype, "steps": args.steps,
                      "step_ms": step_ms, "losses": losses, "final_loss": losses[-1]}), flush=True)


if __name__ == "__main__":
    main()
