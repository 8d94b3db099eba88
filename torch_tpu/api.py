"""TorchTPU-style helpers."""
import torch

from . import _module


def tpu_device(index=None):
    """The torch.device of a tpu (the current one by default)."""
    return torch.device("tpu", _module.current_device() if index is None else index)
