"""Factory kernels (csrc/ops/factory.c): eye, linspace, logspace;
_efficientzerotensor (a zero fill).  (full,
empty and arange are in core.py, with the tensor-making machinery they share
with copies.)  Start / end / base values are 0-d runtime inputs in the type
PyTorch computes the range in (float64 where the platform has it)."""
import torch

from .. import _C
from .._dispatch import Unsupported, register, run, scalar, supported, write
from .._dtypes import dtype_code
from .core import full_tensor


def _eye(n, m, out):
    n, m = int(n), int(m)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    supported(out.dtype)
    r = run("eye", [scalar(1, torch.int64)], [dtype_code(out.dtype), n, m], device=out.device.index)[0]
    out.resize_([n, m])  # CPU's eye_out resizes without resize_output's warning
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
    dt = supported(out.dtype)
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
    r = run("linspace", ins, ints, device=out.device.index)[0]
    if out.numel() != steps:  # as CPU's linspace_out / logspace_out: no resize_output warning
        out.resize_([steps])
    return write(out, r.view(out.shape))  # an out of `steps` elements keeps its shape, as on CPU


@register(["aten::linspace.out", "aten::linspace.Tensor_Tensor_out", "aten::linspace.Tensor_Scalar_out",
           "aten::linspace.Scalar_Tensor_out"])
def linspace_out(start, end, steps, *, out):
    return _space(start, end, steps, out)


@register(["aten::logspace.out", "aten::logspace.Tensor_Tensor_out", "aten::logspace.Tensor_Scalar_out",
           "aten::logspace.Scalar_Tensor_out"])
def logspace_out(start, end, steps, base=10.0, *, out):
    return _space(start, end, steps, out, base)


@register("aten::_efficientzerotensor")
def efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """The zeros autograd makes for a gradient known to be zero (sgn's for
    real inputs, ...).  CPU's is a ZeroTensor (no storage; ops on it read
    zeros); here a plain zero-filled tensor, the value the CPU fallback's
    copy of that ZeroTensor had, made on the device."""
    return full_tensor(size, 0, dtype or torch.get_default_dtype(), device)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None,
                  pin_memory=None):
    """aten::kaiser_window: ATen's composite ends in a per-device
    kernel stub; here the window is composed of device ops, in float32 (or
    float64) like the CPU kernel's opmath: i0(beta*sqrt(1-((n-a)/a)^2))/i0(beta)
    with a = (N-1)/2.  Registered at import (_dispatch.install_fallback)."""
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device or "tpu")
    if layout not in (None, torch.strided):
        raise RuntimeError(f"kaiser_window is not implemented for sparse types, got: {layout}")
    if not dtype.is_floating_point:
        raise RuntimeError(f"kaiser_window expects floating point dtypes, got: {dtype}")
    if window_length < 0:
        raise RuntimeError(f"kaiser_window requires non-negative window_length, got window_length={window_length}")
    if window_length <= 1:
        return torch.ones(window_length, dtype=dtype, device=device)
    n = window_length + 1 if periodic else window_length
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    alpha = (n - 1) / 2.0
    x = (torch.arange(n, dtype=compute, device=device) - alpha) / alpha
    w = torch.special.i0(beta * torch.sqrt(1 - x * x)) / torch.special.i0(torch.tensor(beta, dtype=compute, device=device))
    return w[:window_length].to(dtype)
