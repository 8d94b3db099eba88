"""GRPO (TRL) on tpu vs CPU: rollout tokens/s, seconds per RL step, seconds per
weight sync (`make bench-rl`, issue 39).

Runs examples/rl/grpo.py once per configuration, each in a fresh process:
CPU with generate rollouts, tpu with generate rollouts, tpu with vLLM
colocate rollouts (torch_tpu's vLLM platform in the trainer's process).
The first step of each run (compiles, vLLM's warm-up) is left out of the
figures: medians of the steps after it.  Generate needs no weight sync;
colocate pushes the trainer's weights into the engine before each rollout.

tpu runs in TORCH_TPU_EAGER_MODE's mode (strict unless set).  Figures are
measured on a shared machine (2 cores, other work running
beside): compare ratios within one run of this script, not across runs.

    .venv-rl/bin/python bench/rl.py [--model build/models/SmolLM2-135M-Instruct] [--steps 4]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "rl", "grpo.py")
CONFIGS = [("cpu", "generate"), ("tpu", "generate"), ("tpu", "vllm")]


def run(device, rollout, args, out):
    result = os.path.join(out, f"{device}-{rollout}.json")
    argv = [sys.executable, SCRIPT, "--device", device, "--rollout", rollout, "--steps", str(args.steps),
            "--max-completion-length", str(args.max_completion_length), "--result", result,
            "--output-dir", os.path.join(out, f"{device}-{rollout}")]
    if args.model:
        argv += ["--model", args.model]
    env = dict(os.environ, TRL_EXPERIMENTAL_SILENCE="1", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-2000:], "wall_s": wall}
    with open(result) as f:
        rec = json.load(f)
    later = slice(1, None)  # the first step compiles (and warms vLLM up)
    tokens = [sum(len(c) for c in r["ids"]) for r in rec["completions"]]
    roll_s = rec["rollout_s"]
    fig = {
        "wall_s": wall,
        "rollout_tokens_per_s": sum(tokens[later]) / sum(roll_s[later]) if len(roll_s) > 1 else None,
        "first_rollout_s": roll_s[0] if roll_s else None,
        "rollout_s": roll_s,
        "step_s": statistics.median(s["step_time"] for s in rec["steps"][later]),
        "first_step_s": rec["steps"][0]["step_time"],
        "sync_s": statistics.median(rec["sync_s"][later]) if len(rec["sync_s"]) > 1 else None,
        "first_sync_s": rec["sync_s"][0] if rec["sync_s"] else None,
        "rewards": [round(s["reward"], 4) for s in rec["steps"]],
    }
    if rec.get("syncs"):
        fig["sync_transfers"] = rec["syncs"][-1].get("transfers")
        fig["engine"] = rec.get("engine")
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="default: the script's tiny Llama")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-completion-length", type=int, default=16)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "rl_results.json"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-rl-")
    results = {"model": args.model or "tiny Llama (examples/rl/grpo.py)", "steps": args.steps,
               "max_completion_length": args.max_completion_length,
               "note": "measured on a shared 2-core machine with other work running beside; "
                       "the device 'tpu' is the XLA CPU PJRT plugin",
               "cpus": os.cpu_count(), "eager_mode": os.environ.get("TORCH_TPU_EAGER_MODE", "strict"),
               "configs": {}}
    for device, rollout in CONFIGS:
        name = f"{device}/{rollout}"
        print(f"== {name}", flush=True)
        results["configs"][name] = fig = run(device, rollout, args, work)
        if "error" in fig:
            print(f"   failed:\n{fig['error']}")
            continue
        sync = f"{fig['sync_s']:.3f} s (first {fig['first_sync_s']:.3f})" if fig["sync_s"] is not None else "none"
        tps = fig["rollout_tokens_per_s"]
        print(f"   rollout {tps:.1f} tokens/s, RL step {fig['step_s']:.2f} s (first {fig['first_step_s']:.1f}), "
              f"weight sync {sync}")
    c = results["configs"]
    cpu, tg, tv = c.get("cpu/generate", {}), c.get("tpu/generate", {}), c.get("tpu/vllm", {})
    ratios = {}
    for name, fig in (("tpu/generate", tg), ("tpu/vllm", tv)):
        if fig.get("step_s") and cpu.get("step_s"):
            ratios[f"{name} step time / cpu"] = fig["step_s"] / cpu["step_s"]
            ratios[f"{name} rollout tokens/s / cpu"] = fig["rollout_tokens_per_s"] / cpu["rollout_tokens_per_s"]
    results["ratios"] = ratios
    for k, v in ratios.items():
        print(f"   {k}: {v:.2f}")
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
