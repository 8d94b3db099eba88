"""Embedding and loss kernels (torch_tpu/ops/embedding.py, loss.py) on tpu vs
CPU, by value and by gradient."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import compare


# ---- embedding, losses -------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx,scale", [(None, False), (2, False), (None, True), (0, True)])
def test_embedding(padding_idx, scale):
    idx = torch.tensor([[0, 2, 2, 5], [1, 0, 5, 5]])
    compare(lambda w: F.embedding(idx.to(w.device), w, padding_idx=padding_idx, scale_grad_by_freq=scale),
             torch.randn(6, 3))


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_label_smoothing(smoothing, reduction):
    logits = torch.randn(6, 5)
    target = torch.tensor([1, 4, -100, 0, 2, -100])
    weight = torch.rand(5) + 0.5
    compare(lambda x: F.cross_entropy(x, target.to(x.device), ignore_index=-100, label_smoothing=smoothing,
                                       reduction=reduction), logits)
    compare(lambda x, w: F.cross_entropy(x, target.to(x.device), weight=w, label_smoothing=smoothing,
                                          reduction=reduction), logits, weight, nograd=(1,))


def test_cross_entropy_custom_ignore_and_2d():
    compare(lambda x: F.cross_entropy(x, torch.tensor([1, 3, 3, 0], device=x.device), ignore_index=3),
             torch.randn(4, 5))
    target = torch.randint(0, 4, (2, 5, 6))
    target[0, 0, 0] = -100
    compare(lambda x: F.cross_entropy(x, target.to(x.device)), torch.randn(2, 4, 5, 6))
    compare(lambda x: F.nll_loss(x, torch.tensor(2, device=x.device)), torch.randn(5).log_softmax(0))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    compare(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)
    compare(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5), x, y)
    compare(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.7), x, y)
    compare(lambda x, y: F.l1_loss(x, y, reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    p = torch.rand(3, 4) * 0.98 + 0.01
    y = torch.rand(3, 4)
    compare(lambda p, y: F.binary_cross_entropy(p, y, reduction=reduction), p, y)
    compare(lambda p, y, w: F.binary_cross_entropy(p, y, weight=w, reduction=reduction), p, y, torch.rand(3, 4),
             nograd=(2,))
    compare(lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction), torch.randn(3, 4), y)


def test_nll_loss_backward_every_target_ignored_gives_zero_grad_like_cpu():
    # mean over a total weight of 0: the loss is NaN on both, the gradient 0
    x = torch.randn(2, 3)
    t = torch.tensor([1, 1])
    compare(lambda x: F.cross_entropy(x, t.to(x.device), ignore_index=1), x, atol=0, rtol=0)
