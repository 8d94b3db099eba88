"""The vLLM plugin's parts without a server: platform selection, the paged
attention backend and the slot-mapping kernel, each against a plain
PyTorch CPU computation.  Runs in .venv-serve (`make test-serve`)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is installed in .venv-serve only (make serve-env)")

import torch_tpu  # noqa: E402,F401
import torch_tpu.vllm as plugin  # noqa: E402

TPU = torch.device("tpu")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _platform_in_subprocess(env_extra):
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    env.update(env_extra)
    code = "from vllm.platforms import current_platform as p; print(type(p).__module__ + '.' + type(p).__name__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_register_names_the_platform_when_tpu_is_the_accelerator():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert plugin.register() == "torch_tpu.vllm.platform.TpuPlatform"


def test_register_declines_without_a_tpu(monkeypatch):
    monkeypatch.setattr(torch.tpu, "is_available", lambda: False)
    assert plugin.register() is None


def test_vllm_selects_tpu_and_vllm_plugins_turns_it_off():
    assert _platform_in_subprocess({}) == "torch_tpu.vllm.platform.TpuPlatform"
    assert _platform_in_subprocess({"VLLM_PLUGINS": ""}) == "vllm.platforms.cpu.CpuPlatform"
    assert _platform_in_subprocess({"VLLM_PLUGINS": "tpu"}) == "torch_tpu.vllm.platform.TpuPlatform"


# ---- paged attention -------------------------------------------------------------

class _Spec:
    def __init__(self, block_size):
        self.block_size = block_size


def _reference(query, k_ctx, v_ctx, q_pos, scale):
    """Causal attention of one request, on CPU in float64: query [q, H, D]
    at absolute positions q_pos, keys/values [n, Hkv, D] at 0..n-1."""
    hq, hkv = query.shape[1], k_ctx.shape[1]
    k = k_ctx.double().repeat_interleave(hq // hkv, dim=1)
    v = v_ctx.double().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", query.double(), k) * scale
    mask = torch.arange(k.shape[0])[None, :] > torch.tensor(q_pos)[:, None]
    s = s.masked_fill(mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_attention_matches_reference(dtype):
    """A batch mixing a decode, a chunked-prefill continuation over cached
    blocks and a fresh prefill; blocks scattered through the cache."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    from torch_tpu.vllm import ragged
    from torch_tpu.vllm.attention import TpuAttentionImpl, TpuAttentionMetadataBuilder

    torch.manual_seed(0)
    bs, hq, hkv, d, num_blocks = 8, 6, 2, 16, 24
    scale = 1 / math.sqrt(d)
    # (tokens already in the cache, new tokens this step) per request
    reqs = [(13, 1), (16, 7), (0, 5)]
    rng = np.random.default_rng(0)
    free = list(rng.permutation(np.arange(1, num_blocks)))  # block 0 is vLLM's null block
    width = 6
    table = np.zeros((len(reqs), width), np.int32)
    for r, (ctx, new) in enumerate(reqs):
        for b in range(-(-(ctx + new) // bs)):
            table[r, b] = free.pop()

    cache_cpu = torch.zeros(num_blocks, bs, hkv, 2 * d, dtype=dtype)
    k_all, v_all = [], []
    for r, (ctx, new) in enumerate(reqs):  # the cached part, written as an earlier step would
        k = torch.randn(ctx + new, hkv, d).to(dtype)
        v = torch.randn(ctx + new, hkv, d).to(dtype)
        k_all.append(k)
        v_all.append(v)
        for p in range(ctx):
            cache_cpu[table[r, p // bs], p % bs] = torch.cat([k[p], v[p]], -1)

    starts = np.cumsum([0] + [new for _, new in reqs]).astype(np.int32)
    total = int(starts[-1])
    query = torch.randn(total, hq, d).to(dtype)
    key = torch.cat([k_all[r][ctx:] for r, (ctx, _) in enumerate(reqs)])
    value = torch.cat([v_all[r][ctx:] for r, (ctx, _) in enumerate(reqs)])
    positions = np.concatenate([np.arange(ctx, ctx + new) for ctx, new in reqs])
    req_of = np.repeat(np.arange(len(reqs)), [new for _, new in reqs])
    slots = table[req_of, positions // bs].astype(np.int64) * bs + positions % bs

    seq_lens = torch.tensor([ctx + new for ctx, new in reqs], dtype=torch.int32)
    cm = CommonAttentionMetadata(
        query_start_loc=torch.from_numpy(starts).to(TPU), query_start_loc_cpu=torch.from_numpy(starts),
        seq_lens=seq_lens.to(TPU), num_reqs=len(reqs), num_actual_tokens=total,
        max_query_len=max(n for _, n in reqs), max_seq_len=int(seq_lens.max()),
        block_table_tensor=torch.from_numpy(table).to(TPU), slot_mapping=torch.from_numpy(slots).to(TPU),
        seq_lens_cpu_upper_bound=seq_lens)
    builder = TpuAttentionMetadataBuilder(_Spec(bs), ["layer"], None, TPU)
    md = builder.build(0, cm)
    impl = TpuAttentionImpl(hq, d, scale, hkv)
    cache = ragged.to_storage(cache_cpu.to(TPU), dtype)  # as the runner keeps it (bfloat16 as int16 bits)
    impl.do_kv_cache_update(None, key.to(TPU), value.to(TPU), cache, torch.from_numpy(slots).to(TPU))
    out = torch.zeros(total, hq, d, dtype=dtype, device=TPU)
    impl.forward(None, query.to(TPU), key.to(TPU), value.to(TPU), cache, md, out)

    # The cache now holds every request's keys and values in its slots.
    cache_back = cache.cpu().view(dtype)
    for r, (ctx, new) in enumerate(reqs):
        for p in range(ctx + new):
            assert torch.equal(cache_back[table[r, p // bs], p % bs], torch.cat([k_all[r][p], v_all[r][p]], -1))
    want = torch.cat([
        _reference(query[starts[r]:starts[r + 1]], k_all[r], v_all[r], list(range(ctx, ctx + new)), scale)
        for r, (ctx, new) in enumerate(reqs)])
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(out.cpu().double(), want, **tol)


def test_padding_slots_go_to_the_null_block():
    from torch_tpu.vllm.attention import TpuAttentionImpl

    impl = TpuAttentionImpl(2, 4, 0.5, 2)
    cache = torch.zeros(3, 4, 2, 8, device=TPU)
    key = torch.ones(3, 2, 4)
    value = torch.full((3, 2, 4), 2.0)
    impl.do_kv_cache_update(None, key.to(TPU), value.to(TPU), cache, torch.tensor([5, -1, 9], device=TPU))
    got = cache.cpu().view(-1, 2, 8)
    want = torch.zeros(12, 2, 8)
    want[[5, 9]] = torch.cat([key[[0, 2]], value[[0, 2]]], -1)
    want[0] = torch.cat([key[1], value[1]], -1)  # the padding token's write lands in the null block 0
    assert torch.equal(got, want)


def test_unsupported_attention_features_raise():
    from torch_tpu.vllm.attention import TpuAttentionImpl

    with pytest.raises(NotImplementedError, match="sliding window"):
        TpuAttentionImpl(2, 4, 0.5, 2, sliding_window=16)
    with pytest.raises(NotImplementedError, match="ALiBi"):
        TpuAttentionImpl(2, 4, 0.5, 2, alibi_slopes=[0.1, 0.2])


def test_slot_mapping_kernel_matches_reference():
    from torch_tpu.vllm.kernels import compute_slot_mapping

    bs, stride = 4, 5
    table = torch.tensor([[3, 7, 1, 0, 0], [2, 9, 4, 6, 0], [8, 0, 0, 0, 0]], dtype=torch.int32)
    qsl = torch.tensor([0, 2, 7, 8], dtype=torch.int32)
    positions = torch.tensor([5, 6, 9, 10, 11, 12, 13, 2], dtype=torch.int64)
    out = torch.zeros(12, dtype=torch.int64, device=TPU)
    compute_slot_mapping(8, 12, qsl.to(TPU), positions.to(TPU), table.to(TPU), stride, out, bs)
    req = [0, 0, 1, 1, 1, 1, 1, 2]
    want = [int(table[r, p // bs]) * bs + int(p) % bs for r, p in zip(req, positions)] + [-1] * 4
    assert out.cpu().tolist() == want


def test_seeded_rows_of_vllms_sampler_depend_on_their_generator_only():
    """vLLM's random_sample draws a seeded request's row with its own tpu
    generator: the same seed gives the same token wherever the row sits in
    the batch and whatever the other rows are; the unseeded rows use the
    device's default generator."""
    from vllm.v1.sample.ops.topk_topp_sampler import random_sample

    torch.manual_seed(0)
    vocab = 4096
    probs = torch.softmax(torch.randn(6, vocab) * 3, -1)

    def draw(rows, seeds):
        gens = {i: torch.Generator(device="tpu").manual_seed(s) for i, s in seeds.items()}
        return random_sample(probs[rows].to(TPU), gens).cpu().tolist()

    picks = [draw([r], {0: 100 + r})[0] for r in range(6)]
    batch = draw([0, 1, 2, 3, 4, 5], {r: 100 + r for r in range(6)})
    assert batch == picks
    shuffled = draw([3, 0, 5], {0: 103, 2: 105})  # row 1 unseeded
    assert shuffled[0] == picks[3] and shuffled[2] == picks[5]
    for t in batch:
        assert 0 <= t < vocab
    # different seeds draw differently somewhere among 8 draws of a flat row
    flat = torch.full((1, vocab), 1.0 / vocab)
    draws = {random_sample(flat.to(TPU), {0: torch.Generator(device="tpu").manual_seed(s)}).item() for s in range(8)}
    assert len(draws) > 1
