"""Padding kernels (torch_tpu/ops/padding.py) on tpu vs CPU, by value and by
gradient, with no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import T, compare


# ---- padding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes(mode):
    compare(lambda x: F.pad(x, (2, 3), mode=mode), torch.randn(2, 3, 5))
    compare(lambda x: F.pad(x, (2, 3), mode=mode), torch.randn(3, 5))
    compare(lambda x: F.pad(x, (2, 3, 1, 0), mode=mode), torch.randn(2, 3, 5, 7))
    compare(lambda x: F.pad(x, (0, 1, 3, 2), mode=mode), torch.randn(3, 5, 7))
    compare(lambda x: F.pad(x, (2, 1, 1, 2, 1, 1), mode=mode), torch.randn(1, 2, 3, 3, 4))


def test_pad_replicate_large_and_negative():
    compare(lambda x: F.pad(x, (6, 0, 2, 5), mode="replicate"), torch.randn(1, 2, 3, 3))
    compare(lambda x: F.pad(x, (-1, 2), mode="replicate"), torch.randn(1, 2, 5))


def test_pad_reflect_too_large_raises_like_cpu():
    x = torch.randn(1, 2, 3)
    with pytest.raises(RuntimeError):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError):
        F.pad(x.to(T), (3, 0), mode="reflect")


def test_reflect_negative_padding():
    compare(lambda x: F.pad(x, (-1, 1, -2, 1), mode="reflect"), torch.randn(1, 3, 4, 4))


def test_empty_batches_stay_on_device():
    compare(lambda x: F.pad(x, (1, 2), mode="reflect"), torch.randn(0, 3, 3), grad=False)
    compare(lambda x: F.pad(x, (0, 2, 0, 1), mode="replicate"), torch.randn(0, 3, 3, 3), grad=False)
