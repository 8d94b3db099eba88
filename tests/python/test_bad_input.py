"""Bad input: the exception PyTorch raises on CPU, a clear message, no crash."""
import subprocess
import sys

import pytest
import torch


def _same_error(fn, *cpu_args):
    """fn raises the same exception type on cpu and tpu args."""
    with pytest.raises(Exception) as cpu_exc:
        fn(*cpu_args)
    tpu_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    with pytest.raises(type(cpu_exc.value)) as tpu_exc:
        fn(*tpu_args)
        torch.tpu.synchronize()
    return str(tpu_exc.value)


def test_shape_mismatch_in_binary_op():
    msg = _same_error(lambda a, b: a + b, torch.ones(2, 3), torch.ones(4))
    assert "3" in msg and "4" in msg


def test_matmul_shape_mismatch():
    msg = _same_error(lambda a, b: a @ b, torch.ones(2, 3), torch.ones(4, 5))
    assert "2x3" in msg or "(2, 3)" in msg or "3" in msg


def test_bad_dtype_for_op():
    _same_error(lambda a: torch.mean(a), torch.ones(3, dtype=torch.int64))


def test_index_out_of_range_select():
    _same_error(lambda a: a[5], torch.ones(3))


def test_dim_out_of_range():
    msg = _same_error(lambda a: a.sum(dim=3), torch.ones(2, 2))
    assert "range" in msg


def test_mixing_cpu_and_tpu_tensors():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError) as e:
        a + torch.ones(3)
    assert "device" in str(e.value)
    # a 0-d CPU tensor is allowed, as on CUDA
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


def test_view_with_incompatible_size():
    _same_error(lambda a: a.view(4, 2), torch.ones(3, 3))


def test_cat_mismatched_shapes():
    _same_error(lambda a, b: torch.cat([a, b]), torch.ones(2, 3), torch.ones(2, 4))


def test_negative_size_factory():
    with pytest.raises(RuntimeError):
        torch.empty(-1, device="tpu")


def test_inplace_result_type_cannot_be_cast():
    _same_error(lambda a, b: a.add_(b), torch.ones(3, dtype=torch.int64), torch.ones(3))


def test_fallback_disabled_names_the_op():
    code = (
        "import torch\n"
        "t = torch.ones(4, device='tpu')\n"
        "try:\n"
        "    torch.ops.aten._unique2(t)\n"
        "except NotImplementedError as e:\n"
        "    print('NIE', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "TORCH_TPU_CPU_FALLBACK": "0"})
    assert r.returncode == 0, r.stderr
    assert "NIE" in r.stdout and "_unique2" in r.stdout


def test_missing_plugin_says_what_to_install():
    # import torch still works; the warning and every use say what to set
    code = (
        "import torch\n"
        "print('available', torch.tpu.is_available())\n"
        "try:\n"
        "    torch.ones(2, device='tpu')\n"
        "except RuntimeError as e:\n"
        "    print('RAISED', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "TORCH_TPU_PJRT_PLUGIN": "/nonexistent/plugin.so"})
    assert r.returncode == 0, r.stderr
    assert "available False" in r.stdout
    assert "RAISED" in r.stdout and "TORCH_TPU_PJRT_PLUGIN" in r.stdout and "xla-cpu-pjrt" in r.stdout
    assert "TORCH_TPU_PJRT_PLUGIN" in r.stderr


def test_debug_mode_raises_device_side_failure_at_the_op():
    # an op that only fails while the program runs: a mismatch the engine
    # detects in its argument check (wrong buffer for a compiled program)
    code = (
        "import torch\n"
        "x = torch.ones(3, device='tpu')\n"
        "try:\n"
        "    torch.ops.aten.index_select(x, 0, torch.tensor([7], device='tpu'))\n"
        "    print('no error')\n"
        "except (IndexError, RuntimeError) as e:\n"
        "    print('raised', type(e).__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "TORCH_TPU_EAGER_MODE": "debug"})
    assert r.returncode == 0, r.stderr
    assert "raised" in r.stdout
