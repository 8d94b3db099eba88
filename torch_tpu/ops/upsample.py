"""Upsampling kernels (csrc/ops/upsample.c): nearest, nearest-exact,
linear / bilinear / trilinear and bicubic, over 1 to 3 spatial dims, and
their backward ops; anti-aliased bilinear and bicubic as two matmuls with
CPU's weights (below).  Any case a kernel does not take (complex dtypes,
invalid sizes whose PyTorch error the CPU kernel produces, tensors empty in
a dim other than the batch) raises Unsupported and runs through the CPU
fallback.  An empty batch gives an empty result on the device.
"""
import functools

import torch

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



# ---- anti-aliased bilinear / bicubic (interpolate(..., antialias=True)) ----------------------
# Separable and linear: out = A_h @ x @ A_w^T per image, where A (n_out x
# n_in) depends only on the sizes, the scale and align_corners.  A is CPU's
# own: the CPU kernel run over the identity matrix as one image (its
# columns are the basis images of the resized dim; the other dim n -> n is
# the identity), in float64, cached; two matmuls do the rest on the device,
# and the backward is A_h^T @ g @ A_w.


@functools.lru_cache(maxsize=256)
def _aa_weights(op, n_in, n_out, align_corners, scale):
    basis = torch.eye(n_in, dtype=torch.float64).view(1, 1, n_in, n_in)  # column j: the basis image e_j
    return op(basis, [n_out, n_in], align_corners, scale, None).view(n_out, n_in)


_AA_DEVICE = {}


def _aa_matrix(op, n_in, n_out, align_corners, scale, like):
    key = (op, n_in, n_out, bool(align_corners), scale, like.device, like.dtype)
    m = _AA_DEVICE.get(key)
    if m is None:
        if len(_AA_DEVICE) > 256:
            _AA_DEVICE.clear()
        m = _AA_DEVICE[key] = _aa_weights(op, n_in, n_out, bool(align_corners), scale).to(like.dtype).to(like.device)
    return m


def _aa_check(t, sizes):
    if t.dtype not in (torch.float32, torch.float64) or t.dim() != 4 or len(sizes) != 2 or t.numel() == 0 or \
            any(int(s) <= 0 for s in sizes) or max(t.shape[2:]) > 4096:
        raise Unsupported()  # CPU computes (uint8, half types) or raises its error


def _reg_aa(name):
    cpu_op = getattr(torch.ops.aten, f"_upsample_{name}2d_aa").default

    def fwd(self, output_size, align_corners, scales_h=None, scales_w=None):
        _aa_check(self, output_size)
        ho, wo = (int(s) for s in output_size)
        a_h = _aa_matrix(cpu_op, self.shape[2], ho, align_corners, scales_h, self)
        a_w = _aa_matrix(cpu_op, self.shape[3], wo, align_corners, scales_w, self)
        return torch.matmul(torch.matmul(a_h, self), a_w.t())

    def bwd(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        _aa_check(grad_output, output_size)
        n, c, h, w = (int(s) for s in input_size)
        if list(grad_output.shape) != [n, c, int(output_size[0]), int(output_size[1])]:
            raise Unsupported()
        a_h = _aa_matrix(cpu_op, h, int(output_size[0]), align_corners, scales_h, grad_output)
        a_w = _aa_matrix(cpu_op, w, int(output_size[1]), align_corners, scales_w, grad_output)
        return torch.matmul(torch.matmul(a_h.t(), grad_output), a_w)

    register(f"aten::_upsample_{name}2d_aa", out=f"aten::_upsample_{name}2d_aa.out")(fwd)
    register(f"aten::_upsample_{name}2d_aa_backward", out=f"aten::_upsample_{name}2d_aa_backward.grad_input")(bwd)


for _name in ("bilinear", "bicubic"):
    _reg_aa(_name)
