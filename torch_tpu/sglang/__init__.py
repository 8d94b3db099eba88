"""SGLang platform plugin: serves models on the tpu device.

SGLang (>= 0.5.10) finds this package through the ``sglang.srt.platforms``
entry point (``tpu = torch_tpu.sglang:activate``).  SGLang calls
:func:`activate` while it resolves ``current_platform`` (at ``import sglang``,
in each of its processes); it answers the qualified name of
:class:`torch_tpu.sglang.platform.TpuSRTPlatform` when tpu is the accelerator,
else None (SGLang then picks its own platform).  ``SGLANG_PLATFORM=tpu``
selects it by name (an error, not another platform, when tpu is absent).

What SGLang needs changed for tpu is in :mod:`torch_tpu.sglang.patches`,
applied only when tpu is SGLang's platform: at import (the platform module
applies it when SGLang imports it), and as hooks registered through the
``sglang.srt.plugins`` entry point (``tpu = torch_tpu.sglang:register_hooks``;
SGLang runs it in each of its processes before serving, and applies the
hooks with its HookRegistry).  ``SGLANG_PLUGINS`` without ``tpu`` leaves the
hooks out.

Nothing here imports SGLang: the package stays importable without it.
"""

PLATFORM = "torch_tpu.sglang.platform.TpuSRTPlatform"


def _tpu_is_the_accelerator():
    import torch

    import torch_tpu  # noqa: F401  (registers the device if autoload is off)

    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    return acc is not None and acc.type == "tpu" and torch.tpu.is_available()


def activate():
    """Entry point of the ``sglang.srt.platforms`` group."""
    try:
        active = _tpu_is_the_accelerator()
    except Exception:  # a broken install must not break SGLang's other platforms
        import logging

        logging.getLogger(__name__).debug("tpu platform unavailable", exc_info=True)
        return None
    return PLATFORM if active else None



def register_hooks():
    """Entry point of the ``sglang.srt.plugins`` group."""
    from sglang.srt.platforms import current_platform

    from .platform import TpuSRTPlatform

    if isinstance(current_platform, TpuSRTPlatform):
        from . import patches

        patches.register_hooks()
