"""Thirteen Transformers architectures on tpu, each from a small random
config, against the same weights on CPU: forward logits, loss, every
parameter's gradient, and greedy generate where it applies (identical
tokens).  No op may run through the CPU fallback (the MoE layer runs
_grouped_mm and histc on the device; generate's isin too)."""
import pytest
import torch

from hf_util import T, needs_hf, no_fallback, twin

pytestmark = needs_hf

V = 48  # vocabulary
DEC = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=32, bos_token_id=1, eos_token_id=2, pad_token_id=0)
ENC = dict(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48,
           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=40)


def _case(name):
    import transformers as tr

    return {
        "gpt2": (tr.GPT2LMHeadModel, lambda: tr.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=1,
                                                           n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                           bos_token_id=1, eos_token_id=2)),
        "llama": (tr.LlamaForCausalLM, lambda: tr.LlamaConfig(**DEC)),
        "qwen2": (tr.Qwen2ForCausalLM, lambda: tr.Qwen2Config(**DEC)),
        "qwen3": (tr.Qwen3ForCausalLM, lambda: tr.Qwen3Config(**DEC, head_dim=8)),
        "qwen3_moe": (tr.Qwen3MoeForCausalLM, lambda: tr.Qwen3MoeConfig(
            **DEC, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
            decoder_sparse_step=1, norm_topk_prob=True)),
        "mistral": (tr.MistralForCausalLM, lambda: tr.MistralConfig(**DEC, head_dim=8)),
        "gemma2": (tr.Gemma2ForCausalLM, lambda: tr.Gemma2Config(**DEC, head_dim=8)),
        "phi3": (tr.Phi3ForCausalLM, lambda: tr.Phi3Config(**DEC)),
        "bert": (tr.BertForMaskedLM, lambda: tr.BertConfig(**ENC)),
        "roberta": (tr.RobertaForMaskedLM, lambda: tr.RobertaConfig(**ENC, pad_token_id=1)),
        "t5": (tr.T5ForConditionalGeneration, lambda: tr.T5Config(
            vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=1, num_heads=4, dropout_rate=0.0,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)),
        "vit": (tr.ViTForImageClassification, lambda: tr.ViTConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
            intermediate_size=48, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5)),
        "whisper": (tr.WhisperForConditionalGeneration, lambda: tr.WhisperConfig(
            vocab_size=V, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_source_positions=8,
            max_target_positions=16, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2, begin_suppress_tokens=None,
            suppress_tokens=None)),
    }[name]


def _inputs(name):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (2, 6), generator=g)
    if name == "vit":
        return dict(pixel_values=torch.randn(2, 3, 16, 16, generator=g), labels=torch.tensor([1, 4]))
    if name == "whisper":
        return dict(input_features=torch.randn(2, 8, 16, generator=g), decoder_input_ids=ids[:, :4],
                    labels=ids[:, 1:5])
    if name == "t5":
        return dict(input_ids=ids, labels=ids[:, :4].flip(1))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    return dict(input_ids=ids, attention_mask=mask, labels=ids)


ARCHS = ["gpt2", "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "phi3", "bert", "roberta", "t5", "vit",
         "whisper"]


@pytest.mark.parametrize("name", ARCHS)
def test_architecture_matches_cpu(name):
    cls, cfg = _case(name)
    cpu, dev = twin(cls, cfg())
    cpu.train(), dev.train()  # dropout is 0: train mode only exercises the training paths
    inputs = _inputs(name)
    with no_fallback():
        out = dev(**{k: v.to(T) for k, v in inputs.items()})
        out.loss.backward()
    ref = cpu(**inputs)
    ref.loss.backward()
    torch.testing.assert_close(out.logits.detach().cpu(), ref.logits.detach(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out.loss.detach().cpu(), ref.loss.detach(), atol=2e-5, rtol=2e-5)
    grads = dict(dev.named_parameters())
    for pname, p in cpu.named_parameters():
        if p.grad is None:
            assert grads[pname].grad is None, pname
            continue
        torch.testing.assert_close(grads[pname].grad.cpu(), p.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{pname}: {m}")
    if cpu.can_generate():
        cpu.eval(), dev.eval()
        if name == "whisper":
            kw = dict(input_features=inputs["input_features"], max_new_tokens=3, do_sample=False)
        else:
            kw = dict(input_ids=inputs["input_ids"][:, :4], max_new_tokens=3, do_sample=False)
            if "attention_mask" in inputs:
                kw["attention_mask"] = inputs["attention_mask"][:, :4]
        ref_tokens = cpu.generate(**kw)
        with no_fallback():
            tokens = dev.generate(**{k: v.to(T) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
        assert torch.equal(tokens.cpu(), ref_tokens)
