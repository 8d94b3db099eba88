"""accelerate on tpu: what accelerate 1.15 asks of a device, answered for tpu.

accelerate has no public extension point for a new device type (its
device, memory and cache helpers test a fixed list: cuda, xpu, npu, mlu,
...; the only override is the ACCELERATE_TORCH_DEVICE variable).  These
patches are applied by the import hook of torch_tpu.integrations when each
module has loaded; each defers to accelerate's own code unless tpu is the
current accelerator:

| accelerate                           | on tpu                                          |
| ------------------------------------ | ----------------------------------------------- |
| state.PartialState.default_device    | tpu:<current index> (so Accelerator, Trainer and|
|                                      | prepare() place models and batches on tpu)      |
| state.PartialState._prepare_backend  | under torchrun / accelerate launch (LOCAL_RANK  |
|                                      | set): backend "tpu:tpu_dist,cpu:gloo", type     |
|                                      | MULTI_GPU (accelerate's DDP-per-device type:    |
|                                      | prepare() wraps DDP on tpu:LOCAL_RANK); it knew |
|                                      | no tpu and ran each process alone               |
| state.PartialState.set_device        | tpu:LOCAL_RANK for that type (not cuda)         |
| state.PartialState.wait_for_everyone | a CPU run (use_cpu, gloo) passes no device_ids  |
|                                      | to barrier: PyTorch would pick the accelerator's|
|                                      | device type, tpu, which gloo does not serve     |
| utils.modeling.get_max_memory        | per device torch.tpu.mem_get_info()[0] (the     |
|                                      | device's free memory) + the host's, for         |
|                                      | device_map="auto"; a user max_memory is checked |
|                                      | against torch.tpu.device_count()                |
| utils.memory.clear_device_cache      | torch.tpu.empty_cache()                         |

ACCELERATE_TORCH_DEVICE still wins when set (accelerate reads it first).
"""
import functools
import os

from . import _tpu_is_accelerator


def _patch_state(state):
    cls = state.PartialState
    original = cls.__dict__["default_device"]

    def default_device(self):
        if _tpu_is_accelerator():
            import torch

            return torch.device("tpu", torch.tpu.current_device())
        return original.fget(self)

    default_device.__doc__ = (original.__doc__ or "") + "\n        (torch_tpu: tpu when it is the accelerator.)"
    cls.default_device = property(default_device)

    from accelerate.utils import DistributedType

    prepare_backend = cls._prepare_backend

    @functools.wraps(prepare_backend)
    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        found, kind = prepare_backend(self, cpu, sagemaker_dp, backend)
        if (kind == DistributedType.NO and not cpu and not sagemaker_dp
                and int(os.environ.get("LOCAL_RANK", -1)) != -1 and _tpu_is_accelerator()):
            return backend or "tpu:tpu_dist,cpu:gloo", DistributedType.MULTI_GPU
        return found, kind

    cls._prepare_backend = _prepare_backend

    set_device = cls.set_device

    @functools.wraps(set_device)
    def _set_device(self):
        if (self.device is None and self.distributed_type == DistributedType.MULTI_GPU
                and "tpu" in (self.backend or "") and _tpu_is_accelerator()):
            import torch

            self.device = torch.device("tpu", self.local_process_index % torch.tpu.device_count())
            torch.tpu.set_device(self.device)
            return
        set_device(self)

    cls.set_device = _set_device

    wait = cls.wait_for_everyone

    @functools.wraps(wait)
    def wait_for_everyone(self):
        if self.distributed_type == DistributedType.MULTI_CPU and _tpu_is_accelerator():
            import torch

            torch.distributed.barrier()
            return
        wait(self)

    cls.wait_for_everyone = wait_for_everyone


def tpu_max_memory(max_memory=None):
    """accelerate's get_max_memory for tpu: {device index: bytes, 'cpu': bytes}.
    Defaults: the free memory each device reports (torch.tpu.mem_get_info)
    and the host's available memory.  A given dict has its sizes ("2GB")
    converted; integer keys must be tpu indices; order: devices, then
    'mps', 'cpu', 'disk' (as accelerate orders them)."""
    import psutil
    import torch
    from accelerate.utils.modeling import convert_file_size_to_int

    count = torch.tpu.device_count()
    if max_memory is None:
        out = {i: torch.tpu.mem_get_info(i)[0] for i in range(count)}
        out["cpu"] = psutil.virtual_memory().available
        return out
    max_memory = dict(max_memory)
    for key, value in max_memory.items():
        if isinstance(value, str):
            max_memory[key] = convert_file_size_to_int(value)
    devices = sorted(k for k in max_memory if isinstance(k, int))
    for k in devices:
        if k < 0 or k >= count:
            raise ValueError(f"max_memory names tpu device {k}, but there are {count} tpu devices "
                             f"(indices 0..{count - 1})")
    order = devices + [k for k in ("mps", "cpu", "disk") if k in max_memory]
    for k in max_memory:
        if k not in order:
            raise ValueError(f"Device {k!r} is not recognized, available devices are integers (tpu device "
                             "indices), 'cpu' and 'disk'")
    return {k: max_memory[k] for k in order}


def _patch_modeling(modeling):
    original = modeling.get_max_memory

    @functools.wraps(original)
    def get_max_memory(max_memory=None):
        if _tpu_is_accelerator():
            return tpu_max_memory(max_memory)
        return original(max_memory)

    modeling.get_max_memory = get_max_memory


def _patch_memory(memory):
    original = memory.clear_device_cache

    @functools.wraps(original)
    def clear_device_cache(garbage_collection=False):
        original(garbage_collection)
        if _tpu_is_accelerator():
            import torch

            torch.tpu.empty_cache()

    memory.clear_device_cache = clear_device_cache


def register_all(register):
    register("accelerate.state", _patch_state)
    register("accelerate.utils.modeling", _patch_modeling)
    register("accelerate.utils.memory", _patch_memory)
