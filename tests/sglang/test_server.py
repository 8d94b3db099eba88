"""SGLang serves on tpu: `python -m sglang.launch_server` with torch_tpu's
platform plugin answers OpenAI completions, greedy, token for token as
Transformers' generate on CPU (float32 both)."""
import concurrent.futures
import importlib.util
import os
import re

import pytest

from sglang_server import DEFAULT_MODEL, Server

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang is not installed here (its environment is .venv-sglang: make sglang-env)",
                allow_module_level=True)
if not os.path.exists(os.path.join(DEFAULT_MODEL, "config.json")):
    pytest.skip(f"no model at {DEFAULT_MODEL} (make sglang-env writes it)", allow_module_level=True)

import torch  # noqa: E402

if not (hasattr(torch, "tpu") and torch.tpu.is_available()):
    pytest.skip("tpu is not available (torch_tpu did not load)", allow_module_level=True)

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def server():
    # the tpu attention backend logs the engine's compile count per step
    os.environ["TORCH_TPU_SGLANG_METRICS"] = "1"
    try:
        s = Server()
    finally:
        del os.environ["TORCH_TPU_SGLANG_METRICS"]
    try:
        yield s.wait_ready()
    finally:
        s.stop()


@pytest.fixture(scope="module")
def reference():
    """Greedy continuation of a prompt's token ids by Transformers on CPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])

    def generate(prompt_ids, max_tokens):
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                 do_sample=False, pad_token_id=min(eos))
        return out[0, len(prompt_ids):].tolist()

    generate.eos = eos
    return generate


def complete(server, prompt, max_tokens=MAX_TOKENS):
    status, body = server.request("/v1/completions", {
        "model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "return_token_ids": True})
    assert status == 200, body
    return body


def check_choice(choice, reference):
    ids = choice["token_ids"]
    want = reference(choice["prompt_token_ids"], MAX_TOKENS)
    if want and want[-1] in reference.eos:  # generate keeps the EOS it stopped on
        ids = ids[:len(want)]
    assert ids == want, (choice["text"], ids, want)


def test_platform_is_tpu(server):
    log = server.log_text()
    assert "'device': 'tpu'" in log and "'attention_backend': 'tpu'" in log and "'page_size': 16" in log
    assert "tpu: LlamaForCausalLM weights on tpu:0 (float32)" in log


def test_greedy_completion_matches_transformers(server, reference):
    body = complete(server, PROMPTS[0])
    (choice,) = body["choices"]
    assert choice["text"].strip(), body
    check_choice(choice, reference)


def test_batched_prompts_match_transformers(server, reference):
    """Several prompts of different lengths in one request (prefilled and
    decoded together) and two requests in flight at once."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        batch = pool.submit(complete, server, PROMPTS)
        single = pool.submit(complete, server, PROMPTS[1])
        choices = batch.result()["choices"] + single.result()["choices"]
    assert len(choices) == len(PROMPTS) + 1
    for choice in choices:
        check_choice(choice, reference)


def test_regex_constrained_completion(server):
    """Structured output (xgrammar's token bitmask, applied on the host for
    tpu logits: torch_tpu/sglang/patches.py)."""
    status, body = server.request("/v1/completions", {
        "model": "default", "prompt": "The year the Eiffel Tower was finished:", "max_tokens": 6,
        "temperature": 0, "regex": "[0-9]{4}"})
    assert status == 200, body
    assert re.fullmatch("[0-9]{4}", body["choices"][0]["text"]), body


def test_steady_decode_compiles_nothing(server):
    """One request decoding 24 tokens (crossing a 16-token page): after its
    first decode steps (their shapes' programs), the engine's compile count
    stays put: the attention's inputs are padded to its token bucket, the
    allocator's free pages live on the host (torch_tpu/sglang/memory.py)."""
    complete(server, PROMPTS[2], max_tokens=24)
    steps = re.findall(r"tpu: step \d+ \((\w+), (\d+) requests, \d+ tokens\): (\d+) programs compiled",
                       server.log_text())
    last = []  # the compile counts of the last run of single-request decode steps
    for mode, reqs, count in steps:
        last = last + [int(count)] if (mode, reqs) == ("DECODE", "1") else []
    assert len(last) >= 20, steps[-30:]
    assert last[3] == last[-1], last
