"""from_pretrained on tpu: device_map "tpu" / "auto" / {"": "tpu:0"} / 0,
"auto" against max_memory and the device's reported free memory (offload to
the CPU when the device is too small), dtype=bfloat16, safetensors, and
the bad-input messages (missing gguf package, unsupported dtype)."""
import pytest
import torch

from hf_util import T, needs_hf, no_fallback

pytestmark = needs_hf


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=32)
    model = LlamaForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("llama")
    model.save_pretrained(d)  # safetensors
    assert (d / "model.safetensors").exists()
    ids = torch.randint(0, 64, (2, 6))
    with torch.no_grad():
        ref = model(ids).logits
    return d, ids, ref


def _load(d, **kw):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(d, **kw).eval()


@pytest.mark.parametrize("device_map", ["tpu", "auto", {"": "tpu:0"}, 0], ids=["tpu", "auto", "dict", "int"])
def test_device_map_puts_every_weight_on_tpu(saved_llama, device_map):
    d, ids, ref = saved_llama
    with no_fallback():
        model = _load(d, device_map=device_map)
        devices = {p.device for p in model.parameters()} | {b.device for b in model.buffers()}
        assert devices == {torch.device("tpu", 0)}, devices
        with torch.no_grad():
            out = model(ids.to(T)).logits
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_device_map_auto_respects_max_memory_and_offloads_the_rest(saved_llama):
    d, ids, ref = saved_llama
    model = _load(d, device_map="auto", max_memory={0: 60_000, "cpu": 10**9})
    placed = set(model.hf_device_map.values())
    assert 0 in placed and "cpu" in placed, model.hf_device_map
    assert any(p.device.type == "tpu" for p in model.parameters())
    with torch.no_grad():
        out = model(ids.to(T)).logits  # offloaded layers run on tpu through accelerate's hooks
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_device_map_auto_reads_the_device_free_memory(saved_llama, monkeypatch):
    d, ids, ref = saved_llama
    total = torch.tpu.get_device_properties(0).total_memory
    free, total2 = torch.tpu.mem_get_info(0)
    assert total == total2 and 0 < free <= total
    monkeypatch.setattr(torch.tpu, "mem_get_info", lambda device=None: (70_000, total))
    model = _load(d, device_map="auto")
    placed = set(model.hf_device_map.values())
    assert 0 in placed and "cpu" in placed, model.hf_device_map  # a 70 kB device cannot hold the 91 kB model
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to(T)).logits.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_device_map_auto_names_a_tpu_device_that_does_not_exist(saved_llama):
    d, _, _ = saved_llama
    with pytest.raises(ValueError, match="tpu device 3"):
        _load(d, device_map="auto", max_memory={3: "1GB", "cpu": "1GB"})


def test_dtype_bfloat16_loads_bf16_weights_on_tpu(saved_llama):
    d, ids, _ = saved_llama
    model = _load(d, device_map="tpu", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    cpu = _load(d, dtype=torch.bfloat16)
    with torch.no_grad():
        got = model(ids.to(T)).logits.float().cpu()
        ref = cpu(ids).logits.float()
    torch.testing.assert_close(got, ref, atol=3e-2, rtol=3e-2)


def test_missing_gguf_package_says_what_to_install(tmp_path, monkeypatch):
    import transformers.modeling_gguf_pytorch_utils as g

    import struct

    def string(x):
        return struct.pack("<Q", len(x)) + x.encode()

    # a valid GGUF file with no tensors: magic, version 3, 0 tensors, 1 key (general.architecture = llama)
    (tmp_path / "model.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("general.architecture")
                                          + struct.pack("<I", 8) + string("llama"))
    monkeypatch.setattr(g, "is_gguf_available", lambda *a, **k: False)
    with pytest.raises(ImportError, match="install .*gguf"):
        _load(tmp_path, gguf_file="model.gguf", device_map="tpu")


def test_unsupported_dtype_names_the_op():
    # complex32 (chalf) has no XLA element type; the 8-bit floats are tpu dtypes (test_float8.py)
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32))
    with pytest.raises(TypeError, match=r"(?i)tpu does not support dtype (torch\.)?complex32 \(in aten::"):
        model.to(T, dtype=torch.complex32)
    with pytest.raises(TypeError, match=r"(?i)complex32 \(in aten::empty"):
        torch.empty(3, device=T, dtype=torch.complex32)
    with pytest.raises(TypeError, match=r"(?i)complex32 \(in aten::"):
        torch.ones(3, device=T).to(torch.complex32)
