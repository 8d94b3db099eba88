"""Convolution kernels (torch_tpu/ops/convolution.py) on tpu vs CPU, by value
and by gradient: conv 1-3d, transposed, groups, padding modes; unfold / fold."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import T, compare


# ---- convolution ----------------------------------------------------------------------


@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, 1, 1, 2), ((2, 1), (0, 2), (1, 2), 4), (1, 1, 1, 8)])
def test_conv2d(stride, padding, dilation, groups):
    x = torch.randn(2, 8, 9, 10)
    w = torch.randn(16, 8 // groups, 3, 3)
    b = torch.randn(16)
    compare(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
             x, w, b)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_padding_same_and_no_bias():
    compare(lambda x, w: F.conv2d(x, w, padding="same"), torch.randn(1, 3, 7, 6), torch.randn(4, 3, 4, 3))


def test_conv1d_conv3d():
    compare(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), torch.randn(2, 4, 11), torch.randn(6, 4, 3),
             torch.randn(6))
    compare(lambda x, w: F.conv3d(x, w, padding=1, groups=2), torch.randn(1, 4, 5, 6, 4), torch.randn(4, 2, 3, 3, 2))


def test_conv2d_unbatched():
    compare(lambda x, w: F.conv2d(x, w, padding=1), torch.randn(3, 6, 6), torch.randn(5, 3, 3, 3))


@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 1, 2, 2), (3, 2, 0, 1, 1)])
def test_conv_transpose2d(stride, padding, output_padding, groups, dilation):
    x = torch.randn(2, 4, 5, 6)
    w = torch.randn(4, 6 // groups, 3, 3)
    b = torch.randn(6)
    compare(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=stride, padding=padding,
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


# ---- windows ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,d,p,s", [((2, 3), 1, 1, (2, 1)), (3, 2, 0, 1), (1, 1, 0, 2), ((3, 2), (1, 2), (2, 0), 3)])
def test_unfold_fold(k, d, p, s):
    x = torch.randn(2, 3, 8, 9)
    compare(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), x)
    cols = F.unfold(x, k, dilation=d, padding=p, stride=s)
    compare(lambda c: F.fold(c, (8, 9), k, dilation=d, padding=p, stride=s), cols)
    compare(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), x[0])


def test_empty_unfold_fold_stay_on_device():
    compare(lambda x: F.unfold(x, 2), torch.randn(0, 1, 5, 5), grad=False)
    compare(lambda x: F.fold(x, (3, 3), 2), torch.randn(0, 4, 4), grad=False)


def test_conv_error_message():
    with pytest.raises(RuntimeError, match="expected input.* to have 4 channels"):
        F.conv2d(torch.randn(1, 3, 5, 5, device=T), torch.randn(2, 4, 3, 3, device=T))
