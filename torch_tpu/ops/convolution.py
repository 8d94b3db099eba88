"""Convolution kernels (csrc/ops/convolution.c): aten::convolution (and the
*_overrideable ops PyTorch's _convolution routes a PrivateUse1 backend to)
and its backward, im2col / col2im (nn.Unfold / nn.Fold).
"""
from .._dispatch import Unsupported, register, run, supported


def _tup(v, n, name="param"):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if len(v) == 1 and n > 1:
        v = v * n
    if len(v) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match the "
                           f"convolution dimensions, but got {name}={v}")
    return [int(x) for x in v]


# ---- convolution ------------------------------------------------------------------


def _conv_attrs(weight, stride, padding, dilation, transposed, output_padding, groups):
    nsp = weight.dim() - 2
    if nsp < 1:
        raise RuntimeError(f"convolution: weight should have at least three dimensions, got {weight.dim()}")
    if isinstance(padding, str):
        raise RuntimeError("convolution: string padding reaches the device only through conv*d, not convolution")
    return [nsp, int(bool(transposed)), int(groups), *_tup(stride, nsp, "stride"), *_tup(padding, nsp, "padding"),
            *_tup(dilation, nsp, "dilation"), *_tup(output_padding or [0], nsp, "output_padding")]


@register(["aten::convolution", "aten::convolution_overrideable"],
          out=["aten::convolution.out", "aten::convolution_overrideable.out"])
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    ints = _conv_attrs(weight, stride, padding, dilation, transposed, output_padding, groups)
    if input.dim() >= 3 and input.shape[0] and input.shape[1] and 0 in input.shape[2:]:
        # PyTorch's own check (ATen Convolution.cpp); found by tests/faults' op fuzzer
        raise RuntimeError(f"Only zero batch or zero channel inputs are supported, but got input shape: "
                           f"{list(input.shape)}")
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise Unsupported()  # integer convolutions (CPU has them, the rule does not): the CPU fallback
    ins = [input, weight] + ([bias] if bias is not None else [])
    return run("convolution", ins, ints)[0]


def _conv_bwd(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
              output_mask):
    mask = [bool(m) for m in output_mask]
    if not any(mask):
        return None, None, None
    ints = _conv_attrs(weight, stride, padding, dilation, transposed, output_padding, groups) + [int(m) for m in mask]
    outs = iter(run("convolution_backward", [grad_output, input, weight], ints))
    return tuple(next(outs) if m else None for m in mask)


@register("aten::convolution_backward")
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    return _conv_bwd(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                     output_mask)


@register("aten::convolution_backward_overrideable")
def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask):
    return _conv_bwd(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                     output_mask)


# ---- im2col / col2im ---------------------------------------------------------------------


def _pair(v):
    v = [int(a) for a in (v if isinstance(v, (list, tuple)) else [v])]
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise Unsupported()
    return v


def _win(kernel_size, dilation, padding, stride):
    return [*_pair(kernel_size), *_pair(dilation), *_pair(padding), *_pair(stride)]


@register("aten::im2col", out="aten::im2col.out")
def im2col(self, kernel_size, dilation, padding, stride):
    supported(self.dtype)
    w = _win(kernel_size, dilation, padding, stride)
    if self.dim() not in (3, 4) or min(self.shape[-3:]) == 0 or min(w[0:2] + w[2:4] + w[6:8]) < 1 or min(w[4:6]) < 0:
        raise Unsupported()
    x = self if self.dim() == 4 else self.unsqueeze(0)
    L = 1
    for i in range(2):
        n = (x.shape[2 + i] + 2 * w[4 + i] - (w[2 + i] * (w[i] - 1) + 1)) // w[6 + i] + 1
        if n < 1:
            raise Unsupported()
        L *= n
    if x.shape[0] == 0:
        return self.new_empty([0, x.shape[1] * w[0] * w[1], L])
    r = run("im2col", [x], w)[0]
    return r if self.dim() == 4 else r.squeeze(0)


@register("aten::col2im", out="aten::col2im.out")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    supported(self.dtype)
    w = _win(kernel_size, dilation, padding, stride)
    out = _pair(output_size)
    if self.dim() not in (2, 3) or min(self.shape[-2:]) == 0 or min(w[0:2] + w[2:4] + w[6:8]) < 1 or min(w[4:6]) < 0:
        raise Unsupported()
    x = self if self.dim() == 3 else self.unsqueeze(0)
    L = 1
    for i in range(2):
        n = (out[i] + 2 * w[4 + i] - (w[2 + i] * (w[i] - 1) + 1)) // w[6 + i] + 1
        if n < 1:
            raise Unsupported()
        L *= n
    if x.shape[1] % (w[0] * w[1]) or x.shape[2] != L:
        raise Unsupported()
    if x.shape[0] == 0:
        return self.new_empty([0, x.shape[1] // (w[0] * w[1]), *out])
    r = run("col2im", [x], [*out, *w])[0]
    return r if self.dim() == 3 else r.squeeze(0)

