"""Profiles a few training steps of examples/train_mlp.py's model on the tpu
and writes what a CUDA user would look at:

  <out>/trace.json        torch.profiler's chrome trace: the CPU ops, and the
                          tpu:0 track with every program (named by its ops),
                          compile and cache hit, transfer and host wait
                          (open in https://ui.perfetto.dev or chrome://tracing)
  <out>/tb/               the same via tensorboard_trace_handler (schedule:
                          1 wait, 1 warmup, 3 active steps)
  <out>/snapshot.pickle   a memory snapshot (torch.tpu.memory): drag it into
                          https://pytorch.org/memory_viz, or
                          python -m torch.cuda._memory_viz trace_plot <out>/snapshot.pickle -o <out>/memory.html
  <out>/explain.txt       torch_tpu.debug.explain of one step: its programs, ops, cuts

and prints the key_averages table sorted by device time.
Run: .venv/bin/python examples/profile_demo.py [out_dir]   (make profile-demo)
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mlp import make_data  # noqa: E402

import torch_tpu  # noqa: E402,F401
from torch_tpu.debug import explain  # noqa: E402


def main(out="profile_out", device="tpu"):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x_all, y_all = make_data()

    def step(i):
        j = (i * 64) % 512
        x, y = x_all[j:j + 64].to(device), y_all[j:j + 64].to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    torch.tpu.memory._record_memory_history(max_entries=100000)
    step(0)  # the first step compiles; profile steady steps (and one that recompiles nothing)
    with open(os.path.join(out, "explain.txt"), "w") as f:
        f.write(str(explain(step, 1)) + "\n")
    acts = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    with profile(activities=acts, record_shapes=True) as prof:
        for i in range(2, 5):
            with record_function(f"train_step_{i}"):
                step(i)
    prof.export_chrome_trace(os.path.join(out, "trace.json"))
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(os.path.join(out, "tb"))) as tb:
        for i in range(5, 11):
            step(i)
            tb.step()
    torch.tpu.memory._dump_snapshot(os.path.join(out, "snapshot.pickle"))
    torch.tpu.memory._record_memory_history(enabled=None)
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
    print(open(os.path.join(out, "explain.txt")).read())
    print(torch.tpu.memory.memory_summary())
    print(f"wrote {out}/trace.json, {out}/tb/, {out}/snapshot.pickle, {out}/explain.txt")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "profile_out")
