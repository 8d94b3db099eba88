"""The bench GPT (bench/models.py: 4 layers, d=256, 4 heads, seq 128,
batch 8, AdamW), trained for --steps steps on one fixed batch: the program
`python -m torch_tpu.doctor --tune` is measured on, and `make bench`'s
doctor section (bench/doctor.py) runs with and without the doctor.

    python -m torch_tpu.doctor --tune --steps 8 examples/doctor/bench_gpt.py
    python -m torch_tpu.run examples/doctor/bench_gpt.py --steps 20

Written for CUDA like the other examples (the doctor and torch_tpu.run map
it onto tpu).  No planted problem: one host read, after the loop.  The last
line it prints is one JSON object: the loop's seconds (first step to the
last step's result on the host) and the final loss."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "bench"))
from models import make_gpt, train_step  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--config", default="gpt", help="a bench/models.py CONFIGS name")
args = ap.parse_args()

device = "cuda" if torch.cuda.is_available() else "tpu"
model, opt, x, y = make_gpt(args.config, device)
t0 = time.perf_counter()
total = torch.zeros((), device=device)
for step in range(args.steps):
    loss = train_step(model, opt, x, y)
    total += loss.detach()
final = loss.item()  # waits for the last step
loop_s = time.perf_counter() - t0
print(json.dumps({"steps": args.steps, "loop_s": loop_s, "loss": final, "mean_loss": total.item() / args.steps}))
