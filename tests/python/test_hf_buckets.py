"""Decoding with Transformers on tpu runs on a few programs per bucket of
length (torch_tpu/integrations/generation.py): greedy tokens identical to
CPU, the logits of a hand-written DynamicCache loop equal CPU's, and the
programs compiled while generating tokens 2..N are bounded, in strict and
fused mode."""
import pytest
import torch

from hf_util import T, needs_hf, no_fallback, twin

pytestmark = needs_hf


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    return twin(LlamaForCausalLM, cfg, seed=4)


def _prompt(batch=2, length=7):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 96, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[1, :3] = 0  # left padding
        mask[1, :3] = 0
    return ids, mask


def _compiles():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


class _CountAfterFirstToken:
    """A logits processor that counts the programs made from the second
    generated token on (generate calls it once per token)."""

    def __init__(self):
        self.calls = 0
        self.at_second = None

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls == 2:
            torch.tpu.synchronize()
            self.at_second = _compiles()
        return scores


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generate_equals_cpu_and_compiles_per_bucket(llama, batch):
    from transformers import LogitsProcessorList

    cpu, dev = llama
    ids, mask = _prompt(batch)
    n = 48
    ref = cpu.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    counter = _CountAfterFirstToken()
    with no_fallback():
        out = dev.generate(ids.to(T), attention_mask=mask.to(T), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, logits_processor=LogitsProcessorList([counter]))
        torch.tpu.synchronize()
        grown = _compiles() - counter.at_second
    assert type(out) is torch.Tensor and out.device.type == "tpu"
    assert torch.equal(out.cpu(), ref)
    # tokens 2..48: the decoding step's programs for one bucket, compiled at token 2 at most
    # (those of the second token are counted: its programs are the first decoding step's)
    assert grown <= 6, torch.tpu.metrics_report()


def test_dynamic_cache_loop_logits_equal_cpu(llama):
    from transformers import DynamicCache

    cpu, dev = llama
    ids, _ = _prompt(1, 5)
    caches = {"cpu": DynamicCache(config=cpu.config), "tpu": DynamicCache(config=dev.config)}
    steps = {"cpu": ids, "tpu": ids.to(T)}
    for i in range(20):
        outs = {}
        for name, model in (("cpu", cpu), ("tpu", dev)):
            with torch.no_grad():
                o = model(steps[name], cache=caches[name], use_cache=True)
            outs[name] = o.logits[:, -1]
        torch.testing.assert_close(outs["tpu"].cpu(), outs["cpu"], atol=2e-5, rtol=1e-4)
        nxt = outs["cpu"].argmax(-1, keepdim=True)
        steps = {"cpu": nxt, "tpu": nxt.to(T)}
    assert caches["tpu"].get_seq_length() == caches["cpu"].get_seq_length() == 24
    assert type(caches["tpu"].layers[0]).__name__ == "TpuBucketedLayer"
    assert caches["tpu"].layers[0].keys.shape[-2] == 64  # the bucket


def test_crop_and_beam_search_equal_cpu(llama):
    cpu, dev = llama
    ids, mask = _prompt(1, 6)
    kw = dict(max_new_tokens=6, num_beams=2, do_sample=False)
    ref = cpu.generate(ids, attention_mask=mask, **kw)
    out = dev.generate(ids.to(T), attention_mask=mask.to(T), **kw)
    assert torch.equal(out.cpu(), ref)


def test_compiled_forward_with_dynamic_shapes_decodes_without_recompiling(llama):
    import copy

    from transformers import DynamicCache

    cpu, dev = llama
    dev = copy.deepcopy(dev)
    fwd = torch.compile(dev.forward, backend="tpu", dynamic=True)
    ids, _ = _prompt(1, 5)
    cc, tc = DynamicCache(config=cpu.config), DynamicCache(config=dev.config)
    sc, st = ids, ids.to(T)
    for i in range(24):
        if i == 3:  # prefill and the first decoding steps made their programs
            torch.tpu.synchronize()
            before = _compiles()
        with torch.no_grad():
            lc = cpu(sc, cache=cc, use_cache=True).logits[:, -1]
            lt = fwd(st, cache=tc, use_cache=True).logits[:, -1]
        torch.testing.assert_close(lt.cpu(), lc, atol=2e-5, rtol=1e-4)
        nxt = lc.argmax(-1, keepdim=True)
        sc, st = nxt, nxt.to(T)
    torch.tpu.synchronize()
    assert _compiles() - before == 0, torch.tpu.metrics_report()
    assert type(tc.layers[0]).__name__ == "TpuBucketedLayer"
