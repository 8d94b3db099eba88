"""Normalization kernels (torch_tpu/ops/normalization.py: batch norm, layer
norm) on tpu vs CPU, by value and by gradient."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import T, compare


# ---- norms ------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_train_running_stats(affine):
    x = torch.randn(4, 3, 5, 6) * 2 + 1
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    w, b = (torch.randn(3), torch.randn(3)) if affine else (None, None)

    def fn(x, *wb):
        return F.batch_norm(x, rm_, rv_, *wb, training=True, momentum=0.3, eps=1e-3)

    for dev in ("cpu", T):
        rm_, rv_ = rm.clone().to(dev), rv.clone().to(dev)
        if dev == "cpu":
            xc = x.clone().requires_grad_()
            wbc = [t.clone().requires_grad_() for t in (w, b)] if affine else []
            oc = fn(xc, *wbc)
            rmc, rvc = rm_, rv_
        else:
            xt = x.to(T).requires_grad_()
            wbt = [t.to(T).requires_grad_() for t in (w, b)] if affine else []
            ot = fn(xt, *wbt)
            rmt, rvt = rm_, rv_
    torch.testing.assert_close(ot.cpu(), oc, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(rmt.cpu(), rmc, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(rvt.cpu(), rvc, atol=1e-5, rtol=1e-4)
    r = torch.randn(oc.shape)
    oc.backward(r)
    ot.backward(r.to(T))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)
    for c, t in zip(wbc, wbt):
        torch.testing.assert_close(t.grad.cpu(), c.grad, atol=1e-4, rtol=1e-4)


def test_batch_norm_eval_and_module_modes():
    torch.manual_seed(3)
    bn = torch.nn.BatchNorm1d(4)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    bn.eval()
    bnt = torch.nn.BatchNorm1d(4).to(T)
    bnt.load_state_dict(bn.state_dict())
    bnt.eval()
    compare(lambda x, w, b: F.batch_norm(x, bn.running_mean.to(x.device), bn.running_var.to(x.device), w, b,
                                          training=False), torch.randn(6, 4, 3), torch.randn(4), torch.randn(4))
    x = torch.randn(8, 4)
    torch.testing.assert_close(bnt(x.to(T)).cpu(), bn(x), atol=1e-5, rtol=1e-4)
    bn.train()
    bnt.train()
    torch.testing.assert_close(bnt(x.to(T)).cpu(), bn(x), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bnt.running_var.cpu(), bn.running_var, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape,norm", [((4, 7), (7,)), ((2, 3, 4, 5), (4, 5)), ((3, 6), (3, 6))])
def test_layer_norm(shape, norm):
    compare(lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-4), torch.randn(shape) * 3, torch.randn(norm),
             torch.randn(norm))
    compare(lambda x: F.layer_norm(x, norm), torch.randn(shape))


def test_layer_norm_bf16_stats_dtype_like_cpu():
    x = torch.randn(3, 8).bfloat16()
    oc = torch.native_layer_norm(x, (8,), torch.ones(8), None, 1e-5)
    ot = torch.native_layer_norm(x.to(T), (8,), torch.ones(8, device=T), None, 1e-5)
    assert [t.dtype for t in ot] == [t.dtype for t in oc]
    torch.testing.assert_close(ot[0].cpu().float(), oc[0].float(), atol=2e-2, rtol=2e-2)


def test_rms_norm_decomposes():
    compare(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6), torch.randn(3, 6), torch.randn(6))
