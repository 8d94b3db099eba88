"""The vLLM plugin's ragged paged attention, one layer's call (fused mode,
the call a program of its own as in a serving step), with the engine's C
kernel (the CPU plugin's host kernel) and with the StableHLO kernel, in one
run: ms per call and, for the C kernel, its own share.

    .venv/bin/python bench/attention.py [--out bench/attention_results.json]

Cases: SmolLM2-135M's attention (9 query heads over 3 KV heads of 64, KV
blocks of 16, a 347-block cache): decodes at 1 x 40, 8 x 300 and 32 x 300
tokens of context, two 256-token prefills, a 256-token chunk after 200
cached tokens.  No vLLM needed."""
import argparse
import json
import os
import platform
import time

import numpy as np
import torch

import torch_tpu  # noqa: F401
from torch_tpu import _C
from torch_tpu.vllm import ragged

NB, BS, HKV, HQ, D = 347, 16, 3, 9, 64
CASES = {"decode 1x40": ([1], [40], 8), "decode 8x300": ([1] * 8, [300] * 8, 8),
         "decode 32x300": ([1] * 32, [300] * 32, 32), "prefill 2x256": ([256, 256], [0, 0], 512),
         "prefill 256 after 200": ([256], [200], 256)}


def run(kv, qlens, ctxs, t, n):
    q = torch.randn(t, HQ, D).to("tpu")
    starts = np.concatenate([[0], np.cumsum(qlens)])
    seq = np.array(ctxs) + np.array(qlens)
    table = np.arange(1, 1 + len(qlens) * 64).reshape(len(qlens), 64) % NB
    per, out_index = ragged.plan(starts, seq, table, t, 32, BS)
    per = {k: tuple(torch.from_numpy(np.ascontiguousarray(a)).to("tpu") for a in v) for k, v in per.items()}
    out_index = torch.from_numpy(out_index).to("tpu")

    def call():
        ragged.attention(q, kv, per, out_index, D ** -0.5)
        _C.flush(_C.CUT_OTHER)

    for _ in range(3):
        call()
    torch.tpu.synchronize()
    k0 = _C.host_kernel_stats(ragged.HOST_KERNEL)[1]
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    torch.tpu.synchronize()
    wall = (time.perf_counter() - t0) / n * 1e3
    return round(wall, 3), round((_C.host_kernel_stats(ragged.HOST_KERNEL)[1] - k0) / n * 1e3, 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "attention_results.json"))
    a = ap.parse_args()
    torch.tpu.set_eager_mode("fused")
    torch.manual_seed(0)
    kv = torch.randn(NB, BS, HKV, 2 * D).to("tpu")
    results = dict(machine=dict(node=platform.node(), cpus=os.cpu_count()), cases={})
    kernels = ["host_kernel", "stablehlo"] if ragged.host_kernel() else ["stablehlo"]
    for name, (qlens, ctxs, t) in CASES.items():
        row = {}
        for k in kernels:
            os.environ["TORCH_TPU_HOST_KERNELS"] = "1" if k == "host_kernel" else "0"
            wall, own = run(kv, qlens, ctxs, t, a.repeats)
            row[k] = dict(ms=wall, **({"kernel_ms": own} if k == "host_kernel" else {}))
        if len(kernels) == 2:
            row["stablehlo_over_host"] = round(row["stablehlo"]["ms"] / row["host_kernel"]["ms"], 2)
        results["cases"][name] = row
        print(f"{name}: {json.dumps(row)}", flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
