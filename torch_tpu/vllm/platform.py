"""The tpu Platform for vLLM (an out-of-tree platform, like vllm-ascend's)."""
import logging
import os

import torch
from vllm.platforms.interface import Platform, PlatformEnum

from . import _device

logger = logging.getLogger(__name__)

WORKER = "torch_tpu.vllm.worker.TpuWorker"
ATTENTION = "torch_tpu.vllm.attention.TpuAttentionBackend"
DEFAULT_BLOCK_SIZE = 32


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    # Collectives between workers go through gloo on host copies; one chip
    # (tensor_parallel_size=1) needs none.
    dist_backend: str = "gloo"
    # Small functions vLLM compiles on its own (outside the model) run under
    # Dynamo without Inductor: Inductor has no tpu code generator.
    simple_compile_backend: str = "eager"

    @property
    def supported_dtypes(self):
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype):
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"tpu: model dtype {dtype} is not supported (float32, bfloat16, float16)")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return f"tpu-{device_id}"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        info = _device.memory_info(torch.device("tpu", device_id))
        if info is None:
            raise NotImplementedError(
                "tpu: the device layer does not report its memory yet "
                "(torch.accelerator.get_memory_info / torch.tpu.mem_get_info)")
        return int(info[1])

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        """Bytes allocated on the device (vLLM logs the weights' size with
        it).  0 while the device layer cannot tell: a log figure only."""
        used = _device.memory_allocated(device or torch.device("tpu", 0))
        return 0.0 if used is None else float(used)

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        # Pinned host memory means nothing to a PJRT transfer.
        return False

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("tpu: MLA and sparse attention are not supported")
        if selected_backend is not None:
            logger.info("tpu: attention backend %s is not available on tpu; using TPU_PAGED", selected_backend)
        return ATTENTION

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("tpu: LoRA is not supported")

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def use_sync_weight_loader(cls) -> bool:
        return False

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM's host-side C++ ops (the build that matches this CPU's ISA,
        # chosen as vLLM's CPU platform chooses it); no tpu kernels come
        # from vLLM: the model runs on ATen ops the engine lowers.
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.import_kernels()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        """vLLM computes some step metadata with Triton kernels on the
        device; on tpu the same computation is ATen ops (kernels.py)."""
        from vllm.triton_utils.dispatcher import register_kernels

        from . import kernels

        register_kernels(kernels.OVERRIDES)

    @classmethod
    def validate_request(cls, processed_inputs, params) -> None:
        """A seeded request needs a tpu random generator (vLLM makes one per
        request); refused here, in the API process, while the device layer
        has none, so the request gets a 400 instead of failing the engine."""
        if getattr(params, "seed", None) is not None and not _device.generators_available(torch.device("tpu")):
            from vllm.exceptions import VLLMValidationError  # a client error: HTTP 400

            raise VLLMValidationError(
                "tpu: sampling with a seed needs torch.Generator(device='tpu'), which the "
                "device layer does not provide yet; send the request without 'seed'",
                parameter="seed", value=params.seed)

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        # The engine core and workers must be spawned: a forked child would
        # inherit the PJRT client of a parent that already imported torch
        # (torch_tpu autoloads) with none of its threads, and hang.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

        parallel = vllm_config.parallel_config
        if parallel.world_size > 1:
            raise NotImplementedError(
                f"tpu: one device per engine for now (world_size={parallel.world_size}); "
                "run one server per chip behind a router")
        if parallel.worker_cls == "auto":
            parallel.worker_cls = WORKER
        if parallel.enable_dbo:
            parallel.enable_dbo = False

        cache = vllm_config.cache_config
        if not cache.user_specified_block_size:
            cache.block_size = DEFAULT_BLOCK_SIZE

        # The model runs eagerly on tpu (every op a program the engine
        # caches); vLLM's piecewise Inductor compilation and CUDA graphs
        # have no tpu counterpart.
        compilation = vllm_config.compilation_config
        compilation.mode = CompilationMode.NONE
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        compilation.max_cudagraph_capture_size = 0

        scheduler = vllm_config.scheduler_config
        scheduler.async_scheduling = False

        model = vllm_config.model_config
        if model is not None and model.use_mla:
            raise NotImplementedError("tpu: MLA models are not supported")
