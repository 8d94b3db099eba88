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

_FUSED = MODES["fused"]
_DEBUG = MODES["debug"]


def _fused_runner(gm, example_inputs):
    @functools.wraps(gm.forward)
    def run(*args):
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
        return out

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
