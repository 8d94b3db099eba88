"""SGLang's "tpu" attention backend: the ragged paged attention kernel of
torch_tpu/vllm/ragged.py (which needs no vLLM) behind SGLang's
AttentionBackend, and the KV pool whose layout that kernel reads.

KV pool (torch_tpu/sglang/memory.py: :class:`TpuMHATokenToKVPool`, the
platform's MHA pool): one tensor per layer, ``[slots, num_kv_heads, 2 *
head_dim]`` (a token's key then its value), read by the kernel as ``[slots /
page_size, page_size, H, 2D]``: SGLang's pages (PAGE_SIZE tokens on tpu)
are the kernel's blocks, so a request's block table is its row of
``req_to_token`` taken every page_size-th slot, divided by page_size.

Per step (:meth:`TpuAttnBackend.init_forward_metadata`, once, not per
layer) the host builds the kernel's inputs with ragged.plan from the
ForwardBatch's host-side lengths (seq_lens_cpu, extend_seq_lens_cpu) and
the block tables, padded to the step's token bucket T (a power of two) and
to a table width fixed by the context length, and uploads them; every layer
uses them.  Decode, prefill, chunked prefill, prefix-cache hits and mixed
batches are the same computation (context + queries per request), so the
attention is one program per token bucket.  The block tables come from
``req_to_token``, which lives on the host on tpu (step.py): no device read.
The step's tokens arrive padded to the bucket (step.py `pad`); the padding
rows belong to no request.

TORCH_TPU_SGLANG_METRICS=1 logs, at each step, the programs the engine has
compiled (or loaded from its disk tier) so far: "tpu: step N (MODE, R
requests, T tokens): C programs compiled".
"""
import logging
import os

import numpy as np
import torch
from sglang.srt.layers.attention.attention_registry import register_attention_backend
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from torch_tpu._serving import bucket, compile_count, cut  # noqa: F401 (step.py)
from torch_tpu.vllm import ragged

from .memory import TpuMHATokenToKVPool

NAME = "tpu"
logger = logging.getLogger(__name__)


class TpuAttnMetadata:
    def __init__(self, num_tokens, per, out_index):
        self.num_tokens = num_tokens  # the step's real tokens
        self.per = per                # ragged.plan's inputs per kernel variant, on the device
        self.out_index = out_index    # [T] int64: each token's row in the kernels' output


class TpuAttnBackend(AttentionBackend):
    """Ragged paged attention over TpuMHATokenToKVPool (causal decoder
    self-attention; no CUDA graphs)."""

    def __init__(self, model_runner):
        super().__init__()
        self.device = model_runner.device
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        if not isinstance(self.token_to_kv_pool, TpuMHATokenToKVPool):
            raise NotImplementedError(f"tpu attention: needs the tpu KV pool, got "
                                      f"{type(self.token_to_kv_pool).__name__}")
        self.page_size = self.token_to_kv_pool.page_size
        self.max_reqs = self.req_to_token_pool.size
        self.forward_metadata = None
        self.steps = 0
        self.log_metrics = os.environ.get("TORCH_TPU_SGLANG_METRICS", "0") == "1"

    # ---- per step -----------------------------------------------------------

    def init_forward_metadata(self, forward_batch):
        mode = forward_batch.forward_mode
        if mode.is_idle():
            self.forward_metadata = None
            return
        if mode.is_decode():
            seq_lens = forward_batch.seq_lens_cpu.numpy().astype(np.int64)
            qlens = np.ones_like(seq_lens)
        elif mode in (ForwardMode.EXTEND, ForwardMode.MIXED):
            qlens = np.asarray(forward_batch.extend_seq_lens_cpu, np.int64)
            seq_lens = forward_batch.seq_lens_cpu.numpy().astype(np.int64)
        else:
            raise NotImplementedError(f"tpu attention: forward mode {mode.name}")
        starts = np.concatenate([[0], np.cumsum(qlens)])
        table = self.block_tables(forward_batch.req_pool_indices, seq_lens)
        self.forward_metadata = self.metadata(starts, seq_lens, table)
        self.steps += 1
        if self.log_metrics:
            logger.info("tpu: step %d (%s, %d requests, %d tokens): %d programs compiled", self.steps, mode.name,
                        len(seq_lens), int(starts[-1]), compile_count())

    def block_tables(self, req_pool_indices, seq_lens):
        """[R, context_len / page_size] page ids of the step's requests (from
        the host table: step.py); pages past a request's length are 0."""
        rows = self.req_to_token_pool.req_to_token.index_select(0, req_pool_indices).cpu().numpy()
        table = rows[:, ::self.page_size].astype(np.int64) // self.page_size
        pages = -(-seq_lens // self.page_size)
        table[np.arange(table.shape[1])[None, :] >= pages[:, None]] = 0
        return table.astype(np.int32)

    def metadata(self, starts, seq_lens, table):
        """The kernel's inputs for a step (host arrays in, device tensors
        out): starts [R + 1] query offsets, seq_lens [R] lengths after the
        step, table [R, pages] page ids."""
        num_tokens = int(starts[-1])
        per, out_index = ragged.plan(starts, seq_lens, table, bucket(num_tokens), self.max_reqs, self.page_size)

        def up(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

        return TpuAttnMetadata(num_tokens, {k: tuple(up(a) for a in v) for k, v in per.items()}, up(out_index))

    # ---- per layer ----------------------------------------------------------

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache)

    def _forward(self, q, k, v, layer, forward_batch, save_kv_cache):
        self._check(layer)
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(forward_batch.out_cache_loc, None), k, v)
        hq, d = layer.tp_q_head_num, layer.head_dim
        md = self.forward_metadata
        t = md.out_index.shape[0]
        n = q.shape[0] if q.dim() == 3 else q.numel() // (hq * d)
        query = q.reshape(n, hq, d)
        cut()
        if n < t:  # padded to the bucket: one program per T
            query = torch.cat([query, query.new_zeros(t - n, hq, d)])
        pool = self.token_to_kv_pool
        out = ragged.attention(query, pool.paged_kv(layer.layer_id), md.per, md.out_index, layer.scaling,
                               pool.dtype)
        out = out[:n].to(q.dtype).reshape(n, hq * d)
        cut()
        return out

    @staticmethod
    def _check(layer):
        unsupported = []
        if layer.is_cross_attention or layer.attn_type != AttentionType.DECODER:
            unsupported.append(f"attention type {layer.attn_type}")
        if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
            unsupported.append("sliding window")
        if getattr(layer, "logit_cap", 0):
            unsupported.append("logit soft cap")
        if layer.qk_head_dim != layer.v_head_dim:
            unsupported.append("different key and value head sizes")
        if unsupported:
            raise NotImplementedError("tpu attention: not supported: " + ", ".join(unsupported))

    def support_triton(self):
        return False


@register_attention_backend(NAME)
def create_tpu_backend(runner):
    return TpuAttnBackend(runner)
