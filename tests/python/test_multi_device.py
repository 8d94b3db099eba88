"""Several tpu devices in one process (TORCH_TPU_NUM_DEVICES=2 on the CPU
plugin): tensors on tpu:1 run on device 1, each device has its own pending
graph, copies between devices, factories on the named device, the current
device of torch.tpu.device(...).  Runs in a subprocess: the device count is
fixed when the engine starts."""
import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import torch, torch_tpu
from torch_tpu import _C
assert torch.tpu.device_count() == 2, torch.tpu.device_count()
torch.manual_seed(0)
a_cpu, b_cpu = torch.randn(5, 4), torch.randn(4)
a, b = a_cpu.to("tpu:1"), b_cpu.to("tpu:1")
assert a.device == torch.device("tpu", 1)
c = torch.relu(a * 2 + b).sum(0)
assert c.device.index == 1
torch.testing.assert_close(c.cpu(), torch.relu(a_cpu * 2 + b_cpu).sum(0))

# each device its own pending graph: work on tpu:0 does not flush tpu:1's
if torch.tpu.get_eager_mode() == "fused":
    x1 = a + 1
    n1 = torch.tpu.cache_stats()["pending_nodes"]
    x0 = torch.ones(3, device="tpu:0") * 2
    assert torch.tpu.cache_stats()["pending_nodes"] >= n1 + 1
    assert x0.cpu().tolist() == [2.0, 2.0, 2.0]
    torch.testing.assert_close(x1.cpu(), a_cpu + 1)

# device to device
d0 = c.to("tpu:0")
assert d0.device.index == 0 and torch.equal(d0.cpu(), c.cpu())
e = torch.zeros(4, device="tpu:0")
e.copy_(c)
assert torch.equal(e.cpu(), c.cpu())
h = c.to("tpu:0", dtype=torch.float64)
assert h.dtype == torch.float64 and h.device.index == 0
torch.testing.assert_close(h.cpu(), c.cpu().double())
back = d0[1:3].to("tpu:1")  # a view crosses too
assert back.device.index == 1 and torch.equal(back.cpu(), c.cpu()[1:3])

# factories on the named device and on the current one
f = torch.full((3,), 2.5, device="tpu:1")
g = torch.arange(4, device="tpu:1")
r = torch.randn(3, device="tpu:1")
assert (f.device.index, g.device.index, r.device.index) == (1, 1, 1)
assert f.cpu().tolist() == [2.5] * 3 and g.cpu().tolist() == [0, 1, 2, 3]
with torch.tpu.device(1):
    assert torch.tpu.current_device() == 1
    assert torch.ones(2, device="tpu").device.index == 1
assert torch.tpu.current_device() == 0
torch.tpu.set_device(1)
assert torch.zeros(2, device="tpu").device.index == 1
torch.tpu.set_device(0)

# ops across devices raise as on CUDA
try:
    a + d0
    raise SystemExit("mixed devices accepted")
except RuntimeError as ex:
    assert "same device" in str(ex), ex

# a model on tpu:1 trains like on CPU
torch.manual_seed(1)
ref = torch.nn.Linear(4, 3)
m = torch.nn.Linear(4, 3)
m.load_state_dict(ref.state_dict())
m.to("tpu:1")
opt, ref_opt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 3)
for _ in range(3):
    for model, o, dev in ((ref, ref_opt, "cpu"), (m, opt, "tpu:1")):
        o.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        o.step()
for p, q in zip(m.parameters(), ref.parameters()):
    assert p.device.index == 1
    torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)

# memory is counted per device
torch.tpu.synchronize()
before0, before1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
big = torch.ones(1 << 16, device="tpu:1")
torch.tpu.synchronize()
assert torch.tpu.memory_allocated(1) - before1 == 4 << 16
assert torch.tpu.memory_allocated(0) == before0
# events and streams of device 1
ev = torch.tpu.Event(enable_timing=True)
with torch.tpu.device(1):
    s = torch.tpu.Stream()
    ev2 = torch.tpu.Event(enable_timing=True)
assert s.device.index == 1

# complex ops with Python scalars run on the operand's device, not tpu:0
z_cpu = torch.randn(3, dtype=torch.complex64)
z = z_cpu.to("tpu:1")
for f in (lambda t: t * 2.5, lambda t: t + 1j, lambda t: t / (1 + 2j), lambda t: torch.pow(t, 2),
          lambda t: t - 3, lambda t: 2 * t):
    r = f(z)
    assert r.device.index == 1
    torch.testing.assert_close(r.cpu(), f(z_cpu))

# factories whose kernels take no tensor run on the device named, and so do
# the linalg ops built on them (torch.eye inside linalg.inv)
for f in (lambda d: torch.eye(3, 4, device=d), lambda d: torch.linspace(-1, 2, 7, device=d),
          lambda d: torch.logspace(0, 2, 5, base=2, device=d), lambda d: torch.kaiser_window(6, device=d),
          lambda d: torch.kaiser_window(5, False, 3.0, dtype=torch.float64, device=d)):
    r = f("tpu:1")
    assert r.device.index == 1
    torch.testing.assert_close(r.cpu(), f("cpu"))
m_cpu = torch.randn(4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
r = torch.linalg.inv(m_cpu.to("tpu:1"))
assert r.device.index == 1
torch.testing.assert_close(r.cpu(), torch.linalg.inv(m_cpu))
print("MULTI_DEVICE_OK")
"""


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_two_devices_in_one_process(mode):
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_EAGER_MODE=mode)
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "MULTI_DEVICE_OK" in r.stdout, r.stdout + r.stderr
