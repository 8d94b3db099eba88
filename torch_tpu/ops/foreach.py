"""The torch._foreach_* kernels.  A foreach op is its per-tensor op over the
list: each tensor goes through the per-tensor kernel (add, exp, addcdiv,
linalg_vector_norm, mm ...), so it gets the same rule with the same inputs
and attributes, and the results are bit-identical to a Python loop over the
per-tensor op (a user switching an optimizer between foreach and for-loop
gets the same numbers).  What foreach adds is batching: the rule calls of a
chunk of the list run as one node of the engine (the "foreach" rule,
csrc/ops/foreach.c), one program per chunk in strict mode.

Lists with a tensor off the device, or a case a per-tensor kernel does not
take (complex), run through the CPU fallback as a whole.  In-place variants
compute every result first and then write them back, so aliasing between the
lists reads old values (as the CPU loop does).  Scalars travel as the
per-tensor kernels pass them (0-d runtime inputs: a changing learning rate
never recompiles); a Tensor of scalars (addcmul / addcdiv .Tensor) is read
on the device, element by element, with no host sync.
"""
import torch

from .. import _C
from .._dispatch import Call, Unsupported, check_inplace, register, run, write
from . import elementwise as ew
from . import linalg, math, reduce

MAX_IN, MAX_OUT, MAX_FLOATS = 64, 16, 64  # TPU_OP_MAX_INPUTS / OUTPUTS, _C.op's float attrs
_RULE_INDEX = {name: i for i, name in enumerate(_C.rules())}  # resolved once


# ---- running a list of per-tensor calls -------------------------------------------------

def _run_calls(calls):
    """Runs per-tensor Calls in as few "foreach" nodes as the rule limits
    allow; returns the first output of each (a tensor in `calls` is a result
    already and is passed through)."""
    results = [None] * len(calls)
    chunk, nin, nflt = [], 0, 0

    def flush():
        if len(chunk) == 1:
            i = chunk[0]
            results[i] = calls[i].run()
        elif chunk:
            inputs, ints, floats = [], [len(chunk)], []
            for i in chunk:
                c = calls[i]
                inputs.extend(c.inputs)
                ints.extend((_RULE_INDEX[c.rule], len(c.inputs), len(c.ints), len(c.floats), *c.ints))
                floats.extend(c.floats)
            for i, r in zip(chunk, run("foreach", inputs, ints, floats)):
                results[i] = r
        chunk.clear()

    for i, c in enumerate(calls):
        if not isinstance(c, Call):
            results[i] = c
            continue
        k, f = len(c.inputs), len(c.floats)
        if chunk and (nin + k > MAX_IN or nflt + f > MAX_FLOATS or len(chunk) == MAX_OUT):
            flush()
            nin, nflt = 0, 0
        chunk.append(i)
        nin, nflt = nin + k, nflt + f
    flush()
    return results


def _on_device(*lists):
    for lst in lists:
        for t in lst:
            if isinstance(t, torch.Tensor) and not _C.is_tpu(t):
                raise Unsupported("a tensor off the tpu")


def _check_len(name, a, b, what="tensor lists"):
    if len(a) != len(b):
        raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}"
                           if what == "tensor lists" else
                           f"{name}: Tensor list must have same number of elements as scalar list, "
                           f"got {len(a)} and {len(b)}")


def _check_0d(other):
    if other.dim() != 0 or other.numel() != 1:
        raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {other.dim()} dimensions and "
                           f"{other.numel()} elements.")


def _register(name, overloads, per_tensor, inplace=True, out=True):
    """Registers _foreach_<name>.<overload> (functional, and the in-place
    _foreach_<name>_ and out= variants) for each overload, from
    per_tensor(overload, self, *args, **kwargs) -> the list of per-tensor
    Calls (or results)."""
    for ovl in overloads:
        dot = "" if ovl == "default" else f".{ovl}"
        out_name = (f"_foreach_{name}.out" if ovl == "default" else f"_foreach_{name}.{ovl}_out") if out else None

        def functional(self, *args, _ovl=ovl, **kwargs):
            if not self:
                return []
            return _run_calls(per_tensor(_ovl, self, *args, **kwargs))

        def inplace_fn(self, *args, _ovl=ovl, _name=f"_foreach_{name}_{dot}", **kwargs):
            if not self:
                return None
            results = _run_calls(per_tensor(_ovl, self, *args, **kwargs))
            for t, r in zip(self, results):  # PyTorch's checks, all before any write
                check_inplace(t, r, _name)
            for t, r in zip(self, results):
                write(t, r)
            return None

        register(f"_foreach_{name}{dot}", out=out_name)(functional)
        if inplace:
            register(f"_foreach_{name}_{dot}")(inplace_fn)


# ---- binary: List / Scalar / ScalarList / Tensor ------------------------------------------

def _binary(name, list_fn, scalar_fn=None):
    """per_tensor of a binary op: list_fn(a, b) for a List, scalar_fn(a, s)
    for a Scalar / ScalarList / 0-d Tensor (default list_fn)."""
    scalar_fn = scalar_fn or list_fn

    def per_tensor(ovl, self, other, **kw):
        if ovl == "List":
            _check_len(f"_foreach_{name}", self, other)
            _on_device(self, other)
            return [list_fn(a, b, **kw) for a, b in zip(self, other)]
        if ovl == "ScalarList":
            _check_len(f"_foreach_{name}", self, other, "scalars")
            _on_device(self)
            return [scalar_fn(a, s) for a, s in zip(self, other)]
        if ovl == "Tensor":
            _check_0d(other)
            _on_device(self, [other])
        else:
            _on_device(self)
        return [scalar_fn(a, other, **kw) for a in self]

    return per_tensor


_register("add", ["Scalar", "List", "ScalarList", "Tensor"], _binary("add", ew.add))
_register("sub", ["Scalar", "List", "ScalarList"], _binary("sub", ew.sub))
_register("mul", ["Scalar", "List", "ScalarList", "Tensor"], _binary("mul", ew.mul))
_register("div", ["Scalar", "List", "ScalarList", "Tensor"], _binary("div", ew.div))
# PyTorch's foreach maximum / minimum with a Scalar are clamp_min / clamp_max
_register("maximum", ["Scalar", "List", "ScalarList"],
          _binary("maximum", ew.maximum, lambda a, s: ew.clamp(a, s, None)))
_register("minimum", ["Scalar", "List", "ScalarList"],
          _binary("minimum", ew.minimum, lambda a, s: ew.clamp(a, None, s)))
_register("clamp_min", ["Scalar", "List", "ScalarList"], _binary("clamp_min", lambda a, b: ew.clamp(a, b, None)))
_register("clamp_max", ["Scalar", "List", "ScalarList"], _binary("clamp_max", lambda a, b: ew.clamp(a, None, b)))
_register("pow", ["Scalar", "List", "ScalarList"], _binary("pow", ew.power))


@register("_foreach_pow.ScalarAndTensor")
def _foreach_pow_scalar_and_tensor(self, exponent):
    """self ** exponent[i] for a Python number self."""
    if not exponent:
        return []
    _on_device(exponent)
    return _run_calls([ew.power(self, e) for e in exponent])


# ---- unary ------------------------------------------------------------------------------------

_UNARY = {**{n: math.unary[n] for n in [
    "sqrt", "rsqrt", "reciprocal", "sign", "abs", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
    "tan", "tanh", "sigmoid", "floor", "ceil", "trunc", "frac", "erf", "erfc", "asin", "acos", "atan", "sinh",
    "cosh"]}, "neg": math.neg, "round": math.round_, "lgamma": math.lgamma}


def _unary(fn):
    def per_tensor(ovl, self):
        _on_device(self)
        return [fn(t) for t in self]

    return per_tensor


for _name, _fn in _UNARY.items():
    _register(_name, ["default"], _unary(_fn))


# ---- addcmul / addcdiv / lerp --------------------------------------------------------------

def _addc(name, fn):
    def per_tensor(ovl, self, tensor1, tensor2, scalars=1):
        _check_len(f"_foreach_{name}", self, tensor1)
        _check_len(f"_foreach_{name}", self, tensor2)
        _on_device(self, tensor1, tensor2)
        if ovl == "Scalar":
            values = [scalars] * len(self)
        elif ovl == "ScalarList":
            _check_len(f"_foreach_{name}", self, scalars, "scalars")
            values = list(scalars)
        else:  # a 1-d Tensor of values
            if scalars.dim() != 1 or scalars.numel() != len(self):
                raise RuntimeError(f"_foreach_{name}: Expected scalars to be a 1-D tensor with {len(self)} "
                                   f"elements, got shape {list(scalars.shape)}")
            values = [scalars[i] for i in range(len(self))] if _C.is_tpu(scalars) else scalars.tolist()
        return [fn(a, b, c, value=v) for a, b, c, v in zip(self, tensor1, tensor2, values)]

    return per_tensor


_register("addcmul", ["Scalar", "ScalarList", "Tensor"], _addc("addcmul", ew.addcmul))
_register("addcdiv", ["Scalar", "ScalarList", "Tensor"], _addc("addcdiv", ew.addcdiv))


def _lerp(ovl, self, tensors1, weight):
    name = "_foreach_lerp"
    _check_len(name, self, tensors1)
    if ovl == "Scalar":
        weights = [weight] * len(self)
    else:
        _check_len(name, self, weight, "tensor lists" if ovl == "List" else "scalars")
        weights = list(weight)
    _on_device(self, tensors1, weights if ovl == "List" else [])
    for a, b in zip(self, tensors1):
        if a.dtype != b.dtype:
            raise RuntimeError(f"{name}: expected dtype {a.dtype} for `end` but got dtype {b.dtype}")
    return [ew.lerp(a, b, w) for a, b, w in zip(self, tensors1, weights)]


_register("lerp", ["List", "Scalar", "ScalarList"], _lerp)


# ---- reductions, mm, clone --------------------------------------------------------------------

def _norm(ovl, self, ord=2, dtype=None):
    _on_device(self)
    return [reduce.linalg_vector_norm(t, ord, dtype=dtype) for t in self]


def _powsum(ovl, self, ord=2, dtype=None):
    _on_device(self)
    return [reduce.powsum(t, ord, dtype) for t in self]


def _max(ovl, self):
    _on_device(self)
    return [reduce.max_all(t) for t in self]


def _clone(ovl, self, *, memory_format=None):
    _on_device(self)
    return [Call("identity", [t]) for t in self]  # as clone (ops/core.py)


def _mm(ovl, self, mat2):
    _check_len("_foreach_mm", self, mat2)
    _on_device(self, mat2)
    return [linalg.mm(a, b) for a, b in zip(self, mat2)]


_register("norm", ["Scalar"], _norm, inplace=False)
_register("powsum", ["Scalar"], _powsum, inplace=False)
_register("max", ["default"], _max, inplace=False)
_register("clone", ["default"], _clone, inplace=False)
_register("mm", ["default"], _mm, inplace=False, out=False)


# ---- zero_ / copy_ --------------------------------------------------------------------------

@register("_foreach_zero_")
def _foreach_zero_(self):
    _on_device(self)
    for t in self:
        write(t, 0)  # as zero_ (ops/core.py)


@register("_foreach_copy_")
def _foreach_copy_(self, src, non_blocking=False):
    _check_len("_foreach_copy_", self, src)
    for d, s in zip(self, src):
        if _C.is_tpu(d) and _C.is_tpu(s):
            write(d, s)  # as copy_ between tpu tensors (ops/core.py)
        else:
            d.copy_(s)
