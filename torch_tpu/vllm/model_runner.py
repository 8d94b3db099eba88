"""The tpu model runner: vLLM's GPU model runner (v1) with the device set
to tpu.  The model's weights, activations and KV cache live on tpu; sampled
token ids come back to the host once per step.

Every program is compiled per shape, so every shape a step can have comes
from a small fixed set (:func:`bucket`): the step's tokens (T, a power of
two, at least 1) and its requests (R, a power of two); the attention's
runtime inputs are padded to sizes of T alone (ragged.py).  To keep the
exact counts out of device programs, the runner's input preparation (positions, sequence lengths, slot mapping,
block tables, query starts: vLLM's CpuGpuBuffer ``.gpu`` halves and its
other per-step device tensors) runs on the host: those buffers are host
tensors here, and only padded tensors go to tpu (input ids and positions
``[T]``, the attention metadata, the logits rows ``[R]``).  Greedy sampling
runs on the padded ``[R, vocab]`` logits; any other sampling (temperature,
top-k, top-p, seeds, logprobs, penalties, logits processors) runs vLLM's own
sampler on the host over the step's logits rows (`TpuModelRunner._sample`).
:meth:`TpuModelRunner.warm_up` runs every (T, R) bucket (smallest first)
before the first request."""
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

from .._serving import bucket, buckets, compile_count, cut  # noqa: F401 (worker.py, attention.py, tests)
from . import profile, ragged

logger = logging.getLogger("vllm." + __name__)  # under vLLM's configured logger

MIN_TOKENS = 1
WARM_PREFIX = "_tpu_warmup_"
WARMUP_BUDGET_S = "0"  # seconds of warm-up at most, by default (0: no limit; the shapes left compile when met)


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
        self._host_sampling_batch()
        self._host_generators = {}  # a seeded request's tpu generator -> its host generator
        self._dev_inputs = None  # device input ids / positions for vLLM's own dummy runs
        self._step_tokens = 0  # the last step's padded token count (T)

    def _host_block_tables(self):
        for bt in self.input_batch.block_table.block_tables:
            for buf in (bt.block_table, bt.slot_mapping):
                if buf.gpu.device.type != "cpu":
                    buf.gpu = torch.zeros_like(buf.cpu)

    def _host_sampling_batch(self):
        """The input batch's sampling parameters, logits processors, prompt
        token ids (penalties) and allowed-token mask stay on the host: the
        sampler beyond greedy runs there (`_sample`)."""
        from vllm.v1.sample.logits_processor import build_logitsprocs

        ib = self.input_batch
        for name in ("temperature", "top_p", "top_k", "frequency_penalties", "presence_penalties",
                     "repetition_penalties"):
            setattr(ib, name, torch.zeros_like(getattr(ib, name), device="cpu"))
        ib.device = torch.device("cpu")
        if not getattr(ib.logitsprocs, "_tpu_host", False):
            custom = tuple(self.model_config.logits_processors or ())
            ib.logitsprocs = build_logitsprocs(self.vllm_config, torch.device("cpu"), False, self.is_pooling_model,
                                               custom)
            ib.logitsprocs._tpu_host = True

    def load_model(self, *args, **kwargs):
        super().load_model(*args, **kwargs)
        model, compute_logits = self.model, self.model.compute_logits

        def cut_then_compute_logits(*a, **k):
            cut()  # the logits rows' gather is a program of its own (T, R)
            with profile.phase("logits"):
                return compute_logits(*a, **k)

        model.compute_logits = cut_then_compute_logits

    def _model_forward(self, *args, **kwargs):
        with profile.phase("forward"):
            out = super()._model_forward(*args, **kwargs)
            cut()  # the layers' programs depend on T alone
        return out

    # TORCH_TPU_VLLM_PROFILE (profile.py): a step from execute_model to the
    # end of sample_tokens, its input preparation, forward and sampler.
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if profile.ACTIVE is not None and scheduler_output.total_num_scheduled_tokens:
            n = scheduler_output.num_scheduled_tokens
            profile.ACTIVE.begin(len(n), scheduler_output.total_num_scheduled_tokens,
                                 all(v == 1 for v in n.values()))
        return super().execute_model(scheduler_output, intermediate_tensors)

    def sample_tokens(self, grammar_output):
        out = super().sample_tokens(grammar_output)
        if profile.ACTIVE is not None:
            profile.ACTIVE.end(self._step_tokens)
        return out

    def _update_states(self, scheduler_output):
        with profile.phase("input"):
            return super()._update_states(scheduler_output)

    def _build_attention_metadata(self, *args, **kwargs):
        with profile.phase("input"):
            return super()._build_attention_metadata(*args, **kwargs)

    def may_reinitialize_input_batch(self, kv_cache_config):
        super().may_reinitialize_input_batch(kv_cache_config)
        self._host_block_tables()
        self._host_sampling_batch()

    def tokens_bucket(self, n):
        return bucket(n, MIN_TOKENS, self.max_num_tokens)

    def reqs_bucket(self, n):
        return bucket(n, 1, self.max_num_reqs)

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        """vLLM's input preparation (on host tensors here); the rows whose
        logits are computed go to tpu padded to the request bucket (padding
        rows read token 0)."""
        with profile.phase("input"):
            logits_indices, spec, max_sampled = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        if spec is not None:
            raise NotImplementedError("tpu: speculative decoding is not supported")
        n = logits_indices.shape[0]
        rows = torch.zeros(self.reqs_bucket(n), dtype=torch.int64)
        rows[:n] = logits_indices
        return rows.to(self.device), spec, max_sampled

    def _preprocess(self, scheduler_output, num_input_tokens, intermediate_tensors=None):
        with profile.phase("input"):
            out = list(super()._preprocess(scheduler_output, num_input_tokens, intermediate_tensors))
            if out[0] is not None and out[0].device.type == "cpu":
                out[0] = out[0].to(self.device)  # input ids [T]
            if out[2].device.type == "cpu":
                out[2] = out[2].to(self.device)  # positions [T]
        return tuple(out)

    def _dummy_sampler_run(self, hidden_states):
        """vLLM's memory profile computes the logits of its largest batch
        and samples them with every feature on: the logits are measured on
        tpu; the sampler beyond greedy runs on the host here (`_sample`), so
        its device programs (a sort over the vocabulary) are never compiled."""
        logits = self.model.compute_logits(torch.rand_like(hidden_states))
        cut()
        return logits

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
        """Greedy sampling runs on tpu over the padded logits ``[R, vocab]``
        (the padding rows' tokens are dropped on the host).  Anything else
        (temperature, top-k, top-p, seeds, logprobs, penalties, logits
        processors) runs vLLM's sampler on the host over the step's logits
        rows, as vLLM's CPU backend does: every mix of requests then runs
        programs of the request bucket alone (the logits), where on tpu each
        mix of sampling features, seeded rows and request count was a program
        of its own (1-2 s to compile), and XLA's sort for top-p took ~240 ms
        for 8 rows over a 49k vocabulary.  A seeded request draws from a host
        generator seeded as its tpu one, one draw per step, wherever its row
        sits: the same seed gives the same tokens."""
        n = self.input_batch.num_reqs
        md = self.input_batch.sampling_metadata
        cut()  # the logits are a program of their own (per R), whichever way the step samples
        if logits is None or spec_decode_metadata is not None or self._samples_on_device(md):
            with profile.phase("sampler"):
                out = super()._sample(logits, spec_decode_metadata)
                ids = out.sampled_token_ids.cpu()  # the step's one device-to-host read
            return dataclasses.replace(out, sampled_token_ids=ids[:n])
        with profile.phase("sampler"):
            self.input_batch.update_async_output_token_ids()
            rows = logits.cpu()[:n]  # the step's one device-to-host read
            md = dataclasses.replace(md, generators=self._host_generators_of(md.generators))
            return self.sampler(logits=rows, sampling_metadata=md)

    @staticmethod
    def _samples_on_device(md):
        """Greedy, and nothing that reads or changes the logits beyond the
        argmax (logprobs, penalties, masks, active logits processors)."""
        if not (md.all_greedy and md.max_num_logprobs is None and not md.logprob_token_ids and md.no_penalties
                and md.allowed_token_ids_mask is None and not md.bad_words_token_ids):
            return False
        for proc in md.logitsprocs.non_argmax_invariant:  # vLLM's built-ins say when they act
            state = getattr(proc, "biases", getattr(proc, "min_toks", True))
            if state:
                return False
        return True

    def _host_generators_of(self, generators):
        """{row: tpu generator} -> {row: host generator}, each host
        generator made once per tpu generator (seeded with its seed) and
        kept while a request holds that tpu generator."""
        out = {}
        for row, gen in generators.items():
            host = self._host_generators.get(id(gen))
            if host is None or host[0] is not gen:
                host = self._host_generators[id(gen)] = (gen, torch.Generator().manual_seed(gen.initial_seed()))
            out[row] = host[1]
        if len(self._host_generators) > len(generators):
            live = {id(r.generator) for r in self.requests.values() if getattr(r, "generator", None) is not None}
            for key in [k for k in self._host_generators if k not in live]:
                del self._host_generators[key]
        return out

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, *args, **kwargs):
        """A step's token count padded to a power of two (at least 1, at
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
        self._step_tokens = desc.num_tokens
        return mode, desc, ubatch, across_dp, stats

    @torch.inference_mode()  # as vLLM runs its steps: their tensors are inference tensors
    def warm_up(self):
        """Runs every step shape before the first request, so no request
        waits for a compile.  A step's programs are the layers and the
        ragged attention (per token bucket T, whatever the mix of requests:
        attention.py), the gather of the logits rows (per T and request
        bucket R), the logits and the greedy sampler (per R), cut apart in fused
        mode (`cut`).  So: one real step (vLLM's execute_model and
        sample_tokens on a scheduler output of made-up greedy requests) per
        T, one per R at the smallest T that holds R requests, and the gather
        alone for every other (T, R) a step can have.  Made-up requests
        write their keys and values into free blocks, which a request writes
        before it reads.  Buckets go smallest first; TORCH_TPU_VLLM_WARMUP_S
        (seconds, default 0: no limit) stops it early, the shapes left
        compiling when a step first meets them.  Returns (step shapes
        warmed, step shapes left, programs, seconds)."""
        t0, c0 = time.perf_counter(), compile_count()
        budget = float(os.environ.get("TORCH_TPU_VLLM_WARMUP_S", WARMUP_BUDGET_S))
        deadline = t0 + budget if budget > 0 else float("inf")
        width = self.input_batch.block_table[0].max_num_blocks_per_req
        bs = self.input_batch.block_table[0].block_size
        max_len, max_tokens, max_reqs = self.max_model_len, self.max_num_tokens, self.max_num_reqs
        n_blocks = max(1, min(width, self.kv_cache_config.num_blocks - 1))
        pairs = [(t, r) for t, _ in buckets(MIN_TOKENS, max_tokens) for r, r_lo in buckets(1, max_reqs)
                 if self._warm_query_lens(t, r, r_lo, max_len)]
        r_lo = dict((r, lo) for r, lo in buckets(1, max_reqs))
        steps, done = [], set()
        for r in sorted({r for _, r in pairs}):  # per R, at its smallest T
            t = min(t for t, r2 in pairs if r2 == r)
            steps.append((t, r))
        for t in sorted({t for t, _ in pairs}):  # per T, with its largest R
            if not any(t2 == t for t2, _ in steps):
                steps.append((t, max(r for t2, r in pairs if t2 == t)))
        steps.sort()
        # The first step writes every layer's KV cache for the first time
        # (its programs read the caches' zero fill): its shape runs twice,
        # so the programs of its later steps are warmed too.
        steps = steps[:1] + steps
        warmed, upto = 0, 0
        for t, r in steps:
            if time.perf_counter() > deadline:
                break
            self._warm_step(self._warm_query_lens(t, r, r_lo[r], max_len), list(range(1, n_blocks + 1)), bs)
            warmed += (t, r) not in done
            done.add((t, r))
            upto = t
        hidden = self.model_config.get_hidden_size()
        for t, r in pairs:  # the logits rows' gather of the other pairs
            if (t, r) in done or time.perf_counter() > deadline:
                continue
            # as a step has them: the hidden states a program's output (not
            # a view of a filled storage), the rows uploaded from the host
            states = torch.zeros((t, hidden), dtype=self.dtype, device=self.device) * 1
            rows = torch.zeros(r, dtype=torch.int64).to(self.device)
            cut()
            picked = states[rows]  # kept past the cut, as the logits' input is
            cut()
            del picked
            done.add((t, r))
            warmed += 1
        torch.accelerator.synchronize(self.device)
        seconds = time.perf_counter() - t0
        if warmed < len(pairs):
            logger.warning("tpu: warm-up stopped after %.0f s (TORCH_TPU_VLLM_WARMUP_S=%g): %d of %d step shapes "
                           "warmed, every one of up to %d tokens; a step that meets one of the other %d compiles "
                           "it then (TORCH_TPU_VLLM_WARMUP_S=0 for no limit)", seconds, budget, warmed, len(pairs),
                           upto, len(pairs) - warmed)
        return warmed, len(pairs) - warmed, compile_count() - c0, seconds

    @staticmethod
    def _warm_query_lens(t, r, r_lo, max_len):
        """Query lengths of made-up requests for a step of bucket (t, r), or
        None when no step has those buckets.  Some requests prefill (two
        queries or more) and the rest decode, when t allows, so both kernel
        variants run on real items."""
        if r_lo > t or r_lo * max_len < t:
            return None
        num = min(r, t)
        qs = [1] * num
        left = t - num
        for i in range(num):
            # at most max_len - 1 tokens: room for the sampled one (vLLM
            # asserts prompt + sampled <= max_model_len); a step one token
            # short of t still pads to bucket t
            extra = max(0, min(left, max_len - 2))
            qs[i] += extra
            left -= extra
        return qs

    def _warm_step(self, query_lens, block_ids, bs):
        """One step of made-up new requests (prompts of query_lens tokens),
        then their end."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

        reqs, sched = [], {}
        vocab = min(1000, self.model_config.get_vocab_size())  # ids a small vocabulary holds too
        for i, q in enumerate(query_lens):
            rid = f"{WARM_PREFIX}{i}"
            reqs.append(NewRequestData(
                req_id=rid, prompt_token_ids=[(7 * j + i) % vocab for j in range(q)], mm_features=[],
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
        2 * head_size]``, 16-bit floats kept as int16 bits (see attention.py).  vLLM's own allocator carves
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
                    dtype=ragged.cache_storage(spec.dtype), device=self.device)
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
