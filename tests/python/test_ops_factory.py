"""Factory kernels (torch_tpu/ops/factory.py: eye, linspace, logspace) on tpu
vs CPU."""
import pytest
import torch

import torch_tpu
from op_compare import T


def test_eye():
    before = torch_tpu.fallback_counts()
    for args, kw in [((3,), {}), ((3, 5), {}), ((4, 2), dict(dtype=torch.int64)), ((0,), {}),
                     ((2,), dict(dtype=torch.bool))]:
        t = torch.eye(*args, device=T, **kw)
        torch.testing.assert_close(t.cpu(), torch.eye(*args, **kw))
    out = torch.empty(7, device=T)
    torch.eye(2, 3, out=out)
    torch.testing.assert_close(out.cpu(), torch.eye(2, 3))
    assert torch_tpu.fallback_counts() == before
    with pytest.raises(RuntimeError):
        torch.eye(-1, device=T)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_linspace_logspace(dtype):
    before = torch_tpu.fallback_counts()
    for args in [(-1, 3.5, 11), (0, 1, 1), (2, -7, 0), (5, 5, 4), (-3, 17, 7), (0, 10, 100)]:
        torch.testing.assert_close(torch.linspace(*args, dtype=dtype, device=T).cpu(),
                                   torch.linspace(*args, dtype=dtype))
        if dtype.is_floating_point:
            torch.testing.assert_close(torch.logspace(*args, dtype=dtype, device=T).cpu(),
                                       torch.logspace(*args, dtype=dtype), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.logspace(0, 3, 4, base=2, dtype=dtype, device=T).cpu(),
                               torch.logspace(0, 3, 4, base=2, dtype=dtype))
    assert torch_tpu.fallback_counts() == before
