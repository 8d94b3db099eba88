"""Transformers on tpu: the two defaults Transformers 5.24 does not derive
from torch.accelerator.

Transformers already knows torch_tpu (is_torch_tpu_available, Trainer's
device, CompileConfig(backend="tpu")), but two places pick a device from a
fixed list (cuda, xpu, mps, ...) and otherwise use the CPU.  The patches
below are applied by the import hook of torch_tpu.integrations when their
module loads, and act only when tpu is the accelerator:

| Transformers                                      | on tpu                     |
| ------------------------------------------------- | -------------------------- |
| pipelines.base.Pipeline.__init__ without `device` | device=tpu:<current index> |
|                                                   | (as a CUDA machine gets    |
|                                                   | cuda:0; an explicit device |
|                                                   | or a device_map is kept)   |
| generation.continuous_batching.utils.             | the tpu device and its     |
| get_device_and_memory_breakdown (sizes the paged  | memory figures (mem_get_   |
| KV cache of generate_batch)                       | info, memory_reserved)     |
|                                                   | instead of the host's      |
"""
import functools

from . import _tpu_is_accelerator


def _patch_pipeline_base(base):
    import inspect

    cls = base.Pipeline
    original = cls.__init__
    sig = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if _tpu_is_accelerator():
            bound = sig.bind_partial(self, *args, **kwargs)
            model = bound.arguments.get("model")
            if ("device" not in bound.arguments or bound.arguments["device"] is None) and \
                    getattr(model, "hf_device_map", None) is None:
                import torch

                bound.arguments["device"] = torch.device("tpu", torch.tpu.current_device())
                return original(*bound.args, **bound.kwargs)
        return original(self, *args, **kwargs)

    cls.__init__ = __init__


def tpu_memory_breakdown():
    """(device, total, reserved, allocated) bytes of the current tpu device."""
    import torch

    device = torch.device("tpu", torch.tpu.current_device())
    torch.tpu.synchronize()
    free, total = torch.tpu.mem_get_info(device)
    return device, total, torch.tpu.memory_reserved(device), total - free


def _patch_cb_utils(utils):
    original = utils.get_device_and_memory_breakdown

    @functools.wraps(original)
    def get_device_and_memory_breakdown():
        if _tpu_is_accelerator():
            return tpu_memory_breakdown()
        return original()

    utils.get_device_and_memory_breakdown = get_device_and_memory_breakdown


def register_all(register):
    register("transformers.pipelines.base", _patch_pipeline_base)
    register("transformers.generation.continuous_batching.utils", _patch_cb_utils)
