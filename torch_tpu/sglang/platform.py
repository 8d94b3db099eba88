"""The tpu platform for SGLang (an out-of-tree ``SRTPlatform``)."""
import logging

import torch
from sglang.srt.platforms.interface import PlatformCapabilities, PlatformEnum, SRTPlatform

from . import patches

logger = logging.getLogger(__name__)
patches.apply_at_import()

ATTENTION_BACKEND = "tpu"  # torch_tpu.sglang.attention (registered when the KV pool is chosen)
# The attention backends that run on tpu: ours, and SGLang's SDPA loop.
ATTENTION_BACKENDS = (ATTENTION_BACKEND, "torch_native")
PAGE_SIZE = 16  # tokens per KV page: the ragged kernel's block


def _allow_attention_backend_choice():
    """`--attention-backend tpu` on the command line (argparse's choices)."""
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices

    if ATTENTION_BACKEND not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([ATTENTION_BACKEND])


_allow_attention_backend_choice()


def _cpu_plugin():
    """Whether the plugin found is the XLA CPU plugin (known without starting
    the engine: this runs in SGLang's launcher, before its processes fork)."""
    import os

    from torch_tpu import _engine

    return bool(_engine._plugin) and "xla_cpu" in os.path.basename(_engine._plugin)


HOST_MEM_FRACTION = 0.25  # of the CPU plugin's device capacity, by default (as vLLM on tpu: worker.HOST_DEFAULT_UTIL)


class TpuSRTPlatform(SRTPlatform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    # No Triton kernels (core then uses its torch-native allocator and
    # req-to-token writers), no CUDA graphs, no piecewise compilation: the
    # model runs eagerly on tpu, every op a program the engine caches.
    capabilities = PlatformCapabilities()

    # ---- configuration ----------------------------------------------------

    def apply_server_args_defaults(self, server_args) -> None:
        # Attention: the ragged paged attention kernel (attention.py; SGLang's
        # SDPA loop, torch_native, when asked), over pages of PAGE_SIZE
        # tokens; sampling by torch ops (the other backends are CUDA/Triton
        # kernels), no CUDA graphs, no overlap of the scheduler with the
        # device (its stream and event juggling is CUDA's).
        for field, value, allowed in (("attention_backend", ATTENTION_BACKEND, ATTENTION_BACKENDS),
                                      ("sampling_backend", "pytorch", ("pytorch",))):
            asked = getattr(server_args, field, None)
            if asked is not None and asked not in allowed:
                logger.warning("tpu: --%s %s needs CUDA kernels; using %s", field.replace("_", "-"), asked, value)
            setattr(server_args, field, asked if asked in allowed else value)
        page_size = getattr(server_args, "page_size", None)
        if page_size == 1:  # SGLang's unpaged allocator: on the device, beside the host table (step.py)
            logger.warning("tpu: --page-size 1 is not supported; using %d", PAGE_SIZE)
        if page_size is None or page_size == 1:
            server_args.page_size = PAGE_SIZE
        server_args.disable_cuda_graph = True
        server_args.disable_overlap_schedule = True
        if getattr(server_args, "mem_fraction_static", 0) is None and _cpu_plugin():
            # The XLA CPU plugin's memory is a share of the host's RAM
            # (TORCH_TPU_CPU_MEMORY), shared with everything on the machine:
            # SGLang's default (~0.8-0.9 of the device) would size its KV pool
            # to most of it.  The bare `launch_server --model-path MODEL` gets
            # the share vLLM on tpu takes by default; an explicit value is kept.
            server_args.mem_fraction_static = HOST_MEM_FRACTION
            logger.info("tpu: the device's memory is the host's RAM (XLA CPU plugin): --mem-fraction-static %s "
                        "by default (set it, or --max-total-tokens, to choose)", HOST_MEM_FRACTION)

    def get_default_attention_backend(self) -> str:
        return ATTENTION_BACKEND

    def get_kv_pool_cls(self, *, kind):
        # The MHA pool in the ragged kernel's layout (torch_native reads its
        # key and value views too).  Importing attention.py registers the
        # "tpu" backend: the pool is built before the attention backend,
        # in the process that serves.
        if kind != "mha":
            return None
        from . import attention

        return attention.TpuMHATokenToKVPool

    def get_paged_allocator_cls(self):
        # SGLang's paged allocator with its free pages on the host (memory.py)
        from .memory import TpuPagedTokenToKVPoolAllocator

        return TpuPagedTokenToKVPoolAllocator

    def get_compile_backend(self, mode=None) -> str:
        return "tpu"  # torch_tpu's Dynamo backend (torch_dynamo_backends entry point)

    def get_dispatch_key_name(self) -> str:
        return "native"  # BaseFusedOp: each op's forward_native (torch ops)

    # ---- device -------------------------------------------------------------

    def get_device(self, device_id=None):
        return "tpu" if device_id is None else f"tpu:{device_id}"

    def set_device(self, device) -> None:
        torch.tpu.set_device(device)

    def get_device_name(self, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    def get_device_uuid(self, device_id: int = 0) -> str:
        return f"tpu-{device_id}"

    def get_device_capability(self, device_id: int = 0):
        return None

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(torch.accelerator.get_memory_info(torch.device("tpu", device_id))[1])

    def get_current_memory_usage(self, device=None) -> float:
        return float(torch.accelerator.memory_allocated(device or torch.device("tpu", torch.tpu.current_device())))

    def get_available_memory(self, device_id: int = 0):
        free, total = torch.accelerator.get_memory_info(torch.device("tpu", device_id))
        return int(free), int(total)

    def empty_cache(self) -> None:
        torch.tpu.empty_cache()

    def synchronize(self) -> None:
        torch.tpu.synchronize()

    def is_pin_memory_available(self, device=None) -> bool:
        return False  # pinned host memory means nothing to a PJRT transfer

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    def post_load_model(self, model: torch.nn.Module) -> None:
        devices = sorted({str(p.device) for p in model.parameters()})
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
        logger.info("tpu: %s weights on %s (%s)", type(model).__name__, ", ".join(devices), ", ".join(dtypes))

    # ---- distributed --------------------------------------------------------

    def get_torch_distributed_backend_str(self) -> str:
        # torch_tpu's c10d backend (tpu and cpu tensors): SGLang's device
        # groups hold tpu tensors (the sampler's token-id all_reduce under
        # structured output, for one); gloo has no tpu device.
        return "tpu_dist"

    def get_group_coordinator_device(self, local_rank: int) -> torch.device:
        return torch.device("tpu", local_rank)
