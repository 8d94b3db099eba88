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
