"""nn.MultiheadAttention / TransformerEncoderLayer / TransformerEncoder in
eval mode without grad take PyTorch's fast paths (_native_multi_head_attention,
_transformer_encoder_layer_fwd, nested tensors for padded batches): against
CPU, with no op left to the CPU fallback."""
import copy

import pytest
import torch
import torch.nn as nn

from op_compare import T, no_fallback

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")

PAD = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] + [True] * 5])
CAUSAL = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)


def _both(module, *inputs, **kw):
    """module and a tpu copy, eval, no grad: (cpu result, tpu result moved back)."""
    module = module.eval()
    dev = copy.deepcopy(module).to(T)
    on = lambda v: v.to(T) if isinstance(v, torch.Tensor) else v
    with torch.no_grad():
        a = module(*inputs, **kw)
        b = no_fallback(lambda: dev(*[on(x) for x in inputs], **{k: on(v) for k, v in kw.items()}))
    return a, b


def _close(a, b, atol=2e-5):
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            _close(x, y, atol)
        return
    if a is None:
        assert b is None
        return
    assert b.device.type == "tpu" and b.shape == a.shape
    torch.testing.assert_close(b.cpu(), a, atol=atol, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masks", ["none", "padding", "attn", "both"])
def test_multihead_attention_fast_path(need_weights, average, masks):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(3, 6, 16)
    kw = {"need_weights": need_weights, "average_attn_weights": average}
    if masks in ("padding", "both"):
        kw["key_padding_mask"] = PAD
    if masks in ("attn", "both"):
        kw["attn_mask"] = CAUSAL
    a, b = _both(mha, x, x, x, **kw)
    _close(a, b)


def test_multihead_attention_fast_path_separate_key_value():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
    w = mha.in_proj_weight.detach()
    bias = mha.in_proj_bias.detach()
    ow, ob = mha.out_proj.weight.detach(), mha.out_proj.bias.detach()
    a = torch._native_multi_head_attention(q, k, v, 8, 2, w, bias, ow, ob, None, True, False)
    b = no_fallback(lambda: torch._native_multi_head_attention(
        q.to(T), k.to(T), v.to(T), 8, 2, w.to(T), bias.to(T), ow.to(T), ob.to(T), None, True, False))
    _close(a, b)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal"])
def test_encoder_layer_fast_path(norm_first, activation, masks):
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(16, 4, 32, activation=activation, batch_first=True, norm_first=norm_first)
    x = torch.randn(3, 6, 16)
    kw = {"src_key_padding_mask": PAD} if masks == "padding" else {"src_mask": CAUSAL} if masks == "causal" else {}
    a, b = _both(layer, x, **kw)
    _close(a, b)


@pytest.mark.parametrize("nested", [True, False])
def test_encoder_with_padding(nested):
    # enable_nested_tensor (the default) packs the padded batch as a nested
    # tensor: padded positions come back as zeros.
    torch.manual_seed(3)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                enable_nested_tensor=nested, norm=nn.LayerNorm(16))
    x = torch.randn(3, 6, 16)
    a, b = _both(enc, x, src_key_padding_mask=PAD)
    _close(a, b)
    if nested:
        assert torch.equal(b[2, 1:].cpu(), a[2, 1:])  # the LayerNorm of zero rows


def test_nested_tensor_from_mask_round_trip():
    t = torch.randn(3, 6, 4)
    keep = ~PAD
    nc = torch._nested_tensor_from_mask(t, keep)
    nt = no_fallback(lambda: torch._nested_tensor_from_mask(t.to(T), keep.to(T)))
    assert nt.is_nested and nt.device.type == "tpu"
    assert torch.equal(torch.ops.aten._nested_tensor_size(nt), torch.ops.aten._nested_tensor_size(nc))
    for args in [(1.5,), (0.0, (3, 7, 4))]:
        _close(nc.to_padded_tensor(*args), no_fallback(lambda: nt.to_padded_tensor(*args)))
    assert torch._nested_tensor_from_mask_left_aligned(t.to(T), keep.to(T))
    gap = keep.clone()
    gap[0, 2] = False
    assert not torch._nested_tensor_from_mask_left_aligned(t.to(T), gap.to(T))
    with pytest.raises(RuntimeError, match="left-aligned"):
        torch._nested_tensor_from_mask(t.to(T), gap.to(T))
