"""TRL's GRPOTrainer on tpu against a CPU run of the same script (issue 39).

`make test-rl` runs this in .venv-rl (TRL 1.16 over .venv-serve's vLLM).
Each test runs examples/rl/grpo.py as a user would, on tpu and on the CPU
(`--device cpu`), and compares what each run did: the completions sampled
and their rewards (equal: `--sampling host` draws the sampling noise from a
seeded CPU generator in both runs), the logged losses, gradient norms and
entropies per step, and the final parameters.

Parameters: the model trains with AdamW (lr 1e-3, 3 steps), which moves
every element by up to ~lr per step whatever its gradient's size, so an
element whose gradient is ~0 (a rounding difference) can move in either
direction: the test bounds the largest difference by a tenth of the largest
update and the mean difference by 1e-3 of the mean update, and prints both.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="TRL is not installed here: `make test-rl` runs this in .venv-rl")

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "rl", "grpo.py")
COMMON = ["--steps", "3"]


def _run(argv, out, timeout=420):
    env = dict(os.environ, TRL_EXPERIMENTAL_SILENCE="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=timeout)
    log = (proc.stdout + proc.stderr)[-5000:]
    assert proc.returncode == 0, f"{' '.join(argv[1:])} exited {proc.returncode}:\n{log}"
    return log


def _script(device, result, *extra):
    return [sys.executable, SCRIPT, "--device", device, "--result", str(result), *COMMON, *extra]


def _generate(device, result, *extra):
    """A run whose rollouts are generate's, sampled with host noise."""
    return _script(device, result, "--sampling", "host", *extra)


def _load(result, rank=None):
    path = f"{result}.rank{rank}" if rank is not None else str(result)
    with open(path) as f:
        return json.load(f)


def _compare_steps(cpu, tpu, loss_atol, rel):
    """Same completions and rewards; losses, grad norms, entropies close."""
    assert len(cpu["completions"]) == len(tpu["completions"]) == 3
    for i, (c, t) in enumerate(zip(cpu["completions"], tpu["completions"])):
        assert c["ids"] == t["ids"], f"rollout {i}: tpu sampled other tokens than the CPU"
        assert c["reward"] == t["reward"], f"rollout {i}: rewards differ"
    diffs = []
    for c, t in zip(cpu["steps"], tpu["steps"]):
        d = {k: abs(c[k] - t[k]) for k in ("loss", "grad_norm", "entropy", "reward")}
        diffs.append(d)
        assert d["reward"] == 0, (c, t)
        assert d["loss"] <= loss_atol, f"step {c['step']}: loss cpu {c['loss']} tpu {t['loss']}"
        assert d["grad_norm"] <= rel * c["grad_norm"], f"step {c['step']}: grad_norm {c['grad_norm']} {t['grad_norm']}"
        assert d["entropy"] <= rel * c["entropy"], f"step {c['step']}: entropy {c['entropy']} {t['entropy']}"
    return diffs


@pytest.fixture(scope="module")
def initial_params(tmp_path_factory):
    """The tiny model's initial parameters (the script builds them seeded)."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import grpo
    finally:
        sys.path.pop(0)
    from transformers import AutoModelForCausalLM

    d = grpo.tiny_model(str(tmp_path_factory.mktemp("init")))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _check_params(cpu_pt, tpu_pt, init, what):
    a, b = torch.load(cpu_pt), torch.load(tpu_pt)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    mean = sum(float((a[k] - b[k]).abs().sum()) for k in a) / sum(a[k].numel() for k in a)
    upd_max = max(float((a[k] - init[k]).abs().max()) for k in a)
    upd_mean = sum(float((a[k] - init[k]).abs().sum()) for k in a) / sum(a[k].numel() for k in a)
    print(f"{what}: final parameters tpu vs cpu: max |diff| {worst:.3g}, mean {mean:.3g} "
          f"(the training moved them by max {upd_max:.3g}, mean {upd_mean:.3g})")
    assert upd_mean > 1e-4, "the run did not train"
    assert worst <= 0.1 * upd_max, f"{what}: max |diff| {worst} of an update {upd_max}"
    assert mean <= 1e-3 * upd_mean, f"{what}: mean |diff| {mean} of a mean update {upd_mean}"
    return worst, mean


def test_grpo_generate_one_process_matches_cpu(tmp_path, initial_params):
    """Rollouts by Transformers' generate on tpu, float32: the same samples,
    rewards, losses and final parameters as the CPU."""
    for device in ("cpu", "tpu"):
        _run(_generate(device, tmp_path / f"{device}.json", "--precision", "fp32"), tmp_path)
    cpu, tpu = _load(tmp_path / "cpu.json"), _load(tmp_path / "tpu.json")
    diffs = _compare_steps(cpu, tpu, loss_atol=1e-6, rel=1e-5)
    print("generate, 1 process, fp32, |tpu - cpu| per step:", diffs)
    _check_params(tmp_path / "cpu.json.pt", tmp_path / "tpu.json.pt", initial_params, "generate fp32")


def test_grpo_generate_bf16_autocast_matches_cpu(tmp_path, initial_params):
    """TRL's default precision (bf16 autocast around the loss forward): the
    bf16 roundings of tpu and CPU matmuls differ (accumulation order), so
    log-probs differ by ~1e-3 and the tolerances are bf16's."""
    for device in ("cpu", "tpu"):
        _run(_generate(device, tmp_path / f"{device}.json", "--precision", "bf16"), tmp_path)
    cpu, tpu = _load(tmp_path / "cpu.json"), _load(tmp_path / "tpu.json")
    diffs = _compare_steps(cpu, tpu, loss_atol=2e-3, rel=5e-3)
    print("generate, 1 process, bf16 autocast, |tpu - cpu| per step:", diffs)
    a, b = torch.load(tmp_path / "cpu.json.pt"), torch.load(tmp_path / "tpu.json.pt")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    mean = sum(float((a[k] - b[k]).abs().sum()) for k in a) / sum(a[k].numel() for k in a)
    upd_mean = sum(float((a[k] - initial_params[k]).abs().sum()) for k in a) / sum(a[k].numel() for k in a)
    print(f"bf16: final parameters tpu vs cpu: max |diff| {worst:.3g}, mean {mean:.3g} (mean update {upd_mean:.3g})")
    assert mean <= 0.05 * upd_mean


def test_grpo_generate_two_processes_match_cpu(tmp_path, initial_params):
    """Two processes: on tpu by `accelerate launch --multi_gpu` (tpu_dist,
    DDP on tpu:LOCAL_RANK), on the CPU by torchrun (gloo); each rank's
    samples, rewards and losses, and the final parameters, agree."""
    cpu_res, tpu_res = tmp_path / "cpu.json", tmp_path / "tpu.json"
    args = ["--precision", "fp32", "--batch-size", "4"]
    _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
          *_generate("cpu", cpu_res, *args)[1:]], tmp_path)
    log = _run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                *_generate("tpu", tpu_res, *args)[1:]], tmp_path)
    assert "GRPO on tpu:0, 2 process(es)" in log and "GRPO on tpu:1, 2 process(es)" in log, log
    for rank in range(2):
        diffs = _compare_steps(_load(cpu_res, rank), _load(tpu_res, rank), loss_atol=1e-6, rel=1e-5)
        print(f"generate, 2 processes, rank {rank}, |tpu - cpu| per step:", diffs)
    _check_params(f"{cpu_res}.pt", f"{tpu_res}.pt", initial_params, "generate, 2 processes")


def test_grpo_vllm_colocate_matches_cpu_replay(tmp_path, initial_params):
    """Rollouts by vLLM inside the trainer (TRL's colocate mode, torch_tpu's
    vLLM platform): before each rollout the trainer's weights are pushed
    into the engine, tpu tensor to tpu tensor.  Checked: after each sync the
    engine holds the trainer's weights (in vLLM's dtype, bf16, in place),
    no weight crossed the host; and the CPU, trained on the very samples the
    tpu's vLLM drew (`--replay`), gets the same rewards, losses and
    parameters.  (vLLM's own sampling is not compared with CPU's: tpu's
    generator is Threefry.)"""
    pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-rl` runs this in .venv-rl "
                                       "(over .venv-serve)")
    tpu_res, cpu_res = tmp_path / "tpu.json", tmp_path / "cpu.json"
    args = ["--precision", "fp32", "--is-correction", "off"]
    _run(_script("tpu", tpu_res, "--rollout", "vllm", *args), tmp_path)
    _run(_script("cpu", cpu_res, "--replay", str(tpu_res), *args), tmp_path)
    tpu, cpu = _load(tpu_res), _load(cpu_res)
    assert tpu["engine"] == {"device": "tpu:0", "dtype": "bfloat16"}, tpu["engine"]
    assert len(tpu["syncs"]) == 3
    for i, s in enumerate(tpu["syncs"]):
        print(f"sync {i}: {tpu['sync_s'][i]:.4f} s, {s}")
        assert s["in_place"], f"sync {i}: the engine's parameters were replaced, not written"
        assert s["engine_vs_trainer"] == 0.0, f"sync {i}: the engine's weights differ from the trainer's"
        t = s["transfers"]
        assert t["to_device"]["count"] == 0 and t["to_host"]["count"] == 0, f"sync {i} went through the host: {t}"
    print(f"vLLM colocate: seconds per weight sync {tpu['sync_s']}")
    diffs = _compare_steps(cpu, tpu, loss_atol=1e-6, rel=1e-5)
    print("vLLM colocate (tpu) vs CPU replay, |tpu - cpu| per step:", diffs)
    _check_params(f"{cpu_res}.pt", f"{tpu_res}.pt", initial_params, "vLLM colocate")
