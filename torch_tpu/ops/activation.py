"""Activation kernels and their backward ops: relu, leaky_relu, elu / celu,
gelu, silu, mish, hardsigmoid, hardswish, softplus, hardtanh, threshold,
log_sigmoid, hard / soft shrink, prelu, glu (rules in
csrc/ops/activation.c).  The conventions are elementwise.py's.
"""
import torch

from .._dispatch import Call, Unsupported, coef, operand, register, run, supported
from .._dtypes import dtype_code, scalar_type_name
from .elementwise import ew, result_dtype

# ---- activations -----------------------------------------------------------------------------


def _act_dt(x):
    return supported(x.dtype)


@register("relu", out="relu.out", inplace="relu_", fast=True)  # C++ for floating inputs (arith.cpp)
def relu(self):
    if self.dtype == torch.bool:
        raise RuntimeError('"clamp_min_scalar_cpu" not implemented for \'Bool\'')
    return ew("relu", [self], _act_dt(self))


@register("leaky_relu", out="leaky_relu.out", inplace="leaky_relu_")
def leaky_relu(self, negative_slope=0.01):
    dt = _act_dt(self)
    return ew("leaky_relu", [self, coef(negative_slope, dt)], dt)


@register("elu", out="elu.out", inplace="elu_")
def elu(self, alpha=1, scale=1, input_scale=1):
    dt = _act_dt(self)
    return ew("elu", [self, coef(alpha, dt), coef(scale, dt), coef(input_scale, dt)], dt)


@register("celu", out="celu.out", inplace="celu_")
def celu(self, alpha=1.0):
    if float(alpha) == 0:
        raise RuntimeError("ZeroDivisionError")  # CPU's celu with alpha 0, word for word
    return elu(self, alpha, 1.0, 1.0 / float(alpha))


_APPROX = {"none": 0, "tanh": 1}


@register("gelu", out="gelu.out", inplace="gelu_")
def gelu(self, *, approximate="none"):
    if approximate not in _APPROX:
        raise RuntimeError("approximate argument must be either none or tanh.")
    return ew("gelu", [self], _act_dt(self), _APPROX[approximate])


for _name in ["silu", "mish", "hardsigmoid", "hardswish"]:  # C++ for floating inputs (arith.cpp)
    register(_name, out=f"{_name}.out", inplace=f"{_name}_", fast=True)(
        (lambda r: lambda self: ew(r, [self], _act_dt(self)))(_name))


@register("softplus", out="softplus.out")
def softplus(self, beta=1, threshold=20):
    dt = _act_dt(self)
    return ew("softplus", [self, coef(beta, dt), coef(threshold, dt)], dt)


@register("hardtanh", out="hardtanh.out", inplace="hardtanh_")
def hardtanh(self, min_val=-1, max_val=1):
    dt = _act_dt(self)
    if dt == torch.bool:
        raise Unsupported()
    return ew("hardtanh", [self, operand(min_val, dt), operand(max_val, dt)], dt)


@register("threshold", out="threshold.out", inplace="threshold_")
def threshold(self, threshold, value):
    dt = _act_dt(self)
    return ew("threshold", [self, coef(threshold, dt), coef(value, dt)], dt)


# ---- backward ops --------------------------------------------------------------------------------


def _bwd_dt(grad, x):
    return result_dtype(grad, x)


@register("threshold_backward", out="threshold_backward.grad_input")
def threshold_backward(grad_output, self, threshold):
    dt = _bwd_dt(grad_output, self)
    return ew("threshold_backward", [grad_output, self, coef(threshold, dt)], dt)


@register("gelu_backward", out="gelu_backward.grad_input")
def gelu_backward(grad_output, self, *, approximate="none"):
    return ew("gelu_backward", [grad_output, self], _bwd_dt(grad_output, self), _APPROX[approximate])


for _name in ["silu_backward", "sigmoid_backward", "tanh_backward", "hardsigmoid_backward"]:
    register(_name, out=f"{_name}.grad_input")(
        (lambda r: lambda grad_output, x: ew(r, [grad_output, x], _bwd_dt(grad_output, x)))(_name))
register("hardswish_backward", out="hardswish_backward.out")(
    lambda grad_output, self: ew("hardswish_backward", [grad_output, self], _bwd_dt(grad_output, self)))
register("mish_backward")(
    lambda grad_output, self: ew("mish_backward", [grad_output, self], _bwd_dt(grad_output, self)))


@register("leaky_relu_backward", out="leaky_relu_backward.grad_input")
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    if self_is_result and float(negative_slope) < 0:
        raise RuntimeError(
            "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
            "This is caused by calling in-place forward function with a negative slope, please call out-of-place "
            "version instead. File an issue at https://github.com/pytorch/pytorch if you do require supporting "
            "in-place leakRelu backward calculation with negative slope"
        )
    dt = _bwd_dt(grad_output, self)
    return ew("leaky_relu_backward", [grad_output, self, coef(negative_slope, dt)], dt)


@register("elu_backward", out="elu_backward.grad_input")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    if is_result and float(alpha) < 0:  # CPU's check, word for word (elu_ / celu_ with alpha < 0)
        raise RuntimeError(
            "In-place elu backward calculation is triggered with a negative slope which is not supported. "
            "This is caused by calling in-place forward function with a negative slope, please call out-of-place "
            "version instead.")
    dt = _bwd_dt(grad_output, self_or_result)
    return ew("elu_backward", [grad_output, self_or_result, coef(alpha, dt), coef(scale, dt),
                                 coef(input_scale, dt)], dt, int(bool(is_result)))


@register("softplus_backward", out="softplus_backward.grad_input")
def softplus_backward(grad_output, self, beta, threshold):
    dt = _bwd_dt(grad_output, self)
    return ew("softplus_backward", [grad_output, self, coef(beta, dt), coef(threshold, dt)], dt)


@register("hardtanh_backward", out="hardtanh_backward.grad_input")
def hardtanh_backward(grad_output, self, min_val, max_val):
    dt = _bwd_dt(grad_output, self)
    return ew("hardtanh_backward", [grad_output, self, coef(min_val, dt), coef(max_val, dt)], dt)


# ---- log_sigmoid, shrink, prelu, glu ------------------------------------------------------


@register("aten::log_sigmoid_forward", out="aten::log_sigmoid_forward.output")
def log_sigmoid_forward(self):
    if not self.dtype.is_floating_point:
        raise Unsupported()
    out, buf = run("log_sigmoid_forward", [self])
    return out, buf


@register("aten::log_sigmoid_backward", out="aten::log_sigmoid_backward.grad_input")
def log_sigmoid_backward(grad_output, self, buffer):
    dt = supported(torch.result_type(grad_output, self))
    if not dt.is_floating_point:
        raise Unsupported()
    return ew("log_sigmoid_backward", [grad_output, self], dt)


def _shrink(rule):
    def kernel(self, lambd=0.5):
        dt = supported(self.dtype)
        if not dt.is_floating_point:
            raise Unsupported()
        if rule == "softshrink" and not 0 <= float(lambd) <= torch.finfo(dt).max:
            raise RuntimeError(f"lambda must be in range [0, {torch.finfo(dt).max:g}] for input dtype "
                               f"{scalar_type_name(dt)}, but found {lambd}")
        return ew(rule, [self, coef(lambd, dt)], dt)

    return kernel


register("aten::hardshrink", out="aten::hardshrink.out")(_shrink("hardshrink"))
register("aten::softshrink", out="aten::softshrink.out")(_shrink("softshrink"))


def _shrink_bwd(grad_out, self, lambd):
    dt = supported(torch.result_type(grad_out, self))
    if not dt.is_floating_point:
        raise Unsupported()
    return ew("shrink_backward", [grad_out, self, coef(lambd, dt)], dt)


register("aten::hardshrink_backward", out="aten::hardshrink_backward.grad_input")(_shrink_bwd)
register("aten::softshrink_backward", out="aten::softshrink_backward.grad_input")(_shrink_bwd)


@register("aten::_prelu_kernel")
def prelu_kernel(self, weight):
    dt = supported(self.dtype)
    if weight.dtype != dt or not dt.is_floating_point:
        raise Unsupported()
    return ew("prelu", [self, weight], dt)


@register("aten::_prelu_kernel_backward")
def prelu_kernel_backward(grad_output, self, weight):
    dt = supported(self.dtype)
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
    return Call("glu", [self], [_glu_dim(self, dim)])


@register("aten::glu_backward", out="aten::glu_backward.grad_input")
def glu_backward(grad_output, self, dim):
    if grad_output.dtype != self.dtype:
        raise Unsupported()
    return Call("glu_backward", [grad_output, self], [_glu_dim(self, dim)])

