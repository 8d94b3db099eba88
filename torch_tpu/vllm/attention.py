"""Paged attention on tpu, written in ATen ops the engine lowers.

KV cache: one tpu tensor per layer, ``[num_blocks, block_size, num_kv_heads,
2 * head_size]`` (a token's key then its value, per head), addressed by
vLLM's block ids.  Block 0 is vLLM's null block: it is never handed to a
request, so padding slots (id -1) are written there.

Per step the metadata builder turns the batch into padded per-request
tensors, shared by every layer:

- ``q_index`` ``[R, Q]``: the token each padded query row reads (Q is the
  longest query, rounded up to a power of two),
- ``blocks`` ``[R, K // block_size]``: each request's block ids (K, the
  longest context, rounded up to a power of two of blocks),
- ``bias`` ``[R, 1, Q, K]``: 0 where query row q may see key k (k at or
  before q's position: causal across the cached prefix and the new tokens),
  -inf elsewhere,
- ``out_index`` ``[T]``: where each of the T tokens' rows lies in ``[R*Q]``.

Each layer then gathers its blocks (one index_select), computes
softmax(q k^T * scale + bias) v for all requests at once in float32 and
gathers the token rows back.  Prefill, decode, chunked prefill and prefix
cache hits are the same computation: a prefix hit only means the context
starts with blocks written by an earlier request.

Shapes: R is the request count rounded up to a power of two (padding rows
read token 0 and see key 0 only), Q and K // block_size powers of two, T
the step's padded token count (model_runner.bucket), so a step's attention
is one of a small fixed set of programs, all compiled at start-up
(TpuModelRunner.warm_up).  In fused mode the attention is a program of its
own (the pending graph is cut before and after it): the rest of a layer
then depends on T alone, and the many (T, R, Q, K) attention programs are
small ones.  The metadata is built on the host from vLLM's host tensors
and uploaded once per step, shared by every layer.
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

from torch_tpu import _C

from .model_runner import MIN_TOKENS, bucket

NAME = "CUSTOM"

# (host slot mapping, its device copy): every layer of a step gets the same
# host tensor from vLLM; it goes to the device once.
_slots = [None, None]
# Set by TpuModelRunner.warm_up: receives each attention call's arguments.
capture = None


def _cut():
    """Runs what is pending (fused mode): attention is a program of its own."""
    if torch.tpu.get_eager_mode() == "fused":
        _C.flush(_C.CUT_OTHER)


class TpuAttentionBackend(AttentionBackend):
    # do_kv_cache_update() writes the new keys and values before forward().
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return NAME

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(8)]

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return False

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False


register_backend(AttentionBackendEnum.CUSTOM, f"{__name__}.TpuAttentionBackend")


def step_shape(query_lens, seq_lens, num_tokens, block_size, width, max_tokens, max_reqs):
    """(T, R, Q, B) of a step: its tokens, requests, longest query and
    longest context in blocks, each padded to its bucket."""
    t_pad = bucket(num_tokens, MIN_TOKENS, max(max_tokens, num_tokens))
    r_pad = bucket(len(query_lens), 1, max(max_reqs, len(query_lens)))
    q_pad = bucket(int(np.max(query_lens, initial=1)), 1, t_pad)
    n_blocks = bucket(-(-int(np.max(seq_lens, initial=1)) // block_size), 1, width)
    return t_pad, r_pad, q_pad, n_blocks


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    q_index: torch.Tensor    # [R, Q] int64, token row of each padded query
    blocks: torch.Tensor     # [R, K // block_size] block ids
    bias: torch.Tensor       # [R, 1, Q, K] float32: 0 visible, -inf masked
    out_index: torch.Tensor  # [T] int64, row of each token in [R * Q]


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        # The scheduler's bounds cap the buckets; built on its own (no
        # config), a step's buckets are capped by the step itself.
        sched = getattr(vllm_config, "scheduler_config", None)
        self.max_tokens = sched.max_num_batched_tokens if sched is not None else 0
        self.max_reqs = sched.max_num_seqs if sched is not None else 0

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        cm = common_attn_metadata
        if isinstance(cm.causal, torch.Tensor) or not cm.causal:
            raise NotImplementedError("tpu attention: only causal decoder attention is supported")
        num_reqs, num_tokens = cm.num_reqs, cm.num_actual_tokens
        starts = cm.query_start_loc_cpu[: num_reqs + 1].numpy().astype(np.int64)
        if cm.seq_lens_cpu_upper_bound is not None:
            seq_lens = cm.seq_lens_cpu_upper_bound[:num_reqs].numpy().astype(np.int64)
        else:
            seq_lens = cm.seq_lens[:num_reqs].cpu().numpy().astype(np.int64)
        table = cm.block_table_tensor
        return self.metadata(starts, seq_lens, table.cpu().numpy() if table.device.type != "cpu" else table.numpy(),
                             num_tokens)

    def metadata(self, starts, seq_lens, table, num_tokens):
        num_reqs = len(starts) - 1
        t_pad, r_pad, q_pad, n_blocks = step_shape(starts[1:] - starts[:-1], seq_lens, num_tokens, self.block_size,
                                                   table.shape[1], self.max_tokens, self.max_reqs)
        k_pad = n_blocks * self.block_size
        query_lens = starts[1:] - starts[:-1]
        context = seq_lens - query_lens
        pad = r_pad - num_reqs
        starts_p = np.concatenate([starts[:-1], np.zeros(pad, np.int64)])
        qlens_p = np.concatenate([query_lens, np.zeros(pad, np.int64)])
        ctx_p = np.concatenate([context, np.zeros(pad, np.int64)])

        # Host-side index arithmetic on a few hundred ints; one upload each.
        rows = np.arange(q_pad)
        valid = rows[None, :] < qlens_p[:, None]                          # [R, Q]
        q_index = np.where(valid, starts_p[:, None] + rows[None, :], 0)
        positions = np.where(valid, ctx_p[:, None] + rows[None, :], 0)    # [R, Q]
        visible = np.arange(k_pad)[None, None, :] <= positions[:, :, None]
        bias = np.where(visible, np.float32(0), np.float32(-np.inf))[:, None]
        token_req = np.repeat(np.arange(num_reqs), query_lens)
        token_row = np.arange(int(starts[-1])) - np.repeat(starts[:-1], query_lens)
        out_index = np.zeros(t_pad, np.int64)  # padded tokens read row 0
        out_index[: token_req.shape[0]] = token_req * q_pad + token_row
        blocks = np.zeros((r_pad, n_blocks), np.int64)  # padding rows: the null block
        blocks[:num_reqs] = table[:num_reqs, :n_blocks]

        dev = self.device
        return TpuAttentionMetadata(
            num_actual_tokens=num_tokens,
            q_index=torch.from_numpy(q_index).to(dev),
            blocks=torch.from_numpy(blocks).to(dev),
            bias=torch.from_numpy(np.ascontiguousarray(bias)).to(dev),
            out_index=torch.from_numpy(out_index).to(dev),
        )


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None, sinks=None, **kwargs):
        unsupported = []
        if alibi_slopes is not None:
            unsupported.append("ALiBi")
        if sliding_window is not None:
            unsupported.append("sliding window")
        if logits_soft_cap:
            unsupported.append("logits soft cap")
        if sinks is not None:
            unsupported.append("attention sinks")
        if attn_type != AttentionType.DECODER:
            unsupported.append(f"attention type {attn_type}")
        if kv_cache_dtype not in ("auto", "float32", "bfloat16", "float16"):
            unsupported.append(f"kv cache dtype {kv_cache_dtype}")
        if unsupported:
            raise NotImplementedError("tpu attention: not supported: " + ", ".join(unsupported))
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.group = self.num_heads // self.num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type
        self.sliding_window = None

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        """Writes the step's keys and values into their slots (one scatter)."""
        n = key.shape[0]
        if slot_mapping.device.type == "cpu":  # host-side input preparation (model_runner)
            if _slots[0] is not slot_mapping:
                _slots[:] = [slot_mapping, slot_mapping.to(key.device)]
            slot_mapping = _slots[1]
        slots = slot_mapping[:n].to(torch.int64).clamp(min=0)  # -1 (padding) -> the null block
        flat = kv_cache.view(-1, self.num_kv_heads, 2 * self.head_size)
        flat.index_copy_(0, slots, torch.cat([key, value], dim=-1).to(kv_cache.dtype))

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu attention: fused output quantization is not supported")
        if attn_metadata is None:  # profiling / warm-up without metadata
            return output
        if capture is not None:
            capture(self, layer, query, key, value, kv_cache, output)
        _cut()
        self._attend(query, kv_cache, attn_metadata, output)
        _cut()
        return output

    def _attend(self, query, kv_cache, md, output):
        num_reqs, q_pad = md.q_index.shape
        k_pad = md.bias.shape[-1]
        hkv, g, d = self.num_kv_heads, self.group, self.head_size

        kv = kv_cache.index_select(0, md.blocks.reshape(-1))          # [R*nb, bs, Hkv, 2D]
        kv = kv.view(num_reqs, k_pad, hkv, 2 * d).permute(0, 2, 1, 3)  # [R, Hkv, K, 2D]
        k = kv[..., :d].float()
        v = kv[..., d:].float()
        q = query.index_select(0, md.q_index.reshape(-1)).float()     # [R*Q, Hq, D]
        q = q.view(num_reqs, q_pad, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(num_reqs, hkv, g * q_pad, d)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale    # [R, Hkv, G*Q, K]
        scores = scores.view(num_reqs, hkv, g, q_pad, k_pad) + md.bias.unsqueeze(1)
        probs = torch.softmax(scores, dim=-1).view(num_reqs, hkv, g * q_pad, k_pad)
        out = torch.matmul(probs, v)                                   # [R, Hkv, G*Q, D]
        out = out.view(num_reqs, hkv, g, q_pad, d).permute(0, 3, 1, 2, 4).reshape(num_reqs * q_pad, hkv * g, d)
        output.copy_(out.index_select(0, md.out_index).to(output.dtype).view(output.shape))
