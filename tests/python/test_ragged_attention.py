"""The ragged paged attention kernel of the vLLM plugin
(torch_tpu/vllm/ragged.py; no vLLM needed): any mix of decodes, prefills,
chunked prefills and cached prefixes, grouped GQA heads, float32 and
bfloat16 caches, against causal attention computed on CPU from the same
paged cache; every step of one token bucket runs the same programs."""
import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.vllm import ragged

T_DEV = torch.device("tpu")
NB, BS, HQ, HKV, D, MAXBLK, MAX_REQS = 48, 8, 4, 2, 16, 24, 16


def _reference(query, kv, starts, seq_lens, table, scale):
    """Causal attention of each request's queries over its context and
    itself, read from the paged cache block by block (CPU, float64)."""
    out = torch.zeros(query.shape, dtype=torch.float64)
    kv = kv.double()
    g = HQ // HKV
    for i in range(len(seq_lens)):
        s, e, length = starts[i], starts[i + 1], seq_lens[i]
        ctx = length - (e - s)
        rows = kv[torch.as_tensor(table[i, :-(-length // BS)])].reshape(-1, HKV, 2 * D)[:length]
        k = rows[..., :D].repeat_interleave(g, 1)
        v = rows[..., D:].repeat_interleave(g, 1)
        scores = torch.einsum("qhd,khd->hqk", query[s:e].double(), k) * scale
        seen = torch.arange(length)[None, :] <= (ctx + torch.arange(e - s))[:, None]
        probs = scores.masked_fill(~seen, float("-inf")).softmax(-1)
        out[s:e] = torch.einsum("hqk,khd->qhd", probs, v)
    return out


def _step(qlens, ctxs, bucket, rng):
    qlens, ctxs = np.array(qlens), np.array(ctxs)
    seq = qlens + ctxs
    starts = np.concatenate([[0], np.cumsum(qlens)])
    table = np.zeros((len(qlens), MAXBLK), np.int64)
    for i, n in enumerate(seq):
        nb = -(-int(n) // BS)
        table[i, :nb] = rng.choice(np.arange(1, NB), nb, replace=False)
    return starts, seq, table


def _run(query, kv, starts, seq, table, bucket, scale):
    per, out_index = ragged.plan(starts, seq, table, bucket, MAX_REQS, BS)

    def up(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(T_DEV)

    out = ragged.attention(query.to(T_DEV), ragged.to_storage(kv.to(T_DEV), kv.dtype),
                           {k: [up(a) for a in v] for k, v in per.items()}, up(out_index), scale, kv.dtype)
    return out.cpu()


STEPS = [
    ([1, 1, 1], [5, 40, 100]),                     # decodes
    ([17], [0]),                                   # a prefill
    ([9, 1, 22, 1], [0, 150, 16, 7]),              # prefills beside decodes; a cached prefix of 16
    ([30], [120]),                                 # a chunk of a long prefill
    ([1] * 16, list(range(0, 160, 10))),           # a full batch of decodes (one group of each variant)
]


@pytest.fixture(params=["host_kernel", "stablehlo"])
def kernel(request, monkeypatch):
    """Both kernels: the engine's C kernel (the XLA CPU plugin's programs
    call it: csrc/kernels/paged_attention.c) and the StableHLO one (every
    other plugin)."""
    if request.param == "host_kernel":
        if torch.tpu.get_device_properties(0).platform != "cpu":
            pytest.skip("the host kernel runs on the XLA CPU plugin only")
        monkeypatch.delenv("TORCH_TPU_HOST_KERNELS", raising=False)
        assert ragged.host_kernel(), "the CPU plugin's programs cannot call the host kernel (not registered)"
    else:
        monkeypatch.setenv("TORCH_TPU_HOST_KERNELS", "0")
    return request.param


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_ragged_attention_equals_causal_attention_on_cpu(kv_dtype, kernel):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    kv = torch.randn(NB, BS, HKV, 2 * D).to(kv_dtype)
    scale = D ** -0.5
    for qlens, ctxs in STEPS:
        starts, seq, table = _step(qlens, ctxs, 64, rng)
        query = torch.randn(64, HQ, D)
        got = _run(query, kv, starts, seq, table, 64, scale)
        want = _reference(query, kv, starts, seq, table, scale)
        n = int(starts[-1])
        assert got.shape == (64, HQ, D) and got.dtype == torch.float32
        torch.testing.assert_close(got[:n].double(), want[:n], atol=2e-5, rtol=2e-5, msg=str((qlens, ctxs)))


def test_one_program_set_per_token_bucket(kernel):
    """Steps of different mixes in one bucket compile nothing after the
    first."""
    rng = np.random.default_rng(1)
    kv = torch.randn(NB, BS, HKV, 2 * D)
    query = torch.randn(32, HQ, D)
    _run(query, kv, *_step([3, 1], [4, 9], 32, rng), 32, 0.25)
    torch.tpu.synchronize()
    m = torch.tpu.metrics()
    before = m["compile"]["count"] + m["disk_load"]["count"]
    for qlens, ctxs in ([[1] * 12, list(range(12))], [[20, 5, 1], [60, 0, 100]], [[32], [0]], [[2] * 16, [1] * 16]):
        starts, seq, table = _step(qlens, ctxs, 32, rng)
        got = _run(query, kv, starts, seq, table, 32, 0.25)
        n = int(starts[-1])
        torch.testing.assert_close(got[:n].double(), _reference(query, kv, starts, seq, table, 0.25)[:n],
                                   atol=2e-5, rtol=2e-5)
    torch.tpu.synchronize()
    m = torch.tpu.metrics()
    assert m["compile"]["count"] + m["disk_load"]["count"] == before


def test_too_many_items_for_the_bucket_is_a_clear_error():
    rng = np.random.default_rng(2)
    starts, seq, table = _step([1] * 40, [3] * 40, 64, rng)  # 40 requests: more than max_num_seqs allows
    with pytest.raises(ValueError, match="40 decode items exceed the bucket's 32"):
        ragged.plan(starts, seq, table, 64, MAX_REQS, BS)
