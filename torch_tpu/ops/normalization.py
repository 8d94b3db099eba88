"""Normalization kernels (csrc/ops/normalization.c): batch norm (training,
eval, the running-stat updates) and layer norm, forward and backward.

Eval-mode native_batch_norm returns empty save_mean / save_invstd, as on
CPU.  Training updates running_mean / running_var in place (the rule returns
the new values; they are written through the view machinery).
_fused_rms_norm / rms_norm are CompositeImplicitAutograd in PyTorch 2.13
(they decompose into pow/mean/rsqrt/mul before reaching the device).
"""
import torch

from .._dispatch import float_coef, register, run, write
from .._dtypes import dtype_code, opmath


def _empty(dtype, device):
    return torch.empty(0, dtype=dtype, device=device)


# ---- batch norm --------------------------------------------------------------------


def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps):
    has_r = running_mean is not None and running_var is not None
    sdt = opmath(input.dtype)
    ins = [input] + [t for t in (weight, bias) if t is not None]
    if has_r:
        ins += [running_mean, running_var]
    ins += [float_coef(momentum, sdt), float_coef(eps, sdt)]
    outs = run("native_batch_norm", ins,
               [int(bool(training)), int(weight is not None), int(bias is not None), int(has_r), dtype_code(sdt)])
    if not training:
        return outs[0], _empty(sdt, input.device), _empty(sdt, input.device)
    if has_r:
        write(running_mean, outs[3])
        write(running_var, outs[4])
    return outs[0], outs[1], outs[2]


@register("aten::native_batch_norm", out="aten::native_batch_norm.out")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register("aten::_native_batch_norm_legit", out="aten::_native_batch_norm_legit.out")
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register("aten::_native_batch_norm_legit.no_stats", out="aten::_native_batch_norm_legit.no_stats_out")
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return _bn_forward(input, weight, bias, None, None, training, momentum, eps)


@register("aten::_batch_norm_with_update", out="aten::_batch_norm_with_update.out")
def batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, m, s = _bn_forward(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, m, s, torch.empty(0, dtype=torch.uint8, device=input.device)


def _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                 output_mask):
    mask = [bool(m) for m in output_mask]
    if not any(mask):
        return None, None, None
    has_r = running_mean is not None and running_var is not None
    has_s = save_mean is not None and save_invstd is not None and save_mean.numel() > 0
    ins = [grad_out, input] + ([weight] if weight is not None else [])
    if has_r:
        ins += [running_mean, running_var]
    if has_s:
        ins += [save_mean, save_invstd]
    ins.append(float_coef(eps, opmath(input.dtype)))
    outs = iter(run("native_batch_norm_backward", ins,
                    [int(bool(train)), int(weight is not None), int(has_r), int(has_s), *[int(m) for m in mask]]))
    return tuple(next(outs) if m else None for m in mask)


@register("aten::native_batch_norm_backward", out="aten::native_batch_norm_backward.out")
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                               eps, output_mask):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask)


@register("aten::batch_norm_backward")
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask)


# ---- layer norm ---------------------------------------------------------------------


@register("aten::native_layer_norm", out="aten::native_layer_norm.out")
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    nnorm = len(normalized_shape)
    shape = list(input.shape)
    if nnorm == 0 or list(normalized_shape) != shape[len(shape) - nnorm:]:
        raise RuntimeError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size{list(input.shape)}")
    mixed = weight is not None and weight.dtype != input.dtype
    sdt = opmath(input.dtype) if mixed else input.dtype
    ins = [input] + [t for t in (weight, bias) if t is not None] + [float_coef(eps, input.dtype)]
    out, mean, rstd = run("native_layer_norm", ins,
                          [nnorm, int(weight is not None), int(bias is not None), dtype_code(sdt)])
    return out, mean, rstd


@register("aten::native_layer_norm_backward", out="aten::native_layer_norm_backward.out")
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    mask = [bool(m) for m in output_mask]
    if not any(mask):
        return None, None, None
    ins = [grad_out, input, mean, rstd] + [t for t in (weight, bias) if t is not None]
    outs = iter(run("native_layer_norm_backward", ins,
                    [len(normalized_shape), int(weight is not None), int(bias is not None), *[int(m) for m in mask]]))
    return tuple(next(outs) if m else None for m in mask)

