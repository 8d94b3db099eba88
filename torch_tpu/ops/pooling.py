"""Pooling kernels (csrc/ops/pooling.c): max pooling with indices, average
pooling, adaptive average / max pooling over 2 spatial dims and their
backward ops, max_unpool2d (and 3-d through its rule), and fractional max
pooling in 2-d and 3-d.
"""
import math

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


@register("aten::max_unpool3d", out="aten::max_unpool3d.out")
def max_unpool3d(self, indices, output_size, stride, padding):
    """max_unpool2d's rule over planes of D x (H W): the indices are flat in
    a plane either way (stride and padding are only checked, as on CPU)."""
    supported(self.dtype)
    out = [int(s) for s in output_size]
    if (len(out) != 3 or len(stride) != 3 or len(padding) != 3 or min(stride) < 1 or min(padding) < 0
            or self.dim() not in (4, 5) or indices.shape != self.shape or indices.dtype != torch.int64
            or self.numel() == 0 or min(out) < 1):
        raise Unsupported()  # CPU's errors
    x, i = (self, indices) if self.dim() == 5 else (self.unsqueeze(0), indices.unsqueeze(0))
    n, c, d, h, w = x.shape
    r = run("max_unpool2d", [x.reshape(n, c, d, h * w), i.reshape(n, c, d, h * w)], [out[0], out[1] * out[2]])[0]
    r = r.view(n, c, *out)
    return r if self.dim() == 5 else r.squeeze(0)


# ---- fractional max pooling --------------------------------------------------
# aten::fractional_max_pool2d / 3d follow PyTorch's CPU kernel exactly, given
# the same `_random_samples` (the windows come from the samples; the random
# draw itself, torch.rand on the device, is the caller's).  Arguments are
# checked here with the CPU kernel's messages.  The backward scatters the
# gradient at the saved indices with the index family's scatter_add rule.


_SAMPLE_DIMS = ("time", "height", "width")


def _check_forward(name, k, self, kernel_size, output_size, samples):
    prefix = "fractional_max_pool2d()" if k == 2 else "fractional_max_pool3d_out()"
    nd = self.dim()
    if nd not in (k + 1, k + 2):
        raise RuntimeError(f"{prefix}: Expected {k + 1}D or {k + 2}D tensor, but got: {list(self.shape)}")
    for i in range(1, nd):
        if self.shape[i] == 0:
            raise RuntimeError(f"{prefix}: Expected input to have non-zero size for non-batch dimensions, but got"
                               f"{list(self.shape)} with dimension {i} being empty.")
    if not self.is_floating_point():
        raise NotImplementedError(f"\"{name}_out_frame\" not implemented for '{_short(self.dtype)}'")
    if samples.dtype != self.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.dim() != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.dim()}")
    N = self.shape[0] if nd == k + 2 else 1
    C = self.shape[-k - 1]
    if samples.shape[0] < N:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != C:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != k:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {k}; got {samples.shape[2]}.")
    pool, out = [int(v) for v in kernel_size], [int(v) for v in output_size]
    if len(pool) != k or len(out) != k:
        raise RuntimeError(f"{name}: kernel_size must either be a single Int or tuple of Ints")
    names = _SAMPLE_DIMS[3 - k:]
    for d in range(k):
        size = self.shape[nd - k + d]
        # the 3-d CPU kernel wants a strictly smaller span than the input
        if out[d] + pool[d] - 1 > size or (k == 3 and out[d] + pool[d] - 1 == size):
            raise RuntimeError(f"{prefix}: pool {names[d]} {pool[d]} too large relative to input {names[d]} {size}")
        if out[d] < 1 or pool[d] < 1:
            raise RuntimeError(f"{prefix}: output_size and kernel_size must be positive, got {out} and {pool}")
    return N, C, pool, out


def _short(dt):
    return {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte", torch.bool: "Bool"}.get(dt, str(dt))


def _forward(name, k, self, kernel_size, output_size, random_samples):
    N, C, pool, out = _check_forward(name, k, self, kernel_size, output_size, random_samples)
    batched = self.dim() == k + 2
    x = self if batched else self.unsqueeze(0)
    samples = random_samples if random_samples.shape[0] == N else random_samples[:N]
    values, indices = run("fractional_max_pool", [x, samples], [k, *pool, *out])
    if not batched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return values, indices


@register("aten::fractional_max_pool2d", out="aten::fractional_max_pool2d.output")
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    return _forward("fractional_max_pool2d", 2, self, kernel_size, output_size, random_samples)


@register("aten::fractional_max_pool3d", out="aten::fractional_max_pool3d.output")
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    return _forward("fractional_max_pool3d", 3, self, kernel_size, output_size, random_samples)


def _backward(k, grad_output, self, output_size, indices):
    lead = list(self.shape[:self.dim() - k])
    want = lead + [int(v) for v in output_size]
    if list(grad_output.shape) != want or list(indices.shape) != want:
        if k == 2:
            raise RuntimeError("fractional_max_pool2d_backward(): gradOutput sizes unexpected")
        for d, nm in enumerate(_SAMPLE_DIMS):
            i = len(lead) + d
            if grad_output.dim() <= i or grad_output.shape[i] != want[i]:
                raise RuntimeError(f"fractional_max_pool3d_backward_out(): gradOutput {nm} unexpected")
        raise RuntimeError(f"fractional_max_pool3d_backward_out(): indices of shape {list(indices.shape)}, "
                           f"expected {want}")
    plane = math.prod(self.shape[self.dim() - k:])
    g = grad_output.reshape(lead + [-1])
    idx = indices.reshape(lead + [-1])
    zeros = torch.zeros(lead + [plane], dtype=self.dtype, device=self.device)
    return run("scatter_add", [zeros, idx, g], [len(lead)])[0].view(self.shape)


@register("aten::fractional_max_pool2d_backward", out="aten::fractional_max_pool2d_backward.grad_input")
def fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices):
    return _backward(2, grad_output, self, output_size, indices)


@register("aten::fractional_max_pool3d_backward", out="aten::fractional_max_pool3d_backward.grad_input")
def fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    return _backward(3, grad_output, self, output_size, indices)
