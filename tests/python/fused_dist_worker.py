"""One rank of tests/python/test_fused_dist.py (and bench/dist.py's
"fsdp_llama" figure): a small llama-style training step (RMSNorm, causal
attention, SwiGLU, a ModuleList of blocks) on 2 processes, under FSDP2
(fully_shard per block and at the root) or DDP, in the eager mode
TORCH_TPU_EAGER_MODE names.

`python fused_dist_worker.py WRAP STEPS` with torchrun's environment
(tests/python/dist_util.py launches it).  It trains STEPS steps from a
seeded start, counts the engine's work in each step (torch.tpu.metrics():
programs executed and compiled, host waits, transfers, cuts by reason,
CPU fallbacks) and the step's wall time, and reports them with the full
final parameters (rank 0's JSON)."""
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))

CONFIG = dict(vocab=256, d=128, layers=2, heads=4, hidden=256, seq=64, batch=2,
              # TorchTitan's llama3 habits, each 0/1: rotary embedding through complex numbers
              # (torch.polar, view_as_complex), torch.nn.RMSNorm, FSDP2 bf16 parameters with fp32
              # reductions, gradient clipping (clip_grad_norm_), and the optimizer (0 for-loop
              # AdamW, 1 foreach, 2 fused)
              rope=0, nn_norm=0, mp=0, clip=0, opt=0)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_freqs(dim, seq, theta=10000.0):
    f = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    f = torch.outer(torch.arange(seq).float(), f)
    return torch.polar(torch.ones_like(f), f)  # complex64 [seq, dim/2]


def apply_rope(x, freqs):
    # x: [b, s, h, hd]
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs.view(1, x.shape[1], 1, -1)).flatten(3)
    return out.type_as(x)


def norm(d, nn_norm):
    return torch.nn.RMSNorm(d, eps=1e-5) if nn_norm else RMSNorm(d)


class Block(torch.nn.Module):
    def __init__(self, d, heads, hidden, rope=0, nn_norm=0):
        super().__init__()
        self.heads, self.rope = heads, rope
        self.attn_norm = norm(d, nn_norm)
        self.wqkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.ffn_norm = norm(d, nn_norm)
        self.w1 = torch.nn.Linear(d, hidden, bias=False)
        self.w3 = torch.nn.Linear(d, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x, freqs=None):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads) for t in self.wqkv(self.attn_norm(x)).split(d, dim=-1))
        if freqs is not None:
            q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
        h = self.ffn_norm(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))


class Llama(torch.nn.Module):
    def __init__(self, vocab, d, layers, heads, hidden, seq, rope=0, nn_norm=0, **_):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(Block(d, heads, hidden, rope, nn_norm) for _ in range(layers))
        self.norm = norm(d, nn_norm)
        self.out = torch.nn.Linear(d, vocab, bias=False)
        # a buffer, as TorchTitan's freqs_cis (not sharded by FSDP2)
        self.register_buffer("freqs", rope_freqs(d // heads, seq) if rope else None, persistent=False)

    def forward(self, ids):
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x, self.freqs)
        return self.out(self.norm(x))


def batch(step, cfg, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def full_params(model):
    out = {}
    for k, v in model.state_dict().items():
        v = v.full_tensor() if hasattr(v, "full_tensor") else v
        out[k] = v.detach().cpu().float().clone()
    return out


def build(wrap, dev, cfg):
    torch.manual_seed(0)
    model = Llama(**cfg).to(dev)
    if wrap == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(dev.type, (WORLD,))
        kw = dict(mesh=mesh)
        if cfg["mp"]:
            from torch.distributed.fsdp import MixedPrecisionPolicy
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
    elif wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    how = [dict(foreach=False), dict(foreach=True), dict(fused=True)][cfg["opt"]]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **how)
    return model, opt


def train(wrap, dev, steps, cfg, counts=None):
    model, opt = build(wrap, dev, cfg)
    on_tpu = dev.type == "tpu"
    per_step, losses = [], []
    for step in range(steps):
        x, y = batch(step, cfg, RANK)
        if on_tpu:
            torch.tpu.synchronize()
            torch.tpu.reset_metrics()
        dist.barrier()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.reshape(-1))
        loss.backward()
        if cfg["clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))  # one read per step, as a training loop logs its loss
        sec = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        # CPU seconds of this process (the XLA CPU plugin's threads included): less
        # sensitive than wall time to other processes on a loaded machine
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        row = {"seconds": sec, "cpu_seconds": cpu}
        if on_tpu:
            m = torch.tpu.metrics()
            row.update(executed=m["execute"]["count"], compiled=m["compile"]["count"],
                       device_seconds=m["execute"]["device_seconds"], host_wait_seconds=m["host_wait"]["seconds"],
                       disk_loads=m["disk_load"]["count"], host_waits=m["host_wait"]["count"],
                       to_host=m["transfer"]["to_host"]["count"], to_device=m["transfer"]["to_device"]["count"],
                       device_copies=m["transfer"]["device_to_device"]["count"],
                       cuts={k: v for k, v in m["cuts"].items() if v},
                       fallbacks=dict(m["fallbacks"]), ops=m["ops_recorded"],
                       causes=[c["cause"] for c in m["recompile_causes"]][:5])
            if os.environ.get("FUSED_DIST_PROGRAMS") and step == steps - 1:
                progs = [p for p in m["programs"] if p["executions"]]
                row["programs"] = sorted(progs, key=lambda p: -p["execute_seconds"])[:int(os.environ["FUSED_DIST_PROGRAMS"])]
        per_step.append(row)
    return full_params(model), losses, per_step


def main():
    import warnings
    warnings.filterwarnings("ignore")
    import torch_tpu  # noqa: F401
    wrap, steps = sys.argv[1], int(sys.argv[2])
    cfg = dict(CONFIG)
    for kv in sys.argv[3:]:
        k, v = kv.split("=")
        cfg[k] = int(v)
    torch.tpu.set_device(LOCAL_RANK)
    dist.init_process_group()  # tpu -> tpu_dist, cpu -> gloo
    dev = torch.device("tpu", LOCAL_RANK)
    params, losses, per_step = train(wrap, dev, steps, cfg)
    data = {"wrap": wrap, "mode": os.environ.get("TORCH_TPU_EAGER_MODE", "strict"), "config": cfg,
            "losses": losses, "steps": per_step}
    if os.environ.get("FUSED_DIST_GLOO"):  # the same training on CPU tensors through gloo
        gparams, glosses, _ = train(wrap, torch.device("cpu"), steps, cfg)
        data["gloo_losses"] = glosses
        diffs = {k: float((params[k] - gparams[k]).abs().max()) for k in params}
        data["max_diff_vs_gloo"] = max(diffs.values())
        data["worst_vs_gloo"] = max(diffs, key=diffs.get)
        n = sum(v.numel() for v in params.values())
        data["mean_diff_vs_gloo"] = sum(float((params[k] - gparams[k]).abs().sum()) for k in params) / n
    # fingerprints of the final parameters, to compare runs in other processes
    data["param_sums"] = {k: float(v.double().sum()) for k, v in params.items()}
    data["param_abs_sums"] = {k: float(v.double().abs().sum()) for k, v in params.items()}
    out = os.environ.get("TPU_DIST_OUT")
    if out:
        with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
            json.dump(data, f)
    if RANK == 0 and os.environ.get("FUSED_DIST_PRINT"):
        print(json.dumps({k: v for k, v in data.items()}, indent=None))
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
