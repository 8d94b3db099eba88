"""generate on tpu: greedy tokens identical to CPU (float32), seeded
sampling reproducible, beam search as on CPU, the static cache with the
torch.compile path Transformers picks for tpu (backend "tpu"), and
continuous batching (generate_batch); isin / multinomial stay on the
device."""
import pytest
import torch

from hf_util import T, needs_hf, no_fallback, twin

pytestmark = needs_hf


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    return twin(LlamaForCausalLM, cfg)


def _prompt():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (2, 5), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :2] = 0  # left padding
    mask[1, :2] = 0
    return ids, mask


def test_greedy_tokens_identical_to_cpu(llama):
    cpu, dev = llama
    ids, mask = _prompt()
    ref = cpu.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    with no_fallback():
        out = dev.generate(ids.to(T), attention_mask=mask.to(T), max_new_tokens=6, do_sample=False)
    assert out.device.type == "tpu"
    assert torch.equal(out.cpu(), ref)


def test_sampling_is_reproducible_under_a_seed_and_stays_on_device(llama):
    _, dev = llama
    ids, mask = _prompt()
    kw = dict(attention_mask=mask.to(T), max_new_tokens=8, do_sample=True, top_k=20, top_p=0.95, temperature=1.5)
    with no_fallback():
        torch.manual_seed(11)
        a = dev.generate(ids.to(T), **kw).cpu()
        torch.manual_seed(11)
        b = dev.generate(ids.to(T), **kw).cpu()
        torch.tpu.manual_seed(12)
        c = dev.generate(ids.to(T), **kw).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)  # another seed, another sample
    assert ((a >= 0) & (a < 64)).all()


def test_beam_search_matches_cpu(llama):
    cpu, dev = llama
    ids, mask = _prompt()
    kw = dict(max_new_tokens=5, num_beams=3, do_sample=False, num_return_sequences=2)
    ref = cpu.generate(ids, attention_mask=mask, **kw)
    with no_fallback():
        out = dev.generate(ids.to(T), attention_mask=mask.to(T), **kw)
    assert torch.equal(out.cpu(), ref)


def test_static_cache_compiles_with_the_tpu_backend_and_matches_cpu(llama):
    cpu, dev = llama
    ids, mask = _prompt()
    ref = cpu.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    out = dev.generate(ids.to(T), attention_mask=mask.to(T), max_new_tokens=5, do_sample=False,
                       cache_implementation="static")
    assert torch.equal(out.cpu(), ref)
    # Transformers compiled the decoding step with torch_tpu's backend
    assert getattr(dev, "_compiled_call", None) is not None
    assert dev._last_compile_config.backend == "tpu"


def test_generate_batch_continuous_batching_matches_greedy(llama, monkeypatch):
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    cpu, dev = llama
    # the paged cache is sized from the tpu's reported memory (a 16 MB device here)
    monkeypatch.setattr(torch.tpu, "mem_get_info", lambda device=None: (16 << 20, 64 << 20))
    prompts = [[5, 9, 13], [7, 3, 22, 41, 8]]
    cfg = GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=2, pad_token_id=0)
    with no_fallback(), torch.no_grad():
        out = dev.generate_batch(prompts, generation_config=cfg, progress_bar=False, warmup=False,
                                 continuous_batching_config=ContinuousBatchingConfig(max_batch_tokens=64))
    assert len(out) == 2
    got = {tuple(r.prompt_ids): list(r.generated_tokens) for r in out.values()}
    for p in prompts:
        ref = cpu.generate(torch.tensor([p]), max_new_tokens=4, do_sample=False)[0, len(p):].tolist()
        assert got[tuple(p)] == ref
