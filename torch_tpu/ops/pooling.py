"""Pooling kernels (csrc/ops/pooling.c): max pooling with indices, average
pooling, adaptive average / max pooling over 2 spatial dims and their
backward ops, and max_unpool2d.
"""
import torch

from .._dispatch import Unsupported, register, run, supported


def _pool2(v, name, default=None):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if len(v) == 0 and default is not None:
        return list(default)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise RuntimeError(f"max_pool2d: {name} must either be a single int, or a tuple of two ints")
    return [int(x) for x in v]


def _maxpool_attrs(kernel_size, stride, padding, dilation, ceil_mode):
    k = _pool2(kernel_size, "kernel_size")
    return [*k, *_pool2(stride, "stride", k), *_pool2(padding, "padding"), *_pool2(dilation, "dilation"),
            int(bool(ceil_mode))]


@register("aten::max_pool2d_with_indices", out="aten::max_pool2d_with_indices.out")
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    out, idx = run("max_pool2d_with_indices", [self], _maxpool_attrs(kernel_size, stride, padding, dilation,
                                                                      ceil_mode))
    return out, idx


@register("aten::max_pool2d_with_indices_backward", out="aten::max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return run("max_pool2d_with_indices_backward", [grad_output, self, indices],
               _maxpool_attrs(kernel_size, stride, padding, dilation, ceil_mode))[0]


def _avg_attrs(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    k = _pool2(kernel_size, "kernel_size")
    return [*k, *_pool2(stride, "stride", k), *_pool2(padding, "padding"), int(bool(ceil_mode)),
            int(bool(count_include_pad)), int(divisor_override or 0)]


@register("aten::avg_pool2d", out="aten::avg_pool2d.out")
def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return run("avg_pool2d", [self], _avg_attrs(kernel_size, stride, padding, ceil_mode, count_include_pad,
                                                 divisor_override))[0]


@register("aten::avg_pool2d_backward", out="aten::avg_pool2d_backward.grad_input")
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return run("avg_pool2d_backward", [grad_output, self], _avg_attrs(kernel_size, stride, padding, ceil_mode,
                                                                       count_include_pad, divisor_override))[0]


@register("aten::_adaptive_avg_pool2d", out="aten::_adaptive_avg_pool2d.out")
def adaptive_avg_pool2d(self, output_size):
    return run("adaptive_avg_pool2d", [self], _pool2(output_size, "output_size"))[0]


@register("aten::_adaptive_avg_pool2d_backward", out="aten::_adaptive_avg_pool2d_backward.out")
def adaptive_avg_pool2d_backward(grad_output, self):
    return run("adaptive_avg_pool2d_backward", [grad_output, self])[0]


@register("aten::adaptive_max_pool2d", out="aten::adaptive_max_pool2d.out")
def adaptive_max_pool2d(self, output_size):
    out, idx = run("adaptive_max_pool2d", [self], _pool2(output_size, "output_size"))
    return out, idx


@register("aten::adaptive_max_pool2d_backward", out="aten::adaptive_max_pool2d_backward.grad_input")
def adaptive_max_pool2d_backward(grad_output, self, indices):
    return run("adaptive_max_pool2d_backward", [grad_output, self, indices])[0]



@register("aten::max_unpool2d", out="aten::max_unpool2d.out")
def max_unpool2d(self, indices, output_size):
    supported(self.dtype)
    out = [int(s) for s in output_size]
    if (len(out) != 2 or self.dim() not in (3, 4) or indices.shape != self.shape or indices.dtype != torch.int64
            or self.numel() == 0 or min(out) < 1):
        raise Unsupported()
    x, i = (self, indices) if self.dim() == 4 else (self.unsqueeze(0), indices.unsqueeze(0))
    r = run("max_unpool2d", [x, i], out)[0]
    return r if self.dim() == 4 else r.squeeze(0)


