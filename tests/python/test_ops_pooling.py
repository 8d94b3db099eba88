"""Pooling kernels (torch_tpu/ops/pooling.py) on tpu vs CPU, by value and by
gradient, and max_unpool2d / max_unpool3d."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import compare


# ---- pooling -------------------------------------------------------------------------


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
                                          ((3, 2), (2, 1), (1, 0), 1, True)])
def test_max_pool2d(k, s, p, d, ceil):
    x = torch.randn(2, 3, 9, 8)
    compare(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), x)
    compare(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)[1], x, grad=False)


def test_max_pool2d_ties_route_grad_like_cpu():
    x = torch.zeros(1, 1, 4, 4)
    compare(lambda x: F.max_pool2d(x, 2, 1), x)


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, 2, 0, False, True, None), (3, 2, 1, True, True, None),
                                                (3, 2, 1, True, False, None), (3, 2, 1, False, False, 4),
                                                ((2, 3), (1, 2), (1, 1), False, False, None)])
def test_avg_pool2d(k, s, p, ceil, cip, div):
    compare(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div),
             torch.randn(2, 3, 7, 9))


@pytest.mark.parametrize("out", [(1, 1), (3, 4), (7, 7), (2, 5)])
def test_adaptive_pools(out):
    x = torch.randn(2, 3, 7, 10)
    compare(lambda x: F.adaptive_avg_pool2d(x, out), x)
    compare(lambda x: F.adaptive_max_pool2d(x, out), x)
    compare(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True)[1], x, grad=False)


def test_max_unpool2d():
    x = torch.randn(2, 3, 6, 8)
    o, i = F.max_pool2d(x, 2, return_indices=True)
    compare(lambda o, i: F.max_unpool2d(o, i, 2), o, i)
    compare(lambda o, i: F.max_unpool2d(o, i, 2, output_size=(7, 9)), o, i)
    o, i = F.max_pool2d(x[0], 3, stride=2, padding=1, return_indices=True)
    compare(lambda o, i: F.max_unpool2d(o, i, 3, stride=2, padding=1, output_size=(6, 8)), o, i)


def test_max_unpool3d():
    # max_unpool2d's rule over D x (H W) planes (it went through the CPU fallback)
    x = torch.randn(2, 3, 4, 6, 8)
    o, i = F.max_pool3d(x, 2, return_indices=True)
    compare(lambda o, i: F.max_unpool3d(o, i, 2), o, i)
    compare(lambda o, i: F.max_unpool3d(o, i, 2, output_size=(5, 7, 9)), o, i)
    o, i = F.max_pool3d(x[0], (3, 2, 3), stride=(2, 1, 2), padding=1, return_indices=True)  # overlapping, no batch
    compare(lambda o, i: F.max_unpool3d(o, i, (3, 2, 3), stride=(2, 1, 2), padding=1, output_size=(4, 6, 8)), o, i)
    out = torch.empty(0, device="tpu")
    o, i = F.max_pool3d(x, 2, return_indices=True)
    torch._C._nn.max_unpool3d(o.to("tpu"), i.to("tpu"), (4, 6, 8), (2, 2, 2), (0, 0, 0), out=out)
    assert torch.equal(out.cpu(), F.max_unpool3d(o, i, 2))


@pytest.mark.parametrize("bad", [
    lambda d: F.max_unpool3d(torch.randn(2, 3, 2, 2, device=d)[None, None], torch.zeros(1, 1, 2, 3, 2, 2, device=d,
                                                                                          dtype=torch.long), 2),
    lambda d: torch._C._nn.max_unpool3d(torch.randn(1, 2, 2, 2, 2, device=d), torch.zeros(1, 2, 2, 2, 1, device=d,
                                                                                           dtype=torch.long),
                                        (4, 4, 4), (2, 2, 2), (0, 0, 0)),
    lambda d: torch._C._nn.max_unpool3d(torch.randn(1, 2, 2, 2, 2, device=d), torch.zeros(1, 2, 2, 2, 2, device=d,
                                                                                           dtype=torch.long),
                                        (4, 4, 4), (0, 2, 2), (0, 0, 0)),
])
def test_max_unpool3d_errors_are_cpus(bad):
    with pytest.raises(Exception) as c:
        bad("cpu")
    with pytest.raises(Exception) as t:
        bad("tpu")
    assert type(t.value) is type(c.value) and str(t.value) == str(c.value)
