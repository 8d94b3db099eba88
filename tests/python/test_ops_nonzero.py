"""Data-dependent result shapes (torch_tpu/ops/nonzero.py) on tpu vs
PyTorch CPU, with no CPU fallback: unique (sorted, inverse, counts, NaN,
bool, 0-d, empty), unique_consecutive.  nonzero itself: test_hf_ops.py."""
import pytest
import torch

import torch_tpu
from op_compare import no_fallback

T = torch.device("tpu")


def _same(fn, x):
    c = fn(x)
    t = no_fallback(lambda: fn(x.to(T)))
    c, t = (c, t) if isinstance(c, tuple) else ((c,), (t,))
    assert len(c) == len(t)
    for a, b in zip(c, t):
        assert b.device.type == "tpu" and b.dtype == a.dtype and b.shape == a.shape, (a, b)
        torch.testing.assert_close(b.cpu(), a, equal_nan=True, atol=0, rtol=0)


INPUTS = {
    "ints_2d": lambda: torch.randint(-3, 4, (5, 7)),
    "floats_nan_signed_zero": lambda: torch.tensor([3.0, -0.0, 1.0, float("nan"), 0.0, 3.0, float("nan"), -1.5]),
    "bool": lambda: torch.tensor([True, False, True, True]),
    "half": lambda: torch.randn(40).round().half(),
    "uint8": lambda: torch.randint(0, 255, (64,), dtype=torch.uint8),
    "one_element": lambda: torch.tensor([7]),
    "zero_d": lambda: torch.tensor(5.0),
    "empty_2d": lambda: torch.empty(0, 3),
}


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("inverse,counts", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_matches_cpu(name, inverse, counts):
    x = INPUTS[name]()
    _same(lambda a: torch.unique(a, return_inverse=inverse, return_counts=counts), x)
    _same(lambda a: torch.ops.aten._unique2(a, True, inverse, counts), x)
    _same(lambda a: torch.ops.aten._unique(a, True, inverse), x)


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_unique_consecutive_matches_cpu(name):
    x = INPUTS[name]()
    if x.numel() > 4:  # runs of equal values
        x = x.reshape(-1).repeat_interleave(2).reshape(-1)
    _same(lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True), x)
    _same(lambda a: torch.unique_consecutive(a), x)


def test_unique_inverse_rebuilds_the_input_on_device():
    x = torch.randint(0, 50, (8, 9), device=T)
    values, inverse = torch.unique(x, return_inverse=True)
    assert torch.equal(values[inverse].cpu(), x.cpu())


def test_unique_with_dim_still_matches_cpu_through_the_fallback():
    x = torch.tensor([[1, 2], [1, 2], [0, 5]])
    c = torch.unique(x, dim=0, return_inverse=True, return_counts=True)
    t = torch.unique(x.to(T), dim=0, return_inverse=True, return_counts=True)
    for a, b in zip(c, t):
        assert torch.equal(b.cpu(), a)


def test_unique_of_complex_raises_as_on_cpu():
    x = torch.tensor([1 + 1j, 1 + 1j, 2 - 1j])
    with pytest.raises(NotImplementedError) as cpu:
        torch.unique_consecutive(x)
    with pytest.raises(NotImplementedError) as tpu:
        torch.unique_consecutive(x.to(T))
    assert "ComplexFloat" in str(cpu.value) and "ComplexFloat" in str(tpu.value)
