"""OpInfo complex64 samples: the OpInfos below run their complex64 samples
on tpu (values and gradients against PyTorch CPU, the OpInfo sweep's
comparison in opinfo_util.run_op) with no CPU fallback.

Complex64 OpInfos known to still use the CPU fallback (not listed):
prod (prod, nonzero), cumsum, linalg.vector_norm, index_select's backward
(index_add_), and the reductions / scans of reduce.py generally.  The
float32-only OpInfos (rfft, ihfft, complex, polar, view_as_complex take
real inputs) are covered by the float32 sweep and test_complex_fft.py.
TORCH_TPU_OPINFO_MAX_SAMPLES=K caps the samples per op (default 4; 0 = all).
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_util as U  # noqa: E402

COMPLEX_PASS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos",
    "tan", "reciprocal", "sigmoid", "square", "abs", "angle", "sgn", "conj", "conj_physical", "resolve_conj",
    "real", "imag", "view_as_real", "mm", "bmm", "matmul", "mv", "dot", "vdot", "addmm", "baddbmm", "addmv",
    "sum", "mean", "where", "eq", "ne", "pow", "masked_fill", "expm1", "log1p", "log2", "log10", "einsum",
    "tensordot", "kron", "outer", "inner", "linalg.vecdot",
    "fft.fft", "fft.ifft", "fft.fft2", "fft.ifft2", "fft.fftn", "fft.ifftn", "fft.irfft", "fft.irfft2",
    "fft.irfftn", "fft.hfft", "fft.fftshift",
]

_DB = None


def _db():
    global _DB
    if _DB is None:
        _DB = U.load_op_db()
    return _DB


@pytest.mark.parametrize("key", COMPLEX_PASS)
def test_opinfo_complex64_samples(key):
    cap = int(os.environ.get("TORCH_TPU_OPINFO_MAX_SAMPLES", "4")) or None
    res = U.run_op(_db()[key], max_samples=cap, dtype=torch.complex64)
    assert res["status"] == "pass", f"{key}: {res['status']} {res['fallbacks']} {res['error'] or res['reason']}"
    assert res["compared"] > 0
