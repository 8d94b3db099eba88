"""Special math kernels (torch_tpu/ops/math.py: logaddexp, logit, xlogy,
lgamma, digamma, polygamma) on tpu vs CPU.  (The unary math ops are in
test_ops_elementwise.py.)"""
import pytest
import torch
from op_compare import T, compare


@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2])
def test_logaddexp(fn):
    a, b = torch.randn(4, 5) * 20, torch.randn(5) * 20
    compare(fn, a, b)
    inf = float("inf")
    compare(fn, torch.tensor([inf, -inf, inf, 1.0, float("nan")]), torch.tensor([inf, -inf, -inf, -inf, 1.0]),
             grad=False)


def test_logit():
    x = torch.rand(20)
    x[0], x[1] = 0.0, 1.0
    compare(lambda x: torch.logit(x, eps=0.05), x)
    compare(lambda x: torch.logit(x), torch.rand(20) * 0.98 + 0.01)
    compare(lambda x: torch.logit(x), torch.tensor([-0.5, 1.5, 0.25]), grad=False)
    compare(lambda x: torch.logit(x), torch.arange(3), grad=False)


def test_xlogy_xlog1py():
    x = torch.tensor([0.0, 1.0, 2.0, 0.0, -1.5, 3.0])
    y = torch.tensor([0.0, 2.0, float("nan"), 3.0, 0.5, 4.0])
    compare(torch.xlogy, x, y, grad=False)
    compare(torch.xlogy, torch.randn(3, 4), torch.rand(4) + 0.1)
    compare(lambda y: torch.xlogy(2.0, y), torch.rand(5) + 0.1)
    compare(lambda x: torch.xlogy(x, 3), torch.randn(5))
    compare(torch.special.xlog1py, torch.randn(3, 4), torch.rand(4))


def test_xlogy_inplace_and_int():
    a = torch.rand(5) + 0.5
    ta = a.to(T)
    ta.xlogy_(2.0)
    torch.testing.assert_close(ta.cpu(), a.xlogy(2.0))
    compare(torch.xlogy, torch.arange(4), torch.arange(4) + 1, grad=False)


def test_lgamma_digamma_polygamma():
    x = torch.randn(30) * 5
    compare(torch.lgamma, x, atol=1e-4)
    compare(torch.digamma, torch.rand(30) * 10 + 0.1, atol=1e-4)
    compare(torch.digamma, torch.tensor([0.0, -1.0, -2.5, 1.0]), grad=False, atol=1e-4)
    for n in (0, 1, 2, 3):
        compare(lambda x: torch.polygamma(n, x), torch.rand(20) * 5 + 0.2, grad=n < 3, atol=1e-4, rtol=1e-3)
    compare(torch.lgamma, torch.arange(1, 6), grad=False)


def test_polygamma_negative_inputs():
    x = torch.tensor([-8.4784, -3.7, -0.5, -0.2, 0.3, 7.5, -1.5, 30.0, -15.2])
    for n in (1, 2, 3, 4):
        compare(lambda x: torch.polygamma(n, x), x, grad=False, rtol=1e-4, atol=1e-4)
