"""torch_tpu: PyTorch on TPUs (and any PJRT plugin) with a C engine.

Importing this package registers the "tpu" device (PrivateUse1 renamed):
the C++ device interfaces (hooks, allocator, guard, generators), the
torch.tpu module and a fallback that starts the engine on first use.
``import torch`` alone does the same through the ``torch.backends`` entry
point.  Nothing heavy happens here: the PJRT plugin is loaded and the
kernels are registered when a program first touches the device."""


def _autoload():
    """Entry point for torch.backends autoloading (`import torch` loads us).
    Defined before `import torch` so that `import torch_tpu` first (torch
    then autoloads this half-initialised module) also works."""


import torch  # noqa: E402

from . import _C, _engine  # noqa: E402

__version__ = "0.1.0"

_BACKEND = "tpu"


def _flush_after_step(opt, args, kwargs):
    # Fused eager: an optimizer step ends a training step, so the pending
    # graph is cut there (asynchronously).  Every step is then the same
    # program, instead of size-bound cuts that drift across step boundaries.
    if _C.initialized():
        _C.flush(_C.CUT_STEP)


def _register():
    if torch._C._get_privateuse1_backend_name() == _BACKEND and hasattr(torch, "tpu"):
        return
    from . import _blocks, _dispatch, _module
    torch.utils.rename_privateuse1_backend(_BACKEND)
    # torch.autocast("tpu") with no dtype: bfloat16, a TPU's native lower
    # precision (as torch.tpu.amp.autocast and TorchTPU); PyTorch's default
    # for a PrivateUse1 device is float16.  The setting is per thread in
    # PyTorch; this is the importing (main) thread's.
    torch.set_autocast_dtype(_BACKEND, torch.bfloat16)
    _C._register_hooks()
    torch._register_device_module(_BACKEND, _module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _engine.configure()
    _C._set_starter(_engine.start)
    _dispatch.install_fallback()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_flush_after_step)
    _blocks.install()
    from . import _compile, _distributed, comm

    _compile.route_default_backend()
    _distributed.register()
    comm.install()


_register()

from . import api  # noqa: E402
from ._dispatch import fallback_counts  # noqa: E402

# accelerate / Transformers: patches applied when those modules load (an
# import hook; nothing of theirs is imported here).  See integrations/.
from .integrations import install as _install_integrations  # noqa: E402

_install_integrations()

# TORCH_TPU_TRANSFER=1: programs written for CUDA run on tpu unchanged (for
# launchers such as torchrun; `python -m torch_tpu.run` does the same).
import os as _os  # noqa: E402

if _os.environ.get("TORCH_TPU_TRANSFER", "").strip() not in ("", "0"):
    from . import transfer as _transfer  # noqa: F401,E402  (applies the mapping)
