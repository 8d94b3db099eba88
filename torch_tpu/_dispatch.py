"""How ATen overloads reach the engine: the one registration path
(register / impl, with out= and in-place variants derived and one fallback
behaviour), the run() bridge to the C rules, the helpers kernels pass
arguments with, and the CPU fallback.

See torch_tpu/ops/README.md for the contract kernels are written against.
"""
import importlib
import math
import os
import threading
import warnings
from typing import NamedTuple

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import _C
from ._dtypes import CODE, coef_dtype, dtype_code, scalar_type_name

_lib = torch.library.Library("aten", "IMPL")
_fallback_lib = torch.library.Library("_", "IMPL")
_registered = {}  # "add.Tensor" -> python function
NotTpuError = _C.NotTpuError
# A case a kernel (or a lowering rule, via TPU_UNIMPLEMENTED) cannot take on
# the device: the op then runs through the CPU fallback, counted and warned.
Unsupported = _C.Unsupported


# ---- arguments ------------------------------------------------------------------

class scalar(tuple):
    """A Python number passed to a rule as a 0-d input of a chosen dtype."""

    def __new__(cls, value, dtype):
        if dtype.is_complex:  # no complex scalar inputs: the op runs on CPU
            raise Unsupported(f"complex scalar of dtype {dtype}")
        return tuple.__new__(cls, (CODE[dtype], value))


def number(v, dtype):
    """v as the Python number type of dtype (float, bool or int)."""
    if dtype.is_floating_point:
        return float(v)
    if dtype == torch.bool:
        return bool(v)
    if isinstance(v, float) and not math.isfinite(v) or isinstance(v, int) and not -(1 << 63) <= v < (1 << 64):
        # CPU's checked conversion of a fill value (found by tests/faults' op fuzzer)
        raise RuntimeError(f"value cannot be converted to type {_C_TYPE_NAMES.get(dtype, str(dtype))} without overflow")
    return int(v)


_C_TYPE_NAMES = {torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int",
                 torch.int64: "int64_t", torch.uint16: "uint16_t", torch.uint32: "uint32_t", torch.uint64: "uint64_t"}


def coef(v, dtype):
    """A Scalar argument (alpha, beta, a threshold ...) of an op whose result
    is `dtype`, as a 0-d runtime input in the type PyTorch computes it in
    (see _dtypes.coef_dtype): a changing value never recompiles.  A 0-d tpu
    tensor (foreach ops' tensor of scalars) stays on the device: the rule
    converts it to the compute type, as it would the number."""
    if isinstance(v, torch.Tensor):
        if _C.is_tpu(v):
            return v
        v = v.item()
    c = coef_dtype(dtype)
    return scalar(number(v, c), c)


def float_coef(v, dtype):
    """A float parameter (eps, momentum, beta, delta) as a 0-d runtime input:
    float64 for double results, float32 otherwise."""
    return coef(float(v.item() if isinstance(v, torch.Tensor) else v), torch.promote_types(dtype, torch.float32))


def operand(x, dtype):
    """An elementwise operand: a tpu tensor as is; a Python number or a 0-d
    CPU tensor as a 0-d input of `dtype` (the rule converts to the result
    dtype anyway).  Complex values have no device form: Unsupported."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise Unsupported("complex operand")
        if x.device.type == "cpu" and x.dim() == 0:
            return scalar(number(x.item(), dtype), dtype)
        return x
    if isinstance(x, complex):
        raise Unsupported("complex operand")
    return scalar(number(x, dtype), dtype)


def supported(dtype):
    """dtype itself if the engine computes in it, else Unsupported (complex
    and the types without a code run through the CPU fallback)."""
    if dtype.is_complex or dtype not in CODE:
        raise Unsupported(f"dtype {dtype}")
    return dtype


# ---- running rules ---------------------------------------------------------------

def _is_tpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _upload(x, device=None):
    """A CPU tensor as a new tpu tensor on device index `device` (None: the
    current device), through the dispatcher's copy."""
    return x.to(torch.device("tpu", _C.get_device() if device is None else device))


def _fix_inputs(rule, inputs):
    fixed = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and not _C.is_tpu(x):
            if x.device.type == "cpu" and x.dim() == 0:
                fixed.append(_upload(x) if x.is_complex() else (dtype_code(x.dtype), x.item()))
                continue
            if x.device.type == "meta":
                raise NotImplementedError(f"tpu: {rule} got a meta tensor")
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"tpu:0 and {x.device}! (while running {rule})"
            )
        fixed.append(x)
    return fixed


def device_index(device):
    """The tpu device index a factory's `device` argument names (None: the
    current device)."""
    if device is None:
        return _C.get_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return _C.get_device() if d.index is None else d.index


def run(rule, inputs, ints=(), floats=(), device=None):
    """Runs the C lowering rule `rule`; returns a list of new tpu tensors.
    An op with no tpu tensor input runs on `device` (an index; None: the
    current device)."""
    try:
        return _C.op(rule, inputs, ints, floats, device)
    except NotTpuError:
        return _C.op(rule, _fix_inputs(rule, inputs), ints, floats, device)


class Call(NamedTuple):
    """One rule call with its arguments, not yet run.  A kernel may return a
    Call instead of a tensor (register runs it and returns its first
    output); the foreach kernels run the Calls of a whole list as one node,
    so a foreach op lowers exactly as its per-tensor op."""
    rule: str
    inputs: list
    ints: tuple = ()
    floats: tuple = ()

    def run(self):
        return run(self.rule, self.inputs, self.ints, self.floats)[0]


def to_dtype(t, dtype):
    if t.dtype == dtype:
        return t
    return run("convert", [t], [dtype_code(dtype)])[0]


def write(dst, src):
    """dst[...] = src (src broadcast to dst, converted to dst's dtype);
    every alias of dst sees the write."""
    if dst.is_complex() and not (isinstance(src, torch.Tensor) and _C.is_tpu(src)):
        # complex numbers travel as tensors, not as scalar inputs
        src = _upload(torch.as_tensor(src.item() if isinstance(src, torch.Tensor) else src, dtype=dst.dtype),
                      dst.device.index)
    if isinstance(src, torch.Tensor):
        if not _C.is_tpu(src):
            if src.device.type == "tpu":  # a tpu tensor the engine cannot read: say why
                _C.storage_info(src)
            if src.dim() == 0 and src.device.type == "cpu":
                src = (dtype_code(dst.dtype), src.item())
            else:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found tpu and {src.device}"
                )
        elif src.dtype != dst.dtype:
            src = to_dtype(src, dst.dtype)
    else:
        src = (dtype_code(dst.dtype), src)
    _C.write(dst, src)
    return dst


def cast_check(res_dtype, out_dtype, opname):
    if not torch.can_cast(res_dtype, out_dtype):
        raise RuntimeError(
            f"{opname}: result type {scalar_type_name(res_dtype)} can't be cast to the desired output type "
            f"{scalar_type_name(out_dtype)}"
        )


def resize_out(out, shape):
    """at::native::resize_output: an out= tensor of another shape is resized,
    with PyTorch's deprecation warning when it had elements."""
    if tuple(out.shape) != tuple(shape):
        if out.numel() != 0:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
                f"not match the required output shape {list(shape)}. This behavior is deprecated, and in a future "
                "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
                "reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
                UserWarning, stacklevel=3)
        out.resize_(shape)
    return out


def write_out(out, res, opname="out"):
    cast_check(res.dtype, out.dtype, opname)
    resize_out(out, res.shape)
    write(out, res)
    return out


def check_inplace(self, res, opname):
    """PyTorch's checks before an in-place op writes res into self."""
    cast_check(res.dtype, self.dtype, opname)
    if tuple(res.shape) != tuple(self.shape):
        raise RuntimeError(
            f"{opname}: output with shape {list(self.shape)} doesn't match the broadcast shape {list(res.shape)}"
        )


def write_inplace(self, res, opname):
    """self[...] = res for an in-place op (checked like PyTorch)."""
    check_inplace(self, res, opname)
    write(self, res)
    return self


# ---- registration -------------------------------------------------------------------

def overload(name):
    """The OpOverload of an ATen name: "aten::add.Tensor", "add.Tensor", "add"."""
    base, _, ovl = _strip(name).partition(".")
    return getattr(getattr(torch.ops.aten, base), ovl or "default")


def _strip(name):
    return name[len("aten::"):] if name.startswith("aten::") else name


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _out_arg_names(name):
    return [a.name for a in overload(name)._schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _runs_calls(fn):
    """fn, with a returned Call run (its first output returned)."""
    def kernel(*args, **kwargs):
        res = fn(*args, **kwargs)
        return res.run() if type(res) is Call else res

    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


# ---- out= checks (PyTorch's host-side checks of out tensors; no device work) ----

# out= ops whose CPU kernels refuse an out that shares memory with an input
# (at::assert_no_overlap), even one equal to it
_NO_OVERLAP_OUT = {"gather", "take", "index_select", "masked_select", "cat", "kthvalue"}
# out= ops whose CPU kernels want the out's dtype to be the result's
_EXACT_DTYPE_OUT = {"gather", "aminmax", "amax", "amin", "_softmax", "_log_softmax", "softmax", "log_softmax", "neg",
                    "index_add", "index_select", "index_copy", "linalg_cross"}
# ... the same rule, in the words of other CPU checks ({o}: the out's dtype, {r}: the result's)
_SAME_DTYPE_OUT = {"hardshrink": "Found dtype {o} but expected {r}",
                   "log_sigmoid_forward": "expected scalar type {r} but found {o}"}
# out= ops whose meta kernels take any out dtype where CPU's casting rule
# (can_cast) refuses an unsafe one
_CAST_RULE_OUT = {"angle"}
# out= ops whose CPU kernels resize a wrong-shaped out without the warning
_SILENT_RESIZE_OUT = {"addbmm", "log_sigmoid_forward"}
# out= ops whose CPU kernel is picked by the out's dtype: a floating input
# into an integer or bool out has no kernel (NotImplementedError)
_KERNEL_BY_OUT_DTYPE = {"nansum"}
# out= ops whose CPU kernels check the out for internal overlap before
# resizing it (the others check the out they write: one of the result's shape)
_OVERLAP_BEFORE_RESIZE_OUT = {"take", "index_select", "masked_select"}
_CPU_DTYPE_NAME = {torch.float32: "float", torch.float64: "double", torch.int64: "long int", torch.int32: "int",
                   torch.bool: "bool", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}


def _mem_range(t):
    """(storage id, first byte, end byte) of the memory a tensor's elements span."""
    if t.numel() == 0:
        return None
    span = sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) + 1
    first = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0)
    return t.untyped_storage().data_ptr(), first * t.element_size(), (first + span) * t.element_size()


def _check_out_args(base, args, kwargs, targets):
    """Internal overlap of the outs, and overlap with an input for the ops
    that refuse it.  RuntimeError with CPU's message."""
    _check_out_internal(base, targets)
    for o in targets:
        _check_out_overlap(base, args, kwargs, o)


def _check_out_internal(base, targets):
    for o in targets:
        if isinstance(o, torch.Tensor) and any(s > 1 and st == 0 for s, st in zip(o.shape, o.stride())):
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a single memory "
                f"location. Please clone() the tensor before performing the operation. ({base}: out of shape "
                f"{list(o.shape)} and strides {list(o.stride())})")


def _check_out_overlap(base, args, kwargs, o):
    if base not in _NO_OVERLAP_OUT or not isinstance(o, torch.Tensor):
        return
    ins = [a for a in args for a in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(a, torch.Tensor)]
    ins += [v for v in kwargs.values() if isinstance(v, torch.Tensor)]
    ro = _mem_range(o)
    for t in ins:
        ri = _mem_range(t) if t.device == o.device else None
        if ro and ri and ro[0] == ri[0] and ro[1] < ri[2] and ri[1] < ro[2]:
            raise RuntimeError(
                "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                f"single memory location. Please clone() the tensor before performing the operation. ({base}: "
                f"input {list(t.shape)} and out {list(o.shape)} overlap)")


def _check_out_result(base, opname, args, kwargs, o, r):
    """The checks of one out against its result, before it is written."""
    if base in _EXACT_DTYPE_OUT and o.dtype != r.dtype:
        n = _CPU_DTYPE_NAME
        raise RuntimeError(f"Expected out tensor to have dtype {n.get(r.dtype, r.dtype)}, but got "
                           f"{n.get(o.dtype, o.dtype)} instead ({opname})")
    if base in _SAME_DTYPE_OUT and o.dtype != r.dtype:
        msg = _SAME_DTYPE_OUT[base].format(o=scalar_type_name(o.dtype), r=scalar_type_name(r.dtype))
        raise RuntimeError(f"{msg} ({opname})")
    if tuple(o.shape) == tuple(r.shape):  # not resized: written as it is
        _check_out_internal(base, [o])
    if base in _NO_OVERLAP_OUT:  # checked on the resized out, as CPU
        cast_check(r.dtype, o.dtype, opname)
        resize_out(o, r.shape)
        _check_out_overlap(base, args, kwargs, o)


def _meta_out_dtype_check(opname, outs, targets, args, kwargs):
    """An out= whose dtype is not the result's: CPU's rule for it is op by op
    (unary float ops want the exact dtype, binary ones cast, reductions name
    the input's dtype ...); the op's meta kernel runs the same checks.  Raises
    CPU's error; True when the meta kernel accepts the out (a converting
    write), False when it cannot tell (no meta kernel: our own rules)."""
    def meta(t):
        if isinstance(t, torch.Tensor):
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        return t

    try:
        margs, mkw = tree_map(meta, args), tree_map(meta, kwargs)
        for n, o in zip(outs, targets):
            mkw[n] = tree_map(meta, o)
        overload(opname)(*margs, **mkw)
    except RuntimeError as e:
        msg = str(e)
        if "dtype" in msg or "type" in msg:
            if opname.split(".")[0] == "cat":  # CPU's cat raises a TypeError of its own
                raise TypeError("torch.cat(): input types can't be cast to the desired output type "
                                f"{scalar_type_name(targets[0].dtype)}") from None
            raise RuntimeError(msg.split("\n")[0]) from None
        return False
    except Exception:  # noqa: BLE001 - no meta kernel, data-dependent shapes: our rules decide
        return False
    return True


def _make_out(fn, outs, opname):
    base = opname.split(".")[0]

    def out_variant(*args, **kwargs):
        targets = [kwargs.pop(n) for n in outs]
        if base in _OVERLAP_BEFORE_RESIZE_OUT:
            _check_out_internal(base, targets)
        res = fn(*args, **kwargs)
        results = (res,) if len(targets) == 1 else res
        cast_ok = False
        if base in _KERNEL_BY_OUT_DTYPE and isinstance(args[0], torch.Tensor) and args[0].is_floating_point() \
                and not (targets[0].is_floating_point() or targets[0].is_complex()):
            raise NotImplementedError(f"\"{base}\" not implemented for '{scalar_type_name(targets[0].dtype)}'")
        if base not in _CAST_RULE_OUT and any(isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                                              and o.dtype != r.dtype for o, r in zip(targets, results)):
            cast_ok = _meta_out_dtype_check(opname, outs, targets, args, kwargs)
        for o, r in zip(targets, results):
            if isinstance(o, (list, tuple)):  # a Tensor[] out (foreach ops)
                for oi, ri in zip(o, r):
                    write_out(oi, ri, opname)
            else:
                _check_out_result(base, opname, args, kwargs, o, r)
                if base in _SILENT_RESIZE_OUT and tuple(o.shape) != tuple(r.shape):
                    o.resize_(r.shape)
                if cast_ok:  # CPU's rules (its meta kernel) take this out's dtype: a converting write
                    resize_out(o, r.shape)
                    write(o, r)
                else:
                    write_out(o, r, opname)
        if isinstance(targets[0], (list, tuple)):
            return None
        return targets[0] if len(targets) == 1 else tuple(targets)

    return out_variant


def _make_inplace(fn, opname):
    def inplace_variant(self, *args, **kwargs):
        return write_inplace(self, fn(self, *args, **kwargs), opname)

    return inplace_variant


def _with_fallback(fn, name):
    op = overload(name)

    def kernel(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Unsupported:
            return _cpu_fallback(op, *args, **kwargs)
        except TypeError as e:  # dtype_code(): name the op that met the dtype
            if str(e).startswith("tpu does not support dtype") and "(in " not in str(e):
                raise TypeError(f"{e} (in aten::{name})") from None
            raise

    if op._schema.is_mutable:
        # an in-place / out= op records its computation, then the write into
        # its target: one program (strict and debug flush at the end), so the
        # target's old value can be donated and updated in place
        def mutating_kernel(*args, **kwargs):
            _C.hold_flush()
            try:
                r = kernel(*args, **kwargs)
            except BaseException:
                _C.release_flush()
                raise
            _C.release_flush()
            return r

        mutating_kernel.__name__ = getattr(fn, "__name__", name)
        return mutating_kernel
    kernel.__name__ = getattr(fn, "__name__", name)
    return kernel


def impl(name, fn, key="PrivateUse1"):
    """Registers fn as the `key` kernel of the ATen overload `name`.  A tpu
    kernel is wrapped with the one fallback behaviour: Unsupported, raised
    by the kernel or by a rule's TPU_UNIMPLEMENTED, runs the call through
    the CPU fallback; so is a sparse kernel (SparsePrivateUse1).  Other
    keys (autocast, nested tensors) get fn as it is."""
    name = _strip(name)
    if key == "PrivateUse1":
        _registered[name] = fn
    if key in ("PrivateUse1", "SparsePrivateUse1"):
        fn = _with_fallback(fn, name)
    _lib.impl(name, fn, key)


def register(functional=None, out=None, inplace=None, fast=False, autograd=False):
    """Decorator: registers fn (which returns tensors or a Call) for the
    functional overload(s) and derives the out= and in-place overloads named.
    fast=True (add/sub/mul/div/pow and the one-input float ops) makes the
    functional overload's kernel the C++ one (csrc/torch/arith.cpp): it
    runs the common cases with no Python
    and hands the rest, and a rule's TPU_UNIMPLEMENTED, to this kernel,
    wrapped like every other (so the CPU fallback behaves the same).
    autograd=True (a kernel composed of device ops, whose backward op has no
    kernel) also makes fn the AutogradPrivateUse1 kernel of the functional
    overload(s): autograd records the device ops it is made of, so the
    gradient is the composition's (and, for a call fn declines, that of the
    CPU op between the two copies)."""

    def deco(fn):
        kernel = _runs_calls(fn)
        for n in _as_list(functional):
            if autograd:  # Unsupported there: the CPU fallback, differentiable as it runs above autograd
                _lib.impl(_strip(n), _with_fallback(fn, _strip(n)), "AutogradPrivateUse1")
            if fast:
                n = _strip(n)
                _registered[n] = fn
                _C.register_fast_kernel(n, _with_fallback(kernel, n))
            else:
                impl(n, kernel)
        for n in _as_list(out):
            impl(n, _make_out(kernel, _out_arg_names(n), _strip(n)))
        for n in _as_list(inplace):
            impl(n, _make_inplace(kernel, _strip(n)))
        return fn

    return deco


def registered():
    return dict(_registered)


def fallthrough(key):
    """Every op without a kernel for `key` falls through it (autocast)."""
    _fallback_lib.fallback(torch.library.fallthrough_kernel, key)


# ---- CPU fallback -------------------------------------------------------------

_fallback_counts = {}
_warned = set()
_tls = threading.local()
# torch_tpu.doctor, while it runs: an object whose .fallback(name, args,
# kwargs, seconds) is told of every op run here (None otherwise: one global
# read per fallback, nothing on the device path)
_doctor = None


def fallback_counts():
    return dict(_fallback_counts)


def reset_fallback_counts():
    _fallback_counts.clear()


def _to_cpu(x):
    if _is_tpu(x):
        return x.cpu()
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("cpu")  # factories: build on CPU, then move
    return x


_alternatives = {}  # "aten::add.Tensor" -> device kernel tried before the CPU fallback


def alternative(name, fn):
    """Registers fn as the device alternative of the ATen overload `name`:
    when the overload's kernel declines a call (Unsupported: complex
    operands for a real-typed kernel) fn is tried before the CPU fallback;
    fn raising Unsupported in turn sends the call to the CPU."""
    _alternatives["aten::" + _strip(name)] = fn


def _cpu_fallback(op, *args, **kwargs):
    name = op.name()  # "aten::add.Tensor"; "aten::relu" for a default overload
    alt = _alternatives.get(name)
    if alt is not None:
        try:
            return alt(*args, **kwargs)
        except Unsupported:
            pass
    if os.environ.get("TORCH_TPU_CPU_FALLBACK", "1") == "0":
        raise NotImplementedError(
            f"tpu: no kernel for {name} and the CPU fallback is disabled (TORCH_TPU_CPU_FALLBACK=0)"
        )
    outs, ins = [], []  # out= checks need the tpu tensors (the CPU copies share no memory)
    for i, a in enumerate(op._schema.arguments):
        v = kwargs.get(a.name) if (a.kwarg_only or i >= len(args)) else args[i]
        (outs if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write else ins).append(v)
    if any(_is_tpu(o) for o in outs):
        _check_out_args(op.name().split("::")[-1].split(".")[0], ins, {}, [o for o in outs if _is_tpu(o)])
    _fallback_counts[name] = _fallback_counts.get(name, 0) + 1
    if _C.initialized():
        _C.flush(_C.CUT_FALLBACK)  # what cut a fused graph here (torch.tpu.metrics)
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"tpu: {name} has no tpu kernel; it runs on the CPU (inputs copied over and back)",
                      stacklevel=2)
    schema = op._schema
    doctor = _doctor
    t0 = _C.clock_now() if doctor is not None or _C.trace_active() else None  # profiler, explain, doctor
    cpu_args = list(tree_map(_to_cpu, args))
    cpu_kwargs = tree_map(_to_cpu, kwargs)
    # a Scalar overload that wraps its number and calls the .out overload
    # (copysign.Scalar) reaches Python with a plain number for a Tensor
    # argument: a wrapped number again (the default dtype for a float), so
    # type promotion treats it as the scalar it was (found by tests/faults' op fuzzer)
    for i, a in enumerate(schema.arguments[:len(cpu_args)]):
        v = cpu_args[i]
        if str(a.type) == "Tensor" and isinstance(v, (bool, int, float, complex)):
            cpu_args[i] = torch.tensor(v, dtype=torch.get_default_dtype()) if isinstance(v, float) else torch.tensor(v)
    res = op(*cpu_args, **cpu_kwargs)
    # write back arguments the op mutated
    mutated = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if a.kwarg_only or i >= len(args):
                orig, new = kwargs.get(a.name), cpu_kwargs.get(a.name)
            else:
                orig, new = args[i], cpu_args[i]
            if _is_tpu(orig) and isinstance(new, torch.Tensor):
                if tuple(orig.shape) != tuple(new.shape) and orig.layout == torch.strided:  # sparse: copy_ resizes
                    orig.resize_(new.shape)
                orig.copy_(new)
                mutated[id(new)] = orig
            elif isinstance(orig, (list, tuple)):
                for o, n in zip(orig, new):
                    if _is_tpu(o):
                        o.copy_(n)
    device = None
    for x in tree_flatten((args, kwargs))[0]:
        if _is_tpu(x):
            device = x.device
            break
    if device is None:
        device = torch.device("tpu", 0)

    def back(x):
        if isinstance(x, torch.Tensor):
            if id(x) in mutated:
                return mutated[id(x)]
            return x.to(device)
        return x

    res = tree_map(back, res)
    if t0 is not None:
        t1 = _C.clock_now()
        if _C.trace_active():
            _C.trace_mark(_C.TRACE_FALLBACK, name, t0, t1)
        if doctor is not None:
            doctor.fallback(name, args, kwargs, t1 - t0)
    return res


def _first_use_fallback(op, *args, **kwargs):
    """The PrivateUse1 fallback.  Before the engine has started (the first
    op on the device), it starts it, which registers the kernels, and calls
    the op again; after that it is the CPU fallback."""
    if not _C.started():
        _C.ensure_started()
        return op(*args, **kwargs)
    return _cpu_fallback(op, *args, **kwargs)


_fallback_installed = False


def install_fallback():
    """The PrivateUse1 fallback, registered once (at import of torch_tpu)."""
    global _fallback_installed
    if not _fallback_installed:
        _fallback_installed = True
        _fallback_lib.fallback(_first_use_fallback, "PrivateUse1")
        _fallback_lib.fallback(_first_use_fallback, "SparsePrivateUse1")  # sparse COO (ops/sparse.py)
        # ATen composites that end in a per-device kernel stub never reach
        # the fallback, so their first call could not start the engine:
        # their kernels are registered now and load on first call.  (ATen's
        # shorter kaiser_window overloads call its native function, not the
        # dispatcher: each gets the kernel.)
        for name in ("kaiser_window", "kaiser_window.periodic", "kaiser_window.beta"):
            impl("aten::" + name, _on_first_call("factory", "kaiser_window"))


def _on_first_call(module, attr):
    def kernel(*args, **kwargs):
        _C.ensure_started()
        return getattr(importlib.import_module("torch_tpu.ops." + module), attr)(*args, **kwargs)

    return kernel
