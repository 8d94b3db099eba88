"""The tpu model runner: vLLM's GPU model runner (v1) with the device set
to tpu.  Inputs are staged in host tensors and copied to tpu each step
(vLLM's CpuGpuBuffer), the model's weights, activations and KV cache live
on tpu, sampled token ids come back to the host once per step."""
import dataclasses
import logging

import torch
from vllm.config import CUDAGraphMode
from vllm.v1.kv_cache_interface import AttentionSpec
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

logger = logging.getLogger("vllm." + __name__)  # under vLLM's configured logger


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self.use_cuda_graph = False

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
            padded = min(max(8, 1 << (int(desc.num_tokens) - 1).bit_length()), self.max_num_tokens)
            if padded > desc.num_tokens:
                desc = dataclasses.replace(desc, num_tokens=padded)
        return mode, desc, ubatch, across_dp, stats

    def _sync_device(self) -> None:
        torch.accelerator.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # One device-to-host read per step; the GPU runner's pinned buffer
        # and CUDA event have no tpu counterpart.
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
