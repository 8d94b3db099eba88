"""Optimizer kernels: the fused Adam/AdamW/SGD steps and the torch._foreach_*
family, on the multi-tensor rules of csrc/ops/optim.c.

One call of a foreach op or fused step is one rule call per chunk of the
lists (the engine bounds a rule to 64 inputs / 16 outputs), so a list of
up to 16 tensors (5 for Adam) is one program in strict mode, and the whole
step is one program in fused mode.  Hyperparameters and ScalarList
entries travel as 0-d runtime inputs: a changing learning rate or bias
correction never recompiles.

In-place variants compute every chunk first and then write the results
back with write(), so aliasing between the lists reads old values, and the
write of a fresh result into a whole parameter costs no program.
"""
import math

import torch

from .. import _C
from .._dispatch import _cast_check, _cpu_fallback, _short, dtype_code, impl, run, scalar, write
from .._dtypes import CODE

aten = torch.ops.aten

MAX_IN, MAX_OUT = 64, 16
# Dtype of the per-step scalar math of the fused steps (bias corrections,
# step size): float64, as PyTorch's CPU/CUDA kernels compute them in double.
SCALAR_DTYPE = torch.float64

_HALF = (torch.float16, torch.bfloat16)


def _opmath(dt):
    return torch.float32 if dt in _HALF else dt


def _is_tpu(t):
    return isinstance(t, torch.Tensor) and _C.is_tpu(t)


def _all_tpu(*lists):
    for lst in lists:
        for t in lst:
            if isinstance(t, torch.Tensor) and not _C.is_tpu(t):
                return False
    return True


def _supported(dt):
    return dt in CODE and not dt.is_complex


def _sc(v, dt):
    """A Python number as a 0-d runtime input of dtype dt."""
    if dt == torch.bool:
        return scalar(bool(v), dt)
    if dt.is_floating_point:
        return scalar(float(v), dt)
    return scalar(int(v), dt)


def _check_len(name, a, b, what="tensor lists"):
    if len(a) != len(b):
        raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}"
                           if what == "tensor lists" else
                           f"{name}: Tensor list must have same number of elements as scalar list, "
                           f"got {len(a)} and {len(b)}")


# ---- the generic foreach map -------------------------------------------------------

FE = {
    "identity": 0, "zero": 1, "neg": 2, "sqrt": 3, "rsqrt": 4, "reciprocal": 5, "sign": 6, "abs": 7,
    "exp": 8, "expm1": 9, "log": 10, "log1p": 11, "log2": 12, "log10": 13, "sin": 14, "cos": 15, "tan": 16,
    "tanh": 17, "sigmoid": 18, "floor": 19, "ceil": 20, "round": 21, "trunc": 22, "frac": 23, "erf": 24,
    "erfc": 25, "lgamma": 26, "asin": 27, "acos": 28, "atan": 29, "sinh": 30, "cosh": 31,
    "add": 32, "sub": 33, "mul": 34, "div": 35, "maximum": 36, "minimum": 37, "pow": 38, "rpow": 39,
    "addcmul": 64, "addcdiv": 65, "lerp": 66,
}
# unary ops whose integer inputs give floating results (PyTorch's unary float ops)
_FLOAT_UNARY = {"sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
                "tan", "tanh", "sigmoid", "erf", "erfc", "lgamma", "asin", "acos", "atan", "sinh", "cosh"}


class _Shared:
    """An operand group with one value for every tensor (Scalar, 0-d tensor, alpha)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _foreach_run(op, selves, groups, dtypes):
    """Runs rule "foreach" over the lists in chunks.  groups: each a list with
    one value per tensor or a _Shared; dtypes: (compute, result) per tensor.
    Returns the list of results."""
    n = len(selves)
    if n == 0:
        return []
    shared = sum(1 for g in groups if isinstance(g, _Shared))
    per = 1 + len(groups) - shared
    size = max(1, min((MAX_IN - shared) // per, MAX_OUT))
    code = FE[op]
    out = []
    for s in range(0, n, size):
        e = min(n, s + size)
        inputs = list(selves[s:e])
        counts = []
        for g in groups:
            if isinstance(g, _Shared):
                inputs.append(g.value)
                counts.append(1)
            else:
                inputs.extend(g[s:e])
                counts.append(e - s)
        ints = [code, e - s, len(groups), *counts]
        for cdt, odt in dtypes[s:e]:
            ints.append(CODE[cdt])
            ints.append(CODE[odt])
        out.extend(run("foreach", inputs, ints))
    return out


def _writeback(name, selves, results):
    for t, r in zip(selves, results):
        _cast_check(r.dtype, t.dtype, name)
        if tuple(r.shape) != tuple(t.shape):
            raise RuntimeError(f"{name}: output with shape {list(t.shape)} doesn't match the broadcast shape "
                               f"{list(r.shape)}")
    for t, r in zip(selves, results):
        write(t, r)


def _result_dtypes(selves, others, op, inplace):
    """(compute, result) dtype per tensor; others: per-tensor operand (tensor
    or number) or None (unary)."""
    cache = {}
    res = []
    for i, t in enumerate(selves):
        o = None if others is None else others[i]
        key = (t.dtype, o.dtype if isinstance(o, torch.Tensor) else type(o),
               o.dim() == 0 if isinstance(o, torch.Tensor) else None)
        r = cache.get(key)
        if r is None:
            rd = t.dtype if o is None else torch.result_type(t, o)
            if op == "div" or op in _FLOAT_UNARY:
                if not rd.is_floating_point and not rd.is_complex:
                    rd = torch.get_default_dtype()
            r = cache[key] = rd
        res.append(r)
    out = []
    for t, rd in zip(selves, res):
        od = t.dtype if inplace else rd
        if inplace:
            _cast_check(rd, t.dtype, f"_foreach_{op}_")
        out.append((_opmath(rd), od))
    return out


def _shared_dtype(dtypes):
    cdts = [c for c, _ in dtypes]
    return torch.float64 if torch.float64 in cdts else cdts[0]


def _fallback(opname, overload, *args, **kwargs):
    op = getattr(getattr(aten, opname), overload)
    return _cpu_fallback(op, *args, **kwargs)


def _bool_checks(op, selves, other_is_bool=True):
    for t in selves:
        if t.dtype == torch.bool:
            if op == "sub" and other_is_bool:
                raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                                   "Use the `^` or `logical_xor()` operator instead.")
            if op == "neg":
                raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                                   "If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                                   "instead.")


# ---- binary: List / Scalar / ScalarList / Tensor ---------------------------------------

def _binary(op, overload, self, other, alpha=1, *, inplace=False):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    if not self:
        return None if inplace else []
    if overload == "List":
        _check_len(name, self, other)
        if not _all_tpu(self, other) or not all(_supported(t.dtype) for t in self + list(other)):
            return _fallback(name, overload, self, other, **({"alpha": alpha} if op in ("add", "sub") else {}))
        _bool_checks(op, self, all(o.dtype == torch.bool for o in other))
        dtypes = _result_dtypes(self, other, op, inplace)
        groups = [list(other)]
    elif overload == "Scalar":
        if isinstance(other, complex) or not _all_tpu(self) or not all(_supported(t.dtype) for t in self):
            return _fallback(name, overload, self, other)
        _bool_checks(op, self, isinstance(other, bool))
        dtypes = _result_dtypes(self, [other] * len(self), op, inplace)
        groups = [_Shared(_sc(other, _shared_dtype(dtypes)))]
    elif overload == "ScalarList":
        _check_len(name, self, other, "scalars")
        if any(isinstance(v, complex) for v in other) or not _all_tpu(self) or \
                not all(_supported(t.dtype) for t in self):
            return _fallback(name, overload, self, other)
        _bool_checks(op, self, all(isinstance(v, bool) for v in other))
        dtypes = _result_dtypes(self, list(other), op, inplace)
        groups = [[_sc(v, c) for v, (c, _) in zip(other, dtypes)]]
    elif overload == "Tensor":
        if other.dim() != 0 or other.numel() != 1:
            raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {other.dim()} dimensions and "
                               f"{other.numel()} elements.")
        if not _all_tpu(self) or not all(_supported(t.dtype) for t in self) or not _supported(other.dtype):
            kw = {"alpha": alpha} if op in ("add", "sub") else {}
            return _fallback(name, overload, self, other, **kw)
        dtypes = _result_dtypes(self, [other] * len(self), op, inplace)
        groups = [_Shared(other)]
    else:  # ScalarAndTensor (pow): self is the scalar base, other the exponents
        base, exps = self, other
        dtypes = _result_dtypes(exps, [base] * len(exps), "pow", False)
        return _foreach_run("rpow", exps, [_Shared(_sc(base, _shared_dtype(dtypes)))], dtypes)
    if op in ("add", "sub") and not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha == 1):
        groups.append(_Shared(_sc(alpha, _shared_dtype(dtypes))))
    rop = {"clamp_min": "maximum", "clamp_max": "minimum"}.get(op, op)
    results = _foreach_run(rop, self, groups, dtypes)
    if inplace:
        _writeback(name, self, results)
        return None
    return results


_BINARY = {
    "add": ["Scalar", "List", "ScalarList", "Tensor"],
    "sub": ["Scalar", "List", "ScalarList"],
    "mul": ["Scalar", "List", "ScalarList", "Tensor"],
    "div": ["Scalar", "List", "ScalarList", "Tensor"],
    "maximum": ["Scalar", "List", "ScalarList"],
    "minimum": ["Scalar", "List", "ScalarList"],
    "clamp_min": ["Scalar", "List", "ScalarList"],
    "clamp_max": ["Scalar", "List", "ScalarList"],
    "pow": ["Scalar", "List", "ScalarList"],
}


def _make_binary(op, overload, inplace):
    if op in ("add", "sub") and overload in ("List", "Tensor"):
        def kernel(self, other, *, alpha=1):
            return _binary(op, overload, self, other, alpha, inplace=inplace)
    else:
        def kernel(self, other):
            return _binary(op, overload, self, other, inplace=inplace)
    return kernel


for _op, _ovls in _BINARY.items():
    for _ovl in _ovls:
        impl(f"_foreach_{_op}.{_ovl}", _make_binary(_op, _ovl, False))
        impl(f"_foreach_{_op}_.{_ovl}", _make_binary(_op, _ovl, True))
impl("_foreach_pow.ScalarAndTensor", lambda self, exponent: _binary("pow", "ScalarAndTensor", self, exponent))


# ---- unary ---------------------------------------------------------------------------

def _unary(op, self, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    if not self:
        return None if inplace else []
    if not _all_tpu(self) or not all(_supported(t.dtype) for t in self):
        return _fallback(name, "default", self)
    _bool_checks(op, self)
    dtypes = _result_dtypes(self, None, op, inplace)
    results = _foreach_run(op, self, [], dtypes)
    if inplace:
        _writeback(name, self, results)
        return None
    return results


def _make_unary(op, inplace):
    return lambda self: _unary(op, self, inplace)


for _op in ["neg", "sqrt", "rsqrt", "reciprocal", "sign", "abs", "exp", "expm1", "log", "log1p", "log2", "log10",
            "sin", "cos", "tan", "tanh", "sigmoid", "floor", "ceil", "round", "trunc", "frac", "erf", "erfc",
            "lgamma", "asin", "acos", "atan", "sinh", "cosh"]:
    impl(f"_foreach_{_op}", _make_unary(_op, False))
    impl(f"_foreach_{_op}_", _make_unary(_op, True))


def _foreach_zero_(self):
    if not self:
        return
    if not _all_tpu(self):
        return _fallback("_foreach_zero_", "default", self)
    _writeback("_foreach_zero_", self, _foreach_run("zero", self, [], [(t.dtype, t.dtype) for t in self]))


impl("_foreach_zero_", _foreach_zero_)


def _foreach_copy_(self, src, non_blocking=False):
    _check_len("_foreach_copy_", self, src)
    for d, s in zip(self, src):
        if _is_tpu(d) and _is_tpu(s):
            write(d, s)
        else:
            d.copy_(s)


impl("_foreach_copy_", _foreach_copy_)


def _foreach_clone(self, *, memory_format=None):
    if not self:
        return []
    if not _all_tpu(self):
        return [t.clone() for t in self]
    return _foreach_run("identity", self, [], [(t.dtype, t.dtype) for t in self])


impl("_foreach_clone", _foreach_clone)


# ---- ternary: addcmul / addcdiv / lerp --------------------------------------------------

def _addc(op, self, t1, t2, values, kind, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    if not self:
        return None if inplace else []
    _check_len(name, self, t1)
    _check_len(name, self, t2)
    orig_kind, orig_values = kind, values
    if kind == "Tensor":
        if values.dim() != 1 or values.numel() != len(self):
            raise RuntimeError(f"{name}: Expected scalars to be a 1-D tensor with {len(self)} elements, "
                               f"got shape {list(values.shape)}")
        if _is_tpu(values):
            vals = [values[i] for i in range(len(self))]  # 0-d views, read on the device
        else:
            kind, values = "ScalarList", values.tolist()
    if kind == "ScalarList":
        _check_len(name, self, values, "scalars")
    tensors = list(self) + list(t1) + list(t2)
    if not _all_tpu(tensors) or not all(t.dtype.is_floating_point for t in tensors) or \
            (kind != "Tensor" and any(isinstance(v, complex) for v in (values if kind == "ScalarList" else [values]))):
        return _fallback(name, orig_kind, self, t1, t2, orig_values)
    dtypes = []
    for a, b, c in zip(self, t1, t2):
        rd = torch.promote_types(torch.promote_types(a.dtype, b.dtype), c.dtype)
        if inplace:
            _cast_check(rd, a.dtype, name)
        dtypes.append((_opmath(rd), a.dtype if inplace else rd))
    if kind == "Scalar":
        g = _Shared(_sc(values, _shared_dtype(dtypes)))
    elif kind == "ScalarList":
        g = [_sc(v, c) for v, (c, _) in zip(values, dtypes)]
    else:
        g = vals
    results = _foreach_run(op, list(self), [list(t1), list(t2), g], dtypes)
    if inplace:
        _writeback(name, self, results)
        return None
    return results


def _make_addc(op, kind, inplace):
    if kind == "Scalar":
        def kernel(self, tensor1, tensor2, value=1):
            return _addc(op, self, tensor1, tensor2, value, kind, inplace)
    else:
        def kernel(self, tensor1, tensor2, scalars):
            return _addc(op, self, tensor1, tensor2, scalars, kind, inplace)
    return kernel


for _op in ("addcmul", "addcdiv"):
    for _kind in ("Scalar", "ScalarList", "Tensor"):
        impl(f"_foreach_{_op}.{_kind}", _make_addc(_op, _kind, False))
        impl(f"_foreach_{_op}_.{_kind}", _make_addc(_op, _kind, True))


def _lerp(self, ends, weight, kind, inplace):
    name = f"_foreach_lerp{'_' if inplace else ''}"
    if not self:
        return None if inplace else []
    _check_len(name, self, ends)
    if kind != "Scalar":
        _check_len(name, self, weight, "tensor lists" if kind == "List" else "scalars")
    wt = list(weight) if kind == "List" else []
    if not _all_tpu(self, ends, wt) or not all(t.dtype.is_floating_point for t in list(self) + list(ends) + wt):
        return _fallback(name, kind, self, ends, weight)
    for a, b in zip(self, ends):
        if a.dtype != b.dtype:
            raise RuntimeError(f"{name}: expected dtype {a.dtype} for `end` but got dtype {b.dtype}")
    dtypes = [(_opmath(t.dtype), t.dtype) for t in self]
    if kind == "Scalar":
        g = _Shared(_sc(weight, _shared_dtype(dtypes)))
    elif kind == "ScalarList":
        g = [_sc(v, c) for v, (c, _) in zip(weight, dtypes)]
    else:
        g = wt
    results = _foreach_run("lerp", list(self), [list(ends), g], dtypes)
    if inplace:
        _writeback(name, self, results)
        return None
    return results


def _make_lerp(kind, inplace):
    return lambda self, tensors1, weight: _lerp(self, tensors1, weight, kind, inplace)


for _kind, _arg in (("Scalar", "weight"), ("List", "weights"), ("ScalarList", "weight")):
    impl(f"_foreach_lerp.{_kind}", _make_lerp(_kind, False))
    impl(f"_foreach_lerp_.{_kind}", _make_lerp(_kind, True))


# ---- reductions ------------------------------------------------------------------------

def _norm_run(kind, self, out_dtype, p=0.0):
    n = len(self)
    out = []
    for s in range(0, n, MAX_OUT):
        e = min(n, s + MAX_OUT)
        out.extend(run("foreach_norm", list(self[s:e]), [kind, e - s, CODE[out_dtype]], [float(p)]))
    return out


def _foreach_norm(self, ord=2, dtype=None):
    if not self:
        return []
    if not _all_tpu(self) or not all(_supported(t.dtype) for t in self):
        return _fallback("_foreach_norm", "Scalar", self, ord, dtype)
    for t in self:
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. "
                               f"Got {_short(t.dtype)}")
    p = float(ord)
    kind = {0.0: 0, 1.0: 1, 2.0: 2, math.inf: 3, -math.inf: 4}.get(p, 5)
    # one dtype per call: group by result dtype (lists of mixed dtypes are rare)
    res = [None] * len(self)
    groups = {}
    for i, t in enumerate(self):
        groups.setdefault(dtype or t.dtype, []).append(i)
    for od, idx in groups.items():
        for i, r in zip(idx, _norm_run(kind, [self[i] for i in idx], od, p)):
            res[i] = r
    return res


impl("_foreach_norm.Scalar", _foreach_norm)


def _foreach_powsum(self, ord=2, dtype=None):
    if not self:
        return []
    if not _all_tpu(self) or not all(t.dtype.is_floating_point for t in self):
        return _fallback("_foreach_powsum", "Scalar", self, ord, dtype)
    res = [None] * len(self)
    groups = {}
    for i, t in enumerate(self):
        groups.setdefault(dtype or t.dtype, []).append(i)
    for od, idx in groups.items():
        for i, r in zip(idx, _norm_run(7, [self[i] for i in idx], od, float(ord))):
            res[i] = r
    return res


impl("_foreach_powsum.Scalar", _foreach_powsum)


def _foreach_max(self):
    if not self:
        return []
    if not _all_tpu(self) or not all(_supported(t.dtype) for t in self):
        return _fallback("_foreach_max", "default", self)
    res = [None] * len(self)
    groups = {}
    for i, t in enumerate(self):
        groups.setdefault(t.dtype, []).append(i)
    for od, idx in groups.items():
        for i, r in zip(idx, _norm_run(6, [self[i] for i in idx], od)):
            res[i] = r
    return res


impl("_foreach_max", _foreach_max)


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
        impl(f"{_base}_{_ovl}", _make_fused_adam(_adamw, False))
        impl(f"{_base}{_ovl}", _make_fused_adam(_adamw, True))


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
    impl(f"_fused_sgd_{_ovl}", _make_fused_sgd(False))
    impl(f"_fused_sgd{_ovl}", _make_fused_sgd(True))


# ---- AMP gradient scaling (torch.amp.GradScaler) -------------------------------------------

def _amp_unscale_(self, found_inf, inv_scale):
    if not self:
        return
    if not _all_tpu(self, [found_inf, inv_scale]):
        return _fallback("_amp_foreach_non_finite_check_and_unscale_", "default", self, found_inf, inv_scale)
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


impl("_amp_foreach_non_finite_check_and_unscale_", _amp_unscale_)


def _amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                       growth_interval):
    if not _all_tpu([self, growth_tracker, found_inf]):
        return _fallback("_amp_update_scale_", "default", self, growth_tracker, found_inf, scale_growth_factor,
                         scale_backoff_factor, growth_interval)
    if growth_tracker.numel() != 1 or self.numel() != 1 or found_inf.numel() != 1:
        raise RuntimeError("_amp_update_scale_: scale, growth_tracker and found_inf must be 1-element tensors.")
    new_scale, new_tracker = run("amp_update_scale", [
        self, growth_tracker, found_inf, scalar(float(scale_growth_factor), torch.float64),
        scalar(float(scale_backoff_factor), torch.float64), int(growth_interval)])
    write(growth_tracker, new_tracker)
    write(self, new_scale)
    return self


impl("_amp_update_scale_", _amp_update_scale_)
