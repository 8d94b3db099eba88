"""Matrix products and triangular solves on tpu vs CPU, by value and by gradient."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from op_compare import no_fallback

T = torch.device("tpu")


def _grad_compare(fn, *args, atol=1e-5, rtol=1e-5):
    """Runs fn on CPU and tpu copies of args; compares outputs, then the
    gradients of sum(out * r) for a fixed random r."""
    cpu = [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
           for a in args]
    tpu = [a.detach().to(T).requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
           for a in args]
    oc, ot = fn(*cpu), fn(*tpu)
    torch.testing.assert_close(ot.cpu(), oc, atol=atol, rtol=rtol, equal_nan=True)
    r = torch.randn(oc.shape, dtype=oc.dtype)
    oc.backward(r)
    ot.backward(r.to(T))
    for c, t in zip(cpu, tpu):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol, rtol=rtol)


def test_mm_and_grad():
    _grad_compare(torch.mm, torch.randn(5, 7), torch.randn(7, 3))


@pytest.mark.parametrize("rows", [1, 2, 8, 64, 256, 257, 600])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_by_a_transposed_weight_every_row_count(rows, dtype):
    """nn.Linear's x @ W^T (a transposed view of W): on the CPU compiler 2..256
    rows are computed as (W @ x^T)^T; values, output layout and gradients
    as CPU for every row count, with and without bias, 2-D and 3-D."""
    torch.manual_seed(rows)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    x, w, b = torch.randn(rows, 48, dtype=dtype), torch.randn(40, 48, dtype=dtype), torch.randn(40, dtype=dtype)
    _grad_compare(F.linear, x, w, b, **tol)
    _grad_compare(F.linear, x, w, **tol)
    _grad_compare(lambda a, m: a @ m.t(), x, w, **tol)
    _grad_compare(F.linear, x.view(1, rows, 48), w, b, **tol)
    y = F.linear(x.to(T), w.to(T), b.to(T))
    assert y.is_contiguous() and y.view(-1).shape == (rows * 40,)


def test_matmul_broadcast_batched():
    # matmul decomposes into view/bmm/mm/_unsafe_view; gradients sum over
    # the broadcast batch dims
    _grad_compare(torch.matmul, torch.randn(2, 1, 4, 3), torch.randn(5, 3, 6))
    _grad_compare(torch.matmul, torch.randn(3), torch.randn(2, 3, 4))
    _grad_compare(torch.matmul, torch.randn(2, 4, 3), torch.randn(3))


def test_linear_with_bias():
    _grad_compare(lambda x, w, b: F.linear(x, w, b), torch.randn(2, 5, 4), torch.randn(3, 4), torch.randn(3))


def test_bmm_baddbmm_addbmm():
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    _grad_compare(torch.bmm, a, b)
    _grad_compare(lambda s, x, y: torch.baddbmm(s, x, y, beta=0.5, alpha=-2), torch.randn(3, 4, 2), a, b)
    _grad_compare(lambda s, x, y: torch.addbmm(s, x, y, beta=2, alpha=0.25), torch.randn(4, 2), a, b)


def test_addmm_scalars_and_beta_zero_ignores_nan():
    s = torch.tensor([[float("nan"), 1.0, 2.0]])
    a, b = torch.randn(2, 4), torch.randn(4, 3)
    out = torch.addmm(s.to(T), a.to(T), b.to(T), beta=0, alpha=3)
    torch.testing.assert_close(out.cpu(), torch.addmm(s, a, b, beta=0, alpha=3))
    assert not torch.isnan(out.cpu()).any()
    _grad_compare(lambda s, x, y: torch.addmm(s, x, y, beta=1.5, alpha=0.5), torch.randn(2, 3), a, b)


def test_addmm_changing_alpha_same_results():
    a, b, s = torch.randn(3, 3), torch.randn(3, 3), torch.randn(3, 3)
    for alpha in (0.1, 0.2, 0.3):
        torch.testing.assert_close(torch.addmm(s.to(T), a.to(T), b.to(T), alpha=alpha).cpu(),
                                   torch.addmm(s, a, b, alpha=alpha))


def test_mv_addmv_dot_vdot_addr():
    m, v, w = torch.randn(4, 3), torch.randn(3), torch.randn(3)
    _grad_compare(torch.mv, m, v)
    _grad_compare(lambda s, m, v: torch.addmv(s, m, v, beta=0.5, alpha=2), torch.randn(4), m, v)
    _grad_compare(torch.dot, v, w)
    _grad_compare(torch.vdot, v, w)
    _grad_compare(lambda s, a, b: torch.addr(s, a, b, beta=2, alpha=0.5), torch.randn(4, 3), torch.randn(4), w)
    _grad_compare(torch.outer, torch.randn(4), w)


def test_integer_mm():
    a = torch.randint(-5, 5, (3, 4))
    b = torch.randint(-5, 5, (4, 2))
    assert torch.equal(torch.mm(a.to(T), b.to(T)).cpu(), a @ b)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_low_precision_mm_accumulates_in_f32(dt):
    a = torch.randn(16, 512).to(dt)
    b = torch.randn(512, 8).to(dt)
    out = torch.mm(a.to(T), b.to(T)).cpu()
    assert out.dtype == dt
    ref = (a.float() @ b.float()).to(dt)
    torch.testing.assert_close(out.float(), ref.float(), atol=0.1, rtol=0.02)


def test_out_and_inplace_variants():
    a, b, s = torch.randn(2, 3), torch.randn(3, 4), torch.randn(2, 4)
    out = torch.empty(0, device=T)
    torch.mm(a.to(T), b.to(T), out=out)
    torch.testing.assert_close(out.cpu(), a @ b)
    st = s.to(T)
    st.addmm_(a.to(T), b.to(T), alpha=2)
    torch.testing.assert_close(st.cpu(), s.addmm(a, b, alpha=2))


def test_errors_match_cpu():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        torch.mm(torch.randn(2, 3, device=T), torch.randn(4, 5, device=T))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(torch.randn(2, 3, device=T), torch.randn(3, 5, device=T, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        torch.dot(torch.randn(2, 3, device=T), torch.randn(3, device=T))


# ---- triangular solves (torch_tpu/ops/cholesky.py, rule in csrc/ops/cholesky.c) -------


def _triangular(dt, batch=(2,), n=4):
    torch.manual_seed(0)
    return torch.randn(*batch, n, n, dtype=dt) + n * torch.eye(n, dtype=dt)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_matches_cpu_with_batch_broadcast(dt, upper, left, unit):
    A = _triangular(dt)
    B = torch.randn(4, 3, dtype=dt) if left else torch.randn(3, 4, dtype=dt)  # broadcast over A's batch
    c = torch.linalg.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
    t = no_fallback(lambda: torch.linalg.solve_triangular(A.to("tpu"), B.to("tpu"), upper=upper, left=left,
                                                           unitriangular=unit))
    assert t.device.type == "tpu" and t.shape == c.shape and t.dtype == c.dtype
    torch.testing.assert_close(t.cpu(), c)
    out = torch.empty(0, dtype=dt, device="tpu")
    torch.linalg.solve_triangular(A.to("tpu"), B.to("tpu"), upper=upper, left=left, unitriangular=unit, out=out)
    torch.testing.assert_close(out.cpu(), c)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve_and_its_cloned_coefficient(upper, transpose):
    A, B = _triangular(torch.float64), torch.randn(4, 2, dtype=torch.float64)
    c = torch.triangular_solve(B, A, upper=upper, transpose=transpose)
    t = no_fallback(lambda: torch.triangular_solve(B.to("tpu"), A.to("tpu"), upper=upper, transpose=transpose))
    for a, b in zip(c, t):
        assert b.shape == a.shape
        torch.testing.assert_close(b.cpu(), a)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse_match_cpu(upper):
    A = _triangular(torch.float32, batch=(3,), n=5)
    L = torch.linalg.cholesky(A @ A.mT, upper=upper)
    B = torch.randn(5, 2)
    torch.testing.assert_close(no_fallback(lambda: torch.cholesky_solve(B.to("tpu"), L.to("tpu"), upper=upper)).cpu(),
                               torch.cholesky_solve(B, L, upper=upper), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(no_fallback(lambda: torch.cholesky_inverse(L[1].to("tpu"), upper=upper)).cpu(),
                               torch.cholesky_inverse(L[1], upper=upper), rtol=1e-4, atol=1e-4)


def test_cholesky_and_solve_triangular_gradients_stay_on_device():
    M = (lambda a: a @ a.mT + torch.eye(5))(torch.randn(3, 5, 5, dtype=torch.float64))
    mc, mt = M.clone().requires_grad_(), M.to("tpu").requires_grad_()
    torch.linalg.cholesky(mc).sum().backward()
    no_fallback(lambda: torch.linalg.cholesky(mt).sum().backward())
    torch.testing.assert_close(mt.grad.cpu(), mc.grad)
    A, B = _triangular(torch.float64, batch=()).triu(), torch.randn(4, 2, dtype=torch.float64)
    ac, bc = A.clone().requires_grad_(), B.clone().requires_grad_()
    at, bt = A.to("tpu").requires_grad_(), B.to("tpu").requires_grad_()
    torch.linalg.solve_triangular(ac, bc, upper=True).pow(2).sum().backward()
    no_fallback(lambda: torch.linalg.solve_triangular(at, bt, upper=True).pow(2).sum().backward())
    torch.testing.assert_close(at.grad.cpu(), ac.grad)
    torch.testing.assert_close(bt.grad.cpu(), bc.grad)


def test_solve_triangular_bad_shapes_raise_as_on_cpu():
    A, B = torch.randn(3, 3), torch.randn(4, 2)
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.solve_triangular(A, B, upper=False)
    with pytest.raises(RuntimeError) as tpu:
        torch.linalg.solve_triangular(A.to("tpu"), B.to("tpu"), upper=False)
    assert str(tpu.value) == str(cpu.value)


# ---- LU-based linear algebra (torch_tpu/ops/lu.py, rules in csrc/ops/lu.c) ---------------


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_lu_factor_solve_unpack_match_cpu(dt):
    torch.manual_seed(1)
    A, B = torch.randn(3, 5, 5, dtype=dt), torch.randn(3, 5, 2, dtype=dt)
    c = torch.linalg.lu_factor_ex(A)
    t = no_fallback(lambda: torch.linalg.lu_factor_ex(A.to("tpu")))
    for a, b in zip(c, t):  # LU, LAPACK's pivots, info
        assert b.dtype == a.dtype
        torch.testing.assert_close(b.cpu(), a)
    for left in (True, False):
        for adjoint in (False, True):
            Bx = B if left else B.mT
            want = torch.linalg.lu_solve(c[0], c[1], Bx, left=left, adjoint=adjoint)
            got = no_fallback(lambda: torch.linalg.lu_solve(t[0], t[1], Bx.to("tpu"), left=left, adjoint=adjoint))
            torch.testing.assert_close(got.cpu(), want)
    for a, b in zip(torch.lu_unpack(c[0], c[1]), no_fallback(lambda: torch.lu_unpack(t[0], t[1]))):
        torch.testing.assert_close(b.cpu(), a)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_solve_inv_det_slogdet_match_cpu(dt):
    torch.manual_seed(2)
    A, B = torch.randn(2, 4, 4, dtype=dt), torch.randn(2, 4, 3, dtype=dt)
    At, Bt = A.to("tpu"), B.to("tpu")
    cases = [
        (lambda a, b: torch.linalg.solve(a, b), (A, B)),
        (lambda a, b: torch.linalg.solve(a, b[..., 0]), (A, B)),  # a batch of vectors
        (lambda a, b: torch.linalg.solve(a[0], b[0, :, 0]), (A, B)),  # one vector
        (lambda a, b: torch.linalg.solve(a, b.mT, left=False), (A, B)),
        (lambda a, b: torch.linalg.inv(a), (A, B)),
        (lambda a, b: torch.linalg.det(a), (A, B)),
        (lambda a, b: torch.linalg.slogdet(a), (A, B)),
        (lambda a, b: torch.logdet(a @ a.mT), (A, B)),
        (lambda a, b: torch.ops.aten._linalg_det(a), (A, B)),  # saved LU / pivots as CPU's
        (lambda a, b: torch.ops.aten._linalg_solve_ex(a.mT, b), (A, B)),
    ]
    for fn, _ in cases:
        want = fn(A, B)
        got = no_fallback(lambda: fn(At, Bt))
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for a, b in zip(want, got):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["solve", "inv", "det", "slogdet"])
def test_lu_based_gradients_match_cpu(name):
    torch.manual_seed(3)
    fn = {"solve": lambda a, b: torch.linalg.solve(a, b).sum(),
          "inv": lambda a, b: (torch.linalg.inv(a) * b.sum()).sum(),
          "det": lambda a, b: torch.linalg.det(a) * b.sum(),
          "slogdet": lambda a, b: torch.linalg.slogdet(a)[1] * b.sum()}[name]
    A, B = torch.randn(4, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    ac, bc = A.clone().requires_grad_(), B.clone().requires_grad_()
    at, bt = A.to("tpu").requires_grad_(), B.to("tpu").requires_grad_()
    fn(ac, bc).backward()
    no_fallback(lambda: fn(at, bt).backward())
    torch.testing.assert_close(at.grad.cpu(), ac.grad)
    torch.testing.assert_close(bt.grad.cpu(), bc.grad)


def test_singular_matrices_report_as_on_cpu():
    S = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    for a, b in zip(torch.linalg.lu_factor_ex(S), torch.linalg.lu_factor_ex(S.to("tpu"))):
        torch.testing.assert_close(b.cpu(), a)  # info = 2: the zero pivot
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        torch.linalg.inv(S)
    with pytest.raises(torch.linalg.LinAlgError) as tpu:
        torch.linalg.inv(S.to("tpu"))
    assert str(tpu.value) == str(cpu.value)
    assert torch.linalg.det(S.to("tpu")).item() == 0.0
    with pytest.raises(torch.linalg.LinAlgError):
        torch.cholesky(-torch.eye(2, device="tpu"))
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.solve(torch.randn(3, 3), torch.randn(4))
    with pytest.raises(RuntimeError) as tpu:
        torch.linalg.solve(torch.randn(3, 3, device="tpu"), torch.randn(4, device="tpu"))
    assert str(tpu.value) == str(cpu.value)


def test_lu_solve_with_pivots_of_the_wrong_length_raises_as_on_cpu():
    LU, piv = torch.linalg.lu_factor(torch.randn(3, 3))
    B = torch.randn(3, 2)
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.lu_solve(LU, piv[:2], B)
    with pytest.raises(RuntimeError) as tpu:
        torch.linalg.lu_solve(LU.to("tpu"), piv[:2].to("tpu"), B.to("tpu"))
    assert str(tpu.value) == str(cpu.value)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 6, 4), (2, 3, 5), (3, 1), (1, 3)], ids=str)
def test_rectangular_lu_and_linalg_lu_match_cpu(shape, dt):
    # getrf of an m x n matrix: the square rule on a zero-padded copy (the
    # same pivots), LU / pivots / info cut back to m x n and min(m, n)
    torch.manual_seed(shape[-1])
    A = torch.randn(*shape, dtype=dt)
    tol = dict(rtol=1e-4, atol=1e-5) if dt == torch.float32 else {}
    c = torch.linalg.lu_factor_ex(A)
    t = no_fallback(lambda: torch.linalg.lu_factor_ex(A.to("tpu")))
    torch.testing.assert_close(t[0].cpu(), c[0], **tol)
    assert torch.equal(t[1].cpu(), c[1]) and torch.equal(t[2].cpu(), c[2])
    for want, got in zip(torch.linalg.lu(A), no_fallback(lambda: torch.linalg.lu(A.to("tpu")))):
        torch.testing.assert_close(got.cpu(), want, **tol)
    for want, got in zip(torch.lu_unpack(*c[:2]), no_fallback(lambda: torch.lu_unpack(t[0], t[1]))):
        torch.testing.assert_close(got.cpu(), want, **tol)
    x = A.detach().to("tpu").requires_grad_()  # linalg.lu's gradient (PyTorch's formula over device ops)
    no_fallback(lambda: sum(o.sum() for o in torch.linalg.lu(x)[1:]).backward())
    y = A.detach().requires_grad_()
    sum(o.sum() for o in torch.linalg.lu(y)[1:]).backward()
    torch.testing.assert_close(x.grad.cpu(), y.grad, **tol)


def test_rectangular_singular_lu_reports_the_first_zero_pivot_as_cpu():
    for shape in ((4, 3), (3, 4)):
        A = torch.zeros(*shape)
        A[:, 0] = 1.0
        assert torch.equal(torch.linalg.lu_factor_ex(A.to("tpu"))[2].cpu(), torch.linalg.lu_factor_ex(A)[2])


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,scale", [((4, 4), 1.0), ((5, 5), 10.0), ((2, 3, 3), 0.01), ((1, 1), 3.0),
                                         ((6, 6), 4.0), ((0, 2, 2), 1.0)], ids=str)
def test_matrix_exp_matches_cpu(shape, scale, dt):
    # scaling and squaring on the device (matrix_functions.py): a Taylor
    # polynomial where ATen picks Pade-like ones: equal to rounding
    torch.manual_seed(shape[-1])
    A = torch.randn(*shape, dtype=dt) * scale
    want = torch.linalg.matrix_exp(A)
    got = no_fallback(lambda: torch.linalg.matrix_exp(A.to("tpu"))).cpu()
    assert got.shape == want.shape
    if A.numel():
        rel = (got - want).abs().max() / want.abs().max()
        assert rel < (2e-5 if dt == torch.float32 else 1e-12), rel


def test_matrix_exp_gradient_matches_cpu():
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    torch.matrix_exp(a).sum().backward()
    no_fallback(lambda: torch.matrix_exp(b).sum().backward())
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-10, atol=1e-11)
