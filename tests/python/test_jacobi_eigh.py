"""The symmetric eigenproblem on the device by two-sided Jacobi rotations
(torch_tpu/ops/jacobi.py, issue 42 item 6: it went through the CPU
fallback): eigenvalues equal CPU's (LAPACK), the eigenvectors are
orthonormal, diagonalize A and equal CPU's up to their signs (no two
eigensolvers agree on them); only the UPLO triangle is read; eigvalsh,
matrix_rank(hermitian=True) and pinv(hermitian=True) stay on the device,
with gradients equal to CPU's."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback


def _tol(dt):
    return dict(rtol=1e-4, atol=2e-5) if dt == torch.float32 else dict(rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 4), (5, 5), (2, 6, 6), (1, 1), (9, 9)], ids=str)
def test_eigh_matches_cpu(shape, dt):
    torch.manual_seed(shape[-1])
    X = torch.randn(*shape, dtype=dt)
    A = X + X.mT
    w, V = torch.linalg.eigh(A)
    with no_fallback():
        wt, Vt = (t.cpu() for t in torch.linalg.eigh(A.to("tpu")))
    tol = _tol(dt)
    torch.testing.assert_close(wt, w, **tol)
    torch.testing.assert_close((Vt * wt.unsqueeze(-2)) @ Vt.mT, A, **tol)
    torch.testing.assert_close(Vt.mT @ Vt, torch.eye(shape[-1], dtype=dt).expand_as(A), **tol)
    torch.testing.assert_close(Vt.abs(), V.abs(), rtol=1e-3, atol=1e-3 if dt == torch.float32 else 1e-8)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_only_the_named_triangle_is_read(uplo):
    torch.manual_seed(1)
    X = torch.randn(5, 5, dtype=torch.float64)
    A = X + X.mT
    A[0, 4 if uplo == "L" else 0] += 0  # keep
    B = A.clone()
    if uplo == "L":
        B[0, 4] += 7.0  # above the diagonal: never read
    else:
        B[4, 0] += 7.0
    with no_fallback():
        got = torch.linalg.eigvalsh(B.to("tpu"), UPLO=uplo).cpu()
    torch.testing.assert_close(got, torch.linalg.eigvalsh(B, UPLO=uplo), rtol=1e-10, atol=1e-11)


def test_empty_and_gradients_and_hermitian_users():
    for shape in [(0, 3, 3), (3, 0, 0)]:
        w, V = torch.linalg.eigh(torch.zeros(shape))
        with no_fallback():
            wt, Vt = torch.linalg.eigh(torch.zeros(shape, device="tpu"))
        assert wt.shape == w.shape and Vt.shape == V.shape
    torch.manual_seed(2)
    X = torch.randn(2, 4, 4, dtype=torch.float64)
    A = X + X.mT
    x, y = A.clone().requires_grad_(), A.to("tpu").requires_grad_()
    want = torch.linalg.eigvalsh(x)
    with no_fallback():
        got = torch.linalg.eigvalsh(y)
        (got * torch.arange(4.0, dtype=torch.float64, device="tpu")).sum().backward()
    (want * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(y.grad.cpu(), x.grad, rtol=1e-8, atol=1e-9)
    with no_fallback():
        r = torch.linalg.matrix_rank(A.to("tpu"), hermitian=True).cpu()
        p = torch.linalg.pinv(A.to("tpu"), hermitian=True).cpu()
    assert torch.equal(r, torch.linalg.matrix_rank(A, hermitian=True))
    torch.testing.assert_close(p, torch.linalg.pinv(A, hermitian=True), rtol=1e-8, atol=1e-9)
