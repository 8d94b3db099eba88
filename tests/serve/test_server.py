"""vLLM's OpenAI server on tpu (the torch_tpu plugin), started on loopback
the way `make serve` starts it, checked against the same server on vLLM's
own CPU backend (the plugin turned off with VLLM_PLUGINS) in the same
environment: greedy answers must be identical, for single prompts, a batch
of 8 concurrent requests of different lengths, a prompt that hits the
prefix cache, streaming and chat.  Bad requests get 4xx answers and the
server keeps serving; SIGTERM stops it and everything it started.

Runs in .venv-serve (`make test-serve`).
"""
import concurrent.futures
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import DEFAULT_MODEL, Server  # noqa: E402

pytest.importorskip("vllm", reason="vLLM is installed in .venv-serve only (make serve-env)")
if not os.path.exists(os.path.join(DEFAULT_MODEL, "config.json")):
    pytest.skip("the default model directory is written by `make serve-env`", allow_module_level=True)

NAME = "smollm2"
# The tpu server sizes its KV cache from the device's memory, as `make serve`
# does: a fraction of the device's memory that leaves ~1.25 GiB to the
# model and its KV cache whatever the machine (on the CPU plugin the
# device's memory is the host's RAM).
import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401

TOTAL = torch.accelerator.get_memory_info(torch.device("tpu"))[1]
UTIL = round(1.25 * 2**30 / TOTAL, 6)
MAX_LEN = 512
COMMON = ["--max-model-len", str(MAX_LEN), "--max-num-seqs", "8", "--max-num-batched-tokens", "128",
          "--dtype", "float32", "--enable-prefix-caching", "--enforce-eager"]
SYSTEM = ("You are the help desk of a small railway museum. The museum opens at ten and closes at five, "
          "every day except Monday. Tickets cost eight euros, children under twelve enter free, and the "
          "steam train runs on Sundays at eleven and at three. Answer in one short sentence. ") * 2
BATCH = [
    "The capital of France is",
    "One, two, three,",
    "The largest planet in the solar system is",
    "Q: What is 7 plus 5?\nA:",
    "Write a short poem about autumn leaves falling in a quiet park at dusk:",
    "def add(a, b):",
    "Translate to French: good morning, my friend. How are you today? I hope",
    "The three states of water are",
]


@pytest.fixture(scope="module")
def servers():
    tpu = Server("tpu", name=NAME, extra=COMMON + ["--gpu-memory-utilization", str(UTIL)])
    cpu = Server("cpu", name=NAME, extra=COMMON)
    try:
        tpu.wait_ready()
        cpu.wait_ready()
        yield tpu, cpu
    finally:
        tpu.stop()
        cpu.stop()


def complete(server, prompt, max_tokens=12, **kw):
    status, body = server.request("POST", "/v1/completions", dict(
        model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw))
    assert status == 200, body
    return body["choices"][0]["text"]


def chat(server, content, max_tokens=12):
    status, body = server.request("POST", "/v1/chat/completions", dict(
        model=NAME, messages=[{"role": "user", "content": content}], max_tokens=max_tokens,
        temperature=0.0))
    assert status == 200, body
    return body["choices"][0]["message"]["content"]


def test_models(servers):
    tpu, _ = servers
    status, body = tpu.request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in body["data"]] == [NAME]
    assert body["data"][0]["max_model_len"] == MAX_LEN


def test_kv_cache_sized_from_device_memory(servers):
    """No --kv-cache-memory-bytes: the KV cache gets UTIL x the device's
    memory less the model's peak without it (rounded down to a 16th of its
    power of two, so runs get the same block count), and vLLM makes as many
    blocks of that as fit."""
    import json
    import re

    tpu, _ = servers
    log = tpu.log_tail(10**7)
    m = re.search(r"tpu: (\d+) bytes for the KV cache \(([\d.e-]+) x (\d+) bytes of device memory, "
                  r"less a peak of (\d+) bytes without it, rounded down to a multiple of (\d+) MiB\)", log)
    assert m, log[-3000:]
    available, util, total, peak, grain = int(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]) << 20
    assert util == UTIL and total == TOTAL
    with open(os.path.join(DEFAULT_MODEL, "config.json")) as f:
        cfg = json.load(f)
    layers, kv_heads = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    weights = os.path.getsize(os.path.join(DEFAULT_MODEL, "model.safetensors"))  # float32 on disk and on tpu
    assert weights <= peak < weights + (512 << 20)
    rest = int(total * util) - peak  # rounded down to a 16th of its power of two (the same blocks every run)
    assert grain == max(1 << 24, (1 << (rest.bit_length() - 1)) >> 4)
    assert available == rest // grain * grain
    block_bytes = 32 * kv_heads * head * 2 * 4 * layers  # a block of 32 tokens, float32 K and V, every layer
    allocated = re.search(r"tpu: KV cache of (\d+) layers, (\d+) MiB", log)
    assert int(allocated[1]) == layers
    # as many blocks as fit (vLLM's rounding: within two blocks)
    assert abs(int(allocated[2]) - available / 2**20) <= 2 * block_bytes / 2**20 + 1


def test_completion_matches_cpu(servers):
    tpu, cpu = servers
    got = complete(tpu, "The capital of France is", max_tokens=8)
    assert got == complete(cpu, "The capital of France is", max_tokens=8)
    assert got.startswith(" Paris.")


def test_concurrent_batch_matches_cpu(servers):
    tpu, cpu = servers
    want = [complete(cpu, p) for p in BATCH]
    with concurrent.futures.ThreadPoolExecutor(len(BATCH)) as pool:
        got = list(pool.map(lambda p: complete(tpu, p), BATCH))
    assert got == want


def test_prefix_cache_hit_matches_cpu(servers):
    tpu, cpu = servers
    first = SYSTEM + "Question: When does the museum open?\nAnswer:"
    second = SYSTEM + "Question: When does the steam train run?\nAnswer:"
    assert complete(tpu, first) == complete(cpu, first)
    hits = tpu.metric("vllm:prefix_cache_hits_total")
    assert complete(tpu, second) == complete(cpu, second)
    # The shared system prompt spans several 32-token blocks on tpu.
    assert tpu.metric("vllm:prefix_cache_hits_total") - hits >= 64


def test_streaming_completion(servers):
    tpu, cpu = servers
    prompt = "The three primary colors are"
    events, done = tpu.stream("/v1/completions", dict(model=NAME, prompt=prompt, max_tokens=12,
                                                      temperature=0.0, ignore_eos=True))
    assert done
    assert len(events) > 1
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == complete(cpu, prompt)


def test_chat_matches_cpu_and_streams(servers):
    tpu, cpu = servers
    question = "What is the capital of Italy?"
    answer = chat(tpu, question)
    assert answer == chat(cpu, question)
    events, done = tpu.stream("/v1/chat/completions", dict(
        model=NAME, messages=[{"role": "user", "content": question}], max_tokens=12, temperature=0.0))
    assert done
    deltas = [e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]]
    assert "".join(deltas) == answer


@pytest.mark.parametrize("case", ["too_long", "malformed_json", "unknown_model", "bad_max_tokens", "no_prompt"])
def test_bad_request_is_4xx_and_server_keeps_serving(servers, case):
    tpu, _ = servers
    if case == "too_long":
        status, body = tpu.request("POST", "/v1/completions",
                                   dict(model=NAME, prompt="hello " * (MAX_LEN + 50), max_tokens=4))
        assert status == 400 and "maximum context length" in body["error"]["message"]
    elif case == "malformed_json":
        status, body = tpu.request("POST", "/v1/completions", raw=b'{"model": "smollm2", "prompt": ')
        assert status == 400, body
    elif case == "unknown_model":
        status, body = tpu.request("POST", "/v1/completions", dict(model="no-such-model", prompt="hi", max_tokens=4))
        assert status == 404 and "does not exist" in body["error"]["message"]
    elif case == "bad_max_tokens":
        status, body = tpu.request("POST", "/v1/completions", dict(model=NAME, prompt="hi", max_tokens=-3))
        assert status == 400 and "max_tokens" in body["error"]["message"]
    else:
        status, body = tpu.request("POST", "/v1/chat/completions", dict(model=NAME, max_tokens=4))
        assert 400 <= status < 500, body
    # Still serving, with the same answers.
    assert tpu.request("GET", "/v1/models")[0] == 200
    assert complete(tpu, "The capital of France is", max_tokens=4).startswith(" Paris")


def test_random_sampling_with_top_k_1_is_greedy(servers):
    """The sampling path (temperature, top-k mask, random draw on tpu): with
    top_k=1 only the argmax survives, whatever the draw."""
    tpu, _ = servers
    prompt = "The largest planet in the solar system is"
    status, body = tpu.request("POST", "/v1/completions", dict(
        model=NAME, prompt=prompt, max_tokens=12, temperature=1.0, top_k=1, top_p=0.9, ignore_eos=True))
    assert status == 200, body
    assert body["choices"][0]["text"] == complete(tpu, prompt)
    assert body["usage"]["completion_tokens"] == 12


def test_seeded_sampling(servers):
    """A seed makes sampling repeatable (vLLM draws a seeded request's
    tokens from its own torch.Generator on tpu): the same seed gives the
    same text, alone or amid a concurrent batch of other sampled requests;
    other seeds give other texts."""
    tpu, _ = servers

    def sample(seed, prompt="Once upon a time"):
        body = dict(model=NAME, prompt=prompt, max_tokens=16, temperature=1.0, ignore_eos=True)
        if seed is not None:
            body["seed"] = seed
        status, out = tpu.request("POST", "/v1/completions", body)
        assert status == 200, out
        assert out["usage"]["completion_tokens"] == 16
        return out["choices"][0]["text"]

    first = sample(1234)
    assert sample(1234) == first
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        others = [pool.submit(sample, None, p) for p in BATCH[:4]]
        again = pool.submit(sample, 1234)
        other_seeds = [pool.submit(sample, s) for s in (1, 2)]
        assert again.result() == first
        [f.result() for f in others]
        texts = {first} | {f.result() for f in other_seeds}
    assert len(texts) == 3, texts
    assert complete(tpu, "The capital of France is", max_tokens=4).startswith(" Paris")


@pytest.mark.parametrize("params", [
    dict(presence_penalty=1.5, frequency_penalty=0.5, repetition_penalty=1.3),
    dict(logit_bias={"13": 5.0, "28": -100.0}, min_tokens=6),
    dict(min_p=0.2, top_k=20),
], ids=["penalties", "logit_bias_min_tokens", "min_p"])
def test_penalties_and_logits_processors_match_cpu(servers, params):
    """Greedy answers under penalties and vLLM's logits processors (logit
    bias, min tokens, min_p) -- run by vLLM's sampler on the host on tpu --
    equal vLLM's CPU backend's token for token."""
    tpu, cpu = servers
    prompt = "One, two, three, four, five, six,"
    got = complete(tpu, prompt, max_tokens=10, **params)
    assert got == complete(cpu, prompt, max_tokens=10, **params)


def test_client_that_disconnects_mid_stream_is_cancelled(servers):
    """A client that goes away mid-stream: the server aborts its request
    (no request left running well before its 480 tokens could have been
    made) and keeps answering."""
    import json
    import socket
    import time

    tpu, _ = servers
    body = json.dumps(dict(model=NAME, prompt="Once upon a time", max_tokens=480, temperature=0.0,
                           ignore_eos=True, stream=True)).encode()
    host, port = tpu.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=120) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
        got = b""
        while got.count(b"data:") < 3:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert b" 200 " in got.split(b"\r\n", 1)[0], got
        t0 = time.monotonic()
    while tpu.metric("vllm:num_requests_running") > 0:
        assert time.monotonic() - t0 < 20, "the dropped stream's request still runs"
        time.sleep(0.25)
    assert complete(tpu, "The capital of France is", max_tokens=4).startswith(" Paris")


def test_zz_stops_cleanly(servers):
    """Last: SIGTERM ends the API process and its engine core, promptly."""
    tpu, _ = servers
    rc, seconds, leftover = tpu.stop()
    assert rc == 0, tpu.log_tail()
    assert not leftover, "a process of the server outlived it"
    assert seconds < 60
