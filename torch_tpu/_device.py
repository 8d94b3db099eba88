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
