"""The tpu model runner: vLLM's GPU model runner (v1) with the device set
to tpu.  The model's weights, activations and KV cache live on tpu; sampled
token ids come back to the host once per step.

Every program is compiled per shape, so every shape a step can have comes
from a small fixed set (:func:`bucket`): the step's tokens (T, a power of
two, at least 8), its requests (R, a power of two) and, in the attention
metadata, the longest query (Q) and context in blocks (B), each rounded up
to a power of two.  To keep the exact counts out of device programs, the
runner's input preparation (positions, sequence lengths, slot mapping,
block tables, query starts: vLLM's CpuGpuBuffer ``.gpu`` halves and its
other per-step device tensors) runs on the host: those buffers are host
tensors here, and only padded tensors go to tpu (input ids and positions
``[T]``, the attention metadata, the logits rows ``[R]``).  Greedy sampling
runs on the padded ``[R, vocab]`` logits.  :meth:`TpuModelRunner.warm_up`
runs every bucket (smallest first, within a time budget) before the first
request."""
import dataclasses
import logging
import os
import time

import numpy as np
import torch
from vllm.config import CUDAGraphMode
from vllm.v1.kv_cache_interface import AttentionSpec
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

logger = logging.getLogger("vllm." + __name__)  # under vLLM's configured logger

MIN_TOKENS = 8
WARM_PREFIX = "_tpu_warmup_"
WARMUP_BUDGET_S = "120"  # seconds of warm-up at most, by default (the shapes left compile when met)


def bucket(n, lo, hi):
    """n rounded up to a power of two, at least lo, at most hi."""
    return min(max(int(lo), 1 << max(int(n) - 1, 0).bit_length()), int(hi))


def buckets(lo, hi):
    """(b, first n with bucket(n, lo, hi) == b) for every bucket."""
    out, b, first = [], int(lo), 1
    while b < hi:
        out.append((b, first))
        first, b = b + 1, b * 2
    return out + [(int(hi), first)]


def compile_count():
    """Programs compiled or loaded from the disk tier so far."""
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self.use_cuda_graph = False
        # Input preparation on the host: the per-step device tensors of
        # vLLM's runner become host tensors (see the module docstring).
        for buf in vars(self).values():
            if isinstance(buf, CpuGpuBuffer) and buf.gpu.device.type != "cpu" and not buf.gpu.is_floating_point():
                buf.gpu = torch.zeros_like(buf.cpu)
        for name in ("positions", "seq_lens", "num_computed_tokens", "is_padding"):
            setattr(self, name, torch.zeros_like(getattr(self, name), device="cpu"))
        self._host_block_tables()
        self._dev_inputs = None  # device input ids / positions for vLLM's own dummy runs

    def _host_block_tables(self):
        for bt in self.input_batch.block_table.block_tables:
            for buf in (bt.block_table, bt.slot_mapping):
                if buf.gpu.device.type != "cpu":
                    buf.gpu = torch.zeros_like(buf.cpu)

    def may_reinitialize_input_batch(self, kv_cache_config):
        super().may_reinitialize_input_batch(kv_cache_config)
        self._host_block_tables()

    def tokens_bucket(self, n):
        return bucket(n, MIN_TOKENS, self.max_num_tokens)

    def reqs_bucket(self, n):
        return bucket(n, 1, self.max_num_reqs)

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        """vLLM's input preparation (on host tensors here); the rows whose
        logits are computed go to tpu padded to the request bucket (padding
        rows read token 0)."""
        logits_indices, spec, max_sampled = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        if spec is not None:
            raise NotImplementedError("tpu: speculative decoding is not supported")
        n = logits_indices.shape[0]
        rows = torch.zeros(self.reqs_bucket(n), dtype=torch.int64)
        rows[:n] = logits_indices
        return rows.to(self.device), spec, max_sampled

    def _preprocess(self, scheduler_output, num_input_tokens, intermediate_tensors=None):
        out = list(super()._preprocess(scheduler_output, num_input_tokens, intermediate_tensors))
        if out[0] is not None and out[0].device.type == "cpu":
            out[0] = out[0].to(self.device)  # input ids [T]
        if out[2].device.type == "cpu":
            out[2] = out[2].to(self.device)  # positions [T]
        return tuple(out)

    def _dummy_run(self, num_tokens, *args, **kwargs):
        # vLLM's dummy runs (the memory profile) read the input buffers
        # directly: give them device tensors for the duration.
        if self._dev_inputs is None:
            self._dev_inputs = (torch.zeros_like(self.input_ids.cpu, device=self.device),
                                torch.zeros_like(self.positions, device=self.device))
        saved = self.input_ids.gpu, self.positions
        self.input_ids.gpu, self.positions = self._dev_inputs
        try:
            return super()._dummy_run(num_tokens, *args, **kwargs)
        finally:
            self.input_ids.gpu, self.positions = saved

    def _sample(self, logits, spec_decode_metadata):
        """Greedy sampling runs on the padded logits ``[R, vocab]`` (the
        padding rows' tokens are dropped on the host); anything else samples
        the real rows only (those programs are compiled per request count)."""
        n = self.input_batch.num_reqs
        if logits is not None and logits.shape[0] != n and not self._pads_sampler():
            logits = logits[:n]
        out = super()._sample(logits, spec_decode_metadata)
        ids = out.sampled_token_ids.cpu()  # the step's one device-to-host read
        return dataclasses.replace(out, sampled_token_ids=ids[:n])

    def _pads_sampler(self):
        md = self.input_batch.sampling_metadata
        return (md.all_greedy and md.max_num_logprobs is None and not md.logprob_token_ids
                and md.no_penalties and md.allowed_token_ids_mask is None and not md.bad_words_token_ids)

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, *args, **kwargs):
        """A step's token count padded to a power of two (at least 8, at
        most the runner's buffers), as vLLM pads to its CUDA-graph sizes:
        programs are compiled per shape, so a few buckets serve every batch
        instead of one compile per token count.  The padded tokens run
        through the model on stale inputs; their KV writes go to the null
        block and their outputs are never read (vLLM's own padding path)."""
        mode, desc, ubatch, across_dp, stats = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *args, **kwargs)
        if across_dp is None and mode == CUDAGraphMode.NONE:
            padded = self.tokens_bucket(desc.num_tokens)
            if padded > desc.num_tokens:
                desc = dataclasses.replace(desc, num_tokens=padded)
        return mode, desc, ubatch, across_dp, stats

    @torch.inference_mode()  # as vLLM runs its steps: their tensors are inference tensors
    def warm_up(self):
        """Runs every step shape before the first request, so no request
        waits for a compile.  One real step (vLLM's execute_model and
        sample_tokens on a scheduler output of made-up requests, greedy) per
        (T, R) bucket compiles the layer programs (per T), the logits rows
        and the sampler (per R); then every attention shape (T, R, Q, B)
        a step of T tokens can have runs on that step's own attention inputs
        (fused mode: attention is a program of its own).  Made-up requests
        write their keys and values into free blocks, which a request writes
        before it reads.  Token buckets go smallest first (decode steps
        first); the warm-up stops once TORCH_TPU_VLLM_WARMUP_S seconds
        (default WARMUP_BUDGET_S; 0: no limit) have passed, and the shapes
        left compile when a step first meets them.  Returns (step shapes
        warmed, step shapes left, programs, seconds)."""
        from . import attention

        t0, c0 = time.perf_counter(), compile_count()
        budget = float(os.environ.get("TORCH_TPU_VLLM_WARMUP_S", WARMUP_BUDGET_S))
        deadline = t0 + budget if budget > 0 else float("inf")
        width = self.input_batch.block_table[0].max_num_blocks_per_req
        bs = self.input_batch.block_table[0].block_size
        max_len, max_tokens, max_reqs = self.max_model_len, self.max_num_tokens, self.max_num_reqs
        n_blocks = max(1, min(width, self.kv_cache_config.num_blocks - 1))
        plan = []  # per token bucket: its (T, R) steps' query lengths, then its attention shapes
        for t, t_lo in buckets(MIN_TOKENS, max_tokens):
            steps = [self._warm_query_lens(t, r, r_lo, max_len) for r, r_lo in buckets(1, max_reqs)]
            plan.append((t, [q for q in steps if q], self._attention_shapes(t, t_lo, max_reqs, max_len, width, bs)))
        total = sum(len(steps) + len(shapes) for _, steps, shapes in plan)
        inputs = {}  # T -> one attention call's arguments in a real step of T tokens

        def keep(impl, layer, query, key, value, kv_cache, output):
            inputs.setdefault(output.shape[0], (impl, layer, query, key, value, kv_cache, output))

        warmed, upto = 0, 0
        attention.capture = keep
        try:
            for t, steps, shapes in plan:
                for qs in steps:
                    if time.perf_counter() > deadline:
                        break
                    self._warm_step(qs, list(range(1, n_blocks + 1)), bs)
                    warmed += 1
                if t in inputs:
                    impl, layer, query, key, value, kv_cache, output = inputs[t]
                    for shape in shapes:
                        if time.perf_counter() > deadline:
                            break
                        impl.forward(layer, query, key, value, kv_cache, self._zero_metadata(*shape, bs), output)
                        warmed += 1
                if time.perf_counter() > deadline:
                    break
                upto = t
        finally:
            attention.capture = None
        torch.accelerator.synchronize(self.device)
        seconds = time.perf_counter() - t0
        if warmed < total:
            logger.warning("tpu: warm-up stopped after %.0f s (TORCH_TPU_VLLM_WARMUP_S=%g): %d of %d step shapes "
                           "warmed, every one of up to %d tokens; a step that meets one of the other %d compiles "
                           "it then (raise TORCH_TPU_VLLM_WARMUP_S, 0 for no limit, or lower --max-num-batched-"
                           "tokens / --max-num-seqs / --max-model-len)", seconds, budget, warmed, total, upto,
                           total - warmed)
        return warmed, total - warmed, compile_count() - c0, seconds

    @staticmethod
    def _warm_query_lens(t, r, r_lo, max_len):
        """Query lengths of made-up requests for a step of bucket (t, r), or
        None when no step has those buckets."""
        if r_lo > t or r_lo * max_len < t:
            return None
        num = min(r, t)
        qs = [1] * num
        left = t - num
        for i in range(num):
            extra = min(left, max_len - 1)
            qs[i] += extra
            left -= extra
        return qs

    @staticmethod
    def _attention_shapes(t, t_lo, max_reqs, max_len, width, bs):
        """Every (T, R, Q, B) the attention metadata can have with T = t."""
        out = []
        for r, r_lo in buckets(1, max_reqs):
            for q, q_lo in buckets(1, t):
                if q_lo > max_len:
                    continue
                # some r' in [r_lo, r] requests, the longest query in
                # [q_lo, q], take t' in [t_lo, t] tokens between them
                if not any(max(q_lo + n - 1, t_lo) <= min(n * min(q, max_len), t) for n in range(r_lo, r + 1)):
                    continue
                for b, b_lo in buckets(1, width):
                    if q_lo <= min(b * bs, max_len):
                        out.append((t, r, q, b))
        return out

    def _zero_metadata(self, t, r, q, b, bs):
        from .attention import TpuAttentionMetadata

        def up(shape, dtype):
            return torch.from_numpy(np.zeros(shape, dtype)).to(self.device)

        return TpuAttentionMetadata(num_actual_tokens=t, q_index=up((r, q), np.int64), blocks=up((r, b), np.int64),
                                    bias=up((r, 1, q, b * bs), np.float32), out_index=up((t,), np.int64))

    def _warm_step(self, query_lens, block_ids, bs):
        """One step of made-up new requests (prompts of query_lens tokens),
        then their end."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

        reqs, sched = [], {}
        for i, q in enumerate(query_lens):
            rid = f"{WARM_PREFIX}{i}"
            reqs.append(NewRequestData(
                req_id=rid, prompt_token_ids=[(7 * j + i) % 1000 for j in range(q)], mm_features=[],
                sampling_params=SamplingParams(temperature=0.0, max_tokens=1), pooling_params=None,
                block_ids=(block_ids[: -(-q // bs)],), num_computed_tokens=0, lora_request=None))
            sched[rid] = q

        def output(new, num, finished):
            return SchedulerOutput(scheduled_new_reqs=new, scheduled_cached_reqs=CachedRequestData.make_empty(),
                                   num_scheduled_tokens=num, total_num_scheduled_tokens=sum(num.values()),
                                   scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
                                   num_common_prefix_blocks=[0], finished_req_ids=finished,
                                   free_encoder_mm_hashes=[])

        self.execute_model(output(reqs, sched, set()))
        self.sample_tokens(None)
        self.execute_model(output([], {}, set(sched)))

    def _sync_device(self) -> None:
        torch.accelerator.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # Already on the host (_sample); the GPU runner's pinned buffer and
        # CUDA event have no tpu counterpart.
        return sampled_token_ids.cpu().tolist()

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes, kv_cache_allocation_context=None):
        """One tpu tensor per layer, ``[num_blocks, block_size, num_kv_heads,
        2 * head_size]`` (see attention.py).  vLLM's own allocator carves
        every layer out of one byte buffer; on tpu a write into a slice of a
        shared buffer rewrites the whole buffer, so each layer gets its own."""
        kv_caches = {}
        for tensor in kv_cache_config.kv_cache_tensors:
            for name in tensor.layers:
                group = next(g for g in kv_cache_config.kv_cache_groups if name in g.layer_names)
                spec = group.kv_cache_spec
                specs = getattr(spec, "kv_cache_specs", None)
                if specs is not None:
                    spec = specs[name]
                if not isinstance(spec, AttentionSpec):
                    raise NotImplementedError(f"tpu: KV cache spec {type(spec).__name__} is not supported")
                head_v = getattr(spec, "head_size_v", spec.head_size)
                if head_v != spec.head_size:
                    raise NotImplementedError("tpu: keys and values of different head sizes are not supported")
                num_blocks = kv_cache_config.num_blocks_of(tensor)
                kv_caches[name] = torch.zeros(
                    (num_blocks, spec.block_size, spec.num_kv_heads, 2 * spec.head_size),
                    dtype=spec.dtype, device=self.device)
        for name, target in self.shared_kv_cache_layers.items():
            kv_caches[name] = kv_caches[target]
        num_attn_module = 2 if self.model_config.hf_config.model_type == "longcat_flash" else 1
        bind_kv_cache(
            kv_caches,
            self.compilation_config.static_forward_context,
            self.kv_caches,
            num_attn_module,
            kv_cache_groups=kv_cache_config.kv_cache_groups,
        )
        total = sum(t.numel() * t.element_size() for t in {id(t): t for t in kv_caches.values()}.values())
        logger.info("tpu: KV cache of %d layers, %d MiB", len(kv_caches), total >> 20)
        return kv_caches

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.int64, device=self.device)
        seen = set()
        for kv in self.kv_caches:
            if id(kv) not in seen:
                seen.add(id(kv))
                kv.index_fill_(0, index, 0)
