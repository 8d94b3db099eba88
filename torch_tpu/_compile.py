"""torch.compile(model, backend="tpu").

AOTAutograd splits the model into forward and backward ATen graphs; each is
run through the same kernels and lowering rules as eager, recorded as ONE
fused graph and run as one program (cached by its structure, so a training
loop compiles each graph once).  Found by dynamo through the
"torch_dynamo_backends" entry point, so nothing is imported until used."""
import functools

from . import _C
from ._engine import MODES

_FUSED = MODES["fused"]


def _fused_runner(gm, example_inputs):
    @functools.wraps(gm.forward)
    def run(*args):
        prev = _C.get_mode()
        if prev != _FUSED:
            _C.set_mode(_FUSED)  # flushes what eager left pending
        try:
            out = gm(*args)
            _C.flush()  # the whole graph: one program, asynchronous
        finally:
            if prev != _FUSED:
                _C.set_mode(prev)
        return out

    run._boxed_call = getattr(gm, "_boxed_call", False)
    return run


def _boxed(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(_fused_runner(gm, example_inputs))


def backend(gm, example_inputs, **kwargs):
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=_boxed, bw_compiler=_boxed)(gm, example_inputs, **kwargs)
