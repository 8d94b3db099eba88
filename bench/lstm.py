"""LSTM training step (issue 12's figure): nn.LSTM 2 layers, hidden 256, seq
64, batch 16 (input 256), a linear head, MSE loss, SGD; the same model on
PyTorch CPU (eager), tpu fused eager and tpu under torch.compile(backend=
"tpu"), measured in one run.  Median ms per step after warm-up (the first
tpu steps compile).  The `lstm` section of bench/run.py (`make bench`), or
alone:

    .venv/bin/python bench/lstm.py [--steps N] [--warmup N] [--json PATH]

Note: dynamo does not trace nn.LSTM by default (torch._dynamo.config.
allow_rnn is False): under torch.compile the LSTM runs as the eager layer
ops and the rest of the model is compiled.
"""
import argparse
import copy
import json
import statistics
import sys
import time
import warnings


def make(torch, seed=0):
    torch.manual_seed(seed)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(256, 256, num_layers=2)
            self.head = torch.nn.Linear(256, 16)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y)

    return Net()


def run(torch, model, dev, steps, warmup, compile_=False):
    torch.manual_seed(1)
    x = torch.randn(64, 16, 256).to(dev)
    target = torch.randn(64, 16, 16).to(dev)
    fwd = torch.compile(model, backend="tpu") if compile_ else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    first = None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(fwd(x), target)
        loss.backward()
        opt.step()
        lv = float(loss.item())  # waits for the step
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        if i >= warmup:
            times.append(dt)
    return {"ms_per_step": statistics.median(times) * 1e3, "first_step_s": first, "loss_last": lv,
            "runs_ms": [round(t * 1e3, 2) for t in times]}


def measure(torch, steps, warmup):
    """The three figures, measured in one process (the bench section and the
    command line both come here)."""
    base = make(torch)
    out = {"config": "LSTM 2 layers, hidden 256, seq 64, batch 16, input 256; SGD",
           "cpu_threads": torch.get_num_threads()}
    out["cpu"] = run(torch, copy.deepcopy(base), "cpu", steps, warmup)
    prev = torch.tpu.get_eager_mode()
    try:
        torch.tpu.set_eager_mode("fused")
        s0 = torch.tpu.cache_stats()
        out["tpu_fused"] = run(torch, copy.deepcopy(base).to("tpu"), "tpu", steps, warmup)
        s1 = torch.tpu.cache_stats()
        out["tpu_fused"]["flushes_per_step"] = (s1["flushes"] - s0["flushes"]) / (steps + warmup)
        out["tpu_compiled"] = run(torch, copy.deepcopy(base).to("tpu"), "tpu", steps, warmup, compile_=True)
    finally:
        torch.tpu.set_eager_mode(prev)
    for k in ("tpu_fused", "tpu_compiled"):
        out[k]["speedup_vs_cpu"] = out["cpu"]["ms_per_step"] / out[k]["ms_per_step"]
    return out


def sec_lstm(torch, quick):
    return measure(torch, steps=5 if quick else 10, warmup=2 if quick else 3)


def markdown_rows(fig, cell):
    """Rows for bench/results.md: [figure, PyTorch CPU, tpu strict, tpu fused, notes]."""
    if "error" in fig:
        return [["LSTM train step (2x256, seq 64, batch 16), ms", "error", "", "", fig["error"][:120]]]
    comp = fig.get("tpu_compiled") or {}
    fused = fig.get("tpu_fused") or {}
    note = []
    if fused.get("speedup_vs_cpu"):
        note.append(f"fused {fused['speedup_vs_cpu']:.2f}x CPU")
    if comp.get("ms_per_step"):
        note.append(f"compiled {comp['ms_per_step']:.1f} ms ({comp['speedup_vs_cpu']:.2f}x CPU)")
    return [["LSTM train step (2x256, seq 64, batch 16), ms", cell(fig.get("cpu"), "ms_per_step", "{:.1f}"), "",
             cell(fused, "ms_per_step", "{:.1f}"), "; ".join(note)]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch
    import torch_tpu  # noqa: F401

    out = measure(torch, a.steps, a.warmup)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
