"""torch.nn.attention.flex_attention on tpu (torch_tpu/integrations/
flex_attention.py lets tpu past PyTorch's device check): eagerly (every
mode) and under torch.compile(backend="tpu"), forward and backward, with a
score_mod, a causal block mask made on tpu, GQA and the logsumexp; values
against CPU flex_attention (forward: CPU has no flex backward) and against
SDPA / the same math on CPU, gradients against CPU autograd of that math.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import flex_attention as fa_mod
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

TPU = "tpu"
B, H, L, E = 2, 2, 64, 16
TOL = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(autouse=True)
def _quiet():
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def _qkv(hq=H, hkv=H, lq=L, lk=L):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(B, hq, lq, E, generator=g), torch.randn(B, hkv, lk, E, generator=g),
            torch.randn(B, hkv, lk, E, generator=g))


def _leaves(xs, dev):
    return [x.detach().to(dev).requires_grad_() for x in xs]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def rel_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx).to(score.dtype) * 0.05 - h.to(score.dtype) * 0.1


def _math(q, k, v, bias=None, mask=None):
    """Attention with PyTorch ops (CPU autograd is the reference)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def _rel_bias_matrix(hq, lq, lk):
    qi = torch.arange(lq).view(1, 1, lq, 1)
    ki = torch.arange(lk).view(1, 1, 1, lk)
    h = torch.arange(hq).view(1, hq, 1, 1)
    return ((qi - ki).float() * 0.05 - h.float() * 0.1).expand(1, hq, lq, lk)


def _check_grads(tpu_leaves, cpu_leaves):
    for t, c in zip(tpu_leaves, cpu_leaves):
        assert t.grad is not None
        torch.testing.assert_close(t.grad.cpu(), c.grad, **TOL)


def _compare(fn_tpu, ref_cpu, xs):
    """fn_tpu(tpu leaves) and ref_cpu(cpu leaves): values and gradients."""
    t, c = _leaves(xs, TPU), _leaves(xs, "cpu")
    out, ref = fn_tpu(*t), ref_cpu(*c)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **TOL)
    w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2))
    (out * w.to(TPU)).sum().backward()
    (ref * w).sum().backward()
    _check_grads(t, c)
    return out


def test_plain_forward_matches_cpu_flex_and_sdpa_backward_matches_sdpa():
    xs = _qkv()
    with torch.no_grad():
        ref_flex = flex_attention(*xs)
    out = _compare(lambda q, k, v: flex_attention(q, k, v), F.scaled_dot_product_attention, xs)
    torch.testing.assert_close(out.detach().cpu(), ref_flex, **TOL)


def test_score_mod_forward_matches_cpu_flex_backward_matches_math():
    xs = _qkv()
    with torch.no_grad():
        ref_flex = flex_attention(*xs, score_mod=rel_bias)
    bias = _rel_bias_matrix(H, L, L)
    out = _compare(lambda q, k, v: flex_attention(q, k, v, score_mod=rel_bias),
                   lambda q, k, v: _math(q, k, v, bias=bias), xs)
    torch.testing.assert_close(out.detach().cpu(), ref_flex, **TOL)


def test_causal_block_mask_made_on_tpu_matches_causal_sdpa():
    xs = _qkv(lq=128, lk=128)
    bm = create_block_mask(causal, B=None, H=None, Q_LEN=128, KV_LEN=128, device=TPU)
    assert bm.kv_num_blocks.device.type == "tpu"
    bm_cpu = create_block_mask(causal, B=None, H=None, Q_LEN=128, KV_LEN=128, device="cpu")
    for a, b in zip(bm.as_tuple()[2:], bm_cpu.as_tuple()[2:]):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a.cpu(), b)
    with torch.no_grad():
        ref_flex = flex_attention(*xs, block_mask=bm_cpu)
    out = _compare(lambda q, k, v: flex_attention(q, k, v, block_mask=bm),
                   lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), xs)
    torch.testing.assert_close(out.detach().cpu(), ref_flex, **TOL)


def test_block_mask_and_score_mod_with_gqa_and_lse():
    xs = _qkv(hq=4, hkv=2)
    bm = create_block_mask(causal, B=None, H=None, Q_LEN=L, KV_LEN=L, device=TPU)
    bm_cpu = create_block_mask(causal, B=None, H=None, Q_LEN=L, KV_LEN=L, device="cpu")
    with torch.no_grad():
        ref, ref_aux = flex_attention(*xs, score_mod=rel_bias, block_mask=bm_cpu, enable_gqa=True,
                                      return_aux=AuxRequest(lse=True))
    t = _leaves(xs, TPU)
    out, aux = flex_attention(*t, score_mod=rel_bias, block_mask=bm, enable_gqa=True,
                              return_aux=AuxRequest(lse=True))
    torch.testing.assert_close(out.detach().cpu(), ref, **TOL)
    torch.testing.assert_close(aux.lse.detach().cpu(), ref_aux.lse, **TOL)
    # gradients against the same math on CPU (kv heads repeated for GQA)
    c = _leaves(xs, "cpu")
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    rep = [x.repeat_interleave(2, dim=1) for x in c[1:]]
    m = _math(c[0], *rep, bias=_rel_bias_matrix(4, L, L), mask=mask)
    w = torch.randn(m.shape, generator=torch.Generator().manual_seed(3))
    (m * w).sum().backward()
    (out * w.to(TPU)).sum().backward()
    _check_grads(t, c)


def test_torch_compile_backend_tpu_forward_and_backward():
    torch._dynamo.reset()
    xs = _qkv(lq=128, lk=128)
    bm = create_block_mask(causal, B=None, H=None, Q_LEN=128, KV_LEN=128, device=TPU)
    compiled = torch.compile(flex_attention, backend="tpu")
    bias = _rel_bias_matrix(H, 128, 128)
    mask = torch.ones(128, 128, dtype=torch.bool).tril()
    _compare(lambda q, k, v: compiled(q, k, v, score_mod=rel_bias, block_mask=bm),
             lambda q, k, v: _math(q, k, v, bias=bias, mask=mask), xs)
    # a second call with new values compiles nothing new and is still right
    before = torch.tpu.metrics()["compile"]["count"]
    xs2 = [x * 0.5 for x in xs]
    _compare(lambda q, k, v: compiled(q, k, v, score_mod=rel_bias, block_mask=bm),
             lambda q, k, v: _math(q, k, v, bias=bias, mask=mask), xs2)
    assert torch.tpu.metrics()["compile"]["count"] == before


def test_no_op_runs_on_cpu():
    before = dict(torch.tpu.metrics()["fallbacks"])
    xs = _qkv()
    bm = create_block_mask(causal, B=None, H=None, Q_LEN=L, KV_LEN=L, device=TPU)
    t = _leaves(xs, TPU)
    flex_attention(*t, score_mod=rel_bias, block_mask=bm).sum().backward()
    torch.tpu.synchronize()
    assert torch.tpu.metrics()["fallbacks"] == before


def test_other_devices_still_get_pytorchs_device_check():
    q = torch.empty(1, 1, 16, 8, device="meta")
    with pytest.raises(ValueError, match="FlexAttention is only supported on"):
        fa_mod._validate_device(q, q, q)
    c = torch.randn(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        fa_mod._validate_device(c, c, c)


def test_document_mask_from_compiled_create_block_mask_as_torchtitan():
    # TorchTitan compiles create_block_mask and masks documents with a
    # mask_mod that reads a captured tensor of document ids
    torch._dynamo.reset()
    n = 256
    docs = torch.tensor([0] * 100 + [1] * 156, device=TPU)

    def doc_causal(b, h, q_idx, kv_idx):
        return (docs[q_idx] == docs[kv_idx]) & (q_idx >= kv_idx)

    bm = torch.compile(create_block_mask)(doc_causal, None, None, n, n, device=TPU)
    d = docs.cpu()
    mask = (d[:, None] == d[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()
    compiled = torch.compile(flex_attention)  # the default backend routes tpu graphs to ours
    _compare(lambda q, k, v: compiled(q, k, v, block_mask=bm),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), _qkv(lq=n, lk=n))
