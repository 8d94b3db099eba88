"""Kernels beyond the core families (rules in csrc/ops/extra.c): upsampling
(nearest, nearest-exact, linear/bilinear/trilinear), reflection and
replication padding, im2col / col2im, unfold_backward, max_unpool2d,
cummax / cummin, logcumsumexp, log_sigmoid, logaddexp(2), logit, xlogy,
xlog1py, hard/soft shrink, prelu, glu, lgamma / digamma / polygamma, nansum,
eye, linspace / logspace.

Any case a kernel does not take (complex dtypes, invalid arguments whose
PyTorch error message the CPU kernel produces, empty tensors) raises
Unsupported and runs through the CPU fallback.
"""
import torch

from .. import _C
from .._dispatch import Unsupported, impl, register, resize_out, run, scalar, write
from .._dtypes import CODE, dtype_code


def _ok(dt):
    if dt.is_complex or dt not in CODE:
        raise Unsupported()
    return dt


def _float(dt):
    return dt if dt.is_floating_point else torch.get_default_dtype()


def _compute(dt):
    if dt == torch.float64:
        return torch.float64
    if dt.is_floating_point:
        return torch.float32
    return torch.int64


def _coef(v, dt):
    if isinstance(v, torch.Tensor):
        v = v.item()
    c = _compute(dt)
    return scalar(float(v) if c.is_floating_point else int(v), c)


def _arg(x, dt):
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise Unsupported()
        if x.device.type == "cpu" and x.dim() == 0:
            return scalar(x.item(), dt)
        return x
    if isinstance(x, complex):
        raise Unsupported()
    return scalar(float(x) if dt.is_floating_point else x, dt)


def _empty(shape, like):
    return torch.empty(list(shape), dtype=like.dtype, device=like.device)


def _nonempty(*ts):
    for t in ts:
        if t.numel() == 0:
            raise Unsupported()


# ---- upsampling ---------------------------------------------------------------------


def _scales(scales, n):
    return [float(s) if s is not None else -1.0 for s in (list(scales) + [None] * n)[:n]]


def _up(rule, mode, x, sizes, scales, nsp):
    _ok(x.dtype)
    if x.dim() != nsp + 2 or len(sizes) != nsp or any(int(s) <= 0 for s in sizes):
        raise Unsupported()
    _nonempty(x)
    return run(rule, [x], [int(mode), nsp, *[int(s) for s in sizes]], _scales(scales, nsp))[0]


def _up_bwd(rule, mode, g, output_size, input_size, scales, nsp):
    _ok(g.dtype)
    input_size = [int(s) for s in input_size]
    if (g.dim() != nsp + 2 or len(input_size) != nsp + 2 or list(g.shape[2:]) != [int(s) for s in output_size]
            or list(g.shape[:2]) != input_size[:2]):
        raise Unsupported()
    _nonempty(g)
    if min(input_size) == 0:
        raise Unsupported()
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


# ---- reflection / replication padding --------------------------------------------------


def _pad_check(x, padding, nsp, replicate):
    _ok(x.dtype)
    padding = [int(p) for p in padding]
    if len(padding) != 2 * nsp or x.dim() not in (nsp + 1, nsp + 2) or min(x.shape[1:], default=1) == 0:
        raise Unsupported()
    for i in range(nsp):
        size = x.shape[x.dim() - 1 - i]
        lo, hi = padding[2 * i], padding[2 * i + 1]
        if size + lo + hi <= 0:
            raise Unsupported()
        if not replicate and (lo >= size or hi >= size):
            raise Unsupported()  # the CPU kernel raises PyTorch's message
    return padding


def _reg_pad(kind, nsp):
    rep = int(kind == "replication")
    base = f"{kind}_pad{nsp}d"

    def fwd(self, padding):
        padding = _pad_check(self, padding, nsp, rep)
        if self.numel() == 0:
            shape = list(self.shape)
            for i in range(nsp):
                shape[-1 - i] += padding[2 * i] + padding[2 * i + 1]
            return _empty(shape, self)
        return run("pad_mode", [self], [rep, nsp, *padding])[0]

    def bwd(grad_output, self, padding):
        padding = _pad_check(self, padding, nsp, rep)
        if grad_output.dim() != self.dim():
            raise Unsupported()
        if self.numel() == 0:
            return _empty(self.shape, self)
        return run("pad_mode_backward", [grad_output], [rep, nsp, *padding, *self.shape[self.dim() - nsp:]])[0]

    register(f"aten::{base}", out=f"aten::{base}.out")(fwd)
    register(f"aten::{base}_backward", out=f"aten::{base}_backward.grad_input")(bwd)


for _k in ("reflection", "replication"):
    for _n in (1, 2, 3):
        _reg_pad(_k, _n)


# ---- im2col / col2im / unfold_backward / max_unpool2d --------------------------------------


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
    _ok(self.dtype)
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
        return _empty([0, x.shape[1] * w[0] * w[1], L], self)
    r = run("im2col", [x], w)[0]
    return r if self.dim() == 4 else r.squeeze(0)


@register("aten::col2im", out="aten::col2im.out")
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    _ok(self.dtype)
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
        return _empty([0, x.shape[1] // (w[0] * w[1]), *out], self)
    r = run("col2im", [x], [*out, *w])[0]
    return r if self.dim() == 3 else r.squeeze(0)


@register("aten::unfold_backward", out="aten::unfold_backward.out")
def unfold_backward(grad_in, input_sizes, dim, size, step):
    _ok(grad_in.dtype)
    sizes = [int(s) for s in input_sizes]
    if not sizes and grad_in.numel() == 1:
        return grad_in.reshape(()).clone()
    if not sizes or grad_in.numel() == 0 or grad_in.dim() != len(sizes) + 1:
        raise Unsupported()
    dim = dim % len(sizes)
    return run("unfold_backward", [grad_in], [dim, int(size), int(step), len(sizes), *sizes])[0]


@register("aten::max_unpool2d", out="aten::max_unpool2d.out")
def max_unpool2d(self, indices, output_size):
    _ok(self.dtype)
    out = [int(s) for s in output_size]
    if (len(out) != 2 or self.dim() not in (3, 4) or indices.shape != self.shape or indices.dtype != torch.int64
            or self.numel() == 0 or min(out) < 1):
        raise Unsupported()
    x, i = (self, indices) if self.dim() == 4 else (self.unsqueeze(0), indices.unsqueeze(0))
    r = run("max_unpool2d", [x, i], out)[0]
    return r if self.dim() == 4 else r.squeeze(0)


# ---- scans --------------------------------------------------------------------------------


def _cummaxmin_helper(is_max):
    def kernel(self, values, indices, dim):
        _ok(self.dtype)
        if self.dtype == torch.bool or self.numel() == 0:
            raise Unsupported()
        v, i = run("cummaxmin", [self], [int(dim), int(is_max)])
        resize_out(values, v.shape)
        resize_out(indices, i.shape)
        write(values, v)
        write(indices, i)

    return kernel


impl("aten::_cummax_helper", _cummaxmin_helper(True))
impl("aten::_cummin_helper", _cummaxmin_helper(False))


@register("aten::_logcumsumexp", out="aten::_logcumsumexp.out")
def logcumsumexp(self, dim):
    if not self.dtype.is_floating_point or self.numel() == 0:
        raise Unsupported()
    return run("logcumsumexp", [self], [int(dim)])[0]


# ---- elementwise -----------------------------------------------------------------------------


def _logaddexp(base2):
    def kernel(self, other):
        dt = _ok(torch.result_type(self, other))
        if not dt.is_floating_point:
            raise Unsupported()
        return run("logaddexp", [_arg(self, dt), _arg(other, dt)], [dtype_code(dt), base2])[0]

    return kernel


register("aten::logaddexp", out="aten::logaddexp.out")(_logaddexp(0))
register("aten::logaddexp2", out="aten::logaddexp2.out")(_logaddexp(1))


@register("aten::log_sigmoid_forward", out="aten::log_sigmoid_forward.output")
def log_sigmoid_forward(self):
    if not self.dtype.is_floating_point:
        raise Unsupported()
    out, buf = run("log_sigmoid_forward", [self])
    return out, buf


@register("aten::log_sigmoid_backward", out="aten::log_sigmoid_backward.grad_input")
def log_sigmoid_backward(grad_output, self, buffer):
    dt = _ok(torch.result_type(grad_output, self))
    if not dt.is_floating_point:
        raise Unsupported()
    return run("log_sigmoid_backward", [grad_output, self], [dtype_code(dt)])[0]


def _eps(eps):
    return eps is not None and float(eps) >= 0


@register("aten::logit", out="aten::logit.out", inplace="aten::logit_")
def logit(self, eps=None):
    dt = _float(_ok(self.dtype))
    ins = [self] + ([_coef(eps, dt)] if _eps(eps) else [])
    return run("logit", ins, [dtype_code(dt)])[0]


@register("aten::logit_backward", out="aten::logit_backward.grad_input")
def logit_backward(grad_output, self, eps=None):
    dt = _float(_ok(torch.result_type(grad_output, self)))
    ins = [grad_output, self] + ([_coef(eps, dt)] if _eps(eps) else [])
    return run("logit_backward", ins, [dtype_code(dt)])[0]


def _xlogy(is_1p):
    def kernel(self, other):
        dt = _float(_ok(torch.result_type(self, other)))
        return run("xlogy", [_arg(self, dt), _arg(other, dt)], [dtype_code(dt), is_1p])[0]

    return kernel


register("aten::xlogy.Tensor", out="aten::xlogy.OutTensor", inplace="aten::xlogy_.Tensor")(_xlogy(0))
register("aten::xlogy.Scalar_Self", out="aten::xlogy.OutScalar_Self")(_xlogy(0))
register("aten::xlogy.Scalar_Other", out="aten::xlogy.OutScalar_Other", inplace="aten::xlogy_.Scalar_Other")(
    _xlogy(0))
register("aten::special_xlog1py", out="aten::special_xlog1py.out")(_xlogy(1))
register("aten::special_xlog1py.self_scalar", out="aten::special_xlog1py.self_scalar_out")(_xlogy(1))
register("aten::special_xlog1py.other_scalar", out="aten::special_xlog1py.other_scalar_out")(_xlogy(1))


def _shrink(rule):
    def kernel(self, lambd=0.5):
        dt = _ok(self.dtype)
        if not dt.is_floating_point:
            raise Unsupported()
        return run(rule, [self, _coef(lambd, dt)], [dtype_code(dt)])[0]

    return kernel


register("aten::hardshrink", out="aten::hardshrink.out")(_shrink("hardshrink"))
register("aten::softshrink", out="aten::softshrink.out")(_shrink("softshrink"))


def _shrink_bwd(grad_out, self, lambd):
    dt = _ok(torch.result_type(grad_out, self))
    if not dt.is_floating_point:
        raise Unsupported()
    return run("shrink_backward", [grad_out, self, _coef(lambd, dt)], [dtype_code(dt)])[0]


register("aten::hardshrink_backward", out="aten::hardshrink_backward.grad_input")(_shrink_bwd)
register("aten::softshrink_backward", out="aten::softshrink_backward.grad_input")(_shrink_bwd)


@register("aten::_prelu_kernel")
def prelu_kernel(self, weight):
    dt = _ok(self.dtype)
    if weight.dtype != dt or not dt.is_floating_point:
        raise Unsupported()
    return run("prelu", [self, weight], [dtype_code(dt)])[0]


@register("aten::_prelu_kernel_backward")
def prelu_kernel_backward(grad_output, self, weight):
    dt = _ok(self.dtype)
    if weight.dtype != dt or grad_output.dtype != dt or not dt.is_floating_point:
        raise Unsupported()
    gx, gw = run("prelu_backward", [grad_output, self, weight], [dtype_code(dt)])
    return gx, gw


def _glu_dim(self, dim):
    if self.dim() == 0 or not self.dtype.is_floating_point:
        raise Unsupported()
    d = dim % self.dim() if -self.dim() <= dim < self.dim() else None
    if d is None or self.shape[d] % 2:
        raise Unsupported()  # the CPU kernel raises PyTorch's message
    return d


@register("aten::glu", out="aten::glu.out")
def glu(self, dim=-1):
    return run("glu", [self], [_glu_dim(self, dim)])[0]


@register("aten::glu_backward", out="aten::glu_backward.grad_input")
def glu_backward(grad_output, self, dim):
    if grad_output.dtype != self.dtype:
        raise Unsupported()
    return run("glu_backward", [grad_output, self], [_glu_dim(self, dim)])[0]


def _special(rule):
    def kernel(self):
        dt = _float(_ok(self.dtype))
        return run(rule, [self], [dtype_code(dt)])[0]

    return kernel


register("aten::lgamma", out="aten::lgamma.out", inplace="aten::lgamma_")(_special("lgamma"))
register("aten::digamma", out="aten::digamma.out", inplace="aten::digamma_")(_special("digamma"))


@register("aten::polygamma", out="aten::polygamma.out")
def polygamma(n, self):
    dt = _float(_ok(self.dtype))
    if int(n) < 0:
        raise Unsupported()
    ct = dt if _C.platform() == "tpu" else torch.float64
    return run("polygamma", [self], [dtype_code(dt), int(n), dtype_code(ct)])[0]


@register("aten::polygamma_")
def polygamma_(self, n):
    res = polygamma(n, self)
    if res.dtype != self.dtype:
        raise Unsupported()
    write(self, res)
    return self


# ---- reductions / factories -------------------------------------------------------------------


@register("aten::nansum", out="aten::nansum.out")
def nansum(self, dim=None, keepdim=False, *, dtype=None):
    _ok(self.dtype)
    if dtype is None:
        dtype = torch.int64 if (not self.dtype.is_floating_point) else self.dtype
    _ok(dtype)
    if dtype == torch.bool or self.dtype == torch.bool:
        raise Unsupported()
    dims = [] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if self.dim() == 0:
        dims = []
    else:
        dims = [d % self.dim() for d in dims]
    return run("nansum", [self], [dtype_code(dtype), int(bool(keepdim)), len(dims), *dims])[0]


def _eye(n, m, out):
    n, m = int(n), int(m)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    _ok(out.dtype)
    r = run("eye", [scalar(1, torch.int64)], [dtype_code(out.dtype), n, m])[0]
    resize_out(out, [n, m])
    return write(out, r)


@register("aten::eye.out")
def eye_out(n, *, out):
    return _eye(n, n, out)


@register("aten::eye.m_out")
def eye_m_out(n, m, *, out):
    return _eye(n, m, out)


def _num(v):
    if isinstance(v, torch.Tensor):
        if v.numel() != 1 or v.is_complex():
            raise Unsupported()
        v = v.item()
    if isinstance(v, complex):
        raise Unsupported()
    return v


def _space(start, end, steps, out, base=None):
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _ok(out.dtype)
    if dt == torch.bool:
        raise Unsupported()
    start, end = _num(start), _num(end)
    no_f64 = _C.platform() == "tpu"
    if dt.is_floating_point and base is None:
        ct = torch.float64 if dt == torch.float64 else torch.float32
        s, e = float(start), float(end)
    elif dt.is_floating_point:
        ct = torch.float32 if no_f64 else torch.float64
        s, e = float(torch.tensor(start, dtype=dt)), float(torch.tensor(end, dtype=dt))
    else:
        ct = torch.float32 if no_f64 else torch.float64
        s, e = float(int(start)), float(int(end))
    ins = [scalar(s, ct), scalar(e, ct)]
    ints = [dtype_code(dt), steps]
    if base is not None:
        b = float(_num(base))
        if not dt.is_floating_point:
            b = float(torch.tensor(b, dtype=torch.float32))
        ins.append(scalar(b, ct))
        ints.append(1)
    r = run("linspace", ins, ints)[0]
    resize_out(out, [steps])
    return write(out, r)


@register(["aten::linspace.out", "aten::linspace.Tensor_Tensor_out", "aten::linspace.Tensor_Scalar_out",
           "aten::linspace.Scalar_Tensor_out"])
def linspace_out(start, end, steps, *, out):
    return _space(start, end, steps, out)


@register(["aten::logspace.out", "aten::logspace.Tensor_Tensor_out", "aten::logspace.Tensor_Scalar_out",
           "aten::logspace.Scalar_Tensor_out"])
def logspace_out(start, end, steps, base=10.0, *, out):
    return _space(start, end, steps, out, base)
