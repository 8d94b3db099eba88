"""nansum and the scans of torch_tpu/ops/reduce.py (cummax / cummin,
logcumsumexp) on tpu vs CPU, by value and by gradient."""
import pytest
import torch
from op_compare import compare


# ---- reductions, scans, factories ----------------------------------------------------------------


def test_nansum():
    x = torch.randn(4, 5, 3)
    x[0, 1, 2] = float("nan")
    x[3, 0, 0] = float("nan")
    compare(torch.nansum, x)
    compare(lambda x: torch.nansum(x, 1), x)
    compare(lambda x: torch.nansum(x, (0, 2), keepdim=True), x)
    compare(lambda x: torch.nansum(x, -1, dtype=torch.float64), x)
    compare(torch.nansum, torch.randint(0, 5, (3, 4)), grad=False)
    compare(lambda x: torch.nansum(x, 0), x.to(torch.bfloat16), atol=1e-2, rtol=1e-2, grad=False)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin(fn):
    x = torch.randn(4, 7)
    x[1, 3] = x[1, 1]  # ties take the last index
    compare(lambda x: fn(x, 1), x)
    compare(lambda x: fn(x, 0), x)
    y = x.clone()
    y[2, 2] = float("nan")
    y[2, 5] = float("nan")
    compare(lambda x: fn(x, 1), y, grad=False)
    compare(lambda x: fn(x, -1), torch.randint(0, 3, (3, 9)), grad=False)
    compare(lambda x: fn(x, 0), torch.tensor(2.5), grad=False)


def test_logcumsumexp():
    x = torch.randn(4, 9) * 30
    x[0, 0] = -1000.0
    compare(lambda x: torch.logcumsumexp(x, 1), x, atol=1e-4)
    compare(lambda x: torch.logcumsumexp(x, 0), torch.randn(17, 3, dtype=torch.float64))
    inf = float("inf")
    compare(lambda x: torch.logcumsumexp(x, 0), torch.tensor([-inf, -inf, 1.0, inf, 2.0]), grad=False)
