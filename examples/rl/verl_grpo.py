"""GRPO with VeRL on tpu: VeRL's PPO trainer (verl.trainer.main_ppo, GRPO
advantages) on a small model and a parquet dataset this script writes.

VeRL runs its workers as Ray actors: the trainer (driver) in a TaskRunner
actor, the actor/rollout/ref worker group on a resource pool of
`trainer.n_gpus_per_node` devices.  torch_tpu.integrations.verl is VeRL's
platform here (VERL_PLATFORM=tpu, VERL_USE_EXTERNAL_MODULES names the module,
so every Ray process imports it): device `tpu`, `tpu_dist` for FSDP's process
group, Ray's GPU resource standing for a tpu device (ray.init(num_gpus=N)).
`--device cpu` runs the same config on the CPU as a reference (VeRL 0.9.1 has
no CPU platform: verl_cpu_platform.py beside this file is one, gloo, and
vLLM's own CPU platform serves the rollouts; torch_tpu stays unloaded).  Each step's metrics are written by VeRL's
file logger to OUTPUT_DIR/metrics-DEVICE.jsonl; the script prints the reward,
policy loss, gradient norm and vLLM-vs-actor token-probability difference per
step.

The reward is a rule: the share of a response's characters that are digits
(`compute_score` below, VeRL's custom_reward_function).

    make verl-env
    .venv-verl/bin/python examples/rl/verl_grpo.py [--device tpu|cpu] [--steps 3]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# one batch: every step trains on these prompts (train_batch_size is their
# number), so the rewards of successive steps are comparable
PROMPTS = ["Pick a number:", "Year of birth:", "My phone number:", "Zip code:"]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """VeRL's custom reward function: the share of digits in the response."""
    return sum(c.isdigit() for c in solution_str) / max(len(solution_str), 1)


def write_dataset(path):
    import pandas as pd

    rows = [{"data_source": "digits", "prompt": [{"role": "user", "content": p}], "ability": "digits",
             "reward_model": {"style": "rule", "ground_truth": ""}, "extra_info": {"index": i}}
            for i, p in enumerate(PROMPTS)]
    pd.DataFrame(rows).to_parquet(path)


def overrides(args, data):
    n_dev = args.devices
    o = [
        "algorithm.adv_estimator=grpo",
        "trainer.use_v1=False",
        f"data.train_files={data}", f"data.val_files={data}",
        f"data.train_batch_size={len(PROMPTS)}", "data.max_prompt_length=64",
        f"data.max_response_length={args.response_length}", "data.dataloader_num_workers=0",
        "data.shuffle=False",
        f"actor_rollout_ref.model.path={args.model}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={len(PROMPTS)}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",
        "actor_rollout_ref.rollout.free_cache_engine=False",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.n={args.group}",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
        "actor_rollout_ref.rollout.max_num_seqs=32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={os.path.abspath(__file__)}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,file]", "trainer.val_before_train=False", "trainer.test_freq=-1",
        "trainer.save_freq=-1", f"trainer.total_training_steps={args.steps}",
        "trainer.nnodes=1", f"trainer.n_gpus_per_node={n_dev}", f"trainer.device={args.device}",
        f"trainer.default_local_dir={args.output_dir}/ckpt",
        f"+ray_kwargs.ray_init.num_cpus={args.ray_cpus}",
    ]
    # one Ray GPU slot per device (tpu, or the CPU reference's one process):
    # VeRL's resource pools count GPU or NPU only
    o.append(f"+ray_kwargs.ray_init.num_gpus={n_dev}")
    return o


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="tpu", choices=["tpu", "cpu"])
    p.add_argument("--model", default=os.path.join(ROOT, "build/models/SmolLM2-135M-Instruct"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--response-length", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--ray-cpus", type=int, default=4)
    p.add_argument("--output-dir", default=os.path.join(ROOT, "build/verl_grpo"))
    p.add_argument("--dry-run", action="store_true", help="print the command")
    p.add_argument("extra", nargs="*", help="more hydra overrides")
    args = p.parse_args()
    args.output_dir = os.path.abspath(args.output_dir)
    os.makedirs(args.output_dir, exist_ok=True)
    data = os.path.join(args.output_dir, "digits.parquet")
    write_dataset(data)
    env = dict(os.environ)
    env["VERL_PLATFORM"] = args.device
    env["VERL_USE_EXTERNAL_MODULES"] = "torch_tpu.integrations.verl"
    if args.device == "cpu":
        env["VERL_USE_EXTERNAL_MODULES"] = "verl_cpu_platform"  # beside this file
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")]))
        env["VLLM_PLUGINS"] = ""  # vLLM's own CPU platform, not torch_tpu's
        # VeRL places models with `.to(device=<int>)`, which is the current
        # accelerator's device: tpu once torch_tpu is loaded
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["VERL_FILE_LOGGER_PATH"] = os.path.join(args.output_dir, f"metrics-{args.device}.jsonl")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo"] + overrides(args, data) + args.extra
    if args.dry_run:
        print(" ".join(cmd))
        return
    rc = subprocess.call(cmd, env=env, cwd=args.output_dir)
    if rc == 0:
        with open(env["VERL_FILE_LOGGER_PATH"]) as f:
            for line in f:
                rec = json.loads(line)
                d = rec["data"]
                print(f"{args.device} step {rec['step']}: reward {d['critic/score/mean']:.4f} "
                      f"pg_loss {d['actor/pg_loss']:.6f} grad_norm {d['actor/grad_norm']:.4f} "
                      f"rollout/actor prob diff {d.get('training/rollout_probs_diff_mean', float('nan')):.5f}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
