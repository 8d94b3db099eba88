"""LDL^T with Bunch-Kaufman pivoting on the device (torch_tpu/ops/ldl.py;
issue 42 item 6: linalg.ldl_factor(_ex) and ldl_solve went through the CPU
fallback): pivots and info equal CPU's (MKL's sytrf) exactly, LD and the
solutions to tolerance, for symmetric, non-symmetric (only the lower
triangle is read), indefinite, integer-valued (ties in the pivot search),
rank-deficient and singular matrices, batched, up to a size past LAPACK's
block size; no fallback; CPU's errors for what the device declines."""
import pytest
import torch

import torch_tpu  # noqa: F401
from hf_util import no_fallback


def _matrices():
    g = torch.Generator().manual_seed(3)
    out = []
    for n in (1, 2, 3, 5, 8):
        out.append(torch.randn(2, n, n, generator=g))  # non-symmetric: the lower triangle
        a = torch.randn(2, n, n, generator=g, dtype=torch.float64)
        out.append(a + a.mT)  # indefinite
        out.append(torch.randint(-3, 4, (2, n, n), generator=g).float())  # ties
        out.append(torch.randn(2, n, 2, generator=g) @ torch.randn(2, 2, n, generator=g))  # rank <= 2
    a = torch.randn(5, 5, generator=g)
    out += [torch.tensor([[0.0, 1, 2], [1, 0, 3], [2, 3, 0]]), torch.zeros(4, 4), torch.eye(3), a @ a.T,
            torch.randn(70, 70, generator=g)]
    return out


MATS = _matrices()


@pytest.mark.parametrize("i", range(len(MATS)))
def test_ldl_factor_and_solve_equal_cpu(i):
    A = MATS[i]
    tol = dict(rtol=1e-4, atol=1e-4) if A.dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    LD, piv, info = torch.linalg.ldl_factor_ex(A)
    B = torch.randn(*A.shape[:-1], 3, dtype=A.dtype)
    with no_fallback():
        LDt, pivt, infot = torch.linalg.ldl_factor_ex(A.to("tpu"))
        X = torch.linalg.ldl_solve(LDt, pivt, B.to("tpu"))
    assert pivt.dtype == torch.int32 and infot.dtype == torch.int32 and LDt.shape == LD.shape
    assert torch.equal(pivt.cpu(), piv) and torch.equal(infot.cpu(), info)
    if A.shape[-1] > 8 or bool((info != 0).any()) or i % 4 == 3:
        tol = dict(rtol=2e-3, atol=2e-3) if A.dtype == torch.float32 else tol  # larger or ill-conditioned
    torch.testing.assert_close(LDt.cpu(), LD, **tol)
    if not bool((info != 0).any()):
        torch.testing.assert_close(X.cpu(), torch.linalg.ldl_solve(LD, piv, B), **{k: v * 10 for k, v in tol.items()})


def test_ldl_solve_broadcasts_and_out_and_empty():
    A = torch.randn(4, 4, dtype=torch.float64)
    A = A + A.T
    LD, piv = torch.linalg.ldl_factor(A)
    B = torch.randn(3, 4, 2, dtype=torch.float64)
    want = torch.linalg.ldl_solve(LD, piv, B)
    out = torch.empty(0, device="tpu", dtype=torch.float64)
    with no_fallback():
        got = torch.linalg.ldl_solve(LD.to("tpu"), piv.to("tpu"), B.to("tpu"))
        torch.linalg.ldl_solve(LD.to("tpu"), piv.to("tpu"), B.to("tpu"), out=out)
        LDo, pivo = torch.linalg.ldl_factor(A.to("tpu"))
        for shape in ((0, 0), (0, 2, 2), (2, 0, 0)):
            e = torch.linalg.ldl_factor_ex(torch.zeros(shape, device="tpu"))
            c = torch.linalg.ldl_factor_ex(torch.zeros(shape))
            assert all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(e, c)), shape
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(out.cpu(), want)
    with no_fallback():  # CPU takes int64 pivots too
        torch.testing.assert_close(torch.linalg.ldl_solve(LD.to("tpu"), piv.long().to("tpu"), B.to("tpu")).cpu(), want)
    assert torch.equal(pivo.cpu(), piv)


ERRORS = [
    lambda d: torch.linalg.ldl_factor(torch.zeros(3, 3, device=d)),  # D singular: CPU's message
    lambda d: torch.linalg.ldl_factor_ex(torch.zeros(3, 3, device=d), check_errors=True),
    lambda d: torch.linalg.ldl_factor(torch.zeros(3, 2, device=d)),
    lambda d: torch.linalg.ldl_factor(torch.zeros(3, 3, device=d, dtype=torch.int64)),
    lambda d: torch.linalg.ldl_solve(torch.eye(3, device=d), torch.ones(3, device=d, dtype=torch.int32),
                                     torch.ones(3, 1, device=d, dtype=torch.float64)),
    lambda d: torch.linalg.ldl_solve(torch.eye(3, device=d), torch.ones(3, device=d, dtype=torch.int32),
                                     torch.ones(4, 1, device=d)),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_ldl_errors_are_cpus(i):
    with pytest.raises(Exception) as cpu:
        ERRORS[i]("cpu")
    with pytest.raises(Exception) as tpu:
        ERRORS[i]("tpu")
    assert type(tpu.value) is type(cpu.value) and str(tpu.value) == str(cpu.value)
