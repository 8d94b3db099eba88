"""VeRL on tpu: a ``verl.plugin.platform`` platform named ``tpu``.

VeRL 0.9.1 routes every device question (device name, ``torch.<device>``
module, seeding, the collective backend, the Ray resource its workers hold,
the visible-devices variable) through one object, the platform returned by
``verl.plugin.platform.get_platform()``; built-in platforms are CUDA, NPU and
ROCm, and a platform class registered in ``PlatformRegistry`` under a name is
taken when ``VERL_PLATFORM=<name>`` or when its ``is_platform_available``
answers first.  ``verl/__init__.py`` imports the modules named in
``VERL_USE_EXTERNAL_MODULES`` and the ``verl.plugins`` entry points, so
``VERL_USE_EXTERNAL_MODULES=torch_tpu.integrations.verl VERL_PLATFORM=tpu``
makes every VeRL process (the driver and each Ray actor, which inherit the
driver's environment) use this one.  Nothing of VeRL is edited or wrapped.

The answers:

- device ``tpu``, ``torch.tpu`` its module, ``tpu_dist`` its process-group
  backend (VeRL's FSDP2 engine runs ``fully_shard`` over it);
- the Ray resource that stands for one device is ``GPU``: VeRL 0.9.1's
  resource-pool check (``single_controller/ray/base.py``,
  ``_check_resource_available``) counts only ``GPU`` or ``NPU``, whatever
  the platform's resource name, and Ray's own ``TPU`` resource is for Cloud
  TPU slices (it asks for their topology).  The driver starts Ray with
  ``num_gpus=N``, N the tpu devices; Ray sets CUDA_VISIBLE_DEVICES in the
  workers, which nothing here reads;
- no CUDA IPC (``is_ipc_supported`` False): VeRL's vLLM rollout then pushes
  the trainer's weights to the vLLM server in buckets through host shared
  memory and a ZMQ socket (``bucketed_weight_transfer.py``, its NPU path);
  the vLLM server process runs on tpu through torch_tpu.vllm;
- no NCCL, no nvtx, no cudart: None or no-ops.

One thing the platform cannot say, done here at import when
``VERL_PLATFORM=tpu``: VeRL's FSDP engine classes are registered for device
``tpu`` (``_register_engines``).  examples/rl/verl_cpu_platform.py is the
CPU reference's platform (outside torch_tpu: a process that imports torch_tpu
has tpu as its accelerator, and VeRL places models with ``.to(<int>)``).

Run so far with one worker (``trainer.n_gpus_per_node=1``): one actor
process on ``tpu:0`` and one vLLM server; several workers (FSDP sharding
over tpu_dist across Ray actors) are untried.
"""
import contextlib
import os

import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "tpu"
RAY_RESOURCE = "GPU"


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformTPU(PlatformBase):
    """torch_tpu's device (``tpu``) for VeRL."""

    @property
    def device_name(self) -> str:
        return "tpu"

    @property
    def vendor_name(self) -> str:
        return "torch_tpu"

    @property
    def device_module(self):
        import torch_tpu  # noqa: F401  (torch.tpu)

        return torch.tpu

    def is_available(self) -> bool:
        return self.device_module.is_available()

    def is_platform_available(self, use_smi_check=False) -> bool:
        # chosen by VERL_PLATFORM=tpu only: auto-detection would otherwise
        # take tpu for every process that imports VeRL on a GPU machine
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> int:
        return self.device_module.current_device()

    def device_count(self) -> int:
        return self.device_module.device_count()

    def set_device(self, device_index: int) -> None:
        self.device_module.set_device(device_index)

    def synchronize(self, device_index=None) -> None:
        self.device_module.synchronize(device_index)

    def manual_seed(self, seed: int) -> None:
        self.device_module.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.device_module.manual_seed_all(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None  # PJRT owns the allocator; expandable_segments is CUDA's

    def empty_cache(self) -> None:
        self.device_module.empty_cache()

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "tpu_dist"

    def visible_devices_envvar(self) -> str:
        return "TORCH_TPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return RAY_RESOURCE

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def _register_engines(device):
    """VeRL's FSDP engines (FSDP2's fully_shard, HF models) for ``device``:
    0.9.1 registers them for ``cuda`` and ``npu`` only; the classes are
    device-neutral (they take the device from the platform)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    engines = EngineRegistry._engines
    for model_type, cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        backends = [b for b in ("fsdp", "fsdp2") if device not in engines.get(model_type, {}).get(b, {})]
        if backends:
            EngineRegistry.register(model_type=model_type, backend=backends, device=device)(cls)


if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
    _register_engines(PLATFORM_NAME)
