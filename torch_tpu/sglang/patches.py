"""What SGLang needs changed to serve on tpu, and why (each applied only
when tpu is SGLang's platform).

Applied at import (``platform.py`` imports this module, and SGLang imports
the platform class while ``import sglang`` resolves ``current_platform``, in
every SGLang process, before anything below is imported):

- ``absent_modules``: torchvision, torchaudio and torchcodec are not in
  ``.venv-sglang`` (their builds for torch 2.13 do not load beside the CPU
  torch: ``operator torchvision::nms does not exist``), yet SGLang imports
  torchvision at module level on every path (``sglang.srt.configs`` ->
  ``nano_nemotron_vl`` -> ``multimodal.internvl_utils``; ``configs.deepseek_ocr``)
  for its image and video processors.  While one of those modules
  (TORCHVISION_USERS) executes, an import of an absent package gets a
  placeholder: importing and naming work, calling anything in it raises
  ImportError naming the package; the placeholders leave sys.modules when
  the module is done, so to everyone else (Transformers' availability checks,
  ``try: import torchvision``) the packages stay absent.  Text models never
  call them.

Registered as SGLang hooks (``register_hooks``, through the
``sglang.srt.plugins`` entry point, applied by SGLang's HookRegistry):

- ``XGrammarGrammar.apply_vocab_mask`` (structured output: regex, JSON
  schema, EBNF) picks a kernel by the logits' device type (Triton on cuda,
  sgl_kernel_npu on npu, xgrammar's CPU kernel on cpu) and raises
  "Unsupported device" for any other.  On tpu the step's logits go to the
  host, xgrammar's CPU kernel masks them, and they come back: one [requests,
  vocabulary] round trip per step of a constrained batch.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types

ABSENT = ("torchvision", "torchaudio", "torchcodec")


class _Missing:
    """Anything named inside an absent package: attributes chain, calling
    (or iterating) raises ImportError."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name}: {self._name.split('.')[0]} is not installed "
                          "(torch_tpu's SGLang environment leaves it out; text models do not need it)")

    def __iter__(self):
        self()

    def __repr__(self):
        return f"<absent {self._name}>"


class _AbsentModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Placeholders for the absent packages (active only while one of
    TORCHVISION_USERS executes)."""

    def __init__(self, absent):
        self.absent = absent

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.absent:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _AbsentModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


class _UserLoader(importlib.abc.Loader):
    """Runs one of TORCHVISION_USERS with the placeholders importable, then
    takes them out of sys.modules again: to everyone else (Transformers'
    find_spec checks, `try: import torchvision`) the packages stay absent."""

    def __init__(self, loader, placeholders):
        self.loader, self.placeholders = loader, placeholders

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        before = set(sys.modules)
        sys.meta_path.insert(0, self.placeholders)
        try:
            self.loader.exec_module(module)
        finally:
            sys.meta_path.remove(self.placeholders)
            for name in set(sys.modules) - before:
                if name.split(".")[0] in self.placeholders.absent:
                    del sys.modules[name]


class _UsersFinder(importlib.abc.MetaPathFinder):
    def __init__(self, placeholders):
        self.placeholders = placeholders

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in TORCHVISION_USERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _UserLoader(spec.loader, self.placeholders)
        return spec


# The SGLang modules a text model's path imports that import torchvision at
# module level (for image processors it never runs).
TORCHVISION_USERS = frozenset({
    "sglang.srt.multimodal.internvl_utils",  # via sglang.srt.configs.nano_nemotron_vl
    "sglang.srt.configs.deepseek_ocr",  # via sglang.srt.configs
})

_finder = None


def absent_modules():
    """Placeholders of the absent ABSENT packages for TORCHVISION_USERS."""
    global _finder
    if _finder is not None:
        return
    absent = {name for name in ABSENT if name not in sys.modules and importlib.util.find_spec(name) is None}
    if absent:
        _finder = _UsersFinder(_AbsentFinder(absent))
        sys.meta_path.insert(0, _finder)


def apply_at_import():
    absent_modules()


def _apply_vocab_mask(original, self, logits, vocab_mask):
    if logits.device.type != "tpu":
        return original(self, logits=logits, vocab_mask=vocab_mask)
    from xgrammar import apply_token_bitmask_inplace

    host = logits.cpu()
    apply_token_bitmask_inplace(host, vocab_mask.cpu(), backend="cpu")
    logits.copy_(host)


def _warm_up_after_init(result, runner, *args, **kwargs):
    from . import step

    if (str(runner.device).split(":")[0] != "tpu" or runner.is_draft_worker
            or os.environ.get("TORCH_TPU_SGLANG_WARMUP", "1") == "0"):
        return
    from sglang.srt.runtime_context import get_schedule

    sched = get_schedule()  # an extend step's tokens: a chunk, else the prefill budget
    chunk = sched.chunked_prefill_size
    max_tokens = chunk if chunk and chunk > 0 else sched.max_prefill_tokens
    max_tokens = min(max_tokens, runner.max_total_num_tokens)
    steps, programs, seconds = step.warm_up(runner, max_tokens)
    logging.getLogger(__name__).info("tpu: warm-up ran %d steps (token buckets up to %d) in %.1f s: %d programs "
                                     "compiled or loaded", steps, max_tokens, seconds, programs)


def register_hooks():
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from . import step

    HookRegistry.register("sglang.srt.constrained.xgrammar_backend.XGrammarGrammar.apply_vocab_mask",
                          _apply_vocab_mask, HookType.AROUND)
    # the scheduler's tensors on the host, the forward padded to buckets,
    # sampling on the host (step.py)
    HookRegistry.register("sglang.srt.mem_cache.memory_pool.ReqToTokenPool.__init__", step.req_pool_init,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.managers.overlap_utils.FutureMap.__init__", step.future_map_init,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new",
                          step.init_new_on_host, HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.runner.eager_runner.EagerRunner.load_batch", step.load_batch,
                          HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.model_runner.ModelRunner.sample", step.sample, HookType.AROUND)
    HookRegistry.register("sglang.srt.model_executor.model_runner.ModelRunner.init_cuda_graphs",
                          _warm_up_after_init,
                          HookType.AFTER)
