"""Loss kernels (csrc/ops/loss.c): nll_loss (1-d and 2-d spatial), mse,
smooth_l1, huber, binary_cross_entropy, and their backward ops.

nll_loss with a target outside [0, C) (other than ignore_index) does not
raise as on CPU: that element contributes 0.  binary_cross_entropy does not
check that inputs are in [0, 1].  Checking would need a host sync.
"""
import torch

from .._dispatch import float_coef, register, run, to_dtype

_REDUCTIONS = {0, 1, 2}


def _red(reduction):
    reduction = int(reduction)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _nll_fwd(self, target, weight, reduction, ignore_index):
    if self.dim() < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {self.dim()})")
    if target.dtype not in (torch.int64, torch.uint8, torch.int32):
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    ins = [self, target] + ([weight] if weight is not None else [])
    out, total = run("nll_loss", ins, [_red(reduction), int(ignore_index), int(weight is not None)])
    return out, total


def _nll_bwd(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    ins = [grad_output, self, target] + ([weight] if weight is not None else []) + [total_weight]
    return run("nll_loss_backward", ins, [_red(reduction), int(ignore_index), int(weight is not None)])[0]


@register("aten::nll_loss_forward", out="aten::nll_loss_forward.output")
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    if self.dim() > 2:
        raise ValueError(f"Expected 2 or fewer dimensions (got {self.dim()})")
    return _nll_fwd(self, target, weight, reduction, ignore_index)


@register("aten::nll_loss_backward", out="aten::nll_loss_backward.grad_input")
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_bwd(grad_output, self, target, weight, reduction, ignore_index, total_weight)


@register("aten::nll_loss2d_forward", out="aten::nll_loss2d_forward.output")
def nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    if self.dim() != 4:
        raise RuntimeError(f"only batches of spatial inputs supported (4D tensors), but got input of size: "
                           f"{list(self.shape)}")
    return _nll_fwd(self, target, weight, reduction, ignore_index)


@register("aten::nll_loss2d_backward", out="aten::nll_loss2d_backward.grad_input")
def nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_bwd(grad_output, self, target, weight, reduction, ignore_index, total_weight)


def _pair(self, target):
    dt = torch.promote_types(self.dtype, target.dtype)
    return to_dtype(self, dt), to_dtype(target, dt)


@register("aten::mse_loss", out="aten::mse_loss.out")
def mse_loss(self, target, reduction=1):
    a, b = _pair(self, target)
    return run("mse_loss", [a, b], [_red(reduction)])[0]


@register("aten::mse_loss_backward", out="aten::mse_loss_backward.grad_input")
def mse_loss_backward(grad_output, self, target, reduction):
    a, b = _pair(self, target)
    return run("mse_loss_backward", [grad_output, a, b], [_red(reduction)])[0]


@register("aten::smooth_l1_loss", out="aten::smooth_l1_loss.out")
def smooth_l1_loss(self, target, reduction=1, beta=1.0):
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    a, b = _pair(self, target)
    return run("smooth_l1_loss", [a, b, float_coef(beta, a.dtype)], [_red(reduction)])[0]


@register("aten::smooth_l1_loss_backward", out="aten::smooth_l1_loss_backward.grad_input")
def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    a, b = _pair(self, target)
    return run("smooth_l1_loss_backward", [grad_output, a, b, float_coef(beta, a.dtype)], [_red(reduction)])[0]


@register("aten::huber_loss", out="aten::huber_loss.out")
def huber_loss(self, target, reduction=1, delta=1.0):
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    a, b = _pair(self, target)
    return run("huber_loss", [a, b, float_coef(delta, a.dtype)], [_red(reduction)])[0]


@register("aten::huber_loss_backward", out="aten::huber_loss_backward.out")
def huber_loss_backward(grad_output, self, target, reduction, delta):
    a, b = _pair(self, target)
    return run("huber_loss_backward", [grad_output, a, b, float_coef(delta, a.dtype)], [_red(reduction)])[0]


@register("aten::binary_cross_entropy", out="aten::binary_cross_entropy.out")
def binary_cross_entropy(self, target, weight=None, reduction=1):
    ins = [self, to_dtype(target, self.dtype)] + ([weight] if weight is not None else [])
    return run("binary_cross_entropy", ins, [_red(reduction), int(weight is not None)])[0]


@register("aten::binary_cross_entropy_backward", out="aten::binary_cross_entropy_backward.grad_input")
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
    ins = [grad_output, self, to_dtype(target, self.dtype)] + ([weight] if weight is not None else [])
    return run("binary_cross_entropy_backward", ins, [_red(reduction), int(weight is not None)])[0]
