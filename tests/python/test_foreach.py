"""Every torch._foreach_* op PyTorch has, in every overload (functional,
in-place, out=), against its per-tensor op on the tpu: the results must be
bit-identical (torch.equal), as a foreach op runs its per-tensor op's rule.
The op list is read from torch.ops.aten, so an op PyTorch adds fails here
until it is classified.  (Values against PyTorch CPU: test_optim.py.)"""
import math

import pytest
import torch

from torch_tpu import _dispatch

TPU = torch.device("tpu")
SHAPES = [(3, 4), (5,), (), (2, 1, 3)]
N = len(SHAPES)

# op -> how its per-tensor counterpart is called.  Each value is
# (kind, per-tensor function); kinds say which inputs the op takes.
UNARY_DOMAIN = {"sqrt": "pos", "rsqrt": "pos", "log": "pos", "log2": "pos", "log10": "pos", "log1p": "pos",
                "lgamma": "pos", "reciprocal": "pos", "asin": "unit", "acos": "unit"}
UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
         "sinh", "sqrt", "tan", "tanh", "trunc"]


def _scalar_fn(op):
    # PyTorch's foreach maximum / minimum with a Scalar are clamp_min / clamp_max
    return {"maximum": torch.clamp_min, "minimum": torch.clamp_max}.get(op, getattr(torch, op))


BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow"]
NO_COUNTERPART = {
    "powsum": "no per-tensor ATen op (sum |x|^p); compared against CPU in test_foreach_powsum_matches_cpu",
}
OTHERS = ["addcmul", "addcdiv", "lerp", "norm", "max", "mm", "clone", "copy", "zero"]


def _packets():
    return sorted(n for n in dir(torch.ops.aten) if n.startswith("_foreach_"))


def _base(packet):
    op = packet[len("_foreach_"):]
    return op[:-1] if op.endswith("_") else op


def _cases():
    cases = []
    for packet in _packets():
        for ovl in getattr(torch.ops.aten, packet).overloads():
            cases.append(pytest.param(packet, ovl, id=f"{packet}.{ovl}"))
    return cases


def _lst(seed, domain=None, dtype=torch.float32, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(s, generator=g) for s in shapes]
    if domain == "pos":
        ts = [t.abs() + 0.1 for t in ts]
    elif domain == "unit":
        ts = [t.tanh() * 0.9 for t in ts]
    return [t.to(dtype).to(TPU) for t in ts]


def _clone(lst):
    return [t.clone() for t in lst]


def _equal(got, want, what):
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.device.type == "tpu", what
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}[{i}]: {a.dtype}{list(a.shape)} vs {b.dtype}" \
                                                         f"{list(b.shape)}"
        assert torch.equal(a.cpu(), b.cpu()) or (a.isnan().any() and torch.equal(a.cpu().nan_to_num(),
                                                                                 b.cpu().nan_to_num())), \
            f"{what}[{i}]: not bit-identical to the per-tensor op:\n{a.cpu()}\n{b.cpu()}"


def _args(op, ovl, dtype=torch.float32):
    """(foreach args, foreach kwargs, per-tensor reference results)."""
    if op in UNARY:
        x = _lst(1, UNARY_DOMAIN.get(op), dtype)
        return [x], {}, [getattr(torch, op)(t) for t in x]
    if op in BINARY:
        pos = op == "pow"
        x = _lst(2, "pos" if pos else None, dtype)
        kind = ovl.replace("_out", "")
        if kind == "List":
            y = _lst(3, "pos" if pos else None, dtype)
            kw = {"alpha": 0.37} if op in ("add", "sub") else {}
            return [x, y], kw, [getattr(torch, op)(a, b, **kw) for a, b in zip(x, y)]
        if kind == "Scalar":
            s = 1.7
            return [x, s], {}, [_scalar_fn(op)(a, s) for a in x]
        if kind == "ScalarList":
            ss = [0.5, -2.25, 3.0, 0.3][:N]
            return [x, ss], {}, [_scalar_fn(op)(a, s) for a, s in zip(x, ss)]
        if kind == "Tensor":
            t = torch.tensor(0.37, device=TPU)
            kw = {"alpha": -1.5} if op == "add" else {}
            return [x, t], kw, [getattr(torch, op)(a, t, **kw) for a in x]
        if kind == "ScalarAndTensor":
            return [2.5, x], {}, [torch.pow(2.5, a) for a in x]
    if op in ("addcmul", "addcdiv"):
        x, a, b = _lst(4, None, dtype), _lst(5, None, dtype), _lst(6, "pos", dtype)
        fn = getattr(torch, op)
        kind = ovl.replace("_out", "")
        if kind == "Scalar":
            return [x, a, b, -0.3], {}, [fn(p, q, r, value=-0.3) for p, q, r in zip(x, a, b)]
        vals = [0.1, 2.0, -1.0, 0.7][:N]
        if kind == "ScalarList":
            return [x, a, b, vals], {}, [fn(p, q, r, value=v) for p, q, r, v in zip(x, a, b, vals)]
        vt = torch.tensor(vals, device=TPU)
        return [x, a, b, vt], {}, [fn(p, q, r, value=v) for p, q, r, v in zip(x, a, b, vt.cpu().tolist())]
    if op == "lerp":
        x, y = _lst(7, None, dtype), _lst(8, None, dtype)
        kind = ovl.replace("_out", "")
        if kind == "Scalar":
            return [x, y, 0.3], {}, [torch.lerp(a, b, 0.3) for a, b in zip(x, y)]
        if kind == "ScalarList":
            w = [0.2, 0.9, 0.5, -0.1][:N]
            return [x, y, w], {}, [torch.lerp(a, b, v) for a, b, v in zip(x, y, w)]
        w = _lst(9, "unit", dtype)
        return [x, y, w], {}, [torch.lerp(a, b, v) for a, b, v in zip(x, y, w)]
    if op == "norm":
        x = _lst(10, None, dtype)
        return [x, 3.5], {}, [torch.linalg.vector_norm(t, 3.5) for t in x]
    if op == "max":
        x = _lst(11, None, dtype)
        return [x], {}, [torch.max(t) for t in x]
    if op == "mm":
        a = [torch.randn(2, 3).to(dtype).to(TPU), torch.randn(4, 1).to(dtype).to(TPU)]
        b = [torch.randn(3, 5).to(dtype).to(TPU), torch.randn(1, 2).to(dtype).to(TPU)]
        return [a, b], {}, [torch.mm(p, q) for p, q in zip(a, b)]
    if op == "clone":
        x = _lst(12, None, dtype)
        return [x], {}, [t.clone() for t in x]
    if op == "copy":
        dst, src = _lst(13, None, dtype), _lst(14, None, dtype)
        return [dst, src], {}, [s.clone() for s in src]
    if op == "zero":
        x = _lst(15, None, dtype)
        return [x], {}, [torch.zeros_like(t) for t in x]
    raise AssertionError(f"_foreach_{op}.{ovl} is not classified in this test")


def test_every_foreach_op_is_classified():
    ops = {_base(p) for p in _packets()}
    known = set(UNARY) | set(BINARY) | set(OTHERS) | set(NO_COUNTERPART)
    assert ops - known == set(), f"foreach ops this test does not know: {sorted(ops - known)}"


@pytest.mark.parametrize("packet,ovl", _cases())
def test_foreach_op_is_bit_identical_to_its_per_tensor_op(packet, ovl):
    op = _base(packet)
    if op in NO_COUNTERPART:
        pytest.skip(NO_COUNTERPART[op])
    inplace = packet.endswith("_")
    fn = getattr(getattr(torch.ops.aten, packet), ovl)
    args, kw, want = _args(op, ovl)
    before = dict(_dispatch.fallback_counts())
    if ovl == "out" or ovl.endswith("_out"):
        outs = [torch.empty(0, dtype=w.dtype, device=TPU) for w in want]
        fn(*args, **kw, out=outs)
        got = outs
    elif inplace:
        selves = _clone(args[0])
        fn(selves, *args[1:], **kw)
        got = selves
    else:
        got = fn(*args, **kw)
    after = _dispatch.fallback_counts()
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}, "ran through the CPU fallback"
    _equal(list(got), want, f"{packet}.{ovl}")


@pytest.mark.parametrize("op", ["erf", "exp", "sigmoid", "log2", "sinh", "asin"])
def test_foreach_unary_bfloat16_is_bit_identical(op):
    x = _lst(16, UNARY_DOMAIN.get(op), torch.bfloat16)
    _equal(getattr(torch, f"_foreach_{op}")(x), [getattr(torch, op)(t) for t in x], op)


def test_foreach_mixed_dtypes_and_int_promotion_are_bit_identical():
    x = [torch.randn(3).to(TPU), torch.randn(2, 2).bfloat16().to(TPU), torch.arange(4).to(TPU),
         torch.randn(5).double().to(TPU)]
    _equal(torch._foreach_add(x, 1.5), [torch.add(t, 1.5) for t in x], "add")
    _equal(torch._foreach_div(x, 3), [torch.div(t, 3) for t in x], "div")
    _equal(torch._foreach_mul(x, x), [torch.mul(t, t) for t in x], "mul")
    floats = [t for t in x if t.dtype.is_floating_point]
    _equal(torch._foreach_norm(floats, 2), [torch.linalg.vector_norm(t, 2) for t in floats], "norm")
    _equal(torch._foreach_norm(floats, math.inf, dtype=torch.float64),
           [torch.linalg.vector_norm(t, math.inf, dtype=torch.float64) for t in floats], "norm dtype")


def test_foreach_long_lists_span_several_nodes():
    """More calls than one node takes (16 outputs, 64 inputs): still exact,
    with aliasing between the lists reading old values."""
    x = _lst(17, None, shapes=[(2, i % 3 + 1) for i in range(37)])
    y = _lst(18, None, shapes=[(2, i % 3 + 1) for i in range(37)])
    want = [torch.addcmul(a, b, a, value=0.5) for a, b in zip(x, y)]
    _equal(torch._foreach_addcmul(x, y, x, 0.5), want, "addcmul")
    z = _clone(x)
    torch._foreach_addcdiv_(z, z, [t.abs() + 1 for t in z], [0.1 * i for i in range(37)])
    _equal(z, [torch.addcdiv(a, a, a.abs() + 1, value=0.1 * i) for i, a in enumerate(x)], "addcdiv_")


def test_foreach_powsum_matches_cpu():
    cpu = [torch.randn(s) for s in SHAPES]
    for p in (0, 1, 2, 3.5, math.inf):
        got = torch._foreach_powsum([t.to(TPU) for t in cpu], p)
        want = torch._foreach_powsum(cpu, p)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
    bf = [t.bfloat16() for t in cpu]
    got = torch._foreach_powsum([t.to(TPU) for t in bf], 2, dtype=torch.float32)
    for a, b in zip(got, torch._foreach_powsum(bf, 2, dtype=torch.float32)):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
