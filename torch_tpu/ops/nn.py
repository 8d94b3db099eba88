"""Neural-network kernels (csrc/ops/nn.c): convolution, pooling, batch and
layer norm, embedding, losses.

Notes
- Convolution is registered at aten::convolution (and the *_overrideable ops
  PyTorch's _convolution routes a PrivateUse1 backend to) and its backward.
- Eval-mode native_batch_norm returns empty save_mean / save_invstd, as on
  CPU.  Training updates running_mean / running_var in place (the rule
  returns the new values; they are written through the view machinery).
- nll_loss with a target outside [0, C) (other than ignore_index) does not
  raise as on CPU: that element contributes 0.  binary_cross_entropy does not
  check that inputs are in [0, 1].  Checking would need a host sync.
- _fused_rms_norm / rms_norm are CompositeImplicitAutograd in PyTorch 2.13
  (they decompose into pow/mean/rsqrt/mul before reaching the device).
"""
import torch

from .. import _dispatch
from .._dispatch import register, run, scalar, dtype_code, write

_REDUCTIONS = {0, 1, 2}


def _acc(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _f(v, dtype):
    """A Python float scalar as a 0-d input in the compute type of dtype."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    return scalar(float(v), torch.float64 if dtype == torch.float64 else torch.float32)


def _empty(dtype, device):
    return torch.empty(0, dtype=dtype, device=device)


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


# ---- pooling ------------------------------------------------------------------------


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


# ---- batch norm --------------------------------------------------------------------


def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps):
    has_r = running_mean is not None and running_var is not None
    sdt = _acc(input.dtype)
    ins = [input] + [t for t in (weight, bias) if t is not None]
    if has_r:
        ins += [running_mean, running_var]
    ins += [_f(momentum, sdt), _f(eps, sdt)]
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
    ins.append(_f(eps, _acc(input.dtype)))
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
    sdt = _acc(input.dtype) if mixed else input.dtype
    ins = [input] + [t for t in (weight, bias) if t is not None] + [_f(eps, input.dtype)]
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


# ---- embedding ------------------------------------------------------------------------


def _debug_bounds(index, size, what):
    if torch.tpu.get_eager_mode() == "debug" and index.numel():
        ok = run("index_bounds_check", [index], [int(size)])[0]
        if not bool(ok.item()):
            raise IndexError(f"{what}: index out of range in self")


@register("aten::embedding", out="aten::embedding.out")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    _debug_bounds(indices, weight.shape[0], "embedding")
    return run("embedding", [weight, indices])[0]


@register("aten::embedding_dense_backward", out="aten::embedding_dense_backward.out")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return run("embedding_dense_backward", [grad_output, indices],
               [int(num_weights), int(padding_idx), int(bool(scale_grad_by_freq))])[0]


# ---- losses -----------------------------------------------------------------------------


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
    return _dispatch.to_dtype(self, dt), _dispatch.to_dtype(target, dt)


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
    return run("smooth_l1_loss", [a, b, _f(beta, a.dtype)], [_red(reduction)])[0]


@register("aten::smooth_l1_loss_backward", out="aten::smooth_l1_loss_backward.grad_input")
def smooth_l1_loss_backward(grad_output, self, target, reduction, beta):
    a, b = _pair(self, target)
    return run("smooth_l1_loss_backward", [grad_output, a, b, _f(beta, a.dtype)], [_red(reduction)])[0]


@register("aten::huber_loss", out="aten::huber_loss.out")
def huber_loss(self, target, reduction=1, delta=1.0):
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    a, b = _pair(self, target)
    return run("huber_loss", [a, b, _f(delta, a.dtype)], [_red(reduction)])[0]


@register("aten::huber_loss_backward", out="aten::huber_loss_backward.out")
def huber_loss_backward(grad_output, self, target, reduction, delta):
    a, b = _pair(self, target)
    return run("huber_loss_backward", [grad_output, a, b, _f(delta, a.dtype)], [_red(reduction)])[0]


@register("aten::binary_cross_entropy", out="aten::binary_cross_entropy.out")
def binary_cross_entropy(self, target, weight=None, reduction=1):
    ins = [self, _dispatch.to_dtype(target, self.dtype)] + ([weight] if weight is not None else [])
    return run("binary_cross_entropy", ins, [_red(reduction), int(weight is not None)])[0]


@register("aten::binary_cross_entropy_backward", out="aten::binary_cross_entropy_backward.grad_input")
def binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=1):
    ins = [grad_output, self, _dispatch.to_dtype(target, self.dtype)] + ([weight] if weight is not None else [])
    return run("binary_cross_entropy_backward", ins, [_red(reduction), int(weight is not None)])[0]
