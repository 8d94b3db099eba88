"""The tpu worker: vLLM's GPU worker with the device set to tpu."""
import logging
import os
from contextlib import nullcontext

import torch
from vllm.config import CacheConfig
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

logger = logging.getLogger("vllm." + __name__)  # under vLLM's configured logger

# vLLM's default --gpu-memory-utilization, and what a device whose memory is
# the host's RAM (the XLA CPU plugin: a capacity of half the RAM, at most 16
# GiB, TORCH_TPU_CPU_MEMORY) gets instead when it is left at that: a quarter
# of that capacity (3 GiB on a 24 GiB machine)
_VLLM_DEFAULT_UTIL = CacheConfig().gpu_memory_utilization
HOST_DEFAULT_UTIL = 0.25


class TpuWorker(Worker):
    def init_device(self):
        # Fused eager unless TORCH_TPU_EAGER_MODE says otherwise: a step is
        # a program per decoder layer (the engine cuts after each layer of
        # the model's ModuleList), compiled once per shape for every layer;
        # ~1.8x the tokens/s of strict mode (bench/serve.py).
        if not os.environ.get("TORCH_TPU_EAGER_MODE") and os.environ.get("TPU_LAUNCH_BLOCKING") != "1":
            torch.tpu.set_eager_mode("fused")
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
        free, total = torch.accelerator.get_memory_info(self.device)
        self.init_free_memory, self.total_memory = int(free), int(total)
        util = self.cache_config.gpu_memory_utilization
        if (self.cache_config.kv_cache_memory_bytes is None and util == _VLLM_DEFAULT_UTIL
                and torch.tpu.get_device_properties(self.device).platform == "cpu"):
            # The XLA CPU plugin's memory is the host's RAM, shared with
            # everything on the machine: vLLM's default (0.92 of the
            # device's capacity) would hold most of it, so `vllm serve
            # MODEL` as typed gets HOST_DEFAULT_UTIL; an explicit value is
            # kept as given.
            util = self.cache_config.gpu_memory_utilization = HOST_DEFAULT_UTIL
            logger.info("tpu: the device's memory is the host's RAM (XLA CPU plugin): "
                        "--gpu-memory-utilization %s by default (%.2f GiB; set it or "
                        "--kv-cache-memory-bytes to choose)", util, total * util / 2**30)
        if self.cache_config.kv_cache_memory_bytes is None and total * util > free:
            raise ValueError(
                f"tpu: {free / 2**30:.2f} GiB of the device's {total / 2**30:.2f} GiB are free, less than "
                f"gpu_memory_utilization={util} asks for ({total * util / 2**30:.2f} GiB): lower "
                "--gpu-memory-utilization or size the KV cache with --kv-cache-memory-bytes")
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
        is the answer.  Otherwise vLLM's GPU rule on the device's memory
        API: this process may hold ``gpu_memory_utilization`` x the device's
        memory; a dummy forward of the largest batch measures the peak it
        holds without a KV cache (weights and activations,
        ``max_memory_allocated``), and the KV cache gets the rest.  On the
        CPU plugin the device's memory is the host's RAM (its capacity and
        MemAvailable), shared with everything else on the machine."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit:
            logger.info("tpu: %d MiB for the KV cache (kv_cache_memory_bytes)", explicit >> 20)
            return int(explicit)
        torch.accelerator.synchronize(self.device)
        torch.accelerator.reset_peak_memory_stats(self.device)
        self.model_runner.profile_run()
        torch.accelerator.synchronize(self.device)
        peak = torch.accelerator.max_memory_allocated(self.device)
        util = self.cache_config.gpu_memory_utilization
        requested = int(self.total_memory * util)
        available = requested - peak
        if available <= 0:
            raise RuntimeError(
                f"tpu: no device memory left for the KV cache: gpu_memory_utilization={util} gives "
                f"{requested >> 20} MiB and the model's weights and activations peak at {peak >> 20} MiB; "
                "raise --gpu-memory-utilization or pass --kv-cache-memory-bytes")
        # Rounded down to a sixteenth of its power of two: the measured peak
        # moves by megabytes from run to run, and the cache's block count is
        # in the shape of every program that reads or writes it (a warm
        # start reloads them from the disk cache only when it is the same).
        grain = max(1 << 24, (1 << (available.bit_length() - 1)) >> 4)
        available = available // grain * grain
        logger.info("tpu: %d bytes for the KV cache (%s x %d bytes of device memory, less a peak of %d "
                    "bytes without it, rounded down to a multiple of %d MiB)", available, util, self.total_memory,
                    peak, grain >> 20)
        self.available_kv_cache_memory_bytes = available
        return available

    @torch.no_grad()
    def compile_or_warm_up_model(self) -> CompilationTimes:
        """Runs every step shape (TpuModelRunner.warm_up: one step per
        token and request bucket: the layers, the ragged attention, the
        logits rows and the greedy sampler) so that no request pays for a
        compile; programs already in the engine's disk cache load instead of
        compiling.  TORCH_TPU_VLLM_WARMUP_S=S stops it after S seconds
        (smallest buckets first; no limit by default); TORCH_TPU_VLLM_WARMUP=0
        skips it (the first requests then compile what they meet).  vLLM's GPU warm-up (CUDA-graph
        capture, Triton/FlashInfer kernels) has nothing to do on tpu."""
        from .model_runner import compile_count

        if os.environ.get("TORCH_TPU_VLLM_WARMUP", "1") != "0":
            shapes, left, programs, seconds = self.model_runner.warm_up()
            logger.info("tpu: warmed %d step shapes (%d left), %d programs, %.1f s", shapes, left, programs, seconds)
        else:
            logger.info("tpu: warm-up skipped (TORCH_TPU_VLLM_WARMUP=0)")
        set_random_seed(self.model_config.seed, self.parallel_config.data_parallel_index)
        self._steps, self._warm_compiles = 0, compile_count()
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def sample_tokens(self, grammar_output):
        out = super().sample_tokens(grammar_output)
        if os.environ.get("TORCH_TPU_VLLM_METRICS") == "1" and hasattr(self, "_steps"):
            # The engine's compile counter after each step: programs compiled
            # (or loaded) since the warm-up ended, i.e. during requests.
            from .model_runner import compile_count

            self._steps += 1
            logger.info("tpu: step %d: %d programs compiled since warm-up", self._steps,
                        compile_count() - self._warm_compiles)
        return out
