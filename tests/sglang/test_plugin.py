"""The SGLang platform plugin in process (no server): the entry points,
the platform SGLang resolves, and the packages left out staying out."""
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang is not installed here (its environment is .venv-sglang: make sglang-env)",
                allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(code):
    """A fresh interpreter: SGLang resolves its platform once per process."""
    env = dict(os.environ)
    env.pop("SGLANG_PLATFORM", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1]


def test_entry_points_are_declared():
    def group(name):
        return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=name)}

    assert group("sglang.srt.platforms").get("tpu") == "torch_tpu.sglang:activate"
    assert group("sglang.srt.plugins").get("tpu") == "torch_tpu.sglang:register_hooks"


def test_sglang_resolves_the_tpu_platform():
    line = run("import torch; from sglang.srt.platforms import current_platform as p; "
               "print(type(p).__name__, p.device_type, p.get_default_attention_backend(), "
               "p.capabilities.graph_capture, p.get_torch_distributed_backend_str(), p.get_device())")
    assert line == "TpuSRTPlatform tpu tpu False tpu_dist tpu"


def test_left_out_packages_stay_absent():
    """SGLang's configs import torchvision at module level; they get
    placeholders while they run, everyone else still sees no torchvision."""
    line = run("import importlib.util, sys; import sglang.srt.configs.model_config; "
               "import transformers.utils as u; "
               "print(importlib.util.find_spec('torchvision') is None, 'torchvision' in sys.modules, "
               "u.is_torchvision_available(), u.is_torchcodec_available())")
    assert line == "True False False False"
