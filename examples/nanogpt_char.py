"""Character-level GPT training on tpu, nanoGPT style, from a local text file.

    .venv/bin/python examples/nanogpt_char.py                  # tpu, examples/nanogpt_char.txt
    .venv/bin/python examples/nanogpt_char.py --steps 600 --n-layer 4 --compile
    .venv/bin/python examples/nanogpt_char.py --data my.txt --device cpu

The training loop follows nanoGPT's train.py: a 90/10 train/val split of the
characters, random blocks per batch, autocast on the device (bfloat16),
AdamW with weight decay on the matrices only, gradient clipping, a cosine
learning rate with warmup, an estimate of the train/val loss every
--eval-interval steps, and a sample at the end.  `--device cuda` with
`python -m torch_tpu.run` runs it the way a CUDA user would."""
import argparse
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.block_size:])
            logits = logits[:, -1, :].float() / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits = torch.where(logits < v[:, [-1]], float("-inf"), logits)
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(HERE, "nanogpt_char.txt"))
    ap.add_argument("--device", default="tpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-interval", type=int, default=100)
    ap.add_argument("--eval-iters", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (one program per graph)")
    ap.add_argument("--sample", type=int, default=200, help="characters to generate at the end (0: none)")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}
    print(f"{len(text)} characters, vocabulary {len(chars)}; train {n}, val {len(data) - n}")

    torch.manual_seed(args.seed)
    device = args.device
    device_type = device.split(":")[0]  # nanoGPT: 'cuda' if 'cuda' in device else 'cpu'
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    ctx = nullcontext() if device_type == "cpu" or args.dtype == "float32" else \
        torch.autocast(device_type=device_type, dtype=ptdtype)
    batch_gen = torch.Generator().manual_seed(args.seed)

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - args.block_size - 1, (args.batch_size,), generator=batch_gen)
        x = torch.stack([d[i:i + args.block_size] for i in ix.tolist()])
        y = torch.stack([d[i + 1:i + 1 + args.block_size] for i in ix.tolist()])
        return x.to(device), y.to(device)

    model = GPT(len(chars), args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.99))
    scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16"))
    print(f"{sum(p.numel() for p in model.parameters()) / 1e3:.1f}K parameters on {device}")
    run_model = torch.compile(model) if args.compile else model

    warmup = max(args.steps // 10, 1)

    def lr_at(it):
        if it < warmup:
            return args.lr * (it + 1) / warmup
        ratio = (it - warmup) / max(args.steps - warmup, 1)
        return args.lr * 0.1 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * args.lr * 0.9

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = run_model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    t0 = time.perf_counter()
    X, Y = get_batch("train")
    for it in range(args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        if it % args.eval_interval == 0 or it == args.steps:
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
                  f"({time.perf_counter() - t0:.1f} s)")
        if it == args.steps:
            break
        with ctx:
            _, loss = run_model(X, Y)
        X, Y = get_batch("train")  # the next batch, while this step runs
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    print(f"{args.steps} steps in {time.perf_counter() - t0:.1f} s")

    if args.sample:
        model.eval()
        # a whole block of the validation text as the prompt: every step then
        # sees a block_size window, the same shapes (one program, no recompiles)
        start = splits["val"][:args.block_size].view(1, -1).to(device)
        t1 = time.perf_counter()
        with ctx:
            out = model.generate(start, args.sample, temperature=0.8, top_k=10)
        print(f"sample ({args.sample} characters in {time.perf_counter() - t1:.1f} s):")
        print("".join(chars[i] for i in out[0, args.block_size:].tolist()))


if __name__ == "__main__":
    main()
