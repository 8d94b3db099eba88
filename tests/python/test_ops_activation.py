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


# ---- rrelu (random slopes on the device) --------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rrelu_training_slopes_and_gradient(dtype):
    from op_compare import no_fallback
    x = torch.randn(2000, dtype=dtype)
    x[:3] = 0.0
    xt = x.to("tpu").requires_grad_()
    y = no_fallback(lambda: F.rrelu(xt, 0.1, 0.3, training=True))
    y.sum().backward()
    neg = x < 0
    slope = (y.detach().cpu()[neg] / x[neg])
    assert slope.dtype == dtype and 0.1 <= slope.min() and slope.max() < 0.3
    assert 0.18 < slope.mean() < 0.22 and slope.std() > 0.04  # uniform on [0.1, 0.3): mean 0.2, sd 0.058
    torch.testing.assert_close(y.detach().cpu()[x > 0], x[x > 0], rtol=0, atol=0)
    g = xt.grad.cpu()
    torch.testing.assert_close(g[neg], slope)  # the backward op multiplies by the noise
    assert torch.equal(g[x > 0], torch.ones_like(g[x > 0]))


def test_rrelu_seeded_reproducible_inplace_and_eval():
    x = torch.randn(64, 8)
    xt = x.to("tpu")
    m = torch.nn.RReLU(0.05, 0.4)
    torch.tpu.manual_seed(7)
    a = m(xt).cpu()
    torch.tpu.manual_seed(7)
    b = xt.clone()
    F.rrelu_(b, 0.05, 0.4, training=True)
    assert torch.equal(a, b.cpu())
    compare(m.eval(), x)  # evaluation: leaky_relu with the mean slope
