"""The tpu worker: vLLM's GPU worker with the device set to tpu."""
import logging
from contextlib import nullcontext

import torch
from vllm.config import CUDAGraphMode
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from . import _device

logger = logging.getLogger(__name__)


class TpuWorker(Worker):
    def init_device(self):
        _device.install()
        self.device = torch.device("tpu", self.local_rank)
        current_platform.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        self.init_free_memory = None
        info = _device.memory_info(self.device)
        if info is not None:
            self.init_free_memory = info[0]
        self._init_workspace_and_model_runner()

    def _make_model_runner(self):
        from .model_runner import TpuModelRunner

        return TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag):
        # vLLM's CuMem pools (sleep mode) have no tpu counterpart.
        return nullcontext()

    def _scoped_allocator_max_split(self, max_split_size_mb):
        return nullcontext()

    def sleep(self, level: int = 1) -> None:
        logger.warning("tpu: sleep mode is not supported; ignored")

    def wake_up(self, tags=None) -> None:
        logger.warning("tpu: sleep mode is not supported; ignored")

    @torch.no_grad()
    def determine_available_memory(self) -> int:
        """Bytes for the KV cache.  With ``kv_cache_memory_bytes`` set that
        is the answer; otherwise a dummy forward of the largest batch runs
        and the device's free memory after it, less the share
        ``gpu_memory_utilization`` leaves to others, is what the KV cache
        gets (the CUDA worker's rule, on the device layer's memory API)."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            logger.info("tpu: %d MiB for the KV cache (kv_cache_memory_bytes)", explicit >> 20)
            return int(explicit)
        if self.init_free_memory is None:
            raise RuntimeError(
                "tpu: sizing the KV cache from free device memory needs the device layer's "
                "memory API (torch.accelerator.get_memory_info or torch.tpu.mem_get_info), "
                "which is not available yet: pass kv_cache_memory_bytes "
                "(--kv-cache-memory-bytes) to size it explicitly")
        self.model_runner.profile_run()
        _device.synchronize(self.device)
        free, total = _device.memory_info(self.device)
        unusable = total * (1.0 - self.cache_config.gpu_memory_utilization)
        available = int(free - unusable)
        if available <= 0:
            raise RuntimeError(
                f"tpu: no device memory left for the KV cache ({free} bytes free of {total}, "
                f"gpu_memory_utilization={self.cache_config.gpu_memory_utilization})")
        logger.info("tpu: %d MiB for the KV cache (profiled)", available >> 20)
        return available

    @torch.no_grad()
    def compile_or_warm_up_model(self) -> CompilationTimes:
        """One dummy decode step of the largest batch and the sampler, so
        the programs of a full decode batch are compiled (and in the
        engine's disk cache) before the first request.  vLLM's GPU warm-up
        (CUDA-graph capture, Triton/FlashInfer kernels) has nothing to do
        on tpu."""
        num = min(self.scheduler_config.max_num_seqs, self.scheduler_config.max_num_batched_tokens)
        _, last_hidden = self.model_runner._dummy_run(
            num_tokens=num, skip_eplb=True, cudagraph_runtime_mode=CUDAGraphMode.NONE)
        if _device.generators_available(self.device):
            # (the sampler's warm-up seeds a tpu generator)
            self.model_runner._dummy_sampler_run(hidden_states=last_hidden)
        _device.synchronize(self.device)
        set_random_seed(self.model_config.seed, self.parallel_config.data_parallel_index)
        return CompilationTimes(language_model=0.0, encoder=0.0)
