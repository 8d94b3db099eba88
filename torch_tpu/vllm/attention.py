"""Paged attention on tpu: vLLM's attention backend over the ragged
paged attention kernel of ragged.py.

KV cache: one tpu tensor per layer, ``[num_blocks, block_size, num_kv_heads,
2 * head_size]`` (a token's key then its value, per head), addressed by
vLLM's block ids; 16-bit floats are kept as their bits (int16,
ragged.cache_storage).  Block 0 is vLLM's null block: it is never handed to a
request, so padding slots (id -1) are written there.

Per step the metadata builder turns vLLM's host-side batch description
(query start offsets, sequence lengths, block tables) into the kernel's
runtime inputs (ragged.plan: query items, their positions and block
tables, chunk counts, where each token's row lands), padded to sizes that
depend on the step's token bucket T alone, and uploads them once; every
layer uses them.  Prefill, decode, chunked prefill and prefix cache hits
are the same computation: a prefix hit only means the context starts with
blocks written by an earlier request.  A step's attention is therefore one
program per token bucket, whatever its mix of requests, compiled at
start-up (TpuModelRunner.warm_up).  In fused mode the attention is a
program of its own (the pending graph is cut before and after it), so the
layer programs around it are the same for every layer.
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


from . import profile, ragged
from .._serving import cut
from .model_runner import MIN_TOKENS, bucket

NAME = "CUSTOM"

# (host slot mapping, its device copy): every layer of a step gets the same
# host tensor from vLLM; it goes to the device once.
_slots = [None, None]


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


def step_tokens(num_tokens, max_tokens):
    """T of a step: its token count padded to its bucket."""
    return bucket(num_tokens, MIN_TOKENS, max(max_tokens, num_tokens))


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    per: dict                # ragged.plan's inputs per kernel variant, on the device
    out_index: torch.Tensor  # [T] int64, row of each token in the kernels' output rows


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
        t_pad = step_tokens(num_tokens, self.max_tokens)
        per, out_index = ragged.plan(starts, seq_lens, table, t_pad, self.max_reqs or t_pad, self.block_size)
        return self.upload(per, out_index, num_tokens)

    def upload(self, per, out_index, num_tokens):
        dev = self.device

        def up(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

        return TpuAttentionMetadata(num_actual_tokens=num_tokens,
                                    per={k: tuple(up(a) for a in v) for k, v in per.items()},
                                    out_index=up(out_index))


_KV_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # "auto": the model's


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
        new = torch.cat([key, value], dim=-1).to(self._kv_dtype(key, kv_cache))
        flat.index_copy_(0, slots, new.view(torch.int16) if kv_cache.dtype != new.dtype else new)

    def _kv_dtype(self, key, kv_cache):
        """The dtype of the cache's values: the cache's own, or for a cache
        kept as int16 bits (ragged.cache_storage) the configured KV dtype
        ("auto": the model's)."""
        if kv_cache.dtype != torch.int16:
            return kv_cache.dtype
        return _KV_DTYPES.get(self.kv_cache_dtype, key.dtype)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu attention: fused output quantization is not supported")
        if attn_metadata is None:  # profiling / warm-up without metadata
            return output
        # Attention is a program of its own (either kernel): inside the
        # layer's program the host kernel's call made the layer slower
        # (decode step 177 -> 246 ms at T=8: XLA copies around the call)
        cut()
        with profile.phase("attention"):
            self._attend(query, kv_cache, attn_metadata, output)
            cut()
        return output

    def _attend(self, query, kv_cache, md, output):
        t = md.out_index.shape[0]  # the token bucket; the runner pads its steps to it
        n = min(t, query.shape[0])
        q = query[:n].view(n, self.num_heads, self.head_size)
        if n < t:  # a step vLLM did not pad (its own dummy runs)
            q = torch.cat([q, q.new_zeros(t - n, self.num_heads, self.head_size)])
        out = ragged.attention(q, kv_cache, md.per, md.out_index, self.scale, self._kv_dtype(query, kv_cache))
        output[:n].copy_(out[:n].to(output.dtype).view(output[:n].shape))
