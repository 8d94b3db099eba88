"""torch_tpu: PyTorch on TPUs (and any PJRT plugin) with a C engine.

Importing this package registers the "tpu" device (PrivateUse1 renamed),
the torch.tpu module and every kernel; ``import torch`` alone does the same
through the ``torch.backends`` entry point."""


def _autoload():
    """Entry point for torch.backends autoloading (`import torch` loads us).
    Defined before `import torch` so that `import torch_tpu` first (torch
    then autoloads this half-initialised module) also works."""


import torch  # noqa: E402
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend  # noqa: E402

from . import _C, _engine  # noqa: E402

__version__ = "0.1.0"

_BACKEND = "tpu"


def _register():
    if torch._C._get_privateuse1_backend_name() == _BACKEND and hasattr(torch, "tpu"):
        return
    from . import _device, _module
    _setup_privateuseone_for_python_backend(
        rename=_BACKEND, backend_module=_module, hook=_device._Hooks(), device_guard=_device._Guard()
    )
    try:
        _engine.ensure_initialized()
    except RuntimeError as e:
        # `import torch` must keep working without a plugin: the device is
        # registered, is_available() is False and every use says why.
        import warnings
        warnings.warn(str(e), RuntimeWarning, stacklevel=2)
    _device._hand_over_factories()
    _device._patch_storage_methods()
    _device._patch_pinning()
    from . import _autocast
    _autocast.register()
    # Fused eager: an optimizer step ends a training step, so the pending
    # graph is cut there (asynchronously).  Every step is then the same
    # program, instead of size-bound cuts that drift across step boundaries.
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda opt, args, kwargs: _C.flush())


_register()

from . import ops  # noqa: E402  (kernels register on import)
from . import api  # noqa: E402
from ._dispatch import fallback_counts  # noqa: E402
