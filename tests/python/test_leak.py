"""A long training loop keeps device buffers and process memory flat."""
import resource

import torch
import torch.nn as nn
import torch.nn.functional as F


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_500_steps_keep_buffers_and_rss_flat():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to("tpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 32).to("tpu")
    y = torch.randint(0, 10, (16,)).to("tpu")
    marks = {}
    for step in range(500):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step in (100, 499):
            loss.item()
            torch.tpu.synchronize()
            s = torch.tpu.cache_stats()
            # the scalar cache keeps at most 256 recurring scalars (lr, eps):
            # bounded, and not tensors, so it is counted apart
            marks[step] = (s["live_buffers"] - s["scalar_cache_entries"], _rss_mb())
            assert s["scalar_cache_entries"] <= 256
    (b100, r100), (b500, r500) = marks[100], marks[499]
    # bound: no new tensor buffers at all; RSS within 5% (+8 MiB of allocator slack)
    assert b500 <= b100, f"live buffers grew {b100} -> {b500}"
    assert r500 <= r100 * 1.05 + 8, f"RSS grew {r100:.1f} -> {r500:.1f} MiB"
