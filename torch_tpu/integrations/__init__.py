"""Integrations with libraries that do not know the tpu device yet.

accelerate 1.15 picks its device, its memory budget for
``device_map="auto"`` and its cache clearing from a fixed list of device
types, with no extension point for a new one; Transformers' pipelines pick
their default device the same way.  torch_tpu therefore installs, at
import, one import hook (a ``sys.meta_path`` finder; nothing of those
libraries is imported here, so ``import torch`` stays cheap).  When one of
the modules below finishes loading, the hook applies that module's patch:
a few functions wrapped so that they answer for tpu when tpu is the current
accelerator (or the tensors are tpu tensors) and defer to the original
otherwise.  Installed files are never edited.  The patches are listed in
``accelerate.py``, ``transformers.py``, ``generation.py`` (bounded
shapes while decoding) and ``flex_attention.py`` (torch's own device check
of flex_attention) beside this file; ``patched()`` names those
applied.
"""
import importlib.abc
import sys

_PATCHES = {}  # module name -> callable(module), applied once after the module loads
_applied = []
_finder = None


def _tpu_is_accelerator():
    """tpu is the accelerator PyTorch reports (checked on each call: cheap,
    no engine start)."""
    import torch

    acc = torch.accelerator.current_accelerator()
    return acc is not None and acc.type == "tpu" and torch.accelerator.is_available()


def _apply(name, module):
    patch = _PATCHES.pop(name, None)
    if patch is not None:
        patch(module)
        _applied.append(name)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's patch."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr):  # resource readers, get_source, is_package ...
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, name)
        return spec


def register(name, patch):
    """Applies patch(module) when module `name` has loaded (now, if it has)."""
    mod = sys.modules.get(name)
    if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
        _PATCHES[name] = patch
        _apply(name, mod)
        return
    _PATCHES[name] = patch


def install():
    """Called once by torch_tpu at import."""
    global _finder
    if _finder is not None:
        return
    from . import accelerate, flex_attention, generation, transformers  # noqa: F401  (each registers its patches)

    accelerate.register_all(register)
    flex_attention.register_all(register)
    transformers.register_all(register)
    generation.register_all(register)
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)


def patched():
    """Names of the modules patched so far."""
    return list(_applied)
