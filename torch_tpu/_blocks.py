"""Fused eager's cut after a repeated block.

A model's stack of layers is an nn.ModuleList (GPT-2's `h`, Llama's
`layers`, BERT's `encoder.layer`, nn.TransformerEncoder's `layers` ...).
In fused mode the pending graph is run when such a layer's forward returns
(csrc/runtime: tpu_rt_flush_block) when the layer recorded at least
MIN_NODES ops (counted from the end of the previous layer, so every layer
of a stack is cut, or none):

- the layers are then one program, compiled once for all of them: a
  decoding step with a growing KV cache meets a new sequence length every
  token, and compiles one layer instead of the whole stack;
- the device runs a layer while the host records the next.

A module registration hook marks every child of a ModuleList (at import:
modules are built after `import torch`; `deepcopy` and pickling keep the
mark, an attribute), and a global forward hook, installed only while fused
mode is on, cuts after a marked module.  Graphs traced by torch.compile are
not cut.
"""
import warnings

import torch
from torch.nn.modules import module as _nn_module

from . import _C

# Smaller blocks (a head of a ModuleList of heads, a small expert MLP) stay in
# the graph of their caller.
MIN_NODES = 16

_forward_hook = None


def _mark(parent, name, submodule):
    if submodule is not None and isinstance(parent, torch.nn.ModuleList):
        submodule.__dict__["_tpu_block"] = True


def _cut(module, args, output):
    if torch.compiler.is_compiling() or not module.__dict__.get("_tpu_block"):
        return
    _C.flush_block(MIN_NODES)


def install():
    """At import: the registration hook (costs nothing per forward)."""
    _nn_module.register_module_module_registration_hook(_mark)


def follow_mode(fused):
    """The forward hook exists only while fused mode is on, so strict and
    debug mode pay nothing per module call."""
    global _forward_hook
    if fused and _forward_hook is None:
        _forward_hook = _nn_module.register_module_forward_hook(_cut)
        # torch.compile(module) warns that global hooks fire once more for its
        # wrapper module; this one does nothing there
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks",
                                category=UserWarning)
    elif not fused and _forward_hook is not None:
        _forward_hook.remove()
        _forward_hook = None
