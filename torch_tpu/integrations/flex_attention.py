"""flex_attention on tpu: PyTorch's device check, answered for tpu.

torch.nn.attention.flex_attention (torch 2.13) refuses every device outside
a fixed set ({"cuda", "cpu", "xpu", "hpu", "mps"}: "FlexAttention is only
supported on CUDA, CPU, HPU, or MPS devices") in ``_validate_device``, and
offers no registry a new device could join.  Everything after that check is
device-generic: eagerly, flex_attention compiles its higher-order op with
the "eager" backend, whose dense reference math (scores, score_mod and
mask_mod applied by vmap, a logsumexp softmax) runs through our kernels,
and its autograd op differentiates that math; under torch.compile(backend=
"tpu") AOTAutograd decomposes the same op into ATen ops recorded into the
graph's one program.  So the patch lets tpu tensors past that one check
(forward and backward: tpu has the backward, unlike CPU and MPS) and defers
to PyTorch's check for every other device.  Applied by the import hook of
torch_tpu.integrations when the module has loaded (at once if it already
has); the installed file is never edited.

| torch.nn.attention.flex_attention | on tpu                                   |
| --------------------------------- | ---------------------------------------- |
| _validate_device                  | tpu inputs pass; others: PyTorch's check |
"""
import functools

MODULE = "torch.nn.attention.flex_attention"


def _patch(module):
    original = module._validate_device
    if getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return None
        return original(query, key, value)

    _validate_device._torch_tpu = True
    module._validate_device = _validate_device


def register_all(register):
    register(MODULE, _patch)
