"""The SVD on the device by one-sided Jacobi rotations (torch_tpu/ops/jacobi.py,
issue 42 item 6: it went through the CPU fallback): singular values equal
CPU's (LAPACK) on random, rectangular both ways, batched, empty and
ill-conditioned matrices; U and V are orthonormal and reconstruct A, and
equal CPU's after PyTorch's own sign-uniformizing (the OpInfo's
output_process_fn_grad: no two SVD routines agree on the columns' signs);
svdvals, pinv, matrix_rank, cond and the norms built on it stay on the
device, with gradients equal to CPU's."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback

SHAPES = [(5, 3), (3, 5), (2, 6, 4), (1, 1), (9, 7)]


def _tol(dt):
    return dict(rtol=1e-4, atol=2e-5) if dt == torch.float32 else dict(rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("full", [False, True])
def test_svd_is_an_svd_with_cpus_singular_values(shape, dt, full):
    torch.manual_seed(shape[-1])
    A = torch.randn(*shape, dtype=dt)
    U, S, Vh = torch.linalg.svd(A, full_matrices=full)
    with no_fallback():
        Ut, St, Vht = (x.cpu() for x in torch.linalg.svd(A.to("tpu"), full_matrices=full))
    assert (Ut.shape, St.shape, Vht.shape) == (U.shape, S.shape, Vh.shape)
    tol = _tol(dt)
    torch.testing.assert_close(St, S, **tol)
    k = min(shape[-2:])
    torch.testing.assert_close((Ut[..., :k] * St.unsqueeze(-2)) @ Vht[..., :k, :], A, **tol)
    eye = torch.eye(Ut.shape[-1], dtype=dt)
    torch.testing.assert_close(Ut.mT @ Ut, eye.expand_as(Ut.mT @ Ut), **tol)
    torch.testing.assert_close(Vht @ Vht.mT, torch.eye(Vht.shape[-2], dtype=dt).expand_as(Vht @ Vht.mT), **tol)
    # PyTorch's uniformizing (its OpInfo compares |U|, |Vh| and U Vh): CPU's
    torch.testing.assert_close(Ut[..., :k].abs(), U[..., :k].abs(), **tol)
    torch.testing.assert_close(Ut[..., :k] @ Vht[..., :k, :], U[..., :k] @ Vh[..., :k, :], **tol)


def test_ill_conditioned_and_empty_matrices():
    torch.manual_seed(0)
    q1, q2 = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))[0], torch.linalg.qr(torch.randn(6, 6,
                                                                                                 dtype=torch.float64))[0]
    A = q1 @ torch.diag(torch.tensor([1e6, 1e3, 1, 1e-3, 1e-6, 1e-9], dtype=torch.float64)) @ q2
    with no_fallback():
        got = torch.linalg.svdvals(A.to("tpu")).cpu()
    torch.testing.assert_close(got, torch.linalg.svdvals(A), rtol=1e-9, atol=1e-9)
    for shape in [(5, 0), (0, 5), (0, 5, 2), (3, 0, 0)]:
        for full in (False, True):
            want = torch.linalg.svd(torch.randn(*shape), full_matrices=full)
            with no_fallback():
                got = torch.linalg.svd(torch.randn(*shape, device="tpu"), full_matrices=full)
            for w, g in zip(want, got):
                assert g.shape == w.shape and torch.equal(g.cpu(), w)


@pytest.mark.parametrize("name", ["svdvals", "pinv", "matrix_rank", "cond", "nuc", "norm2"])
def test_ops_built_on_the_svd_match_cpu_with_gradients(name):
    fns = {"svdvals": torch.linalg.svdvals, "pinv": torch.linalg.pinv, "cond": torch.linalg.cond,
           "matrix_rank": lambda a: torch.linalg.matrix_rank(a).to(a.dtype),
           "nuc": lambda a: torch.linalg.matrix_norm(a, "nuc"), "norm2": lambda a: torch.linalg.matrix_norm(a, 2)}
    fn = fns[name]
    torch.manual_seed(3)
    A = torch.randn(2, 5, 3, dtype=torch.float64)
    x, y = A.clone().requires_grad_(), A.to("tpu").requires_grad_()
    want = fn(x)
    with no_fallback():
        got = fn(y)
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-9, atol=1e-10)
        if name != "matrix_rank":
            got.sum().backward()
    if name != "matrix_rank":
        want.sum().backward()
        torch.testing.assert_close(y.grad.cpu(), x.grad, rtol=1e-8, atol=1e-9)
