"""linalg.lstsq on the device (torch_tpu/ops/lstsq.py; issue 42 item 6: it
went through the CPU fallback): every driver's four outputs (solution,
residuals, rank, singular_values) equal CPU's in shape, dtype and value
(tall, square, wide, batched, broadcast batches, vector right-hand sides),
gradients equal CPU's, and none of it falls back; gels' rank error is CPU's,
gelsd keeps rank-deficient inputs on the device, and gelsy sends an input
it cannot prove of full rank to the fallback (CPU's answer)."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback

DRIVERS = [None, "gels", "gelsy", "gelss", "gelsd"]
SHAPES = [((5, 3), (5, 2)), ((3, 3), (3, 2)), ((2, 4), (2, 3)), ((2, 4, 3), (2, 4, 2)), ((4, 3), (4,)),
          ((2, 1, 4, 3), (1, 3, 4, 2)), ((2, 3, 5), (2, 3)), ((3, 1), (3, 1))]
FIELDS = ("solution", "residuals", "rank", "singular_values")


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-10)


def _same(got, want, dtype):
    for name, g, w in zip(FIELDS, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        torch.testing.assert_close(g.cpu(), w, **_tol(dtype), msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("driver", DRIVERS)
def test_lstsq_equals_cpu(driver, shapes, dtype):
    torch.manual_seed(len(shapes[0]) * 7 + shapes[0][-1])
    A, B = torch.randn(*shapes[0], dtype=dtype), torch.randn(*shapes[1], dtype=dtype)
    want = torch.linalg.lstsq(A, B, driver=driver)
    with no_fallback():
        got = torch.linalg.lstsq(A.to("tpu"), B.to("tpu"), driver=driver)
    _same(got, want, dtype)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 4), (2, 4, 3)], ids=str)
def test_lstsq_gradient_equals_cpu(driver, shape):
    torch.manual_seed(3)
    A = torch.randn(*shape, dtype=torch.float64)
    B = torch.randn(*shape[:-1], 2, dtype=torch.float64)

    def grads(dev):
        a, b = A.to(dev).requires_grad_(), B.to(dev).requires_grad_()
        x, res = torch.linalg.lstsq(a, b, driver=driver)[:2]
        loss = (x * torch.linspace(-1, 1, x.numel(), dtype=x.dtype, device=dev).view(x.shape)).sum()
        if res.numel():
            loss = loss + 0.5 * res.sum()
        ga, gb = torch.autograd.grad(loss, (a, b))
        return ga.cpu(), gb.cpu()

    want = grads("cpu")
    with no_fallback():
        got = grads("tpu")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-8, atol=1e-9)


def test_lstsq_out_and_rcond():
    torch.manual_seed(5)
    A, B = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    A[:, 3] = A[:, 0] + 1e-4 * A[:, 3]  # a last singular value ~1e-4: rcond decides the rank
    for rcond in (None, 1e-3, -1.0):
        want = torch.linalg.lstsq(A, B, rcond=rcond, driver="gelsd")
        outs = tuple(torch.empty(0, device="tpu", dtype=d) for d in (A.dtype, A.dtype, torch.int64, A.dtype))
        with no_fallback():
            torch.linalg.lstsq(A.to("tpu"), B.to("tpu"), rcond=rcond, driver="gelsd", out=outs)
        assert int(outs[2]) == int(want.rank), rcond
        _same(outs, want, torch.float64)


@pytest.mark.parametrize("driver", ["gelss", "gelsd"])
def test_svd_drivers_keep_rank_deficient_inputs_on_the_device(driver):
    torch.manual_seed(2)
    A = torch.randn(2, 6, 2, dtype=torch.float64) @ torch.randn(2, 2, 4, dtype=torch.float64)  # rank 2 of 4
    B = torch.randn(2, 6, 3, dtype=torch.float64)
    want = torch.linalg.lstsq(A, B, driver=driver)
    with no_fallback():
        got = torch.linalg.lstsq(A.to("tpu"), B.to("tpu"), driver=driver)
    assert want.rank.tolist() == [2, 2] and want.residuals.numel() == 0
    _same(got, want, torch.float64)


def test_gelsy_sends_a_possibly_rank_deficient_input_to_cpu():
    torch.manual_seed(4)
    A = torch.randn(6, 2) @ torch.randn(2, 4)
    B = torch.randn(6, 3)
    want = torch.linalg.lstsq(A, B)
    with no_fallback(allowed=("linalg_lstsq",)):
        got = torch.linalg.lstsq(A.to("tpu"), B.to("tpu"))
    assert int(want.rank) == 2
    _same(got, want, torch.float32)
    assert torch_tpu.fallback_counts().get("aten::linalg_lstsq", 0) >= 1


def _rank_one(*batch):
    A = torch.zeros(*batch, 4, 3)
    A[..., 0] = 1.0
    return A


ERRORS = [
    lambda d: torch.linalg.lstsq(_rank_one().to(d), torch.randn(4, 2).to(d), driver="gels"),
    lambda d: torch.linalg.lstsq(_rank_one(2).to(d), torch.randn(2, 4, 2).to(d), driver="gels"),
    lambda d: torch.linalg.lstsq(_rank_one(1).to(d), torch.randn(1, 4, 2).to(d), driver="gels"),
    lambda d: torch.linalg.lstsq(torch.randn(4, 3, device=d), torch.randn(4, 2, device=d), driver="bad"),
    lambda d: torch.linalg.lstsq(torch.randn(4, 3, device=d), torch.randn(4, 2, device=d, dtype=torch.float64)),
    lambda d: torch.linalg.lstsq(torch.randn(4, 3, device=d), torch.randn(5, 2, device=d)),
    lambda d: torch.linalg.lstsq(torch.randn(4, 3, device=d), torch.randn(5, 4, 2, device=d)),
    lambda d: torch.linalg.lstsq(torch.randn((), device=d), torch.randn((), device=d)),
    lambda d: torch.linalg.lstsq(torch.ones(4, 3, device=d, dtype=torch.int64), torch.ones(4, 2, device=d,
                                                                                         dtype=torch.int64)),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_lstsq_errors_are_cpus(i):
    with pytest.raises(Exception) as cpu:
        ERRORS[i]("cpu")
    with pytest.raises(Exception) as tpu:
        ERRORS[i]("tpu")
    assert type(tpu.value) is type(cpu.value) and str(tpu.value) == str(cpu.value)


def test_gels_rank_error_is_raised_on_the_device():
    with no_fallback(), pytest.raises(RuntimeError, match="does not have full rank"):
        torch.linalg.lstsq(_rank_one().to("tpu"), torch.randn(4, 2).to("tpu"), driver="gels")
