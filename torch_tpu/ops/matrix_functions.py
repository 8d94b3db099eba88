"""Matrix functions on the device: matrix_exp (torch.linalg.matrix_exp,
torch.matrix_exp) by scaling and squaring.  No lowering rule of its own:
matrix products and sums.  Its gradient is PyTorch's formula (the
exponential of a block matrix: this kernel again).  Real float32 / float64;
complex inputs, and inputs with inf or NaN, go to the CPU fallback."""
import math

import torch

from .._dispatch import Unsupported, register
# ---- matrix_exp: scaling and squaring ---------------------------------------------------------

# the 1-norm up to which the degree-18 Taylor polynomial is exact to the
# dtype (its remainder ~ theta^19 / 19!: 1e-8 for 3.0, 4e-17 for 1.09):
# the fewer squarings after it, the less their rounding grows
_MEXP_THETA = {torch.float32: 3.0, torch.float64: 1.09}


@register("aten::linalg_matrix_exp")
def matrix_exp(self):
    """exp(A) = exp(A / 2^s)^(2^s): A scaled until its 1-norm is at most
    _MEXP_THETA's bound (s from the batch's largest norm: one host read, as the
    count of squarings shapes the program), the degree-18 Taylor polynomial
    of the scaled matrix by Horner's rule, then s squarings.  ATen picks a
    lower degree for small norms; the results agree to rounding."""
    if self.dtype not in (torch.float32, torch.float64) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        raise Unsupported(f"matrix_exp of {self.dtype} {tuple(self.shape)}")
    n = self.shape[-1]
    if self.numel() == 0:
        return self.clone()
    if n == 1:
        return self.exp()
    norm = self.abs().sum(-2).amax(-1).amax()
    norm = float(norm)
    if not math.isfinite(norm):
        raise Unsupported("matrix_exp of a matrix with inf or NaN")  # CPU's result, NaN where it puts them
    theta = _MEXP_THETA[self.dtype]
    s = max(0, math.ceil(math.log2(norm / theta))) if norm > theta else 0
    a = self / (2.0 ** s)
    eye = torch.eye(n, dtype=self.dtype, device=self.device).expand(self.shape)
    p = eye
    for k in range(18, 0, -1):  # I + a/1 (I + a/2 (... (I + a/18)))
        p = eye + (a @ p) / k
    for _ in range(s):
        p = p @ p
    return p
