"""Optimizer kernels: the fused Adam / AdamW / SGD steps (torch._fused_adam_,
_fused_adamw_, _fused_sgd_ and their functional forms) and AMP gradient
scaling (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_), on
the multi-tensor rules of csrc/ops/optim.c.  (The torch._foreach_* ops are in
foreach.py: they run their per-tensor ops' rules.)

One call of a fused step is one rule call per chunk of the lists (the engine
bounds a rule to 64 inputs / 16 outputs), so a step over a few tensors is
one program in strict mode, and the whole step is one program in fused
mode.  Hyperparameters travel as 0-d runtime inputs: a changing learning
rate or bias correction never recompiles.
"""
import torch

from .._dispatch import Unsupported, register, run, scalar, write
from .._dtypes import CODE

MAX_IN, MAX_OUT = 64, 16
# Dtype of the per-step scalar math of the fused steps (bias corrections,
# step size): float64, as PyTorch's CPU/CUDA kernels compute them in double.
SCALAR_DTYPE = torch.float64


def _is_tpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


# ---- fused Adam / AdamW -------------------------------------------------------------------

def _check_fused_lists(name, params, lists):
    for lname, lst in lists:
        if len(lst) != len(params):
            raise RuntimeError(f"{name}: {lname} must have {len(params)} tensors, got {len(lst)}")
    for lname, lst in [("params", params)] + list(lists):
        for t in lst:
            if not _is_tpu(t):
                raise RuntimeError(f"{name}: expected all tensors of {lname} on the tpu device, got {t.device}")


def _fused_adam_step(adamw, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
                     beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    name = "_fused_adamw_" if adamw else "_fused_adam_"
    n = len(params)
    if n == 0:
        return
    lists = [("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs)]
    if amsgrad:
        lists.append(("max_exp_avg_sqs", max_exp_avg_sqs))
    elif len(max_exp_avg_sqs) != 0:
        raise RuntimeError(f"{name}: max_exp_avg_sqs must be empty without amsgrad")
    lists.append(("state_steps", state_steps))
    _check_fused_lists(name, params, lists)
    sdt = SCALAR_DTYPE
    lr_in = lr if isinstance(lr, torch.Tensor) else scalar(float(lr), sdt)
    extra = [lr_in, scalar(float(beta1), sdt), scalar(float(beta2), sdt), scalar(float(weight_decay), sdt),
             scalar(float(eps), sdt)]
    if grad_scale is not None:
        extra.append(grad_scale)
    if found_inf is not None:
        extra.append(found_inf)
    all_lists = [params] + [lst for _, lst in lists]
    nout = 3 + (1 if amsgrad else 0) + (1 if grad_scale is not None else 0)
    size = max(1, min((MAX_IN - len(extra)) // len(all_lists), MAX_OUT // nout))
    ints = [0, int(amsgrad), int(maximize), int(adamw), int(weight_decay != 0), int(grad_scale is not None),
            int(found_inf is not None), CODE[sdt]]
    pending = []
    for s in range(0, n, size):
        e = min(n, s + size)
        inputs = [t for lst in all_lists for t in lst[s:e]]
        ints[0] = e - s
        pending.append((s, e, run("fused_adam", inputs + extra, ints)))
    targets = [params, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else []) + \
        ([grads] if grad_scale is not None else [])
    for s, e, outs in pending:
        k = e - s
        for j, lst in enumerate(targets):
            for i in range(k):
                write(lst[s + i], outs[j * k + i])


def _make_fused_adam(adamw, functional):
    def kernel(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
               weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        lists = [self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs]
        if functional:
            lists = [[t.clone() for t in lst] for lst in lists]
        _fused_adam_step(adamw, *lists, state_steps, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                         eps=eps, amsgrad=amsgrad, maximize=maximize, grad_scale=grad_scale, found_inf=found_inf)
        return tuple(lists) if functional else None
    return kernel


for _adamw in (False, True):
    _base = "_fused_adamw" if _adamw else "_fused_adam"
    for _ovl in ("", ".tensor_lr"):
        register(f"{_base}_{_ovl}")(_make_fused_adam(_adamw, False))
        register(f"{_base}{_ovl}")(_make_fused_adam(_adamw, True))


# ---- fused SGD ------------------------------------------------------------------------------

def _fused_sgd_step(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov,
                    maximize, is_first_step, grad_scale=None, found_inf=None):
    n = len(params)
    if n == 0:
        return
    has_mom = momentum != 0
    lists = [("grads", grads)]
    if has_mom:
        lists.append(("momentum_buffer_list", momentum_buffer_list))
    _check_fused_lists("_fused_sgd_", params, lists)
    sdt = SCALAR_DTYPE
    lr_in = lr if isinstance(lr, torch.Tensor) else scalar(float(lr), sdt)
    extra = [scalar(float(weight_decay), sdt), scalar(float(momentum), sdt), lr_in, scalar(float(dampening), sdt)]
    if grad_scale is not None:
        extra.append(grad_scale)
    if found_inf is not None:
        extra.append(found_inf)
    all_lists = [params] + [lst for _, lst in lists]
    nout = 1 + (1 if has_mom else 0) + (1 if grad_scale is not None else 0)
    size = max(1, min((MAX_IN - len(extra)) // len(all_lists), MAX_OUT // nout))
    ints = [0, int(has_mom), int(nesterov), int(maximize), int(is_first_step), int(weight_decay != 0),
            int(grad_scale is not None), int(found_inf is not None), CODE[sdt]]
    pending = []
    for s in range(0, n, size):
        e = min(n, s + size)
        ints[0] = e - s
        inputs = [t for lst in all_lists for t in lst[s:e]]
        pending.append((s, e, run("fused_sgd", inputs + extra, ints)))
    targets = [params] + ([momentum_buffer_list] if has_mom else []) + ([grads] if grad_scale is not None else [])
    for s, e, outs in pending:
        k = e - s
        for j, lst in enumerate(targets):
            for i in range(k):
                write(lst[s + i], outs[j * k + i])


def _make_fused_sgd(functional):
    def kernel(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
               is_first_step, grad_scale=None, found_inf=None):
        lists = [self, grads, momentum_buffer_list]
        if functional:
            lists = [[t.clone() for t in lst] for lst in lists]
        _fused_sgd_step(*lists, weight_decay=weight_decay, momentum=momentum, lr=lr, dampening=dampening,
                        nesterov=nesterov, maximize=maximize, is_first_step=is_first_step, grad_scale=grad_scale,
                        found_inf=found_inf)
        return tuple(lists) if functional else None
    return kernel


for _ovl in ("", ".tensor_lr"):
    register(f"_fused_sgd_{_ovl}")(_make_fused_sgd(False))
    register(f"_fused_sgd{_ovl}")(_make_fused_sgd(True))


# ---- AMP gradient scaling (torch.amp.GradScaler) -------------------------------------------

def _amp_unscale_(self, found_inf, inv_scale):
    if not self:
        return
    if not all(_is_tpu(t) for t in [*self, found_inf, inv_scale]):
        raise Unsupported("tensors off the tpu")
    if inv_scale.numel() != 1:
        raise RuntimeError("inv_scale must be a 1-element tensor.")
    if found_inf.numel() != 1:
        raise RuntimeError("found_inf must be a 1-element tensor.")
    if inv_scale.dtype != torch.float32:
        raise RuntimeError("inv_scale must be a float tensor.")
    if found_inf.dtype != torch.float32:
        raise RuntimeError("found_inf must be a float tensor.")
    fi = found_inf
    results = []
    size = MAX_OUT - 1
    for s in range(0, len(self), size):
        chunk = list(self[s:s + size])
        *outs, fi = run("amp_unscale", chunk + [fi, inv_scale], [len(chunk)])
        results.extend(outs)
    for t, r in zip(self, results):
        write(t, r)
    write(found_inf, fi)


register("_amp_foreach_non_finite_check_and_unscale_")(_amp_unscale_)


def _amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                       growth_interval):
    if not all(_is_tpu(t) for t in [self, growth_tracker, found_inf]):
        raise Unsupported("tensors off the tpu")
    if growth_tracker.numel() != 1 or self.numel() != 1 or found_inf.numel() != 1:
        raise RuntimeError("_amp_update_scale_: scale, growth_tracker and found_inf must be 1-element tensors.")
    new_scale, new_tracker = run("amp_update_scale", [
        self, growth_tracker, found_inf, scalar(float(scale_growth_factor), torch.float64),
        scalar(float(scale_backoff_factor), torch.float64), int(growth_interval)])
    write(growth_tracker, new_tracker)
    write(self, new_scale)
    return self


register("_amp_update_scale_")(_amp_update_scale_)
