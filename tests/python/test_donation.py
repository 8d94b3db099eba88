"""Buffer donation: the old value of a storage written in place, once
nothing but the pending program holds it, is donated to the program's
result of its type, so the update happens in the same device memory
(csrc/runtime/execute.c).  Values must be exactly CPU's, every alias must
see the write, a value still shared must not be touched, and memory must not
double for an in-place update of a large tensor."""
import os
import subprocess
import sys

import torch

N = 1 << 18  # 1 MiB of float32: above the donation threshold (64k elements)
MIB = 1 << 20


def _sync():
    torch.tpu.synchronize()


def test_inplace_update_of_a_large_tensor_keeps_memory_flat():
    x = torch.arange(N, dtype=torch.float32, device="tpu")
    ref = torch.arange(N, dtype=torch.float32)
    x.add_(1)  # the first in-place op may still meet a held value; from here on donated
    ref.add_(1)
    _sync()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    for i in range(20):  # x * 0.5 + i is exact, fused (an FMA) or not
        x.mul_(0.5).add_(i)
        ref.mul_(0.5).add_(i)
    _sync()
    peak = torch.tpu.max_memory_allocated()
    assert torch.equal(x.cpu(), ref)
    # without donation every step holds the old and the new 1 MiB at once
    assert peak - base < MIB // 2, (base, peak)
    assert torch.tpu.memory_allocated() - base < MIB // 2


def test_views_see_the_donated_update():
    x = torch.zeros(N, device="tpu")
    v = x[10:20]
    t = x.view(512, 512).t()
    x.add_(3.0)
    _sync()
    assert v.cpu().tolist() == [3.0] * 10
    assert torch.equal(t.cpu(), torch.full((512, 512), 3.0))


def test_a_value_shared_by_two_storages_is_not_donated():
    a = torch.arange(N, dtype=torch.float32, device="tpu")
    b = torch.empty_like(a)
    b.copy_(a)  # a whole-storage copy shares the value
    a.add_(1)
    _sync()
    assert torch.equal(b.cpu(), torch.arange(N, dtype=torch.float32))
    assert torch.equal(a.cpu(), torch.arange(N, dtype=torch.float32) + 1)


def test_kv_cache_style_row_writes_match_cpu_and_stay_in_place():
    blocks, rows = 64, 1024  # 64 x 1024 x 16 float32: a 4 MiB cache
    cache = torch.zeros(blocks, rows, 16, device="tpu")
    ref = torch.zeros(blocks, rows, 16)
    flat, rflat = cache.view(-1, 16), ref.view(-1, 16)
    g = torch.Generator().manual_seed(0)
    flat.index_copy_(0, torch.tensor([0], device="tpu"), torch.ones(1, 16, device="tpu"))
    rflat.index_copy_(0, torch.tensor([0]), torch.ones(1, 16))
    _sync()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    for step in range(10):
        slots = torch.randint(0, blocks * rows, (8,), generator=g)
        vals = torch.randn(8, 16, generator=g)
        flat.index_copy_(0, slots.to("tpu"), vals.to("tpu"))
        rflat.index_copy_(0, slots, vals)
    _sync()
    assert torch.equal(cache.cpu(), ref)
    assert torch.tpu.max_memory_allocated() - base < 2 * MIB, "each write copied the whole cache"


def test_donation_off_gives_the_same_values():
    code = ("import torch\n"
            "x = torch.arange(1 << 18, dtype=torch.float32, device='tpu')\n"
            "for i in range(5): x.mul_(0.5).add_(i)\n"
            "r = torch.arange(1 << 18, dtype=torch.float32)\n"
            "for i in range(5): r.mul_(0.5).add_(i)\n"
            "assert torch.equal(x.cpu(), r)\n"
            "print('ok')\n")
    env = dict(os.environ, TORCH_TPU_DONATION="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
