"""GRPO with TRL on tpu: a small causal LM learns to answer with digits.

TRL's GRPOTrainer samples a group of completions per prompt (rollouts),
scores them with a rule-based reward and takes a policy-gradient step on the
group-relative advantages.  With torch_tpu installed, tpu is the accelerator:
the trainer, and Transformers' `generate` for the rollouts, run there with
nothing device-specific in the training (only the record of a weight sync
reads torch.tpu.metrics()); `--device cpu` runs the same script on the CPU
(TrainingArguments' use_cpu) as a reference.

Rollouts:
- `--rollout generate` (default): Transformers' generate on the trainer's
  model; nothing to sync.
- `--rollout vllm`: TRL's "colocate" mode: a vLLM engine inside this
  process (torch_tpu.vllm is vLLM's platform here), the trainer's weights
  pushed into it before each rollout (`load_weights`, tpu tensor to tpu
  tensor).

Model: by default a tiny Llama built from a config (2 layers, a character
tokenizer of this file's own), written to OUTPUT_DIR/model-rankN so vLLM
can load it too; `--model build/models/SmolLM2-135M-Instruct` takes a real one.

`--sampling host` draws the sampling noise (Gumbel-max: argmax of
logits / T + Gumbel noise is a sample of softmax(logits / T)) from a seeded
CPU generator per process, so a tpu run and a CPU run sample the same tokens
and their rewards, losses and parameters can be compared (tests/rl).  The
default, `device`, samples with the device's generator (tpu's is Threefry,
so its tokens differ from CPU's Mersenne Twister ones).

    make rl-env
    .venv-rl/bin/python examples/rl/grpo.py [--device tpu|cpu] [--rollout generate|vllm]
    .venv-rl/bin/torchrun --nproc-per-node 2 examples/rl/grpo.py      # tpu_dist
    .venv-rl/bin/accelerate launch --multi_gpu --num_processes 2 examples/rl/grpo.py

`--result FILE` writes what a run did (per step: loss, reward, each
process's completions and rewards; seconds per rollout and per weight sync,
what each sync moved) as JSON and the final parameters beside it (FILE.pt);
`--replay FILE` trains on the completions a vLLM run recorded there (the
CPU reference of a vLLM run: tpu's sampler is not CPU's).
"""
import argparse
import json
import os
import string
import tempfile
import time

import torch

PROMPTS = [
    "The answer is", "Count to five:", "My phone number:", "Year of birth:",
    "Pick a number:", "Seven times six:", "Room", "Flight", "Zip code:",
    "Total:", "Page", "The score was", "Bus line", "It costs", "Level", "Agent",
]


def digit_reward(completions, **kwargs):
    """The rule: the share of a completion's characters that are digits."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def no_space_reward(completions, **kwargs):
    """A second rule, a small one: -0.1 per space."""
    return [-0.1 * text.count(" ") for text in completions]


def char_tokenizer():
    """A character tokenizer (one token per printable ASCII character)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for ch in string.printable[:-5]:  # letters, digits, punctuation, space
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def tiny_model(out_dir):
    """A 2-layer Llama over the character tokenizer, seeded, saved for vLLM."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


class HostGumbel:
    """A logits processor that turns greedy decoding into sampling at
    `temperature` with noise from a seeded CPU generator (see --sampling)."""

    def __init__(self, seed, temperature):
        self.gen = torch.Generator().manual_seed(seed)
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        u = torch.rand(scores.shape, generator=self.gen, dtype=torch.float32).clamp_(1e-10, 1 - 1e-7)
        return scores / self.temperature - torch.log(-torch.log(u)).to(scores.device, scores.dtype)


@torch.no_grad()
def engine_vs_trainer(engine, model):
    """The largest difference between the vLLM engine's weights and the
    trainer's (vLLM fuses q/k/v and gate/up, and pads the vocabulary)."""
    mine = dict(model.named_parameters())
    worst = 0.0
    for name, p in engine.named_parameters():
        if "qkv_proj" in name:
            parts = [mine[name.replace("qkv_proj", x)] for x in ("q_proj", "k_proj", "v_proj")]
        elif "gate_up_proj" in name:
            parts = [mine[name.replace("gate_up_proj", x)] for x in ("gate_proj", "up_proj")]
        else:
            parts = [mine[name]]
        want = torch.cat([q.detach().to(p.device, p.dtype) for q in parts])
        got = p[: want.shape[0]]
        worst = max(worst, float((got.float() - want.float()).abs().max()))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["tpu", "cpu"], default="tpu")
    ap.add_argument("--rollout", choices=["generate", "vllm"], default="generate")
    ap.add_argument("--model", default=None, help="a model directory (default: a tiny Llama built here)")
    ap.add_argument("--sampling", choices=["device", "host"], default="device")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="bf16: TRL's default (autocast around the loss forward); fp32: no autocast")
    ap.add_argument("--replay", default=None,
                    help="roll out the completions a --rollout vllm run recorded in this --result file "
                         "(a CPU reference for a vLLM run: the same samples, trained here)")
    ap.add_argument("--is-correction", choices=["on", "off"], default="on",
                    help="TRL's importance-sampling correction of vLLM rollouts (vLLM runs the model in bf16)")
    ap.add_argument("--vllm-memory", type=float, default=None,
                    help="vLLM's gpu_memory_utilization (of the device's memory: the host's RAM on the CPU "
                         "plugin); default 0.02 for the tiny model, 0.1 for --model")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8, help="completions per process and step")
    ap.add_argument("--max-completion-length", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output-dir", default=None)
    ap.add_argument("--result", default=None, help="write a JSON record here (and the final parameters to RESULT.pt)")
    args = ap.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList
    from trl import GRPOConfig, GRPOTrainer

    out = args.output_dir or tempfile.mkdtemp(prefix="grpo-")
    # each process writes its own copy (the same seeded weights)
    model_dir = args.model or tiny_model(os.path.join(out, f"model-rank{os.environ.get('RANK', '0')}"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    if args.sampling == "host" and args.rollout == "vllm":
        ap.error("--sampling host is for --rollout generate (vLLM samples in its engine)")
    gen_kwargs = None
    if args.sampling == "host":
        gen_kwargs = {"do_sample": False}
    cfg = GRPOConfig(
        output_dir=out, use_cpu=args.device == "cpu", bf16=args.precision == "bf16", seed=args.seed,
        data_seed=args.seed, max_steps=args.steps, learning_rate=args.lr, logging_steps=1, save_strategy="no",
        report_to=[], per_device_train_batch_size=args.batch_size, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, temperature=1.0, generation_kwargs=gen_kwargs,
        use_vllm=args.rollout == "vllm", vllm_mode="colocate", vllm_max_model_length=64,
        vllm_gpu_memory_utilization=args.vllm_memory or (0.1 if args.model else 0.02),
        vllm_importance_sampling_correction=args.is_correction == "on",
        dataloader_num_workers=0, disable_tqdm=True,
    )
    train = Dataset.from_dict({"prompt": PROMPTS})
    record = {"device": args.device, "rollout": args.rollout, "sampling": args.sampling, "steps": [],
              "completions": [], "sync_s": [], "syncs": [], "rollouts": [], "rollout_s": []}

    def reward(completions, completion_ids=None, **kwargs):
        r = digit_reward(completions)
        record["completions"].append({"ids": [list(map(int, c)) for c in completion_ids], "reward": r})
        return r
    reward.__name__ = "digit_reward"

    rollout_func = None
    if args.replay:
        rank = int(os.environ.get("RANK", "0"))
        path = args.replay if int(os.environ.get("WORLD_SIZE", "1")) == 1 else f"{args.replay}.rank{rank}"
        recorded = iter(json.load(open(path))["rollouts"])

        def rollout_func(prompts, trainer):
            r = next(recorded)
            if tok.batch_decode(r["prompt_ids"]) != list(prompts):
                raise SystemExit(f"--replay {path}: this run's prompts differ from the recorded run's")
            return {"prompt_ids": r["prompt_ids"], "completion_ids": r["completion_ids"], "logprobs": None}
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = GRPOTrainer(model=model, args=cfg, train_dataset=train, processing_class=tok,
                          reward_funcs=[reward, no_space_reward], rollout_func=rollout_func)
    acc = trainer.accelerator
    if args.rollout == "generate":
        inner = acc.unwrap_model(trainer.model)
        plain_generate = inner.generate
        noise = HostGumbel(args.seed * 1000 + acc.process_index, cfg.temperature)

        def generate(*a, **kw):
            if args.sampling == "host":
                kw["logits_processor"] = LogitsProcessorList([noise])
            t = time.perf_counter()
            out = plain_generate(*a, **kw)
            record["rollout_s"].append(time.perf_counter() - t)  # generate returns tokens read back: synced
            return out
        inner.generate = generate
    if args.rollout == "vllm":
        vg = trainer.vllm_generation
        plain_sync = vg.sync_weights
        engine = vg.llm.llm_engine.model_executor.driver_worker.model_runner.model
        record["engine"] = {"device": str(next(engine.parameters()).device),
                            "dtype": str(next(engine.parameters()).dtype).removeprefix("torch.")}

        def timed_sync():
            on_tpu = next(engine.parameters()).device.type == "tpu"
            if on_tpu:
                torch.accelerator.synchronize()
                torch.tpu.reset_metrics()
            ptrs = [p.data_ptr() for p in engine.parameters()]
            t = time.perf_counter()
            plain_sync()
            if on_tpu:
                torch.accelerator.synchronize()
            record["sync_s"].append(time.perf_counter() - t)
            sync = {"in_place": ptrs == [p.data_ptr() for p in engine.parameters()]}
            if on_tpu:  # what the sync moved (before the comparison below reads its maxima)
                sync["transfers"] = torch.tpu.metrics()["transfer"]
            sync["engine_vs_trainer"] = engine_vs_trainer(engine, acc.unwrap_model(trainer.model))
            record["syncs"].append(sync)
        vg.sync_weights = timed_sync
        plain_generate_vllm = vg.generate

        def recorded_generate(prompts, *a, **kw):
            t = time.perf_counter()
            out = plain_generate_vllm(prompts, *a, **kw)
            record["rollout_s"].append(time.perf_counter() - t)
            record["rollouts"].append({"prompt_ids": [list(p) for p in prompts],
                                       "completion_ids": [list(c) for c in out[1]]})
            return out
        vg.generate = recorded_generate

    print(f"GRPO on {acc.device}, {acc.num_processes} process(es), rollouts by {args.rollout}")
    t0 = time.perf_counter()
    trainer.train()
    record["train_s"] = time.perf_counter() - t0
    for h in trainer.state.log_history:
        if "loss" in h:
            record["steps"].append({k: v for k, v in h.items() if isinstance(v, (int, float))})
    for s in record["steps"]:
        print(f"step {s['step']}: loss {s['loss']:.6f} reward {s['reward']:.4f}")
    if args.result:
        path = args.result if acc.num_processes == 1 else f"{args.result}.rank{acc.process_index}"
        with open(path, "w") as f:
            json.dump(record, f)
        if acc.is_main_process:
            params = {k: v.detach().float().cpu() for k, v in acc.unwrap_model(trainer.model).state_dict().items()}
            torch.save(params, f"{args.result}.pt")
    acc.wait_for_everyone()


if __name__ == "__main__":
    main()
