"""How fast a server started as users type it is ready, cold and warm.

`vllm serve MODEL` (vLLM's defaults; .venv-serve) and, when .venv-sglang is
there, SGLang's bare `python -m sglang.launch_server --model-path MODEL`, on
tpu: each started twice with TORCH_TPU_CACHE_DIR at a fresh folder, the
first start compiling every program (cold), the second loading them from
that folder (warm).  Per start: seconds from the command to /health
answering 200, the programs the warm-up ran (vLLM's `tpu: warmed` line:
compiled cold, loaded warm), the server's RSS (all its processes) and
mappings at ready, and whether its first greedy answer is right (the
first token Transformers gives on CPU).  Results: bench/ready_results.json.

    .venv-serve/bin/python bench/ready.py [--only vllm|sglang]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "serve"))
from server import DEFAULT_MODEL, Server  # noqa: E402

PROMPT = "The capital of France is"
SGLANG_PY = os.path.join(ROOT, ".venv-sglang", "bin", "python")


def group_memory(pgid):
    """(RSS bytes, mappings) summed over the processes of a process group."""
    rss = maps = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            with open(f"/proc/{pid}/statm") as f:
                rss += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{pid}/maps") as f:
                maps += sum(1 for _ in f)
        except (OSError, ProcessLookupError):
            continue
    return rss, maps


def first_token():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32)
    with torch.no_grad():
        return tok.decode([model(tok(PROMPT, return_tensors="pt").input_ids).logits[0, -1].argmax().item()])


def start(kind, cache_dir):
    env = {"TORCH_TPU_CACHE_DIR": cache_dir}
    if kind == "vllm":
        vllm = os.path.join(os.path.dirname(sys.executable), "vllm")
        argv = lambda port: [vllm, "serve", DEFAULT_MODEL, "--host", "127.0.0.1", "--port", str(port)]
    else:
        env["SGLANG_PLATFORM"] = "tpu"
        argv = lambda port: [SGLANG_PY, "-m", "sglang.launch_server", "--model-path", DEFAULT_MODEL,
                             "--host", "127.0.0.1", "--port", str(port)]
    t0 = time.perf_counter()
    s = Server("tpu", argv=argv, env=env, log_path=os.path.join(ROOT, "build", f"ready_{kind}.log"))
    try:
        s.wait_ready(timeout=900)
        ready = time.perf_counter() - t0
        rss, maps = group_memory(s.proc.pid)
        status, body = s.request("POST", "/v1/completions", dict(
            model=DEFAULT_MODEL, prompt=PROMPT, max_tokens=4, temperature=0.0))
        text = body["choices"][0]["text"] if status == 200 else None
        log = s.log_tail(10 ** 7)
    finally:
        s.stop()
    warmed = re.findall(r"tpu: warmed (\d+) step shapes \((\d+) left\), (\d+) programs, ([\d.]+) s", log)
    out = dict(ready_s=round(ready, 1), rss_gib=round(rss / 2 ** 30, 2), mappings=maps, text=text)
    if warmed:
        shapes, left, programs, seconds = warmed[-1]
        out.update(warm_up_shapes=int(shapes), warm_up_left=int(left), warm_up_programs=int(programs),
                   warm_up_s=float(seconds))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("vllm", "sglang"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "ready_results.json"))
    a = ap.parse_args()
    kinds = [a.only] if a.only else ["vllm"] + (["sglang"] if os.path.exists(SGLANG_PY) else [])
    want = first_token()
    results = {"model": os.path.basename(DEFAULT_MODEL), "first_token": want}
    for kind in kinds:
        cache = tempfile.mkdtemp(prefix=f"ready_{kind}_")
        try:
            for phase in ("cold", "warm"):
                r = start(kind, cache)
                r["right"] = bool(r["text"]) and r["text"].startswith(want)
                results[f"{kind}_{phase}"] = r
                print(f"{kind:7s} {phase}: ready in {r['ready_s']:6.1f} s, RSS {r['rss_gib']:.2f} GiB, "
                      f"{r['mappings']} mappings, warm-up {r.get('warm_up_programs', '-')} programs in "
                      f"{r.get('warm_up_s', '-')} s, first answer {r['text']!r} ({'right' if r['right'] else 'WRONG'})",
                      flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
