"""What the vLLM plugin asks of the device layer, in one place.

The plugin is written against PyTorch's device-generic API, the way vLLM
uses it on CUDA: ``torch.accelerator.synchronize``, ``empty_cache``,
``get_memory_info``, ``memory_stats``, ``Stream``/``Event``.  Where the tpu
device does not answer one of them yet, the functions here fall back to
what torch.tpu offers, and :data:`MISSING` records which call failed, so a
log line (and the plugin's report) names it.  When the device layer
provides a call, its fallback simply stops being taken.
"""
import logging

import torch

logger = logging.getLogger(__name__)

MISSING = {}


def _missing(name, err):
    if name not in MISSING:
        MISSING[name] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        logger.info("tpu device layer: %s is not available (%s); using the fallback", name, MISSING[name])


def synchronize(device=None):
    """Waits for every pending tpu computation."""
    try:
        _accelerator_synchronize(device)
    except RuntimeError as e:
        _missing("torch.accelerator.synchronize", e)
        torch.tpu.synchronize(device)


def empty_cache():
    try:
        _accelerator_empty_cache()
    except RuntimeError as e:
        _missing("torch.accelerator.empty_cache", e)
        torch.tpu.empty_cache()


def memory_info(device):
    """(free, total) bytes of the device, or None when the device layer
    cannot tell."""
    try:
        return tuple(torch.accelerator.get_memory_info(device))
    except RuntimeError as e:
        _missing("torch.accelerator.get_memory_info", e)
    fn = getattr(torch.tpu, "mem_get_info", None)
    if fn is None:
        _missing("torch.tpu.mem_get_info", AttributeError("torch.tpu has no mem_get_info"))
        return None
    return tuple(fn(device))


def memory_allocated(device):
    try:
        return torch.accelerator.memory_allocated(device)
    except RuntimeError as e:
        _missing("torch.accelerator.memory_allocated", e)
    fn = getattr(torch.tpu, "memory_allocated", None)
    if fn is None:
        _missing("torch.tpu.memory_allocated", AttributeError("torch.tpu has no memory_allocated"))
        return None
    return fn(device)


def generators_available(device):
    """Whether torch.Generator(device=tpu) works (vLLM makes one per
    seeded request)."""
    try:
        torch.Generator(device=device)
        return True
    except (NotImplementedError, RuntimeError) as e:
        _missing("torch.Generator(device='tpu')", e)
        return False


_accelerator_synchronize = torch.accelerator.synchronize
_accelerator_empty_cache = torch.accelerator.empty_cache


def install():
    """vLLM's GPU model runner calls torch.accelerator.synchronize() and
    empty_cache() directly; in a process serving on tpu they are routed
    through the functions above, which fall back where the device layer
    does not answer yet."""
    if getattr(torch.accelerator.synchronize, "_torch_tpu", False):
        return

    def acc_synchronize(device=None):
        synchronize(device)

    def acc_empty_cache():
        empty_cache()

    acc_synchronize._torch_tpu = True
    acc_empty_cache._torch_tpu = True
    torch.accelerator.synchronize = acc_synchronize
    torch.accelerator.empty_cache = acc_empty_cache
