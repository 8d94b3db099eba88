"""nn kernels on tpu vs CPU, by value and by gradient (autograd on both)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

T = torch.device("tpu")


def _compare(fn, *args, atol=1e-5, rtol=1e-4, grad=True, nograd=()):
    """fn on CPU and tpu copies of args: outputs equal, then gradients of
    sum(out[0] * r) equal for every float arg not listed in nograd."""
    def rg(i, a):
        return grad and i not in nograd and a.is_floating_point()

    cpu = [a.detach().clone().requires_grad_(rg(i, a)) if isinstance(a, torch.Tensor) else a
           for i, a in enumerate(args)]
    tpu = [a.detach().to(T).requires_grad_(rg(i, a)) if isinstance(a, torch.Tensor) else a
           for i, a in enumerate(args)]
    oc, ot = fn(*cpu), fn(*tpu)
    single = isinstance(oc, torch.Tensor)
    ocs, ots = ([oc], [ot]) if single else (list(oc), list(ot))
    for c, t in zip(ocs, ots):
        torch.testing.assert_close(t.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)
    if not grad:
        return
    c0, t0 = ocs[0], ots[0]
    r = torch.randn(c0.shape, dtype=c0.dtype)
    c0.backward(r)
    t0.backward(r.to(T))
    for c, t in zip(cpu, tpu):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert t.grad is not None
            torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol * 10, rtol=rtol * 10)


# ---- convolution ----------------------------------------------------------------------


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, 1, 1, 2), ((2, 1), (0, 2), (1, 2), 4), (1, 1, 1, 8)])
def test_conv2d(stride, padding, dilation, groups):
    x = torch.randn(2, 8, 9, 10)
    w = torch.randn(16, 8 // groups, 3, 3)
    b = torch.randn(16)
    _compare(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
             x, w, b)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_padding_same_and_no_bias():
    _compare(lambda x, w: F.conv2d(x, w, padding="same"), torch.randn(1, 3, 7, 6), torch.randn(4, 3, 4, 3))


def test_conv1d_conv3d():
    _compare(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), torch.randn(2, 4, 11), torch.randn(6, 4, 3),
             torch.randn(6))
    _compare(lambda x, w: F.conv3d(x, w, padding=1, groups=2), torch.randn(1, 4, 5, 6, 4), torch.randn(4, 2, 3, 3, 2))


def test_conv2d_unbatched():
    _compare(lambda x, w: F.conv2d(x, w, padding=1), torch.randn(3, 6, 6), torch.randn(5, 3, 3, 3))


@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 1, 2, 2), (3, 2, 0, 1, 1)])
def test_conv_transpose2d(stride, padding, output_padding, groups, dilation):
    x = torch.randn(2, 4, 5, 6)
    w = torch.randn(4, 6 // groups, 3, 3)
    b = torch.randn(6)
    _compare(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=stride, padding=padding,
                                                output_padding=output_padding, groups=groups, dilation=dilation),
             x, w, b)


def test_conv_module_training_step():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, groups=2),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 5))
    net_t = torch.nn.Sequential(*[m for m in net]).to(T)  # same params, moved
    net_c = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, groups=2),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 5))
    net_c.load_state_dict({k: v.cpu() for k, v in net_t.state_dict().items()})
    x, y = torch.randn(4, 3, 10, 10), torch.tensor([0, 1, 2, 4])
    lc = F.cross_entropy(net_c(x), y)
    lt = F.cross_entropy(net_t(x.to(T)), y.to(T))
    lc.backward()
    lt.backward()
    torch.testing.assert_close(lt.cpu(), lc, atol=1e-5, rtol=1e-4)
    for (n, pc), pt in zip(net_c.named_parameters(), net_t.parameters()):
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, atol=1e-4, rtol=1e-3, msg=n)
    bc, bt = net_c[1], net_t[1]
    torch.testing.assert_close(bt.running_mean.cpu(), bc.running_mean, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bt.running_var.cpu(), bc.running_var, atol=1e-5, rtol=1e-4)
    assert bt.num_batches_tracked.item() == 1


# ---- pooling -------------------------------------------------------------------------


@pytest.mark.parametrize("k,s,p,d,ceil", [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False),
                                          ((3, 2), (2, 1), (1, 0), 1, True)])
def test_max_pool2d(k, s, p, d, ceil):
    x = torch.randn(2, 3, 9, 8)
    _compare(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), x)
    _compare(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)[1], x, grad=False)


def test_max_pool2d_ties_route_grad_like_cpu():
    x = torch.zeros(1, 1, 4, 4)
    _compare(lambda x: F.max_pool2d(x, 2, 1), x)


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, 2, 0, False, True, None), (3, 2, 1, True, True, None),
                                                (3, 2, 1, True, False, None), (3, 2, 1, False, False, 4),
                                                ((2, 3), (1, 2), (1, 1), False, False, None)])
def test_avg_pool2d(k, s, p, ceil, cip, div):
    _compare(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div),
             torch.randn(2, 3, 7, 9))


@pytest.mark.parametrize("out", [(1, 1), (3, 4), (7, 7), (2, 5)])
def test_adaptive_pools(out):
    x = torch.randn(2, 3, 7, 10)
    _compare(lambda x: F.adaptive_avg_pool2d(x, out), x)
    _compare(lambda x: F.adaptive_max_pool2d(x, out), x)
    _compare(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True)[1], x, grad=False)


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
    _compare(lambda x, w, b: F.batch_norm(x, bn.running_mean.to(x.device), bn.running_var.to(x.device), w, b,
                                          training=False), torch.randn(6, 4, 3), torch.randn(4), torch.randn(4))
    x = torch.randn(8, 4)
    torch.testing.assert_close(bnt(x.to(T)).cpu(), bn(x), atol=1e-5, rtol=1e-4)
    bn.train()
    bnt.train()
    torch.testing.assert_close(bnt(x.to(T)).cpu(), bn(x), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bnt.running_var.cpu(), bn.running_var, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape,norm", [((4, 7), (7,)), ((2, 3, 4, 5), (4, 5)), ((3, 6), (3, 6))])
def test_layer_norm(shape, norm):
    _compare(lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-4), torch.randn(shape) * 3, torch.randn(norm),
             torch.randn(norm))
    _compare(lambda x: F.layer_norm(x, norm), torch.randn(shape))


def test_layer_norm_bf16_stats_dtype_like_cpu():
    x = torch.randn(3, 8).bfloat16()
    oc = torch.native_layer_norm(x, (8,), torch.ones(8), None, 1e-5)
    ot = torch.native_layer_norm(x.to(T), (8,), torch.ones(8, device=T), None, 1e-5)
    assert [t.dtype for t in ot] == [t.dtype for t in oc]
    torch.testing.assert_close(ot[0].cpu().float(), oc[0].float(), atol=2e-2, rtol=2e-2)


def test_rms_norm_decomposes():
    _compare(lambda x, w: F.rms_norm(x, (6,), w, eps=1e-6), torch.randn(3, 6), torch.randn(6))


# ---- embedding, losses -------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx,scale", [(None, False), (2, False), (None, True), (0, True)])
def test_embedding(padding_idx, scale):
    idx = torch.tensor([[0, 2, 2, 5], [1, 0, 5, 5]])
    _compare(lambda w: F.embedding(idx.to(w.device), w, padding_idx=padding_idx, scale_grad_by_freq=scale),
             torch.randn(6, 3))


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_label_smoothing(smoothing, reduction):
    logits = torch.randn(6, 5)
    target = torch.tensor([1, 4, -100, 0, 2, -100])
    weight = torch.rand(5) + 0.5
    _compare(lambda x: F.cross_entropy(x, target.to(x.device), ignore_index=-100, label_smoothing=smoothing,
                                       reduction=reduction), logits)
    _compare(lambda x, w: F.cross_entropy(x, target.to(x.device), weight=w, label_smoothing=smoothing,
                                          reduction=reduction), logits, weight, nograd=(1,))


def test_cross_entropy_custom_ignore_and_2d():
    _compare(lambda x: F.cross_entropy(x, torch.tensor([1, 3, 3, 0], device=x.device), ignore_index=3),
             torch.randn(4, 5))
    target = torch.randint(0, 4, (2, 5, 6))
    target[0, 0, 0] = -100
    _compare(lambda x: F.cross_entropy(x, target.to(x.device)), torch.randn(2, 4, 5, 6))
    _compare(lambda x: F.nll_loss(x, torch.tensor(2, device=x.device)), torch.randn(5).log_softmax(0))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    _compare(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)
    _compare(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5), x, y)
    _compare(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.7), x, y)
    _compare(lambda x, y: F.l1_loss(x, y, reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    p = torch.rand(3, 4) * 0.98 + 0.01
    y = torch.rand(3, 4)
    _compare(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction), p, y)
    _compare(lambda p, y, w: F.binary_cross_entropy(p, y, weight=w, reduction=reduction), p, y, torch.rand(3, 4),
             nograd=(2,))
    _compare(lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction), torch.randn(3, 4), y)


def test_conv_error_message():
    with pytest.raises(RuntimeError, match="expected input.* to have 4 channels"):
        F.conv2d(torch.randn(1, 3, 5, 5, device=T), torch.randn(2, 4, 3, 3, device=T))


def test_nll_loss_backward_every_target_ignored_gives_zero_grad_like_cpu():
    # mean over a total weight of 0: the loss is NaN on both, the gradient 0
    x = torch.randn(2, 3)
    t = torch.tensor([1, 1])
    _compare(lambda x: F.cross_entropy(x, t.to(x.device), ignore_index=1), x, atol=0, rtol=0)
