"""Activation kernels (torch_tpu/ops/activation.py: log_sigmoid, shrink, prelu,
glu) on tpu vs CPU, by value and by gradient.  (relu ... softplus are in
test_ops_elementwise.py.)"""
import pytest
import torch
import torch.nn.functional as F
from op_compare import compare


# ---- activations and elementwise ------------------------------------------------------------------


def test_log_sigmoid():
    x = torch.randn(4, 5) * 10
    x[0, 0] = 0.0
    compare(F.logsigmoid, x)
    compare(torch.nn.LogSigmoid(), torch.randn(3, 4, dtype=torch.float64))


@pytest.mark.parametrize("fn", [F.hardshrink, F.softshrink])
def test_shrink(fn):
    x = torch.randn(5, 6)
    compare(fn, x)
    compare(lambda x: fn(x, 1.2), x)
    compare(fn, torch.tensor([float("nan"), 0.5, -0.5, 0.2]), grad=False)


def test_prelu():
    x = torch.randn(2, 3, 4, 5)
    compare(F.prelu, x, torch.rand(3) - 0.5)
    compare(F.prelu, x, torch.tensor([0.25]))
    compare(F.prelu, torch.randn(6, 3), torch.rand(3))
    m = torch.nn.PReLU(3)
    compare(lambda x, w: F.prelu(x, w), x, m.weight.detach())


def test_glu():
    compare(F.glu, torch.randn(4, 6))
    compare(lambda x: F.glu(x, 1), torch.randn(2, 4, 3))
    compare(lambda x: F.glu(x, 0), torch.randn(4, 3, dtype=torch.float64))
