"""Collectives across the devices of one process (torch.tpu.comm, as
torch.cuda.comm / torch.cuda.nccl) and nn.DataParallel on two tpu devices
(TORCH_TPU_NUM_DEVICES=2 on the CPU plugin), against the same computation
on CPU.  Runs in a subprocess: the device count is fixed when the engine
starts."""
import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import copy
import torch, torch_tpu
import torch.nn as nn
import torch.nn.parallel.comm as pcomm
from torch.distributed import ReduceOp
assert torch.tpu.device_count() == 2
comm = torch.tpu.comm
torch.manual_seed(0)

def pair(a, b, **kw):
    return [a.to("tpu:0", **kw), b.to("tpu:1", **kw)]

# ---- all_reduce: every op and dtype against the CPU reduction, in place ----
REF = {"sum": lambda a, b: a + b, "product": lambda a, b: a * b, "min": torch.minimum, "max": torch.maximum}
for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.uint8,
           torch.int8, torch.bool, torch.complex64):
    a = (torch.randn(3, 5) * 4).to(dt) if dt != torch.uint8 else torch.randint(0, 9, (3, 5), dtype=dt)
    b = (torch.randn(3, 5) * 4).to(dt) if dt != torch.uint8 else torch.randint(0, 9, (3, 5), dtype=dt)
    for op in ("sum", "product", "min", "max", "avg"):
        if dt.is_complex and op in ("min", "max"):
            continue
        if dt == torch.bool and op == "avg":
            continue
        xs = pair(a, b)
        comm.all_reduce(xs, op=op)
        if op == "avg":
            want = (a + b) / 2 if (dt.is_floating_point or dt.is_complex) else torch.div(a + b, 2, rounding_mode="trunc")
        elif dt == torch.bool:
            want = (a | b) if op in ("sum", "max") else (a & b)
        else:
            want = REF[op](a, b)
        for r, x in enumerate(xs):
            assert x.device.index == r
            torch.testing.assert_close(x.cpu(), want.to(dt), msg=f"all_reduce {op} {dt} member {r}")

# ReduceOp and torch.cuda.nccl's numbers name ops too; outputs=; strided inputs
a, b = torch.randn(4, 6), torch.randn(4, 6)
xs = pair(a, b)
outs = [torch.empty(4, 3, device="tpu:0"), torch.empty(4, 3, device="tpu:1")]
comm.all_reduce([x[:, ::2] for x in xs], outs, op=ReduceOp.MAX)
for o in outs:
    torch.testing.assert_close(o.cpu(), torch.maximum(a, b)[:, ::2])
comm.all_reduce(xs, op=3)  # ncclMin
torch.testing.assert_close(xs[1].cpu(), torch.minimum(a, b))

# ---- all_gather / reduce_scatter (flattened, device order, as nccl) ----
a, b = torch.randn(2, 3), torch.randn(2, 3)
outs = [torch.empty(12, device="tpu:0"), torch.empty(2, 6, device="tpu:1")]
comm.all_gather(pair(a, b), outs)
want = torch.cat([a.reshape(-1), b.reshape(-1)])
torch.testing.assert_close(outs[0].cpu(), want)
torch.testing.assert_close(outs[1].cpu(), want.reshape(2, 6))
a, b = torch.randn(8), torch.randn(8)
outs = [torch.empty(4, device="tpu:0"), torch.empty(4, device="tpu:1")]
comm.reduce_scatter(pair(a, b), outs, op="avg")
torch.testing.assert_close(outs[0].cpu(), ((a + b) / 2)[:4])
torch.testing.assert_close(outs[1].cpu(), ((a + b) / 2)[4:])

# fused mode: pending inputs are computed first
x0 = torch.ones(3, device="tpu:0") * 2
x1 = torch.arange(3., device="tpu:1") + 1
comm.all_reduce([x0, x1])
assert x0.cpu().tolist() == [3.0, 4.0, 5.0] == x1.cpu().tolist()

# ---- bad input: clear errors, no result ----
def raises(exc, text, fn):
    try:
        fn()
    except exc as e:
        assert text in str(e), str(e)
        return
    raise AssertionError(f"no {exc.__name__} ({text})")
raises(RuntimeError, "both on tpu:0", lambda: comm.all_reduce([torch.ones(2, device="tpu:0"), torch.ones(2, device="tpu:0")]))
raises(RuntimeError, "tensor 1 is tensor<3xf32>", lambda: comm.all_reduce(pair(torch.ones(2), torch.ones(3))))
raises(RuntimeError, "does not split", lambda: comm.reduce_scatter(pair(torch.ones(3), torch.ones(3)), pair(torch.ones(1), torch.ones(1))))
raises(ValueError, "every input must be a tpu tensor", lambda: comm.all_reduce([torch.ones(2), torch.ones(2, device="tpu:1")]))
raises(ValueError, "not defined for complex", lambda: comm.all_reduce(pair(torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex64)), op="max"))
raises(ValueError, "unsupported reduction", lambda: comm.all_reduce(pair(torch.ones(2), torch.ones(2)), op="bor"))
raises(ValueError, "has 3 elements, expected 4", lambda: comm.all_gather(pair(torch.ones(2), torch.ones(2)), pair(torch.ones(3), torch.ones(4))))
xs = pair(torch.ones(2), torch.ones(2))
comm.all_reduce(xs)  # the device keeps working after the errors
assert xs[0].cpu().tolist() == [2.0, 2.0]

# ---- torch.nn.parallel.comm (torch.cuda.comm's functions) on tpu ----
t = torch.arange(10., device="tpu:0")
b0, b1 = pcomm.broadcast(t, [0, 1])
assert b0 is t and b1.device.index == 1 and torch.equal(b1.cpu(), t.cpu())
chunks = pcomm.scatter(t, [0, 1], chunk_sizes=[3, 7])
assert [c.device.index for c in chunks] == [0, 1] and chunks[1].cpu().tolist() == list(range(3, 10))
g = pcomm.gather(chunks, destination=1)
assert g.device.index == 1 and torch.equal(g.cpu(), t.cpu())
assert pcomm.gather(chunks, destination=-1).device.type == "cpu"
s = pcomm.reduce_add([torch.ones(3, device="tpu:0"), torch.full((3,), 2., device="tpu:1")], 1)
assert s.device.index == 1 and s.cpu().tolist() == [3.0] * 3
coal = pcomm.broadcast_coalesced([t, t.int()], [0, 1])
assert coal[0][0] is t and coal[1][1].dtype == torch.int32 and coal[1][1].device.index == 1
raises(RuntimeError, "first on devices list", lambda: pcomm.broadcast_coalesced([t], [1, 0]))

# ---- nn.DataParallel over both devices against the replicas' CPU computation ----
torch.manual_seed(1)
ref = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
model = copy.deepcopy(ref).to("tpu")
dp = nn.DataParallel(model)
assert dp.device_ids == [0, 1]
opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
x = torch.randn(10, 4)
for step in range(2):
    opt.zero_grad(); ref_opt.zero_grad()
    y = dp(x.to("tpu"))
    assert y.device.index == 0
    # each replica normalises its own half of the batch with that half's
    # statistics (train mode: running statistics do not enter the output)
    want = torch.cat([ref(c) for c in x.chunk(2)])
    torch.testing.assert_close(y.cpu(), want, rtol=1e-5, atol=1e-6)
    y.pow(2).sum().backward()
    want.pow(2).sum().backward()
    for (n, p), q in zip(ref.named_parameters(), model.parameters()):
        assert q.device.index == 0
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)
    opt.step(); ref_opt.step()

# replica 0's running statistics: the first chunk only
torch.manual_seed(2)
ref = nn.BatchNorm1d(3)
model = copy.deepcopy(ref).to("tpu")
x = torch.randn(8, 3)
nn.DataParallel(model)(x.to("tpu"))
ref(x[:4])
torch.testing.assert_close(model.running_mean.cpu(), ref.running_mean)

# keyword arguments, several outputs, output_device, one device
class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)
    def forward(self, a, scale=1.0):
        return self.l(a) * scale, a.sum(-1)
two = Two()
tt = copy.deepcopy(two).to("tpu")
a = torch.randn(5, 3)
o1, o2 = nn.DataParallel(tt, output_device=1)(a.to("tpu"), scale=2.0)
r1, r2 = two(a, scale=2.0)
assert o1.device.index == 1
torch.testing.assert_close(o1.cpu(), r1)
torch.testing.assert_close(o2.cpu(), r2)
o1, _ = nn.DataParallel(tt, device_ids=[0])(a.to("tpu"), scale=2.0)
torch.testing.assert_close(o1.cpu(), r1)
print("COMM_OK")
"""


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_comm_and_data_parallel_on_two_devices(mode):
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_EAGER_MODE=mode)
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", _SCRIPT], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and "COMM_OK" in r.stdout, r.stdout + r.stderr
