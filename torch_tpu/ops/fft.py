"""Discrete Fourier transforms (csrc/ops/fft.c): aten::_fft_c2c, _fft_r2c and
_fft_c2r, the three primitives every torch.fft function (fft, ifft, rfft,
irfft, hfft, ihfft, fft2, fftn and their inverses) reaches after PyTorch's
composite code has padded / trimmed the signal and resolved dims and norm.
Their gradients are PyTorch's autograd formulas, written with these same
primitives and complex elementwise ops (torch_tpu/ops/complex.py).

Arguments are checked here with the CPU kernel's messages; half types are
not supported (PyTorch's CPU rejects them too).
"""
import torch

from .._dispatch import register, run

_REAL = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _dims(self, dim, op):
    dim = [int(d) for d in dim]
    r = self.dim()
    for d in dim:
        if not -r <= d < r or r == 0:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(r, 1)}, {max(r, 1) - 1}], "
                             f"but got {d})")
    return [d % r for d in dim]


def _check_size(self, dim):
    for d in dim:
        if self.shape[d] < 1:
            raise RuntimeError(f"Invalid number of data points ({self.shape[d]}) specified")


@register("_fft_c2c", out="_fft_c2c.out")
def _fft_c2c(self, dim, normalization, forward):
    if not self.is_complex():
        raise RuntimeError(f"_fft_c2c: expected a complex input tensor, but got {self.dtype}")
    if self.dtype not in (torch.complex64, torch.complex128):
        raise RuntimeError(f"Unsupported dtype {self.dtype}")
    dim = _dims(self, dim, "_fft_c2c")
    if not dim:
        return self.clone()
    _check_size(self, dim)
    return run("fft_c2c", [self], [int(bool(forward)), int(normalization), len(dim), *dim])[0]


@register("_fft_r2c", out="_fft_r2c.out")
def _fft_r2c(self, dim, normalization, onesided):
    if self.dtype not in _REAL:
        raise RuntimeError(f"Unsupported dtype {self.dtype}" if self.is_floating_point() else
                           f"_fft_r2c: expected a real input tensor, but got {self.dtype}")
    dim = _dims(self, dim, "_fft_r2c")
    if not dim:
        return self.to(_REAL[self.dtype])
    _check_size(self, dim)
    return run("fft_r2c", [self], [int(bool(onesided)), int(normalization), len(dim), *dim])[0]


@register("_fft_c2r", out="_fft_c2r.out")
def _fft_c2r(self, dim, normalization, last_dim_size):
    if self.dtype not in (torch.complex64, torch.complex128):
        raise RuntimeError(f"_fft_c2r: expected a complex input tensor, but got {self.dtype}")
    dim = _dims(self, dim, "_fft_c2r")
    if not dim:
        raise RuntimeError("_fft_c2r: expected at least one dim")
    _check_size(self, dim)
    if int(last_dim_size) < 1:
        raise RuntimeError(f"Invalid number of data points ({int(last_dim_size)}) specified")
    return run("fft_c2r", [self], [int(normalization), int(last_dim_size), len(dim), *dim])[0]
