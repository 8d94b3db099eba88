"""User kernels (issue 27's figure): the bench GPT (bench/models.py "gpt")
with every LayerNorm replaced by an RMSNorm, written two ways: PyTorch's
built-in ops (the formula of Hugging Face's LlamaRMSNorm) and the custom-op
RMSNorm of examples/custom_rmsnorm.py (StableHLO forward and backward
kernels, torch_tpu.library).  Both train (AdamW) on tpu in fused eager mode
in the same run, interleaved; median ms per step after warm-up, and the
loss after the timed steps of each (they must agree).  The `kernels`
section of bench/run.py (`make bench`), or alone:

    .venv/bin/python bench/kernels.py [--steps N] [--warmup N] [--json PATH]
"""
import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)


def _example():
    spec = importlib.util.spec_from_file_location("custom_rmsnorm_example",
                                                  os.path.join(REPO, "examples", "custom_rmsnorm.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    return ex


def _models(torch, ex):
    sys.path.insert(0, BENCH)
    from models import make_gpt

    class BuiltinRMSNorm(torch.nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.weight = weight

        def forward(self, x):
            return ex._ref_forward(x, self.weight)

    class KernelRMSNorm(BuiltinRMSNorm):
        def forward(self, x):
            return ex.rmsnorm_fwd(x.contiguous(), self.weight)

    base, _, x, y = make_gpt("gpt", "cpu")
    out = {}
    for tag, cls in (("builtin", BuiltinRMSNorm), ("kernel", KernelRMSNorm)):
        m = copy.deepcopy(base)
        for mod in list(m.modules()):
            for name, child in list(mod.named_children()):
                if isinstance(child, torch.nn.LayerNorm):
                    setattr(mod, name, cls(child.weight))
        out[tag] = m
    return out, x, y


def measure(torch, steps=10, warmup=3):
    ex = _example()
    models, x, y = _models(torch, ex)
    prev = torch.tpu.get_eager_mode()
    torch.tpu.set_eager_mode("fused")
    try:
        dev = torch.device("tpu")
        xs, ys = x.to(dev), y.to(dev)
        runs = {}
        for tag, m in models.items():
            m = m.to(dev)
            opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
            runs[tag] = (m, opt)

        def step(tag):
            m, opt = runs[tag]
            opt.zero_grad(set_to_none=True)
            loss = m(xs, ys)
            loss.backward()
            opt.step()
            return loss

        for _ in range(warmup):
            for tag in runs:
                step(tag)
        torch.tpu.synchronize()
        times = {tag: [] for tag in runs}
        last = {}
        for _ in range(steps):
            for tag in runs:  # interleaved: both see the same machine
                t0 = time.perf_counter()
                last[tag] = step(tag)
                torch.tpu.synchronize()
                times[tag].append((time.perf_counter() - t0) * 1e3)
        out = {"params": {"model": "gpt, LayerNorm -> RMSNorm", "eager_mode": "fused", "optimizer": "AdamW",
                          "warmup_steps": warmup, "timed_steps": steps}}
        for tag in runs:
            out[tag] = {"ms_per_step": statistics.median(times[tag]), "loss": float(last[tag].item())}
        out["kernel_vs_builtin"] = out["kernel"]["ms_per_step"] / out["builtin"]["ms_per_step"]
        return out
    finally:
        torch.tpu.set_eager_mode(prev)


def markdown_rows(fig, cell):
    """Rows for bench/results.md: [figure, PyTorch CPU, tpu strict, tpu fused, notes]."""
    label = "GPT train step, RMSNorm as a custom kernel vs built-in ops, ms"
    if "error" in fig:
        return [[label, "error", "", "", fig["error"][:120]]]
    k, b = fig.get("kernel") or {}, fig.get("builtin") or {}
    note = (f"built-in ops {b.get('ms_per_step', 0):.1f} ms; kernel/built-in {fig.get('kernel_vs_builtin', 0):.2f}; "
            f"losses {k.get('loss', 0):.4f} / {b.get('loss', 0):.4f}")
    return [[label, "", "", cell(k, "ms_per_step", "{:.1f}"), note]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import torch
    import torch_tpu  # noqa: F401

    out = measure(torch, a.steps, a.warmup)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
