"""Transformers on tpu: the one default Transformers 5.24 does not derive
from torch.accelerator.

Transformers already knows torch_tpu (is_torch_tpu_available, Trainer's
device, CompileConfig(backend="tpu")), but ``pipeline(...)`` without
``device`` picks its device from a fixed list (cuda, xpu, mps, ...) and
otherwise moves the model to the CPU.  The patch below (applied by the
import hook of torch_tpu.integrations when transformers.pipelines.base
loads) passes ``device=tpu:<current index>`` in that case when tpu is the
accelerator, as a CUDA machine gets ``cuda:0``.  An explicit ``device``,
or a model dispatched with ``device_map``, is left alone.
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


def register_all(register):
    register("transformers.pipelines.base", _patch_pipeline_base)
