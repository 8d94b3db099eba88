"""What profiling costs on the bench GPT training step (bench/models.py "gpt",
fused mode): ms per step with nothing on, inside torch.profiler with the CPU
activity only (PyTorch's own cost), with CPU + the tpu activity (ours on
top), and with memory history recording.  Rounds alternate so drift hits
every variant alike; the median of each variant's rounds is printed.
Run: TORCH_TPU_EAGER_MODE=fused .venv/bin/python tools/profile_overhead.py [rounds] [steps]"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import torch_tpu  # noqa: E402,F401
from models import make_gpt, train_step  # noqa: E402


def main(rounds=5, steps=10):
    model, opt, x, y = make_gpt("gpt", "tpu")
    for _ in range(5):
        train_step(model, opt, x, y).item()
    torch.tpu.synchronize()

    def run():
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = train_step(model, opt, x, y)
        loss.item()
        torch.tpu.synchronize()
        return (time.perf_counter() - t0) / steps * 1e3

    def off():
        return run()

    def prof_cpu():
        with profile(activities=[ProfilerActivity.CPU]):
            return run()

    def prof_tpu():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            return run()

    def memory():
        torch.tpu.memory._record_memory_history()
        try:
            return run()
        finally:
            torch.tpu.memory._record_memory_history(enabled=None)

    variants = {"off": off, "profile CPU": prof_cpu, "profile CPU+tpu": prof_tpu, "memory history": memory}
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for k, f in variants.items():
            times[k].append(f())
    base = statistics.median(times["off"])
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:16} {m:8.2f} ms/step  ({m / base:5.3f}x off)  rounds: {', '.join(f'{t:.1f}' for t in v)}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
