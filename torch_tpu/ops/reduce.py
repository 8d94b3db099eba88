"""Reduction kernels: sum / mean / prod / nansum, max / min and arg*,
all / any, var / std, norms, logsumexp, softmax and its backward, the scans
(cumsum, cumprod, cummax / cummin, logcumsumexp), sort / topk (rules in
csrc/ops/reduce.c).

The plain reductions pass ints [dtype, keepdim, dim...] (dtype 0 = the
rule's default, an empty dim list = every dim)."""
import torch

from .._dispatch import Call, Unsupported, _make_out, impl, register, resize_out, run, supported, write
from .._dtypes import dtype_code, scalar_type_name



def _dims(dim):
    if dim is None:
        return []
    if isinstance(dim, int):
        return [dim]
    return [int(d) for d in dim]


def _red(rule, self, dim, keepdim, dt=None, floats=()):
    supported(self.dtype)
    code = dtype_code(supported(dt)) if dt is not None else 0
    return Call(rule, [self], [code, int(bool(keepdim)), *_dims(dim)], floats)


def _is_intlike(dt):
    return not dt.is_floating_point and not dt.is_complex


def _sum_dt(self, dtype):
    if dtype is not None:
        return dtype
    return torch.int64 if _is_intlike(self.dtype) else self.dtype


# ---- sum / mean / prod ----------------------------------------------------------------


@register("sum.dim_IntList", out="sum.IntList_out")
def sum_dim(self, dim, keepdim=False, *, dtype=None):
    return _red("sum", self, dim, keepdim, _sum_dt(self, dtype))


@register("sum", out="sum.out")
def sum_all(self, *, dtype=None):
    return _red("sum", self, None, False, _sum_dt(self, dtype))


def _mean_dt(self, dtype):
    dt = dtype if dtype is not None else self.dtype
    if not (dt.is_floating_point or dt.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. "
            + ("Input" if dtype is None else "Optional")
            + f" dtype must be either a floating point or complex dtype. Got: {scalar_type_name(dt)}"
        )
    return dt


@register("mean.dim", out="mean.out")
def mean_dim(self, dim, keepdim=False, *, dtype=None):
    return _red("mean", self, dim, keepdim, _mean_dt(self, dtype))


@register("mean", out="mean.dtype_out")
def mean_all(self, *, dtype=None):
    return _red("mean", self, None, False, _mean_dt(self, dtype))


@register("prod.dim_int", out="prod.int_out")
def prod_dim(self, dim, keepdim=False, *, dtype=None):
    return _red("prod", self, [dim], keepdim, _sum_dt(self, dtype))


@register("prod", out="prod.out")
def prod_all(self, *, dtype=None):
    return _red("prod", self, None, False, _sum_dt(self, dtype))


@register("count_nonzero.dim_IntList", out="count_nonzero.dim_IntList_out")
def count_nonzero(self, dim):
    return _red("count_nonzero", self, dim, False)


@register("count_nonzero", out="count_nonzero.out")
def count_nonzero_all(self, dim=None):
    return _red("count_nonzero", self, dim, False)


# ---- max / min ---------------------------------------------------------------------------


def _no_dim_empty(name, self, dim):
    if self.numel() == 0 and not dim and self.dim() > 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           f"reduction dim with the 'dim' argument.")


@register("amax", out="amax.out")
def amax(self, dim=(), keepdim=False):
    _no_dim_empty("amax", self, dim)
    return _red("amax", self, dim, keepdim)


@register("amin", out="amin.out")
def amin(self, dim=(), keepdim=False):
    _no_dim_empty("amin", self, dim)
    return _red("amin", self, dim, keepdim)


@register("max", out="max.unary_out")
def max_all(self):
    supported(self.dtype)
    return Call("max", [self])


@register("min", out="min.unary_out")
def min_all(self):
    supported(self.dtype)
    return Call("min", [self])


@register("max.dim", out="max.dim_max")
def max_dim(self, dim, keepdim=False):
    supported(self.dtype)
    return tuple(run("max_dim", [self], [dim, int(bool(keepdim))]))


@register("min.dim", out="min.dim_min")
def min_dim(self, dim, keepdim=False):
    supported(self.dtype)
    return tuple(run("min_dim", [self], [dim, int(bool(keepdim))]))


@register("aminmax", out="aminmax.out")
def aminmax(self, *, dim=None, keepdim=False):
    if dim is None and self.numel() == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.")
    return _red("amin", self, dim, keepdim).run(), _red("amax", self, dim, keepdim).run()


def operand(rule, self, dim, keepdim):
    supported(self.dtype)
    # PyTorch's own checks, in its order (found by tests/faults' op fuzzer)
    if self.dtype == torch.bool:
        raise RuntimeError(f"{rule}(): does not support bool input")
    if dim is None and self.numel() == 0:
        raise IndexError(f"{rule}(): Expected reduction dim to be specified for input.numel() == 0.")
    return Call(rule, [self], [int(dim is not None), 0 if dim is None else int(dim), int(bool(keepdim))])


register("argmax", out="argmax.out")(lambda self, dim=None, keepdim=False: operand("argmax", self, dim, keepdim))
register("argmin", out="argmin.out")(lambda self, dim=None, keepdim=False: operand("argmin", self, dim, keepdim))


# ---- all / any -----------------------------------------------------------------------------


def _bool_dt(self):
    return torch.uint8 if self.dtype == torch.uint8 else torch.bool


for _name in ["all", "any"]:
    register(_name, out=f"{_name}.all_out")(
        (lambda r: lambda self: _red(r, self, None, False, _bool_dt(self)))(_name))
    register(f"{_name}.dim", out=f"{_name}.out")(
        (lambda r: lambda self, dim, keepdim=False: _red(r, self, [dim], keepdim, _bool_dt(self)))(_name))
    register(f"{_name}.dims", out=f"{_name}.dims_out")(
        (lambda r: lambda self, dim=None, keepdim=False: _red(r, self, dim, keepdim, _bool_dt(self)))(_name))


# ---- statistics -------------------------------------------------------------------------------


def _var(rule, self, dim, correction, keepdim):
    if self.dtype.is_complex:
        raise Unsupported()
    if not self.dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    c = 1.0 if correction is None else float(correction)
    res = run(rule, [self], [0, int(bool(keepdim)), *_dims(dim)], [c])
    return res[0] if len(res) == 1 else tuple(res)


for _name in ["var", "std"]:
    register(f"{_name}.correction", out=f"{_name}.correction_out")(
        (lambda r: lambda self, dim=None, *, correction=None, keepdim=False: _var(r, self, dim, correction, keepdim))(
            _name))
for _name in ["var_mean", "std_mean"]:
    register(f"{_name}.correction", out=f"{_name}.correction_out")(
        (lambda r: lambda self, dim=None, *, correction=None, keepdim=False: _var(r, self, dim, correction, keepdim))(
            _name))


def _norm(self, p, dim, keepdim, dtype):
    if self.dtype.is_complex:
        raise Unsupported()
    dt = dtype if dtype is not None else self.dtype
    if not dt.is_floating_point:
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {scalar_type_name(self.dtype)}"
        )
    p = 2.0 if p is None else float(p)
    if p < 0 and p != float("-inf") and self.numel() == 0:
        raise RuntimeError(
            "linalg.vector_norm of negative order cannot be performed on an empty tensor"
        )
    return Call("norm", [self], [dtype_code(dt), int(bool(keepdim)), *_dims(dim)], [p])


@register("linalg_vector_norm", out="linalg_vector_norm.out")
def linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _norm(self, ord, dim, keepdim, dtype)


@register("norm.ScalarOpt_dim", out="norm.out")
def norm_dim(self, p, dim, keepdim=False):
    return _norm(self, p, dim, keepdim, None)


@register("norm.ScalarOpt_dim_dtype", out="norm.dtype_out")
def norm_dim_dtype(self, p, dim, keepdim=False, *, dtype):
    return _norm(self, p, dim, keepdim, dtype)


@register("norm.Scalar", out="norm.Scalar_out")
def norm_scalar(self, p=2):
    return _norm(self, p, None, False, None)


@register("norm.ScalarOpt_dtype", out="norm.ScalarOpt_dtype_out")
def norm_scalar_dtype(self, p, *, dtype):
    return _norm(self, p, None, False, dtype)


def powsum(self, ord=2, dtype=None):
    """sum(|x|^ord) (torch._foreach_powsum, which has no per-tensor ATen op):
    the norm rule's attrs, without the root."""
    dt = dtype if dtype is not None else self.dtype
    if not supported(dt).is_floating_point or not self.dtype.is_floating_point:
        raise Unsupported("powsum of a non-float tensor")
    return Call("powsum", [self], [dtype_code(dt), 0], [float(ord)])


@register("logsumexp", out="logsumexp.out")
def logsumexp(self, dim, keepdim=False):
    dt = self.dtype if self.dtype.is_floating_point else torch.get_default_dtype()
    return _red("logsumexp", self, dim, keepdim, dt)


# ---- softmax -------------------------------------------------------------------------------------


def _softmax(rule, self, dim, half_to_float):
    dt = supported(self.dtype)
    if not (dt.is_floating_point or dt.is_complex):
        # PyTorch's CPU kernels' dtype dispatch (found by tests/faults' op fuzzer)
        nd = max(self.dim(), 1)
        if not -nd <= int(dim) < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
        if self.numel() == 0:  # CPU dispatches no kernel for an empty tensor
            return torch.empty(self.shape, dtype=self.dtype, device=self.device)
        last = "_lastdim" if int(dim) % nd == nd - 1 else ""
        raise NotImplementedError(f'"{rule.lstrip("_")}{last}_kernel_impl" not implemented for '
                                  f"'{scalar_type_name(dt)}'")
    if half_to_float:
        if dt != torch.float16 and dt != torch.bfloat16:
            raise RuntimeError("conversion is supported for Half type only")
        dt = torch.float32
    return Call(rule, [self], [int(dim), dtype_code(dt)])


register("_softmax", out="_softmax.out")(lambda self, dim, half_to_float: _softmax("_softmax", self, dim, half_to_float))
register("_log_softmax", out="_log_softmax.out")(
    lambda self, dim, half_to_float: _softmax("_log_softmax", self, dim, half_to_float))


def _softmax_bwd(rule, grad_output, output, dim, input_dtype):
    supported(grad_output.dtype)
    return Call(rule, [grad_output, output], [int(dim), dtype_code(input_dtype)])


register("_softmax_backward_data", out="_softmax_backward_data.out")(
    lambda grad_output, output, dim, input_dtype: _softmax_bwd("_softmax_backward_data", grad_output, output, dim,
                                                               input_dtype))
register("_log_softmax_backward_data", out="_log_softmax_backward_data.out")(
    lambda grad_output, output, dim, input_dtype: _softmax_bwd("_log_softmax_backward_data", grad_output, output,
                                                               dim, input_dtype))


# ---- scans ----------------------------------------------------------------------------------------


def _scan(rule, self, dim, dtype):
    dt = supported(_sum_dt(self, dtype))
    return Call(rule, [self], [int(dim), dtype_code(dt)])


def _scan_out(rule):
    # CPU's cumsum.out / cumprod.out without a dtype scan in the out's dtype (the input converted to it),
    # not the result's; a bool out has no kernel (a 0-dim input is copied and an empty one has
    # nothing to scan, so those pass); a dtype that differs from the out's raises
    def out_variant(self, dim, *, dtype=None, out):
        if dtype is None:
            if out.dtype == torch.bool and self.dim() > 0 and self.numel() > 0:
                raise NotImplementedError(f'"{rule}_out_cpu" not implemented for \'Bool\'')
            dtype = out.dtype
        return _make_out(lambda s, d, dtype: _scan(rule, s, d, dtype).run(), ["out"], f"{rule}.out")(
            self, dim, dtype=dtype, out=out)

    return out_variant


for _rule in ("cumsum", "cumprod"):
    register(_rule, inplace=f"{_rule}_")(lambda self, dim, *, dtype=None, _r=_rule: _scan(_r, self, dim, dtype))
    impl(f"{_rule}.out", _scan_out(_rule))


# ---- sort / topk -----------------------------------------------------------------------------------


def _sort(self, dim, descending):
    supported(self.dtype)
    return tuple(run("sort", [self], [int(dim), int(bool(descending))]))


register("sort.stable", out="sort.values_stable")(
    lambda self, *, stable=None, dim=-1, descending=False: _sort(self, dim, descending))
register("sort", out="sort.values")(lambda self, dim=-1, descending=False: _sort(self, dim, descending))


@register("topk", out="topk.values")
def topk(self, k, dim=-1, largest=True, sorted=True):
    supported(self.dtype)
    return tuple(run("topk", [self], [int(k), int(dim), int(bool(largest)), int(bool(sorted))]))


# ---- scans --------------------------------------------------------------------------------


def _cummaxmin_helper(is_max):
    def kernel(self, values, indices, dim):
        supported(self.dtype)
        if self.dtype == torch.bool or self.numel() == 0:
            raise Unsupported()
        v, i = run("cummaxmin", [self], [int(dim), int(is_max)])
        resize_out(values, v.shape)
        resize_out(indices, i.shape)
        write(values, v)
        write(indices, i)

    return kernel


register("aten::_cummax_helper")(_cummaxmin_helper(True))
register("aten::_cummin_helper")(_cummaxmin_helper(False))


@register("aten::_logcumsumexp", out="aten::_logcumsumexp.out")
def logcumsumexp(self, dim):
    if not self.dtype.is_floating_point or self.numel() == 0:
        raise Unsupported()
    return Call("logcumsumexp", [self], [int(dim)])



@register("aten::nansum", out="aten::nansum.out")
def nansum(self, dim=None, keepdim=False, *, dtype=None):
    supported(self.dtype)
    if dtype is None:
        dtype = torch.int64 if (not self.dtype.is_floating_point) else self.dtype
    supported(dtype)
    if dtype == torch.bool or self.dtype == torch.bool:
        raise Unsupported()
    dims = [] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if self.dim() == 0:
        dims = []
    else:
        dims = [d % self.dim() for d in dims]
    return Call("nansum", [self], [dtype_code(dtype), int(bool(keepdim)), len(dims), *dims])



# ---- hash_tensor: the xor of the elements' 64-bit patterns ------------------------------------


def _bits64(x):
    """Each element as CPU's hash_tensor reads it, as int64: integers and
    bools widened to 64 bits, floats to float64's bit pattern.  float32
    becomes float64 on the bits (exact; XLA's CPU code flushes subnormals in
    float arithmetic, and a TPU has no float64): exponent rebiased,
    mantissa shifted, a subnormal normalized, a NaN quieted."""
    if x.dtype == torch.float64:
        return x.view(torch.int64)
    if not x.dtype.is_floating_point:
        return x.view(torch.int64) if x.dtype == torch.uint64 else x.to(torch.int64)
    b = x.float().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    e, m = (b >> 23) & 0xFF, b & 0x7FFFFF
    normal = ((e + 896) << 52) | (m << 29)
    special = (0x7FF << 52) | (torch.where(m != 0, m | 0x400000, m) << 29)  # inf, NaN
    # a subnormal m 2^-149, p = floor(log2 m) from m's exact float32 exponent
    p = (((m.to(torch.float32).view(torch.int32).to(torch.int64) >> 23) & 0xFF) - 127).clamp(0, 22)
    sub = ((p + 874) << 52) | ((m << (52 - p)) & ((1 << 52) - 1))
    r = torch.where(e == 0xFF, special, torch.where(e == 0, torch.where(m == 0, 0, sub), normal))
    return r | ((b >> 31) << 63)


@register("aten::hash_tensor", out="aten::hash_tensor.out")
def hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    """uint64: the xor over dim (every dim when empty) of _bits64, as a tree
    of bitwise_xor over the reduced elements (padded with zeros, xor's
    identity, to a power of two)."""
    if mode != 0 or self.dtype.is_complex or self.dim() > 8:
        raise Unsupported("hash_tensor: mode or dtype")  # CPU's errors
    nd = max(self.dim(), 1)
    if any(not -nd <= d < nd for d in _dims(dim)):
        raise Unsupported("hash_tensor: dim out of range")  # CPU's error
    if self.dim() == 0:
        return _bits64(self).view(torch.uint64)
    dims = sorted({d % nd for d in _dims(dim)}) if _dims(dim) else list(range(self.dim()))
    if (not _dims(dim) and self.numel() == 0) or any(self.shape[d] == 0 for d in dims):
        raise Unsupported("hash_tensor over no elements")  # CPU's errors
    keep = [d for d in range(self.dim()) if d not in dims]
    x = _bits64(self).permute(*keep, *dims)
    kept = [self.shape[d] for d in keep]
    x = x.reshape(*kept, -1) if x.numel() else torch.zeros(*kept, 1, dtype=torch.int64, device=self.device)
    k = x.shape[-1]
    width = 1 << max(k - 1, 0).bit_length()
    if width != k:
        x = torch.nn.functional.pad(x, (0, width - k))
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., :h] ^ x[..., h:]
    out = x.squeeze(-1)
    if keepdim:
        out = out.reshape([1 if d in dims else self.shape[d] for d in range(self.dim())])
    return out.view(torch.uint64)
