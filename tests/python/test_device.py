"""The device itself: registration, torch.tpu, copies, host reads, save/load."""
import io
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu


def test_plain_import_torch_autoloads_the_backend():
    code = "import torch; t = torch.ones(2, device='tpu'); print(t.device, torch.tpu.is_available())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "tpu:0 True" in r.stdout


def test_torch_tpu_module_api():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.synchronize()
    assert torch_tpu.api.tpu_device() == torch.device("tpu", 0)
    stats = torch.tpu.cache_stats()
    for k in ("mem_hits", "mem_misses", "disk_hits", "compiles", "compile_seconds", "evictions", "live_buffers"):
        assert k in stats
    assert torch.tpu.get_eager_mode() in ("strict", "debug", "fused")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                                   torch.int16, torch.int8, torch.uint8, torch.bool, torch.float64])
def test_round_trip_every_dtype(dtype):
    x = (torch.randn(3, 5) * 50).to(dtype)
    t = x.to("tpu")
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == x.shape
    assert torch.equal(t.cpu(), x)


def test_zero_d_and_zero_size():
    s = torch.tensor(3.5).to("tpu")
    assert s.shape == () and s.item() == 3.5
    z = torch.empty(0, 4).to("tpu")
    assert z.shape == (0, 4) and z.cpu().shape == (0, 4)


def test_to_between_dtypes_on_device():
    x = torch.tensor([-1.7, 0.0, 2.9, 3.2])
    t = x.to("tpu")
    assert torch.equal(t.to(torch.int64).cpu(), x.to(torch.int64))
    assert torch.equal(t.to(torch.bool).cpu(), x.to(torch.bool))
    assert torch.equal(t.to(torch.bfloat16).cpu(), x.to(torch.bfloat16))
    # cpu -> tpu with conversion, and tpu -> cpu with conversion
    assert torch.equal(x.to("tpu", torch.float16).cpu(), x.to(torch.float16))
    assert torch.equal(t.to("cpu", torch.int32), x.to(torch.int32))


def test_copy_both_ways_with_broadcast():
    dst = torch.zeros(3, 4, device="tpu")
    dst.copy_(torch.arange(4.0))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))
    host = torch.empty(3, 4)
    host.copy_(dst)
    assert torch.equal(host, torch.arange(4.0).expand(3, 4))
    # into a non-contiguous CPU destination
    host_t = torch.empty(4, 3).t()
    host_t.copy_(dst)
    assert torch.equal(host_t, torch.arange(4.0).expand(3, 4))


def test_item_tolist_print():
    t = torch.tensor([[1.5, 2.0], [3.0, 4.0]]).to("tpu")
    assert t[1, 0].item() == 3.0
    assert t.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    s = str(t)
    assert "device='tpu:0'" in s and "1.5000" in s


def test_save_and_load_state_dict(tmp_path):
    m = torch.nn.Linear(4, 3).to("tpu")
    path = tmp_path / "m.pt"
    torch.save(m.state_dict(), path)
    sd = torch.load(path)
    assert sd["weight"].device.type == "tpu"
    assert torch.equal(sd["weight"].cpu(), m.weight.detach().cpu())
    sd_cpu = torch.load(path, map_location="cpu")
    assert sd_cpu["weight"].device.type == "cpu"
    assert torch.equal(sd_cpu["weight"], m.weight.detach().cpu())
    buf = io.BytesIO()
    t = torch.arange(10).to("tpu")[2:7]
    torch.save(t, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf).cpu(), torch.arange(2, 7))


def test_manual_seed_reproduces_random_numbers():
    torch.manual_seed(123)
    a = torch.randn(100, device="tpu").cpu()
    b = torch.rand(10, device="tpu").cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.randn(100, device="tpu").cpu(), a)
    assert torch.equal(torch.rand(10, device="tpu").cpu(), b)
    assert not torch.equal(torch.randn(100, device="tpu").cpu(), a)
    # sane distributions
    x = torch.randn(20000, device="tpu").cpu()
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05
    u = torch.rand(20000, device="tpu").cpu()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean().item() - 0.5) < 0.02
    r = torch.randint(3, 9, (5000,), device="tpu").cpu()
    assert r.min() == 3 and r.max() == 8


def test_rng_state_round_trip():
    torch.manual_seed(7)
    st = torch.tpu.get_rng_state()
    a = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(st)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), a)


def test_module_to_tpu_keeps_parameters():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ref = [p.detach().clone() for p in m.parameters()]
    m.to("tpu")
    for p, r in zip(m.parameters(), ref):
        assert isinstance(p, torch.nn.Parameter) and p.device.type == "tpu"
        assert torch.equal(p.detach().cpu(), r)


def test_untyped_storage_on_tpu_does_not_crash():
    s = torch.UntypedStorage(16, device="tpu")
    assert s.device.type == "tpu" and s.nbytes() == 16
    c = torch.arange(4.0).untyped_storage()
    t = c.to(device="tpu")
    assert t.device.type == "tpu" and t.nbytes() == 16
    back = torch.empty(0).set_(t.cpu())
    assert torch.equal(back, torch.arange(4.0))


def test_arange_matches_cpu_without_fallback():
    import torch_tpu
    before = dict(torch_tpu.fallback_counts())
    for args in [(5,), (1, 10, 3), (0.0, 1.0, 0.1), (10, 0, -2), (0, 3), (-3.5, 2.25, 0.5)]:
        a, b = torch.arange(*args, device="tpu").cpu(), torch.arange(*args)
        assert a.dtype == b.dtype and torch.equal(a, b), args
    assert torch.equal(torch.arange(2, 7, dtype=torch.bfloat16, device="tpu").cpu(),
                       torch.arange(2, 7, dtype=torch.bfloat16))
    assert torch_tpu.fallback_counts() == before


def test_autocast_defaults_to_bf16_as_torch_tpu_amp():
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    d = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu"):
        y = d @ d
    with torch.tpu.amp.autocast():
        z = d @ d
    assert y.dtype == z.dtype == torch.bfloat16
    with torch.autocast("tpu", dtype=torch.float16):
        assert (d @ d).dtype == torch.float16


def test_autocast_runs_matmuls_in_bf16_and_softmax_in_f32():
    t = torch.randn(8, 8)
    d = t.to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = d @ d
        z = torch.softmax(y, -1)
        w = d + 1
    assert (y.dtype, z.dtype, w.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = t @ t
    torch.testing.assert_close(y.cpu(), ref, atol=2e-2, rtol=2e-2)
    m = torch.nn.Linear(8, 4).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        loss = m(d).float().pow(2).mean()
    loss.backward()
    assert m.weight.grad.dtype == torch.float32


def test_dataloader_with_pin_memory_feeds_tpu():
    ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    dl = torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)
    seen = 0
    for x, y in dl:
        xt = x.to("tpu", non_blocking=True)
        assert torch.equal(xt.cpu(), x)
        seen += x.shape[0]
    assert seen == 8
