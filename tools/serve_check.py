"""Greedy completions from vLLM on tpu (the torch_tpu plugin) against vLLM's
own CPU backend: the same model, prompts and engine settings, in the same
environment (.venv-serve); the CPU run turns the plugin off with vLLM's
VLLM_PLUGINS.  Every prompt must produce the same token ids.

    .venv-serve/bin/python tools/serve_check.py [--model DIR] [--json OUT]

The workload covers what serving exercises:
- single prompts ("The capital of France is" -> " Paris."),
- a batch of 8 prompts of different lengths submitted at once (the
  scheduler runs them concurrently, decodes batched),
- a long prompt prefilled in chunks (max_num_batched_tokens is small),
- a prompt that shares a long prefix with an earlier one, so its first
  blocks come from vLLM's prefix cache (the hit is checked in the engine's
  prefix-cache counters).

Each backend runs in its own process (vLLM picks its platform once per
process); the engine core they start is ended with them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "build", "models", "SmolLM2-135M-Instruct")

SYSTEM = ("You are a careful assistant for a library. Answer questions about opening hours, "
          "borrowing rules and late fees briefly and politely. The library opens at nine in the "
          "morning and closes at six in the evening from Monday to Friday, and closes at one on "
          "Saturday. Books may be borrowed for three weeks and renewed twice. ") * 3
SINGLE = ["The capital of France is", "def fibonacci(n):"]
BATCH = [
    "One, two, three,",
    "The largest planet in the solar system is",
    "Water boils at a temperature of",
    "Write a haiku about the sea:",
    "Q: What is 12 times 12?\nA:",
    "The quick brown fox",
    "In 1492, Columbus",
    "List three primary colors: red,",
]
LONG = ("Once upon a time, in a small village by a river, there lived an old clockmaker who "
        "repaired every clock in the valley. " * 6 + "One morning, a stranger arrived and")
PREFIX_A = SYSTEM + "Question: When does the library open on Saturday?\nAnswer:"
PREFIX_B = SYSTEM + "Question: How long can I borrow a book?\nAnswer:"

ENGINE_ARGS = dict(
    max_model_len=512,
    max_num_seqs=8,
    max_num_batched_tokens=64,  # long prompts are prefilled in chunks
    enforce_eager=True,
    dtype="float32",
    enable_prefix_caching=True,
    disable_log_stats=False,
    seed=0,
)


def _prefix_hits(llm):
    hits = queries = 0
    for m in llm.get_metrics():
        if m.name == "vllm:prefix_cache_hits":
            hits += m.value
        elif m.name == "vllm:prefix_cache_queries":
            queries += m.value
    return hits, queries


def run_backend(backend, model, max_tokens, out_path):
    """Runs the workload on one backend (this process) and writes token ids."""
    from vllm import LLM, SamplingParams

    kwargs = dict(ENGINE_ARGS)
    if backend == "tpu":
        kwargs["kv_cache_memory_bytes"] = 64 << 20
    t0 = time.perf_counter()
    llm = LLM(model=model, **kwargs)
    startup = time.perf_counter() - t0
    platform = llm.llm_engine.vllm_config.device_config.device_type
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    results, timings = {}, {}

    def generate(name, prompts):
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        timings[name] = {"seconds": time.perf_counter() - t,
                         "tokens": sum(len(o.outputs[0].token_ids) for o in outs)}
        for p, o in zip(prompts, outs):
            results[f"{name}: {p[-40:]!r}"] = {"text": o.outputs[0].text, "ids": list(o.outputs[0].token_ids)}

    for p in SINGLE:
        generate("single", [p])
    generate("batch8", BATCH)
    generate("chunked", [LONG])
    generate("prefix_a", [PREFIX_A])
    hits_before, _ = _prefix_hits(llm)
    generate("prefix_b", [PREFIX_B])
    hits_after, _ = _prefix_hits(llm)
    # The same batch again: every prompt's full blocks are now cached.
    generate("batch8_again", BATCH)
    with open(out_path, "w") as f:
        json.dump({"backend": backend, "platform": platform, "startup_s": startup, "results": results,
                   "timings": timings, "prefix_hit_tokens": hits_after - hits_before}, f, indent=1)


def _child(backend, model, max_tokens, out_path):
    env = dict(os.environ)
    if backend == "cpu":
        env["VLLM_PLUGINS"] = ""  # vLLM loads no platform plugin: its CPU backend runs
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    else:
        env.pop("VLLM_PLUGINS", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--run", backend, "--model", model,
           "--max-tokens", str(max_tokens), "--out", out_path]
    log = out_path + ".log"
    with open(log, "w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0:
        with open(log) as f:
            tail = f.read()[-6000:]
        raise SystemExit(f"serve_check: the {backend} run failed (exit {rc}); log {log}:\n{tail}")
    with open(out_path) as f:
        return json.load(f)


def compare(model, max_tokens, json_out=None):
    tmp = tempfile.mkdtemp(prefix="serve_check_")
    runs = {b: _child(b, model, max_tokens, os.path.join(tmp, f"{b}.json")) for b in ("cpu", "tpu")}
    cpu, tpu = runs["cpu"], runs["tpu"]
    assert cpu["platform"] == "cpu", cpu["platform"]
    assert tpu["platform"] == "tpu", tpu["platform"]
    failed = 0
    for key, want in cpu["results"].items():
        got = tpu["results"].get(key)
        same = got is not None and got["ids"] == want["ids"]
        failed += not same
        print(f"{'same' if same else 'DIFFERENT':9s} {key}: cpu {want['text']!r}"
              + ("" if same else f" / tpu {got and got['text']!r}"))
    for b in ("cpu", "tpu"):
        r = runs[b]
        per = ", ".join(f"{k} {v['tokens'] / v['seconds']:.1f} tok/s" for k, v in r["timings"].items())
        print(f"{b}: startup {r['startup_s']:.1f} s; prefix-cache hit tokens {r['prefix_hit_tokens']}; {per}")
    if tpu["prefix_hit_tokens"] <= 0:
        print("tpu: the prompt sharing a prefix did not hit the prefix cache")
        failed += 1
    if json_out:
        with open(json_out, "w") as f:
            json.dump(runs, f, indent=1)
    total = len(cpu["results"])
    print(f"{total - failed} passed, {failed} failed")
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--json", default=None, help="write both runs' results here")
    ap.add_argument("--run", choices=["cpu", "tpu"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        run_backend(args.run, args.model, args.max_tokens, args.out)
        return
    sys.exit(0 if compare(args.model, args.max_tokens, args.json) else 1)


if __name__ == "__main__":
    main()
