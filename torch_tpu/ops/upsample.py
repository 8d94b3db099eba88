"""Upsampling kernels (csrc/ops/upsample.c): nearest, nearest-exact,
linear / bilinear / trilinear and bicubic, over 1 to 3 spatial dims, and
their backward ops.  Any case a kernel does not take (complex dtypes,
invalid sizes whose PyTorch error the CPU kernel produces, tensors empty in
a dim other than the batch) raises Unsupported and runs through the CPU
fallback.  An empty batch gives an empty result on the device.
"""
from .._dispatch import Unsupported, register, run, supported


def _empty_batch(shape):
    """True when only the batch dim of shape is 0 (CPU accepts it and gives
    an empty result); Unsupported when another dim is 0 (CPU's error)."""
    if all(int(d) for d in shape):
        return False
    if int(shape[0]) == 0 and all(int(d) for d in shape[1:]):
        return True
    raise Unsupported()


def _scales(scales, n):
    return [float(s) if s is not None else -1.0 for s in (list(scales) + [None] * n)[:n]]


def _up(rule, mode, x, sizes, scales, nsp):
    supported(x.dtype)
    if x.dim() != nsp + 2 or len(sizes) != nsp or any(int(s) <= 0 for s in sizes):
        raise Unsupported()
    if _empty_batch(x.shape):
        return x.new_empty([*x.shape[:2], *[int(s) for s in sizes]])
    return run(rule, [x], [int(mode), nsp, *[int(s) for s in sizes]], _scales(scales, nsp))[0]


def _up_bwd(rule, mode, g, output_size, input_size, scales, nsp):
    supported(g.dtype)
    input_size = [int(s) for s in input_size]
    if (g.dim() != nsp + 2 or len(input_size) != nsp + 2 or list(g.shape[2:]) != [int(s) for s in output_size]
            or list(g.shape[:2]) != input_size[:2]):
        raise Unsupported()
    if _empty_batch(input_size):
        return g.new_zeros(input_size)
    return run(rule, [g], [int(mode), nsp, *input_size[2:]], _scales(scales, nsp))[0]


def _reg_nearest(nsp, exact):
    base = f"{'_upsample_nearest_exact' if exact else 'upsample_nearest'}{nsp}d"

    def fwd(self, output_size, *scales):
        return _up("upsample_nearest", exact, self, output_size, scales, nsp)

    def bwd(grad_output, output_size, input_size, *scales):
        return _up_bwd("upsample_nearest_backward", exact, grad_output, output_size, input_size, scales, nsp)

    register(f"aten::{base}", out=f"aten::{base}.out")(fwd)
    register(f"aten::{base}_backward", out=f"aten::{base}_backward.grad_input")(bwd)


for _n in (1, 2, 3):
    _reg_nearest(_n, 0)
    _reg_nearest(_n, 1)

_LINEAR = {1: "upsample_linear1d", 2: "upsample_bilinear2d", 3: "upsample_trilinear3d"}


def _reg_linear(nsp):
    base = _LINEAR[nsp]

    def fwd(self, output_size, align_corners, *scales):
        if not self.dtype.is_floating_point:
            raise Unsupported()
        return _up("upsample_linear", bool(align_corners), self, output_size, scales, nsp)

    def bwd(grad_output, output_size, input_size, align_corners, *scales):
        if not grad_output.dtype.is_floating_point:
            raise Unsupported()
        return _up_bwd("upsample_linear_backward", bool(align_corners), grad_output, output_size, input_size,
                       scales, nsp)

    register(f"aten::{base}", out=f"aten::{base}.out")(fwd)
    register(f"aten::{base}_backward", out=f"aten::{base}_backward.grad_input")(bwd)


for _n in (1, 2, 3):
    _reg_linear(_n)


@register("aten::upsample_bicubic2d", out="aten::upsample_bicubic2d.out")
def upsample_bicubic2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    if not self.dtype.is_floating_point:
        raise Unsupported()
    return _up("upsample_cubic", bool(align_corners), self, output_size, (scales_h, scales_w), 2)


@register("aten::upsample_bicubic2d_backward", out="aten::upsample_bicubic2d_backward.grad_input")
def upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    if not grad_output.dtype.is_floating_point:
        raise Unsupported()
    return _up_bwd("upsample_cubic_backward", bool(align_corners), grad_output, output_size, input_size,
                   (scales_h, scales_w), 2)

