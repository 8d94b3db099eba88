import os
import warnings

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the device even without autoload)

warnings.filterwarnings("ignore", message="tpu: .* has no tpu kernel")

DEVICE = torch.device("tpu")


@pytest.fixture
def tpu():
    return DEVICE


def mode():
    return torch.tpu.get_eager_mode()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


# ---- what each eager mode runs -----------------------------------------------------
# `make test` runs this suite three times, once per eager mode, inside CI's 90
# minutes.  The modes share every kernel rule; they differ in when programs are
# built and run (debug: strict's one-op programs with a sync and the device-side
# checks raised at the op; fused: ops gathered into one program per flush).  So
# the op, module, error and device-contract suites run in every mode, and the
# suites below, which test machinery the mode does not change or a whole
# integration already covered in the other modes, run where they say.
# TORCH_TPU_TEST_ALL_MODES=1 runs everything in every mode.
_ONLY_IN = {
    # the disk program cache, torch.compile's graphs, processes and devices:
    # no eager op semantics of their own
    "test_cache_security.py": ("strict",),
    "test_compile.py": ("strict",),
    "test_compile_nanogpt.py": ("strict",),
    "test_distributed.py": ("strict",),
    "test_dist_timeout.py": ("strict",),
    "test_multi_device.py": ("strict",),
    "test_comm.py": ("strict",),
    "test_hf_loading.py": ("strict",),
    "test_device_capacity.py": ("strict",),  # the engine's start-up (fresh processes)
    # debug runs strict's programs op for op, so its numbers are strict's; these
    # sweeps and end-to-end models run in strict and fused
    "test_opinfo.py": ("strict", "fused"),
    "test_device_generic.py": ("strict",),  # fused runs it in ~10 min: tools/device_generic_report.py --mode fused
    "test_training.py": ("strict", "fused"),
    "test_fused_and_cache.py": ("strict", "fused"),
    "test_hf_models.py": ("strict", "fused"),
    "test_hf_pretrained.py": ("strict", "fused"),
    "test_hf_generate.py": ("strict", "fused"),
    "test_hf_buckets.py": ("strict", "fused"),
    "test_hf_trainer.py": ("strict", "fused"),
}
_ALL_MODES = os.environ.get("TORCH_TPU_TEST_ALL_MODES", "") == "1"


def _runs_in(item):
    return _ONLY_IN.get(os.path.basename(str(item.fspath)), None)


def pytest_report_header(config):
    if _ALL_MODES:
        return "eager mode %s: every suite (TORCH_TPU_TEST_ALL_MODES=1)" % mode()
    skipped = sorted(f for f, modes in _ONLY_IN.items() if mode() not in modes)
    if skipped:
        return "eager mode %s: skips %s (they run in the other modes; see conftest.py)" % (mode(), ", ".join(skipped))
    return "eager mode %s: every suite" % mode()


def pytest_collection_modifyitems(config, items):
    if _ALL_MODES:
        return
    for item in items:
        modes = _runs_in(item)
        if modes is not None and mode() not in modes:
            item.add_marker(pytest.mark.skip(
                reason="runs in the %s eager mode%s (conftest.py: what each mode runs); "
                       "TORCH_TPU_TEST_ALL_MODES=1 runs it in %s" % (" and ".join(modes), "s" if len(modes) > 1 else "",
                                                                     mode())))
