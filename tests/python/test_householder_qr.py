"""QR through Householder reflectors on the device (torch_tpu/ops/householder.py,
issue 42 item 6: these went through the CPU fallback): geqrf, householder_product,
ormqr and linalg.qr in every mode equal CPU's LAPACK results (same sign
conventions), batched and rectangular both ways, with linalg.qr's gradient,
and none of them falls back."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback

SHAPES = [(5, 3), (3, 5), (4, 4), (2, 6, 4), (1, 1), (3, 0), (2, 1, 3)]


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qr_family_equals_cpu(shape, dtype):
    torch.manual_seed(len(shape) * 10 + shape[-1])
    A = torch.randn(*shape, dtype=dtype)
    A[..., 0, :] *= 1e-3  # small leading entries: the reflectors' signs matter
    tol = _tol(dtype)
    with no_fallback():
        a, tau = torch.geqrf(A)
        at, taut = torch.geqrf(A.to("tpu"))
        torch.testing.assert_close(at.cpu(), a, **tol)
        torch.testing.assert_close(taut.cpu(), tau, **tol)
        for mode in ("reduced", "complete", "r"):
            Q, R = torch.linalg.qr(A, mode=mode)
            Qt, Rt = torch.linalg.qr(A.to("tpu"), mode=mode)
            assert Qt.shape == Q.shape and Rt.shape == R.shape, mode
            torch.testing.assert_close(Qt.cpu(), Q, **tol)
            torch.testing.assert_close(Rt.cpu(), R, **tol)
        if shape[-2] >= shape[-1]:
            h = torch.linalg.householder_product(a, tau)
            torch.testing.assert_close(torch.linalg.householder_product(at, taut).cpu(), h, **tol)
            for left in (True, False):
                for transpose in (True, False):
                    c = torch.randn(*shape[:-2], shape[-2], 2, dtype=dtype)
                    if not left:
                        c = c.transpose(-1, -2).contiguous()
                    want = torch.ormqr(a, tau, c, left, transpose)
                    got = torch.ormqr(at, taut, c.to("tpu"), left, transpose)
                    torch.testing.assert_close(got.cpu(), want, **tol)


@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 4, 3)], ids=str)
def test_qr_gradient_equals_cpu(shape):
    torch.manual_seed(1)
    A = torch.randn(*shape, dtype=torch.float64)
    gq, gr = torch.randn_like(torch.linalg.qr(A)[0]), torch.randn_like(torch.linalg.qr(A)[1])

    def grad(dev):
        x = A.detach().to(dev).requires_grad_()
        Q, R = torch.linalg.qr(x)
        ((Q * gq.to(dev)).sum() + (R * gr.to(dev)).sum()).backward()
        return x.grad.cpu()

    want = grad("cpu")
    with no_fallback():
        got = grad("tpu")
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_qr_out_and_torch_qr():
    A = torch.randn(4, 3)
    Q, R = torch.qr(A)
    q, r = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    with no_fallback():
        torch.linalg.qr(A.to("tpu"), out=(q, r))
        Qt, Rt = torch.qr(A.to("tpu"))
    torch.testing.assert_close(q.cpu(), Q, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(Rt.cpu(), R, rtol=1e-4, atol=1e-5)


def test_complex_and_bad_mode_are_cpus():
    with pytest.raises(RuntimeError) as c:
        torch.linalg.qr(torch.randn(3, 3), mode="bad")
    with pytest.raises(RuntimeError) as t:
        torch.linalg.qr(torch.randn(3, 3, device="tpu"), mode="bad")
    assert str(t.value) == str(c.value)
    A = torch.randn(3, 2, dtype=torch.complex64)
    Q, R = torch.linalg.qr(A)  # complex: the CPU fallback, values still CPU's
    Qt, Rt = torch.linalg.qr(A.to("tpu"))
    torch.testing.assert_close(Qt.cpu(), Q)
