"""Padding kernels (csrc/ops/padding.c): constant_pad_nd, reflection and
replication padding over 1 to 3 trailing dims, and their backward ops.
Reflection pads at least as large as the padded dim (PyTorch raises) run
through the CPU fallback, which raises PyTorch's message.
"""
from .._dispatch import Unsupported, register, run, scalar, supported


@register("aten::constant_pad_nd", out="aten::constant_pad_nd.out")
def constant_pad_nd(self, pad, value=0):
    pad = [int(p) for p in pad]
    return run("constant_pad_nd", [self, scalar(value, self.dtype)], pad)[0]


def _pad_check(x, padding, nsp, replicate):
    supported(x.dtype)
    padding = [int(p) for p in padding]
    if len(padding) != 2 * nsp or x.dim() not in (nsp + 1, nsp + 2) or min(x.shape[1:], default=1) == 0:
        raise Unsupported()
    for i in range(nsp):
        size = x.shape[x.dim() - 1 - i]
        lo, hi = padding[2 * i], padding[2 * i + 1]
        if size + lo + hi <= 0:
            raise Unsupported()
        if not replicate and (lo >= size or hi >= size):
            raise Unsupported()  # the CPU kernel raises PyTorch's message
    return padding


def _reg_pad(kind, nsp):
    rep = int(kind == "replication")
    base = f"{kind}_pad{nsp}d"

    def fwd(self, padding):
        padding = _pad_check(self, padding, nsp, rep)
        if self.numel() == 0:
            shape = list(self.shape)
            for i in range(nsp):
                shape[-1 - i] += padding[2 * i] + padding[2 * i + 1]
            return self.new_empty(shape)
        return run("pad_mode", [self], [rep, nsp, *padding])[0]

    def bwd(grad_output, self, padding):
        padding = _pad_check(self, padding, nsp, rep)
        if grad_output.dim() != self.dim():
            raise Unsupported()
        if self.numel() == 0:
            return self.new_empty(self.shape)
        return run("pad_mode_backward", [grad_output], [rep, nsp, *padding, *self.shape[self.dim() - nsp:]])[0]

    register(f"aten::{base}", out=f"aten::{base}.out")(fwd)
    register(f"aten::{base}_backward", out=f"aten::{base}_backward.grad_input")(bwd)


for _k in ("reflection", "replication"):
    for _n in (1, 2, 3):
        _reg_pad(_k, _n)

