"""The op fuzzer (issue 28, item 4): hypothesis draws cases -- an op, a
dtype, shapes (0-sized, scalars, a few large), views (transposed, strided,
offset, expanded), Python scalars, dims (in and out of range) -- and each
case runs on the CPU and on tpu: the results must be equal (within the
dtype's tolerance; same dtype and shape) or both must raise the same
exception type.

A case is plain data (a dict), so it prints, reproduces and becomes a
regression test (tests/faults/test_fuzz_regressions.py) as it is:

    python fuzz_ops.py run --groups elementwise,reduce --count 50 --out result.json
    python fuzz_ops.py case '{"op": "add", ...}'

`run` writes the case it is about to run to <out>.current first, so when the
process dies (abort, segfault) the parent (test_op_fuzz.py) names the case
that killed it."""
import json
import math
import os
import sys
import warnings

import torch

import torch_tpu  # noqa: F401

warnings.filterwarnings("ignore")

FLOATS = ["float32", "float64", "bfloat16", "float16"]
INTS = ["int64", "int32", "int16", "int8", "uint8"]
ALL = FLOATS + INTS + ["bool"]

# ---- building a case's inputs ------------------------------------------------------------------


def _dtype(name):
    return getattr(torch, name)


def _values(shape, dtype, gen, kind):
    dt = _dtype(dtype)
    if kind == "index":  # indices: the case gives the bound
        return None
    if dt == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dt.is_floating_point:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
        if kind == "positive":
            x = x.abs() + 0.1
        elif kind == "unit":
            x = torch.rand(shape, generator=gen, dtype=torch.float64) * 1.8 - 0.9
        elif kind == "special":  # inf, -inf, nan, -0.0 mixed in
            n = x.numel()
            if n:
                flat = x.reshape(-1)
                pick = torch.randint(0, 5, (n,), generator=gen)
                flat[pick == 0] = math.inf
                flat[pick == 1] = -math.inf
                flat[pick == 2] = math.nan
                flat[pick == 3] = -0.0
        return x.to(dt)
    lo, hi = (0, 10) if dtype == "uint8" else (-9, 10)
    if kind == "positive":
        lo = 1
    return torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64).to(dt)


def make_input(spec, gen):
    """A CPU tensor from {"shape", "dtype", "view", "kind"}: the view is made
    the same way on both devices (view_on)."""
    shape, view = list(spec["shape"]), spec.get("view", "contig")
    base_shape = list(shape)
    if view == "transpose" and len(shape) >= 2:
        base_shape[-1], base_shape[-2] = shape[-2], shape[-1]
    elif view == "stride2" and len(shape) >= 1:
        base_shape[-1] = shape[-1] * 2
    elif view == "offset":
        base_shape = [max(1, int(math.prod(shape))) + 3]
    elif view == "expand" and len(shape) >= 1:
        base_shape[0] = 1
    return _values(base_shape, spec["dtype"], gen, spec.get("kind", "normal"))


def view_on(base, spec):
    shape, view = list(spec["shape"]), spec.get("view", "contig")
    if view == "transpose" and len(shape) >= 2:
        return base.transpose(-1, -2)
    if view == "stride2" and len(shape) >= 1:
        return base[..., ::2]
    if view == "offset":
        n = int(math.prod(shape))
        return base[3:3 + n].view(shape) if n else base[3:3].view(shape)
    if view == "expand" and len(shape) >= 1:
        return base.expand(shape)
    return base


# ---- the ops -----------------------------------------------------------------------------------
# op name -> fn(inputs, params) (the same call on both devices).

def _dims_kw(p):
    kw = {}
    if p.get("dim") is not None:
        kw["dim"] = p["dim"]
        kw["keepdim"] = p.get("keepdim", False)
    return kw


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "reciprocal": torch.reciprocal, "rsqrt": torch.rsqrt, "erf": torch.erf, "log1p": torch.log1p,
    "expm1": torch.expm1, "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "isnan": torch.isnan, "isinf": torch.isinf, "square": torch.square, "frac": torch.frac,
    "nan_to_num": torch.nan_to_num, "signbit": torch.signbit,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "remainder": torch.remainder,
    "fmod": torch.fmod, "floor_divide": torch.floor_divide, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "ge": torch.ge, "atan2": torch.atan2, "pow": torch.pow,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "logical_and": torch.logical_and, "hypot": torch.hypot, "copysign": torch.copysign,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
}
REDUCE = {
    "sum": lambda x, p: torch.sum(x, **_dims_kw(p)),
    "mean": lambda x, p: torch.mean(x, **_dims_kw(p)),
    "prod": lambda x, p: torch.prod(x, **_dims_kw(p)) if p.get("dim") is not None else torch.prod(x),
    "amax": lambda x, p: torch.amax(x, **({"dim": p["dim"], "keepdim": p.get("keepdim", False)}
                                           if p.get("dim") is not None else {})),
    "amin": lambda x, p: torch.amin(x, **({"dim": p["dim"], "keepdim": p.get("keepdim", False)}
                                           if p.get("dim") is not None else {})),
    "argmax": lambda x, p: torch.argmax(x, **_dims_kw(p)),
    "argmin": lambda x, p: torch.argmin(x, **_dims_kw(p)),
    "max_dim": lambda x, p: torch.max(x, p["dim"] if p.get("dim") is not None else 0, p.get("keepdim", False)),
    "std": lambda x, p: torch.std(x, **_dims_kw(p)),
    "var": lambda x, p: torch.var(x, **_dims_kw(p), correction=p.get("correction", 1)),
    "logsumexp": lambda x, p: torch.logsumexp(x, p["dim"] if p.get("dim") is not None else 0, p.get("keepdim", False)),
    "any": lambda x, p: torch.any(x, **_dims_kw(p)),
    "all": lambda x, p: torch.all(x, **_dims_kw(p)),
    "norm": lambda x, p: torch.linalg.vector_norm(x, ord=p.get("ord", 2), **_dims_kw(p)),
    "cumsum": lambda x, p: torch.cumsum(x, p["dim"] if p.get("dim") is not None else 0),
    "softmax": lambda x, p: torch.softmax(x, p["dim"] if p.get("dim") is not None else -1),
    "log_softmax": lambda x, p: torch.log_softmax(x, p["dim"] if p.get("dim") is not None else -1),
    "count_nonzero": lambda x, p: torch.count_nonzero(x, p.get("dim")),
    "sort": lambda x, p: torch.sort(x, p["dim"] if p.get("dim") is not None else -1, stable=True),
}
VIEWS = {
    "reshape": lambda x, p: x.reshape(p["shape"]),
    "view": lambda x, p: x.view(p["shape"]),
    "permute": lambda x, p: x.permute(p["perm"]).contiguous(),
    "transpose": lambda x, p: x.transpose(p["d0"], p["d1"]) * 1,
    "narrow": lambda x, p: x.narrow(p["dim"], p["start"], p["length"]) + 0,
    "slice_step": lambda x, p: x[p["start"]:p["stop"]:p["step"]] * 1,
    "flatten": lambda x, p: torch.flatten(x, p.get("d0", 0), p.get("d1", -1)),
    "unsqueeze": lambda x, p: x.unsqueeze(p["dim"]) * 1,
    "squeeze": lambda x, p: x.squeeze(p["dim"]) * 1,
    "flip": lambda x, p: torch.flip(x, p["dims"]),
    "roll": lambda x, p: torch.roll(x, p["shift"], p["dim"]),
    "select": lambda x, p: x.select(p["dim"], p["index"]) + 0,
    "expand_add": lambda x, p: x.expand(p["shape"]) + 1,
    "inplace_slice": lambda x, p: _inplace_slice(x, p),
    "chunk_cat": lambda x, p: torch.cat(torch.chunk(x, p["chunks"], p["dim"])[::-1], p["dim"]),
    "diagonal": lambda x, p: torch.diagonal(x, p.get("offset", 0), -2, -1) + 0,
    "tril": lambda x, p: torch.tril(x, p.get("offset", 0)),
}


def _inplace_slice(x, p):
    y = x.clone()
    y[p["start"]:p["stop"]:p["step"]] += 1 if y.dtype != torch.bool else True
    return y


def _index(inputs, p):
    x = inputs[0]
    return x


def op_fn(case):
    op, p = case["op"], case.get("params", {})
    if op in UNARY:
        f = UNARY[op]
        return lambda ts: f(ts[0])
    if op in BINARY:
        f = BINARY[op]
        if "scalar" in p:
            return lambda ts: f(ts[0], p["scalar"])
        if p.get("scalar_first"):
            return lambda ts: f(p["scalar_first_value"], ts[0])
        return lambda ts: f(ts[0], ts[1])
    if op in REDUCE:
        f = REDUCE[op]
        return lambda ts: f(ts[0], p)
    if op in VIEWS:
        f = VIEWS[op]
        return lambda ts: f(ts[0], p)
    if op == "mm":
        return lambda ts: torch.mm(ts[0], ts[1])
    if op == "bmm":
        return lambda ts: torch.bmm(ts[0], ts[1])
    if op == "matmul":
        return lambda ts: torch.matmul(ts[0], ts[1])
    if op == "linear":
        return lambda ts: torch.nn.functional.linear(ts[0], ts[1], ts[2] if len(ts) > 2 else None)
    if op == "cat":
        return lambda ts: torch.cat(ts, p["dim"])
    if op == "stack":
        return lambda ts: torch.stack(ts, p["dim"])
    if op == "where":
        return lambda ts: torch.where(ts[0], ts[1], ts[2] if len(ts) > 2 else p["other"])
    if op == "masked_fill":
        return lambda ts: ts[0].masked_fill(ts[1], p["value"])
    if op == "fill":  # fill_ of a copy, and full of the same dtype
        return lambda ts: ts[0].clone().fill_(p["value"])
    if op == "full":
        return lambda ts: torch.full(ts[0].shape, p["value"], dtype=ts[0].dtype, device=ts[0].device)
    if op == "clamp":
        return lambda ts: torch.clamp(ts[0], p.get("min"), p.get("max"))
    if op == "index_select":
        return lambda ts: torch.index_select(ts[0], p["dim"], ts[1])
    if op == "gather":
        return lambda ts: torch.gather(ts[0], p["dim"], ts[1])
    if op == "scatter":
        return lambda ts: torch.scatter(ts[0], p["dim"], ts[1], ts[2])
    if op == "scatter_add":
        return lambda ts: torch.scatter_add(ts[0], p["dim"], ts[1], ts[2])
    if op == "scatter_reduce":
        return lambda ts: torch.scatter_reduce(ts[0], p["dim"], ts[1], ts[2], p["reduce"],
                                               include_self=p.get("include_self", True))
    if op == "index_put":
        return lambda ts: ts[0].index_put((ts[1],), ts[2], accumulate=p.get("accumulate", False))
    if op == "adv_index":
        return lambda ts: ts[0][ts[1]]
    if op == "bool_mask":
        return lambda ts: ts[0][ts[1]]
    if op == "conv1d":
        return lambda ts: torch.nn.functional.conv1d(ts[0], ts[1], None, p["stride"], p["padding"], p["dilation"],
                                                     p["groups"])
    if op == "conv2d":
        return lambda ts: torch.nn.functional.conv2d(ts[0], ts[1], ts[2] if len(ts) > 2 else None, p["stride"],
                                                     p["padding"], p["dilation"], p["groups"])
    if op == "topk":
        return lambda ts: torch.topk(ts[0], p["k"], p["dim"], sorted=True).values
    if op == "to_dtype":
        return lambda ts: ts[0].to(_dtype(p["to"]))
    raise KeyError(op)


# ---- running a case ------------------------------------------------------------------------------

def inputs_of(case, device):
    gen = torch.Generator().manual_seed(case.get("seed", 0))
    out = []
    for spec in case["inputs"]:
        if spec.get("kind") == "index":
            t = torch.randint(spec.get("low", 0), spec["high"], spec["shape"], generator=gen, dtype=_dtype(spec["dtype"]))
            out.append(t.to(device))
            continue
        base = make_input(spec, gen)
        out.append(view_on(base.to(device), spec))
    return out


def _tol(dtype, case):
    big = case.get("params", {}).get("loose", False)
    if dtype in (torch.bfloat16,):
        return dict(atol=2e-2 if not big else 1e-1, rtol=2e-2)
    if dtype in (torch.float16,):
        return dict(atol=2e-3 if not big else 1e-2, rtol=2e-3)
    if dtype == torch.float32:
        # loose: sums over many elements (cumsum of 1M values near 3000 differs ~1e-3 by summation order)
        return dict(atol=1e-4 if not big else 5e-3, rtol=1e-4)
    if dtype == torch.float64:
        return dict(atol=1e-9, rtol=1e-9)
    return dict(atol=0, rtol=0)


def _flat(r):
    if isinstance(r, torch.Tensor):
        return [r]
    if isinstance(r, (tuple, list)):
        out = []
        for x in r:
            out += _flat(x)
        return out
    return [torch.tensor(r)]


def run_on(case, device):
    try:
        ts = inputs_of(case, device)
        if device == "cpu" and case["op"].startswith("conv"):
            # PyTorch's CPU conv (oneDNN brgemm) segfaults on some non-contiguous bfloat16 inputs (conv1d,
            # [2, 3, 1] transposed, stride 2, padding 1, dilation 2): the reference gets contiguous copies
            ts = [torch.empty(t.shape, dtype=t.dtype).copy_(t) for t in ts]  # canonical strides, size-1 dims too
        r = op_fn(case)(ts)
        return [x.cpu() if isinstance(x, torch.Tensor) else x for x in _flat(r)], None
    except Exception as e:  # noqa: BLE001 - the exception's type is compared across devices
        return None, e


def check(case):
    """None if the tpu agrees with the CPU, else what differs (a string)."""
    want, werr = run_on(case, "cpu")
    got, gerr = run_on(case, "tpu")
    try:
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        return f"an error of this case surfaced after it, at the next synchronize: {type(e).__name__}: {str(e)[:300]}"
    if werr is not None or gerr is not None:
        if werr is None:
            return f"tpu raised {type(gerr).__name__}: {str(gerr)[:300]}; cpu did not"
        if gerr is None:
            return f"cpu raised {type(werr).__name__}: {str(werr)[:200]}; tpu returned a value"
        if type(werr) is not type(gerr):
            return (f"cpu raised {type(werr).__name__} ({str(werr)[:150]}), tpu raised {type(gerr).__name__} "
                    f"({str(gerr)[:150]})")
        return None
    if len(want) != len(got):
        return f"{len(want)} results on cpu, {len(got)} on tpu"
    for i, (w, g) in enumerate(zip(want, got)):
        if w.dtype != g.dtype or w.shape != g.shape:
            return f"result {i}: cpu {w.dtype}{list(w.shape)}, tpu {g.dtype}{list(g.shape)}"
        try:
            torch.testing.assert_close(g, w, equal_nan=True, **_tol(w.dtype, case))
        except AssertionError as e:
            return f"result {i}: " + str(e).replace("\n", " ")[:400]
    return None


# ---- drawing cases (hypothesis) -------------------------------------------------------------------

def strategies():
    from hypothesis import strategies as st

    small_dim = st.integers(0, 5)

    @st.composite
    def shape(draw, min_rank=0, max_rank=4, large=True):
        if large and draw(st.integers(0, 29)) == 0:  # a few large ones
            return draw(st.sampled_from([[1 << 20], [1024, 1024], [3, 257, 1031], [65537]]))
        r = draw(st.integers(min_rank, max_rank))
        return [draw(small_dim) for _ in range(r)]

    views = st.sampled_from(["contig", "contig", "transpose", "stride2", "offset", "expand"])

    def inp(shp, dtype, view="contig", kind="normal"):
        if view == "expand" and (not shp or shp[0] == 0):
            view = "contig"
        if view == "transpose" and len(shp) < 2 or view == "stride2" and not shp:
            view = "contig"
        return {"shape": shp, "dtype": dtype, "view": view, "kind": kind}

    seeds = st.integers(0, 2 ** 31 - 1)

    @st.composite
    def unary(draw):
        op = draw(st.sampled_from(sorted(UNARY)))
        dt = draw(st.sampled_from(ALL))
        kind = draw(st.sampled_from(["normal", "positive", "special", "unit"]))
        return {"op": op, "seed": draw(seeds), "inputs": [inp(draw(shape()), dt, draw(views), kind)]}

    def broadcastable(draw, shp):
        # drop leading dims, set some to 1; now and then a shape that does not broadcast
        if draw(st.integers(0, 11)) == 0 and shp:
            bad = list(shp)
            bad[-1] = bad[-1] + 2
            return bad
        k = draw(st.integers(0, len(shp)))
        out = list(shp[k:])
        return [1 if draw(st.booleans()) and d else d for d in out]

    @st.composite
    def binary(draw):
        op = draw(st.sampled_from(sorted(BINARY)))
        dt = draw(st.sampled_from(ALL))
        dt2 = dt if draw(st.integers(0, 3)) else draw(st.sampled_from(ALL))  # type promotion now and then
        shp = draw(shape())
        kind = draw(st.sampled_from(["normal", "positive", "special"]))
        case = {"op": op, "seed": draw(seeds), "inputs": [inp(shp, dt, draw(views), kind)]}
        form = draw(st.integers(0, 5))
        if form == 0:
            case["params"] = {"scalar": draw(st.sampled_from([0, 1, -2, 3, 0.5, -1.5, 2.0, True, 1e30, -0.0]))}
        elif form == 1:
            case["params"] = {"scalar_first": True, "scalar_first_value": draw(st.sampled_from([2, -1.5, 0.25, 3]))}
        else:
            case["inputs"].append(inp(broadcastable(draw, shp), dt2, draw(views), kind))
        return case

    @st.composite
    def reduce(draw):
        op = draw(st.sampled_from(sorted(REDUCE)))
        dt = draw(st.sampled_from(ALL))
        shp = draw(shape())
        p = {}
        if draw(st.integers(0, 3)) or op in ("logsumexp", "cumsum", "softmax", "log_softmax", "sort", "max_dim"):
            r = max(len(shp), 1)
            p["dim"] = draw(st.integers(-r - 1, r))  # out of range now and then
            p["keepdim"] = draw(st.booleans())
        if op == "var":
            p["correction"] = draw(st.sampled_from([0, 1, 2]))
        if op == "norm":
            p["ord"] = draw(st.sampled_from([1, 2, 3, math.inf, -math.inf, 0]))
        if shp and math.prod(shp) > 4096:
            p["loose"] = True
        kind = draw(st.sampled_from(["normal", "normal", "special", "positive"]))
        return {"op": op, "seed": draw(seeds), "params": p, "inputs": [inp(shp, dt, draw(views), kind)]}

    @st.composite
    def views_case(draw):
        op = draw(st.sampled_from(sorted(VIEWS)))
        dt = draw(st.sampled_from(ALL))
        shp = draw(shape(large=False, min_rank=1))
        r = len(shp)
        p = {}
        d = draw(st.integers(-r - 1, r))  # a dim, out of range now and then
        if op in ("reshape", "view"):
            n = math.prod(shp)
            opts = [[n], [-1], [n, 1], [1, -1] if n else [0, -1]] + ([[shp[-1], -1]] if shp[-1] else [])
            p["shape"] = draw(st.sampled_from(opts + [[n + 1]]))
        elif op == "permute":
            perm = draw(st.permutations(list(range(r))))
            p["perm"] = list(perm) if draw(st.integers(0, 9)) else list(perm)[:-1] + [r]
        elif op == "transpose":
            p["d0"], p["d1"] = d, draw(st.integers(-r, r - 1))
        elif op == "narrow":
            dd = draw(st.integers(0, r - 1))
            p["dim"] = dd
            p["start"] = draw(st.integers(-shp[dd] - 1, shp[dd] + 1))
            p["length"] = draw(st.integers(0, shp[dd] + 1))
        elif op in ("slice_step", "inplace_slice"):
            p["start"] = draw(st.integers(-6, 6))
            p["stop"] = draw(st.one_of(st.none(), st.integers(-6, 6)))
            p["step"] = draw(st.integers(1, 3))
        elif op == "flatten":
            p["d0"], p["d1"] = sorted([draw(st.integers(-r, r - 1)), draw(st.integers(-r, r - 1))],
                                      key=lambda v: v % r)
        elif op in ("unsqueeze", "squeeze", "roll"):
            p["dim"] = d
            p["shift"] = draw(st.integers(-7, 7))
        elif op == "flip":
            p["dims"] = sorted(set(draw(st.lists(st.integers(-r, r - 1), max_size=r))))
        elif op == "select":
            dd = draw(st.integers(0, r - 1))
            p["dim"], p["index"] = dd, draw(st.integers(-shp[dd] - 1, shp[dd]))
        elif op == "expand_add":
            p["shape"] = [draw(st.integers(0, 3))] + [dd if draw(st.booleans()) else -1 for dd in shp]
        elif op == "chunk_cat":
            p["dim"] = draw(st.integers(-r, r - 1))
            p["chunks"] = draw(st.integers(1, 4))
        elif op in ("diagonal", "tril"):
            p["offset"] = draw(st.integers(-3, 3))
        return {"op": op, "seed": draw(seeds), "params": p, "inputs": [inp(shp, dt, draw(views))]}

    @st.composite
    def matmul(draw):
        op = draw(st.sampled_from(["mm", "bmm", "matmul", "linear"]))
        dt = draw(st.sampled_from(["float32", "float32", "float64", "bfloat16", "float16", "int64", "int32"]))
        m, k, n, b = (draw(st.integers(0, 9)) for _ in range(4))
        if draw(st.integers(0, 19)) == 0:
            m, k, n = 256, 300, 128
        bad = draw(st.integers(0, 11)) == 0
        k2 = k + 1 if bad else k
        v1, v2 = draw(views), draw(views)
        if op == "mm":
            shapes = [[m, k], [k2, n]]
        elif op == "bmm":
            shapes = [[b, m, k], [b, k2, n]]
        elif op == "linear":
            shapes = [[b, m, k], [n, k2]] + ([[n]] if draw(st.booleans()) else [])
        else:
            shapes = draw(st.sampled_from([[[k], [k2]], [[m, k], [k2]], [[k], [k2, n]], [[b, m, k], [k2, n]],
                                           [[b, 1, m, k], [3, k2, n]]]))
        ins = [inp(s, dt, v) for s, v in zip(shapes, [v1, v2, "contig"])]
        return {"op": op, "seed": draw(seeds), "params": {"loose": k > 16}, "inputs": ins}

    @st.composite
    def gather_scatter(draw):
        op = draw(st.sampled_from(["index_select", "gather", "scatter", "scatter_add", "scatter_reduce",
                                   "index_put", "adv_index", "bool_mask", "where", "masked_fill", "clamp",
                                   "cat", "stack", "topk", "to_dtype", "fill", "full"]))
        dt = draw(st.sampled_from(ALL))
        shp = draw(shape(min_rank=1, max_rank=3, large=False))
        r = len(shp)
        dim = draw(st.integers(0, r - 1))
        seed = draw(seeds)
        x = inp(shp, dt, draw(views))
        oob = draw(st.integers(0, 14)) == 0  # an index out of range now and then
        hi = shp[dim] + (3 if oob else 0)
        p = {"dim": dim}
        if op == "index_select":
            ins = [x, {"shape": [draw(st.integers(0, 6))], "dtype": "int64", "kind": "index", "high": max(hi, 1),
                       "low": -shp[dim] if shp[dim] and draw(st.booleans()) else 0}]
        elif op in ("gather", "scatter", "scatter_add", "scatter_reduce"):
            ishape = [draw(st.integers(0, s)) for s in shp]
            ins = [x, {"shape": ishape, "dtype": "int64", "kind": "index", "high": max(hi, 1)}]
            if op != "gather":
                ins.append(inp(ishape, dt))
            if op == "scatter_reduce":
                p["reduce"] = draw(st.sampled_from(["sum", "prod", "mean", "amax", "amin"]))
                p["include_self"] = draw(st.booleans())
        elif op in ("index_put", "adv_index"):
            k = draw(st.integers(0, 5))
            ins = [x, {"shape": [k], "dtype": "int64", "kind": "index", "high": max(shp[0] + (3 if oob else 0), 1),
                       "low": -shp[0] if shp[0] and draw(st.booleans()) else 0}]
            if op == "index_put":
                ins.append(inp([k] + shp[1:], dt))
                p["accumulate"] = draw(st.booleans())
        elif op == "bool_mask":
            ins = [x, inp(shp[:draw(st.integers(1, r))], "bool")]
        elif op == "where":
            ins = [inp(shp, "bool"), x] + ([inp(shp[1:], draw(st.sampled_from(ALL)))] if draw(st.booleans()) else [])
            p["other"] = draw(st.sampled_from([0, -1.5, 7]))
        elif op == "masked_fill":
            ins = [x, inp(shp[draw(st.integers(0, r)):], "bool")]
            p["value"] = draw(st.sampled_from([0, -2, 3.5, True, float("nan")]))
        elif op in ("fill", "full"):  # values out of the integer and half types' ranges too
            ins, p = [x], {"value": draw(st.sampled_from([0, -1, 3.5, 300, -300, 1e20, -1e5, 70000.0, True,
                                                           float("inf"), float("nan"), 2 ** 40]))}
        elif op == "clamp":
            lo = draw(st.one_of(st.none(), st.sampled_from([-1, 0, 0.5, -2.5])))
            hi2 = draw(st.one_of(st.none(), st.sampled_from([1, 2, 0.25, -1])))
            ins, p = [x], {"min": lo, "max": hi2}
        elif op in ("cat", "stack"):
            n = draw(st.integers(1, 4))
            others = []
            for _ in range(n - 1):
                s2 = list(shp)
                if op == "cat":
                    s2[dim] = draw(st.integers(0, 3))
                if draw(st.integers(0, 14)) == 0 and r > 1:
                    s2[(dim + 1) % r] += 1  # not joinable
                others.append(inp(s2, draw(st.sampled_from([dt, dt, "float32", "int64"])), draw(views)))
            ins = [x] + others
            p["dim"] = draw(st.integers(-r - 1, r))
        elif op == "topk":
            ins = [x]
            p["k"] = draw(st.integers(0, shp[dim] + 1))
        else:
            ins = [x]
            p = {"to": draw(st.sampled_from(ALL))}
        return {"op": op, "seed": seed, "params": p, "inputs": ins}

    @st.composite
    def conv(draw):
        op = draw(st.sampled_from(["conv1d", "conv2d"]))
        dt = draw(st.sampled_from(["float32", "float32", "float64", "bfloat16"]))
        nd = 1 if op == "conv1d" else 2
        groups = draw(st.sampled_from([1, 1, 2]))
        cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
        ksz = [draw(st.integers(1, 3)) for _ in range(nd)]
        spatial = [draw(st.integers(0, 7)) for _ in range(nd)]
        n = draw(st.integers(0, 2))
        p = {"stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 2)),
             "dilation": draw(st.integers(1, 2)), "groups": groups}
        ins = [inp([n, cin] + spatial, dt, draw(views)), inp([cout, cin // groups] + ksz, dt)]
        if op == "conv2d" and draw(st.booleans()):
            ins.append(inp([cout], dt))
        return {"op": op, "seed": draw(seeds), "params": p, "inputs": ins}

    return {"elementwise": st.one_of(unary(), binary()), "reduce": reduce(), "views": views_case(),
            "matmul": matmul(), "index": gather_scatter(), "conv": conv()}


GROUPS = ["elementwise", "reduce", "views", "matmul", "index", "conv"]


def run(groups, count, out, seed=28):
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    strat = strategies()
    result = {"cases": 0, "failures": [], "by_group": {}}
    current = out + ".current"
    for g in groups:
        n_before = result["cases"]

        @hseed(seed)
        @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), derandomize=False)
        @given(case=strat[g])
        def one(case):
            with open(current, "w") as f:
                f.write(json.dumps(case))
            why = check(case)
            result["cases"] += 1
            if why is not None:
                result["failures"].append({"case": case, "why": why})

        one()
        result["by_group"][g] = result["cases"] - n_before
        with open(out, "w") as f:
            json.dump(result, f)
    if os.path.exists(current):
        os.unlink(current)
    return result


def main():
    if sys.argv[1] == "case":
        case = json.loads(sys.argv[2])
        print(check(case))
        return
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = run(a.groups.split(","), a.count, a.out, a.seed)
    print(f"{r['cases']} cases, {len(r['failures'])} failures", flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
