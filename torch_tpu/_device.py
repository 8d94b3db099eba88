"""The "tpu" device: PrivateUse1 renamed, the torch.tpu module, RNG state."""
import contextlib
import os

import torch

from . import _C, _engine
from ._dtypes import DTYPE


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self):
        return _engine.is_available()

    def has_primary_context(self, dev_id):
        return True

    def is_built(self):
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


def _hand_over_factories():
    n = max(_C.device_count(), 1)
    devices = [torch.device("tpu", i) for i in range(n)]
    _C.set_factories(
        torch._C._construct_storage_from_data_pointer,
        torch._C._acc.create_empty_tensor,
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch,
        torch._C.DispatchKeySet(torch._C.DispatchKey.CPU),
        devices,
        DTYPE,
        {dt: code for code, dt in enumerate(DTYPE) if dt is not None},
    )


def _storage_to_tpu(self, device=None, non_blocking=False):
    """UntypedStorage.tpu(): PyTorch's generated version allocates through
    a PrivateUse1 allocator, which a Python backend does not have; this one
    uploads the bytes through a tensor instead."""
    index = torch.device(device).index if device is not None and not isinstance(device, int) else device
    index = index or 0
    if self.device.type == "tpu":
        return self
    if self.device.type != "cpu":
        self = self.cpu()
    data = torch.empty(0, dtype=torch.uint8).set_(self)
    return data.to(torch.device("tpu", index)).untyped_storage()


def _patch_storage_methods():
    torch.UntypedStorage.tpu = _storage_to_tpu
    original_to = torch.UntypedStorage.to

    def to(self, *, device, non_blocking=False):
        device = torch.device(device)
        if device.type == "tpu":
            return _storage_to_tpu(self, device, non_blocking)
        return original_to(self, device=device, non_blocking=non_blocking)

    torch.UntypedStorage.to = to

    # UntypedStorage(n, device="tpu") would allocate through a PrivateUse1
    # allocator a Python backend cannot register (a crash): build it from a
    # device tensor instead.
    original_new = torch.UntypedStorage.__new__

    def new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "tpu":
            if len(args) == 1 and isinstance(args[0], int) and not kwargs:
                return torch.zeros(args[0], dtype=torch.uint8, device=device).untyped_storage()
            if not args and not kwargs:
                return torch.zeros(0, dtype=torch.uint8, device=device).untyped_storage()
            raise RuntimeError("tpu: UntypedStorage(...) on tpu takes only a size; create a tensor instead")
        if device is None:
            return original_new(cls, *args, **kwargs)
        return original_new(cls, *args, device=device, **kwargs)

    torch.UntypedStorage.__new__ = new


def _targets_tpu(device):
    if device is None:
        acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
        return acc is not None and acc.type == "tpu"
    return torch.device(device).type == "tpu"


def _patch_pinning():
    """Pinned host memory means nothing to a PJRT transfer (the plugin stages
    copies itself), and a Python backend cannot give PyTorch a pinned
    allocator: DataLoader(pin_memory=True), which pins for the current
    accelerator, would fail.  Pinning for tpu returns the tensor itself."""
    original_pin, original_is_pinned = torch.Tensor.pin_memory, torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        if self.device.type == "cpu" and _targets_tpu(device):
            return self
        return original_pin(self) if device is None else original_pin(self, device)

    def is_pinned(self, device=None):
        if self.device.type == "cpu" and _targets_tpu(device):
            return False
        return original_is_pinned(self) if device is None else original_is_pinned(self, device)

    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = is_pinned
