"""torch.compile(model, backend="tpu").

AOTAutograd splits the model into forward and backward ATen graphs; each is
run through the same kernels and lowering rules as eager, recorded as ONE
fused graph and run as one program (cached by its structure, so a training
loop compiles each graph once).  Found by dynamo through the
"torch_dynamo_backends" entry point, so nothing is imported until used.
torch.compile(model) with the default backend comes here too for graphs on
tpu (route_default_backend, installed at import)."""
import functools
import itertools

import torch
import torch.utils._pytree as pytree

from . import _C
from ._engine import MODES
from ._growing import from_views, to_views

_FUSED = MODES["fused"]
_DEBUG = MODES["debug"]


# ---- layouts: the graph's plan vs what tpu kernels return ---------------------
# AOTAutograd plans every node's strides with the meta kernels (PyTorch's
# rules: a _to_copy, clone or elementwise op of a transposed tensor keeps its
# permuted layout).  tpu kernels return contiguous results (a layout is a
# transpose in the program; XLA picks its own).  The values are the same;
# only ops that read strides differ: a `view` the plan found valid on the
# permuted layout is refused on the contiguous one ("view size is not
# compatible ..."; nanoGPT's attention backward), and an `as_strided` would
# read the wrong elements.  So before each such op the operand is given the
# planned layout when its layout differs (a copy into empty_strided, one
# transpose in the program); same layout (the usual case): nothing is done.

_aten = torch.ops.aten
_LAYOUT_READERS = (
    _aten.view.default,
    _aten._unsafe_view.default,
    _aten.as_strided.default,
    _aten.view_as_real.default,
    _aten.view_as_complex.default,
)


def _same_layout(t, size, stride):
    if tuple(t.shape) != size:
        return False
    return all(n <= 1 or a == b for n, a, b in zip(size, t.stride(), stride))


def _planned_layout(t, size, stride):
    """t with the strides the graph was planned with (t itself when it has them)."""
    if not isinstance(t, torch.Tensor) or _same_layout(t, size, stride):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _dense(size, stride):
    """Do (size, stride) cover a block of numel elements, each once?"""
    expected = 1
    for n, st in sorted(((n, st) for n, st in zip(size, stride) if n != 1), key=lambda d: d[1]):
        if n == 0:
            return True
        if st != expected:
            return False
        expected *= n
    return True


def _plannable(v):
    """A planned operand whose layout we can give: a dense tensor that owns
    its storage from offset 0 (not a window into a larger storage, which an
    as_strided could read beyond)."""
    if not isinstance(v, torch.Tensor) or v.is_sparse:
        return False
    # a symbolic size or stride (dynamic=True) cannot be baked into the graph
    if any(not isinstance(d, int) for d in (*v.shape, *v.stride())):
        return False
    try:
        if v.storage_offset() != 0 or not _dense(tuple(v.shape), tuple(v.stride())):
            return False
        return v.untyped_storage().nbytes() == v.numel() * v.element_size()
    except Exception:  # symbolic sizes, tensor subclasses: leave the node as is
        return False


def conform_layouts(gm):
    """Insert _planned_layout before each op of gm that reads its operand's
    strides; returns how many were inserted."""
    inserted = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _LAYOUT_READERS or not node.args:
            continue
        src = node.args[0]
        if not isinstance(src, torch.fx.Node):
            continue
        v = src.meta.get("val")
        if not _plannable(v):
            continue
        with gm.graph.inserting_before(node):
            fixed = gm.graph.call_function(
                _planned_layout, (src, tuple(v.shape), tuple(v.stride())))
        fixed.meta["val"] = v
        node.args = (fixed,) + tuple(node.args[1:])
        inserted += 1
    if inserted:
        gm.recompile()
    return inserted


def _fused_runner(gm, example_inputs):
    conform_layouts(gm)

    @functools.wraps(gm.forward)
    def run(*args):
        args = from_views(args)  # a cache this graph grew last call grows on in its bucket
        prev = _C.get_mode()
        if prev != _FUSED:
            _C.set_mode(_FUSED)  # flushes what eager left pending
        else:
            # fused eager mode: what eager recorded before the call runs on its
            # own, so the graph is its own program whatever preceded it
            _C.flush(_C.CUT_COMPILED)
        try:
            out = gm(*args)
            _C.flush(_C.CUT_COMPILED)  # the whole graph: one program, asynchronous
        finally:
            if prev != _FUSED:
                _C.set_mode(prev)
        if prev == _DEBUG:  # debug mode: the graph's device-side checks raise at its call
            _C.synchronize()
        return to_views(out)

    run._boxed_call = getattr(gm, "_boxed_call", False)
    return run


def _boxed(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(_fused_runner(gm, example_inputs))


def backend(gm, example_inputs, **kwargs):
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_boxed, bw_compiler=_boxed)(gm, example_inputs, **kwargs)


# ---- torch.compile(model) with the default backend ------------------------------
# PyTorch's Inductor has its own code generator registered for a device named
# "tpu" (Pallas, which needs JAX); a CUDA user's `torch.compile(model)` must
# work unchanged.  The default backend is an object of
# torch._TorchCompileInductorWrapper; its call is wrapped so that a graph
# touching tpu (an input, a parameter, or any value dynamo traced on tpu)
# goes to the backend above, and every other graph to Inductor as before.
# Inductor's options (mode, options=) have no meaning for tpu graphs and are
# ignored there.


def _on_tpu(v):
    return isinstance(v, torch.Tensor) and v.device.type == "tpu"


def graph_touches_tpu(gm, example_inputs):
    """Does this dynamo graph read or make a tpu tensor?"""
    if any(_on_tpu(x) for x in example_inputs):
        return True
    for t in itertools.chain(gm.parameters(), gm.buffers()):
        if _on_tpu(t):
            return True
    for node in gm.graph.nodes:
        v = node.meta.get("example_value", node.meta.get("val"))
        if v is not None and any(_on_tpu(x) for x in pytree.tree_leaves(v)):
            return True
        if node.op == "call_function" and str(node.kwargs.get("device", "")).startswith("tpu"):
            return True
    return False


def route_default_backend():
    cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if cls is None or getattr(cls.__call__, "_tpu_route", False):
        return
    inductor_call = cls.__call__

    @functools.wraps(inductor_call)
    def __call__(self, model_, inputs_, **kwargs):
        if graph_touches_tpu(model_, inputs_):
            return backend(model_, inputs_)
        return inductor_call(self, model_, inputs_, **kwargs)

    __call__._tpu_route = True
    cls.__call__ = __call__
