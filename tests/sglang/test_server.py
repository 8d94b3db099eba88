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


def compile_counts(server):
    return [int(c) for c in re.findall(r"tpu: step \d+ \(\w+, \d+ requests, \d+ tokens\): (\d+) programs compiled",
                                       server.log_text())]


def test_warm_up_ran_before_ready(server):
    """Every token bucket ran at start-up (torch_tpu/sglang/step.py warm_up)."""
    assert re.search(r"tpu: warm-up ran \d+ steps \(token buckets up to \d+\)", server.log_text())


def test_random_request_mix_compiles_nothing(server, reference):
    """Waves of 1-8 concurrent greedy requests of random prompt and output
    lengths, after the start-up warm-up: the engine compiles nothing during
    them (the step padded to token and request buckets, the scheduler's
    tensors on the host), and every answer still equals Transformers'."""
    import random

    rng = random.Random(47)
    words = "the of and a to in is you that it he was for on are as with his they at be this have from".split()
    complete(server, "warm", max_tokens=2)  # the sampler's host programs, once
    before = compile_counts(server)[-1]
    choices = []
    for _ in range(3):
        reqs = [(" ".join(rng.choice(words) for _ in range(rng.randint(3, 60))), rng.randint(2, 10))
                for _ in range(rng.randint(1, 8))]
        with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
            futures = [(pool.submit(complete, server, p, m), m) for p, m in reqs]
            choices += [(f.result()["choices"][0], m) for f, m in futures]
    counts = compile_counts(server)
    complete(server, "done", max_tokens=2)  # its first step logs the count after the last wave
    assert compile_counts(server)[-1] == before, (before, counts[-40:])
    for choice, max_tokens in choices:
        ids = choice["token_ids"]
        want = reference(choice["prompt_token_ids"], max_tokens)
        if want and want[-1] in reference.eos:
            ids = ids[:len(want)]
        assert ids == want, (choice["text"], ids, want)


def test_bad_requests_get_4xx_and_the_server_keeps_answering(server, reference):
    """max_tokens -1, malformed JSON, a prompt over the context length: a
    4xx each; then a request is answered token for token as before."""
    import urllib.error
    import urllib.request

    def post_raw(data):
        req = urllib.request.Request(server.url + "/v1/completions", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    base = {"model": "default", "prompt": PROMPTS[0], "temperature": 0}
    assert 400 <= server.request("/v1/completions", {**base, "max_tokens": -1})[0] < 500
    assert 400 <= post_raw(b'{"model": "default", "prompt": "x", ') < 500
    assert 400 <= server.request("/v1/completions", {**base, "prompt": "word " * 2000, "max_tokens": 4})[0] < 500
    # SGLang serves one model under any name: an unknown name is answered, not refused
    status, body = server.request("/v1/completions", {**base, "model": "no-such-model", "max_tokens": 4})
    assert status == 200, body
    (choice,) = complete(server, PROMPTS[0])["choices"]
    check_choice(choice, reference)


def test_client_disconnect_mid_stream_aborts_the_request(server, reference):
    """A streaming client that closes its socket after three events of a
    400-token request: the server aborts it (its steps stop long before 400
    decode steps: the per-step log goes quiet) and answers the next request
    correctly."""
    import json
    import socket
    import time

    body = json.dumps({"model": "default", "prompt": PROMPTS[2], "max_tokens": 400, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    steps0 = len(compile_counts(server))
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        seen = b""
        while seen.count(b"data:") < 3:
            chunk = s.recv(4096)
            assert chunk, seen
            seen += chunk
    deadline, last = time.time() + 60, -1
    while time.time() < deadline:  # until the step log goes quiet
        time.sleep(3)
        n = len(compile_counts(server))
        if n == last:
            break
        last = n
    assert last - steps0 < 300, f"{last - steps0} steps after the client left: not aborted"
    t0 = time.time()
    (choice,) = complete(server, PROMPTS[0])["choices"]
    check_choice(choice, reference)
    assert time.time() - t0 < 60
