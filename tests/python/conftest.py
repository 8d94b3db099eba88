import os
import warnings

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the device even without autoload)

warnings.filterwarnings("ignore", message="tpu: .* has no tpu kernel")

DEVICE = torch.device("tpu")


@pytest.fixture
def tpu():
    return DEVICE


def mode():
    return torch.tpu.get_eager_mode()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def _shallow_copy_shim():
    """TEMPORARY (remove when the C++ device layer lands): makes
    torch._has_compatible_shallow_copy_type True for dense cpu<->tpu pairs,
    as the C++ layer will, so that Module.to("tpu") keeps its Parameter
    objects (param.data = moved) instead of building new ones; lazy modules
    need that to stay lazy.  A no-op when PyTorch already says True."""
    probe = torch._has_compatible_shallow_copy_type(torch.empty(1), torch.empty(1, device=DEVICE))
    if probe:
        yield False
        return

    def compatible(a, b):
        kinds = {a.device.type, b.device.type}
        if a.layout == torch.strided and b.layout == torch.strided and kinds <= {"cpu", "tpu"}:
            return True
        return a.device.type == b.device.type and a.layout == b.layout

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_has_compatible_shallow_copy_type", compatible, "PrivateUse1")
    try:
        yield True
    finally:
        lib._destroy()
