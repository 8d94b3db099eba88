"""Unchanged CUDA programs on tpu (torch_tpu.transfer, python -m torch_tpu.run).

Each test writes a CUDA-style script (as one finds them in tutorials and
nanoGPT: `torch.cuda.is_available()` picks the device, `.cuda()`,
`torch.cuda.amp`, `device_type = 'cuda' if 'cuda' in device else 'cpu'`),
runs it unchanged through `python -m torch_tpu.run` (or under
TORCH_TPU_TRANSFER=1, or torchrun-style ranks) in a subprocess, and compares
what it prints with the same script run by plain PyTorch on this CPU-only
machine (torch_tpu not loaded: CUDA absent, the script falls back to cpu).
The test process itself never applies the transfer."""
import json
import os
import subprocess
import sys

import pytest
import torch

import dist_util
from conftest import mode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 240


def _env(**extra):
    env = dict(os.environ)
    env.pop("TORCH_TPU_TRANSFER", None)
    env["TORCH_TPU_EAGER_MODE"] = mode()
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def _result(stdout):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, stdout[-3000:]
    return json.loads(lines[0][len("RESULT "):])


def _write(tmp_path, source, name="script.py"):
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def _run(cmd, env, tmp_path, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=str(tmp_path))
    if ok:
        assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def run_tpu(tmp_path, source, args=(), via_env=False):
    """The script through `python -m torch_tpu.run` (or TORCH_TPU_TRANSFER=1): (result, stderr)."""
    path = _write(tmp_path, source)
    if via_env:
        r = _run([sys.executable, path, *args], _env(TORCH_TPU_TRANSFER="1"), tmp_path)
    else:
        r = _run([sys.executable, "-m", "torch_tpu.run", path, *args], _env(), tmp_path)
    return _result(r.stdout), r.stderr


def run_cpu(tmp_path, source, args=()):
    """The same script under plain PyTorch: no torch_tpu, no CUDA."""
    path = _write(tmp_path, source, "script_cpu.py")
    env = _env(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    return _result(_run([sys.executable, path, *args], env, tmp_path).stdout)


def _one_log_line(stderr):
    lines = [ln for ln in stderr.splitlines() if "torch_tpu.transfer" in ln]
    assert len(lines) == 1 and "CUDA runs on tpu" in lines[0], stderr[-3000:]


def _flat(v):
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _flat(item)]
    return [v]


def _close(a, b, rtol, atol):
    torch.testing.assert_close(torch.tensor(_flat(a), dtype=torch.float64),
                               torch.tensor(_flat(b), dtype=torch.float64), rtol=rtol, atol=atol)


only_strict = pytest.mark.skipif(
    mode() != "strict", reason="a whole program in a subprocess: the eager mode's ops are covered by the op "
                               "suites; test_cuda_training_script_matches_cpu runs in every mode")

# ---- scripts: CUDA programs as written for CUDA ----------------------------------------------

TRAIN_CUDA = r'''
import json, os, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
torch.manual_seed(0)
if use_cuda:
    torch.cuda.manual_seed_all(0)
    torch.cuda.set_device(0)

model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
if use_cuda:
    model = model.cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

g = torch.Generator().manual_seed(1)
xs = torch.randn(64, 16, generator=g)
ys = torch.randint(0, 4, (64,), generator=g)
losses = []
for step in range(8):
    x, y = xs[step * 8:(step + 1) * 8], ys[step * 8:(step + 1) * 8]
    if use_cuda:
        x, y = x.cuda(non_blocking=True), y.cuda()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

w = next(model.parameters())
assert w.is_cuda == use_cuda and x.is_cuda == use_cuda, (w.device, x.device)
extra = torch.zeros(2, device=device) + torch.ones(2, device="cuda" if use_cuda else "cpu")
with torch.device("cuda" if use_cuda else "cpu"):
    probe = nn.Linear(2, 2)

# a checkpoint round trip, loaded where the program runs
path = os.path.join(sys.argv[1], "ckpt.pt")
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
state = torch.load(path, map_location="cuda" if use_cuda else "cpu")
model2 = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)).to(device)
model2.load_state_dict(state["model"])
out2 = model2(xs[:4].to(device)).sum().item()

print("RESULT " + json.dumps({
    "losses": losses, "device": str(w.device), "ckpt_device": str(state["model"]["0.weight"].device),
    "params": [p.detach().cpu().flatten()[:8].tolist() for p in model.parameters()],
    "extra": extra.tolist(), "out2": out2, "is_cuda": w.is_cuda, "ctx_device": str(probe.weight.device),
}))
'''

AMP_CUDA = r'''
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

use_amp = torch.cuda.is_available()
device = "cuda" if use_amp else "cpu"


class Square(torch.autograd.Function):  # runs in float32 whatever autocast says
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return 2 * a * g

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
scaler = torch.cuda.amp.GradScaler(init_scale=1024.0, enabled=use_amp)
g = torch.Generator().manual_seed(2)
x = torch.randn(16, 32, generator=g).to(device)
y = torch.randn(16, 8, generator=g).to(device)
losses, dtypes = [], set()
for step in range(6):
    with torch.cuda.amp.autocast(enabled=use_amp):
        h = model(x)
        dtypes.add(str(h.dtype))
        sq = Square.apply(h)
        loss = F.mse_loss(h.float(), y) + 1e-3 * sq.mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())

timing = {}
if use_amp:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    side = torch.cuda.Stream()
    start.record()
    with torch.cuda.stream(side):
        z = model(x)
    torch.cuda.current_stream().wait_stream(side)
    end.record()
    torch.cuda.synchronize()
    timing["ms"] = start.elapsed_time(end)
    timing["z_sum"] = z.float().sum().item()
    timing["allocated"] = torch.cuda.memory_allocated()
    timing["peak"] = torch.cuda.max_memory_allocated()
    timing["reserved"] = torch.cuda.memory_reserved(0)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.empty_cache()
    timing["name"] = torch.cuda.get_device_name(0)
    timing["count"] = torch.cuda.device_count()
    timing["current"] = torch.cuda.current_device()
    timing["total_memory"] = torch.cuda.get_device_properties(0).total_memory
else:
    timing["z_sum"] = model(x).sum().item()
print("RESULT " + json.dumps({"losses": losses, "dtypes": sorted(dtypes), "scale": scaler.get_scale(),
                              "timing": timing, "custom_fwd": str(sq.dtype)}))
'''

NANOGPT_CUDA = r'''
# nanoGPT's device handling (train.py), a one-block character model
import inspect, json, math
from contextlib import nullcontext
import torch
import torch.nn as nn
from torch.nn import functional as F

device = 'cuda' if torch.cuda.is_available() else 'cpu'
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = 'cuda' if 'cuda' in device else 'cpu'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

text = "to be or not to be, that is the question. " * 20
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
block_size, batch_size, n_embd = 16, 4, 32

def get_batch(step):
    g = torch.Generator().manual_seed(step)
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=g)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    if device_type == 'cuda':
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln_2(x))

class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = Block()
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.h(self.wte(idx) + self.wpe(pos))
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))

model = GPT(len(chars)).to(device)
fused = 'fused' in inspect.signature(torch.optim.AdamW).parameters and device_type == 'cuda'
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), fused=fused)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16' and device_type == 'cuda'))
losses, dtypes = [], set()
for it in range(6):
    X, Y = get_batch(it)
    with ctx:
        logits, loss = model(X, Y)
        dtypes.add(str(logits.dtype))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "dtypes": sorted(dtypes), "fused": fused,
                              "device": str(next(model.parameters()).device)}))
'''

DDP_CUDA = r'''
import json, os
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

distributed = "RANK" in os.environ
use_cuda = torch.cuda.is_available()
if distributed:
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
else:
    rank, world, local_rank = 0, 1, 0
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
torch.manual_seed(0)
model = nn.Linear(8, 2).to(device)
if distributed:
    model = DDP(model, device_ids=[local_rank] if use_cuda else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(3)
xs, ys = torch.randn(16, 8, generator=g), torch.randn(16, 2, generator=g)
per = 16 // world
losses = []
for step in range(5):
    x = xs[rank * per:(rank + 1) * per].to(device)
    y = ys[rank * per:(rank + 1) * per].to(device)
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    l = loss.detach().clone()
    if distributed:
        dist.all_reduce(l)
        l /= world
    losses.append(l.item())
params = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
if rank == 0:
    print("RESULT " + json.dumps({"losses": losses, "params": params,
                                  "backend": dist.get_backend() if distributed else None,
                                  "device": str(next(model.parameters()).device)}))
if distributed:
    dist.destroy_process_group()
'''

# ---- tests ---------------------------------------------------------------------------------


def test_cuda_training_script_matches_cpu(tmp_path):
    """A training loop with .cuda(), torch.cuda.manual_seed_all/set_device,
    cudnn flags, `is_cuda`, `with torch.device("cuda")` and a torch.save/torch.load(map_location="cuda")
    round trip: on tpu, the CPU run's losses and parameters."""
    ref = run_cpu(tmp_path, TRAIN_CUDA, [str(tmp_path)])
    got, err = run_tpu(tmp_path, TRAIN_CUDA, [str(tmp_path)])
    assert ref["device"] == "cpu" and got["device"] == "tpu:0"
    assert got["ckpt_device"] == "tpu:0" and got["is_cuda"] is True and got["ctx_device"] == "tpu:0"
    _close(got["losses"], ref["losses"], 1e-4, 1e-5)
    _close(got["params"], ref["params"], 1e-4, 1e-5)
    _close(got["out2"], ref["out2"], 1e-4, 1e-5)
    assert got["extra"] == [1.0, 1.0]
    _one_log_line(err)  # what was mapped: logged once, in one line


@only_strict
def test_cuda_amp_gradscaler_events_memory(tmp_path):
    """torch.cuda.amp.autocast + GradScaler (float16 on tpu), an autograd
    Function under torch.amp.custom_fwd(device_type="cuda"), a side stream,
    Event timing, synchronize and the memory queries."""
    ref = run_cpu(tmp_path, AMP_CUDA)
    got, _ = run_tpu(tmp_path, AMP_CUDA)
    assert ref["dtypes"] == ["torch.float32"] and got["dtypes"] == ["torch.float16"]  # tpu autocast ran
    assert got["scale"] == 1024.0 and ref["scale"] == 1.0  # scaler enabled on tpu, no overflow step
    assert got["custom_fwd"] == ref["custom_fwd"] == "torch.float32"  # custom_fwd(device_type="cuda") casts
    _close(got["losses"], ref["losses"], 2e-2, 2e-3)  # float16 matmuls vs float32
    t = got["timing"]
    _close(t["z_sum"], ref["timing"]["z_sum"], 2e-2, 2e-2)
    assert t["ms"] > 0 and t["allocated"] > 0 and t["peak"] >= t["allocated"] and t["reserved"] >= t["allocated"]
    assert t["name"].startswith("tpu") and t["count"] >= 1 and t["current"] == 0 and t["total_memory"] > 0


@only_strict
def test_nanogpt_device_type_autocast_is_tpu_autocast(tmp_path):
    """nanoGPT's `device_type = 'cuda' if 'cuda' in device else 'cpu'`: on
    tpu, torch.amp.autocast(device_type='cuda') is tpu autocast (bfloat16
    logits, not a silent CPU autocast), fused AdamW, pin_memory, the scaler;
    losses within bfloat16 of the CPU run (float32, nullcontext)."""
    ref = run_cpu(tmp_path, NANOGPT_CUDA)
    got, _ = run_tpu(tmp_path, NANOGPT_CUDA)
    assert ref["dtypes"] == ["torch.float32"] and got["dtypes"] == ["torch.bfloat16"]
    assert got["fused"] is True and got["device"] == "tpu:0"
    _close(got["losses"], ref["losses"], 3e-2, 3e-2)
    assert got["losses"][-1] < got["losses"][0]


@only_strict
def test_torchrun_nccl_ddp_matches_single_process_cpu(tmp_path):
    """torchrun-style ranks (2 processes, TORCH_TPU_TRANSFER=1):
    init_process_group("nccl") is tpu_dist, cuda:LOCAL_RANK, DDP with
    device_ids; the losses and parameters of one CPU process on the whole batch."""
    ref = run_cpu(tmp_path, DDP_CUDA)
    path = _write(tmp_path, DDP_CUDA)
    res = dist_util.launch("transfer_ddp", nproc=2, timeout=TIMEOUT, cmd=[sys.executable, path],
                           env={"TORCH_TPU_TRANSFER": "1", "TORCH_TPU_EAGER_MODE": mode(),
                                "PYTHONPATH": ROOT})
    bad = [r for r in res if r.returncode != 0]
    assert not bad, "\n".join(repr(r) for r in bad)
    got = _result(res[0].output)
    assert got["backend"] == "tpu_dist" and got["device"] == "tpu:0"
    _close(got["losses"], ref["losses"], 1e-4, 1e-6)
    _close(got["params"], ref["params"], 1e-4, 1e-6)


UNMAPPABLE = r'''
import json, sys
import torch
x = torch.ones(2, device="cuda")
try:
    torch.cuda.get_arch_list()
except NotImplementedError as e:
    err = str(e)
print("RESULT " + json.dumps({"argv": sys.argv, "name": __name__, "device": str(x.device), "err": err}),
      flush=True)
g = torch.cuda.CUDAGraph()  # uncaught: the program fails here
'''


@only_strict
def test_run_sets_argv_and_unmappable_calls_raise_naming_them(tmp_path):
    """torch_tpu.run: the script is __main__ with its own argv; torch.cuda
    calls with no tpu meaning raise NotImplementedError naming the call, and
    an uncaught one fails the program (exit status 1)."""
    path = _write(tmp_path, UNMAPPABLE)
    r = _run([sys.executable, "-m", "torch_tpu.run", path, "--flag", "3"], _env(), tmp_path, ok=False)
    got = _result(r.stdout)
    assert got["argv"] == [path, "--flag", "3"] and got["name"] == "__main__" and got["device"] == "tpu:0"
    assert got["err"].startswith("torch.cuda.get_arch_list: no tpu equivalent")
    assert r.returncode == 1
    assert "NotImplementedError: torch.cuda.CUDAGraph: no tpu equivalent" in r.stderr, r.stderr[-3000:]


COMPILED_CUDA = r'''
import json
import torch

device = torch.device("cuda")  # a compiled function naming the device

@torch.compile
def step(a):
    return torch.ones(3, device="cuda") + a * 2 + torch.arange(3, device=device)

out = step(torch.full((3,), 0.5, device=device))
print("RESULT " + json.dumps({"out": out.tolist(), "device": str(out.device)}))
'''


@only_strict
def test_compiled_function_with_cuda_devices(tmp_path):
    """torch.compile over code that names cuda: the graph's device constants
    are tpu (torch.fx's generated code sees torch.device as its own type)."""
    got, _ = run_tpu(tmp_path, COMPILED_CUDA)
    assert got == {"out": [2.0, 3.0, 4.0], "device": "tpu:0"}


CUDA_CHECKPOINT = r'''
import sys, torch
import torch.serialization as ser
# a checkpoint as a CUDA machine writes it: storages tagged "cuda:0"
ser.register_package(1, lambda storage: "cuda:0", lambda storage, location: None)
torch.save({"w": torch.arange(6.0).reshape(2, 3)}, sys.argv[1])
try:  # plain PyTorch without CUDA cannot load it
    torch.load(sys.argv[1])
    print("RESULT {\"loaded\": true}")
except RuntimeError as e:
    print("RESULT " + __import__("json").dumps({"loaded": False, "cuda_error": "CUDA" in str(e)}))
'''

LOAD_CUDA_CHECKPOINT = r'''
import json, sys, torch
state = torch.load(sys.argv[1])  # no map_location, as on the CUDA machine
w = state["w"]
print("RESULT " + json.dumps({"device": str(w.device), "values": w.cpu().tolist(), "is_cuda": w.is_cuda}))
'''


@only_strict
def test_env_var_transfer_loads_checkpoint_saved_on_cuda(tmp_path):
    """TORCH_TPU_TRANSFER=1 and plain `python script.py` (torch autoloads
    torch_tpu, which applies the transfer): a checkpoint whose storages a
    CUDA machine tagged cuda:0, loaded with no map_location, is on tpu."""
    ckpt = str(tmp_path / "cuda_ckpt.pt")
    saved = _run([sys.executable, _write(tmp_path, CUDA_CHECKPOINT, "save.py"), ckpt],
                 _env(TORCH_DEVICE_BACKEND_AUTOLOAD="0"), tmp_path)
    assert _result(saved.stdout) == {"loaded": False, "cuda_error": True}
    got, err = run_tpu(tmp_path, LOAD_CUDA_CHECKPOINT, [ckpt], via_env=True)
    _one_log_line(err)
    assert got == {"device": "tpu:0", "values": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "is_cuda": True}


def test_empty_host_cache_after_the_device_started():
    # vLLM calls torch.accelerator.empty_host_cache() at shutdown: tpu's host
    # (pinned) allocator is registered and caches nothing, so it is a no-op
    # (it segfaulted once the device had started)
    x = torch.ones(3, device="tpu")
    p = torch.arange(4.0).pin_memory()
    y = p.to("tpu", non_blocking=True)
    torch.accelerator.empty_host_cache()
    assert p.is_pinned()
    torch.testing.assert_close(y.cpu(), torch.arange(4.0))
    torch.testing.assert_close(x.cpu(), torch.ones(3))
