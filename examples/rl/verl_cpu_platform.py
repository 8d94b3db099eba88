"""The CPU reference for examples/rl/verl_grpo.py: a VeRL platform named
``cpu`` (VeRL 0.9.1 has none; ``VERL_PLATFORM=cpu``,
``VERL_USE_EXTERNAL_MODULES=verl_cpu_platform`` with this folder on
PYTHONPATH).  It lives outside torch_tpu on purpose: a process that imports
torch_tpu has tpu as its accelerator, and VeRL places models with
``.to(<int>)``, the accelerator's device, so the reference runs with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 and never imports torch_tpu.

- device ``cpu`` (its "device id" is ``"cpu"``: VeRL calls
  ``.to(get_device_id())``), gloo; vLLM's own CPU platform serves the rollouts
  (``VLLM_PLUGINS=`` set empty keeps torch_tpu.vllm out);
- VeRL's FSDP engines registered for ``cpu`` (0.9.1 registers cuda and npu);
- VeRL's workers join ``cpu:gloo,{device}:{backend}``, for cpu a duplicate
  that torch refuses: the workers get ``backend="cpu:gloo"``;
- vLLM's CPU linear layers keep their weights (``_vllm_keeps_cpu_weights``).
"""
import contextlib
import functools
import os

import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry


class _CpuDeviceModule:
    """``torch.cpu`` with the ``torch.cuda`` calls VeRL makes on its device
    module (memory statistics, RNG state, caches) answered for the host."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def _zero(self, *args, **kwargs):
        return 0

    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = _zero

    def _none(self, *args, **kwargs):
        return None

    empty_cache = ipc_collect = set_per_process_memory_fraction = reset_peak_memory_stats = _none

    def mem_get_info(self, *args):
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    def get_rng_state(self, *args):
        return torch.get_rng_state()

    def set_rng_state(self, state, *args):
        torch.set_rng_state(state)

    def get_device_name(self, *args):
        return "cpu"


_DEVICE_MODULE = _CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: _DEVICE_MODULE)

    def is_available(self):
        return True

    def is_platform_available(self, use_smi_check=False):
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

    def current_device(self):
        # VeRL places tensors with `.to(get_device_id())`; an int names the
        # accelerator's device, and this process has none
        return "cpu"

    def device_count(self):
        return 1

    def set_device(self, device_index):
        return None

    def synchronize(self, device_index=None):
        return None

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        return None

    def empty_cache(self):
        return None

    def get_device_capability(self, device_index=0):
        return None, None

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "VERL_CPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg):
        yield

    def profiler_start(self):
        return None

    def profiler_stop(self):
        return None

    def ray_resource_name(self):
        return "GPU"  # VeRL's resource-pool check counts GPU or NPU only

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def cudart(self):
        return None


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
    import verl.workers.engine_workers as _workers

    for _type, _cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if "cpu" not in EngineRegistry._engines.get(_type, {}).get("fsdp2", {}):
            EngineRegistry.register(model_type=_type, backend=["fsdp", "fsdp2"], device="cpu")(_cls)
    if not isinstance(_workers.initialize_global_process_group_ray, functools.partial):
        _workers.initialize_global_process_group_ray = functools.partial(
            _workers.initialize_global_process_group_ray, backend="cpu:gloo")


def _vllm_keeps_cpu_weights():
    """vLLM's CPU platform repacks each linear weight for oneDNN or its SGL
    kernels at load and drops the Parameter (with its weight_loader), so
    VeRL's weight sync (``model.load_weights``) fails on it; the reference's
    vLLM keeps plain weights and torch's linear instead.  Runs in every
    process that imports this module, vLLM's workers included (they import
    VeRL's worker extension, hence VeRL, hence this module)."""
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.utils as layer_utils

    ops._supports_onednn = False
    layer_utils.check_cpu_sgl_kernel = lambda *args, **kwargs: False


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    _vllm_keeps_cpu_weights()
