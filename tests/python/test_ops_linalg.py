"""Matrix products on tpu vs CPU, by value and by gradient."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

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
