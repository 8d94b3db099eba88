"""vLLM platform plugin: serves models on the tpu device.

vLLM finds this package through the ``vllm.platform_plugins`` entry point
(``tpu = torch_tpu.vllm:register``).  :func:`register` is called in every
vLLM process while the platform is resolved; it answers the qualified name
of :class:`torch_tpu.vllm.platform.TpuPlatform` when tpu is the accelerator,
else None (vLLM then picks its own platform).  vLLM's own switch turns the
plugin off: ``VLLM_PLUGINS`` set to a list without ``tpu`` (``VLLM_PLUGINS=``
loads no plugin), or ``VLLM_TARGET_DEVICE=cpu``.

Nothing here imports vLLM: the package stays importable without it.
"""

PLATFORM = "torch_tpu.vllm.platform.TpuPlatform"


def _tpu_is_the_accelerator():
    import torch

    import torch_tpu  # noqa: F401  (registers the device if autoload is off)

    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    return acc is not None and acc.type == "tpu" and torch.tpu.is_available()


def register():
    """Entry point of the ``vllm.platform_plugins`` group."""
    try:
        active = _tpu_is_the_accelerator()
    except Exception:  # a broken install must not break vLLM's CPU platform
        import logging

        logging.getLogger(__name__).debug("tpu platform unavailable", exc_info=True)
        return None
    return PLATFORM if active else None
