"""The device contracts PyTorch programs rely on, checked against PyTorch CPU
or the torch.cuda contract: module conversion keeps Parameter identity,
generators, streams and events, memory statistics, storage resize, pinned
memory, out-of-memory, lazy start and torch.tpu's torch.cuda-shaped API."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu

TPU = torch.device("tpu")


# ---- module conversion ---------------------------------------------------------------


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT-2's lm_head / wte
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, idx):
        return self.head(self.norm(self.emb(idx)) * self.scale)


def test_to_keeps_parameter_and_buffer_objects():
    m = _Tied()
    params = {n: p for n, p in m.named_parameters()}
    buffers = {n: b for n, b in m.named_buffers()}
    m.to(TPU)
    for n, p in m.named_parameters():
        assert p is params[n] and p.device.type == "tpu"
    for n, b in m.named_buffers():  # buffers are reassigned, as on CUDA (Module._apply)
        assert b.device.type == "tpu" and torch.equal(b.cpu(), buffers[n])
    assert m.head.weight is m.emb.weight
    m.to("cpu")
    for n, p in m.named_parameters():
        assert p is params[n] and p.device.type == "cpu"


def test_tied_weights_train_like_cpu():
    torch.manual_seed(0)
    cpu = _Tied()
    dev = _Tied()
    dev.load_state_dict(cpu.state_dict())
    dev.to(TPU)
    idx = torch.randint(0, 11, (4, 5))
    for model, d in ((cpu, "cpu"), (dev, TPU)):
        loss = F.cross_entropy(model(idx.to(d)).flatten(0, 1), idx.to(d).flatten())
        loss.backward()
    # one Parameter, one gradient: the sum of both uses, as on CPU
    torch.testing.assert_close(dev.emb.weight.grad.cpu(), cpu.emb.weight.grad, rtol=1e-4, atol=1e-5)
    assert dev.head.weight.grad is dev.emb.weight.grad


def test_optimizer_built_before_to_trains():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    m.load_state_dict(ref.state_dict())
    opt = torch.optim.Adam(m.parameters(), lr=0.05)  # built before the move
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    m.to(TPU)
    x, y = torch.randn(16, 6), torch.randn(16, 2)
    for _ in range(3):
        for model, o, d in ((ref, ref_opt, "cpu"), (m, opt, TPU)):
            o.zero_grad()
            F.mse_loss(model(x.to(d)), y.to(d)).backward()
            o.step()
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a.cpu(), b.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("conv", ["bf16", "half", "double"])
def test_dtype_conversion_keeps_identity(conv):
    m = nn.Linear(3, 2).to(TPU)
    w = m.weight
    want = {"bf16": torch.bfloat16, "half": torch.float16, "double": torch.float64}[conv]
    ref = w.detach().cpu().to(want)
    getattr(m, {"bf16": "bfloat16", "half": "half", "double": "double"}[conv])()
    assert m.weight is w and w.dtype == want and w.device.type == "tpu"
    assert torch.equal(w.detach().cpu(), ref)


def test_load_state_dict_assign_and_to_empty():
    m = nn.Linear(4, 3)
    sd = {k: v.to(TPU) for k, v in nn.Linear(4, 3).state_dict().items()}
    m.load_state_dict(sd, assign=True)
    assert m.weight.device.type == "tpu" and isinstance(m.weight, nn.Parameter)
    assert torch.equal(m.weight.detach().cpu(), sd["weight"].cpu())
    with torch.device("meta"):
        e = nn.Linear(4, 3)
    e.to_empty(device=TPU)
    assert e.weight.device.type == "tpu" and e.weight.shape == (3, 4)
    nn.init.ones_(e.weight)
    assert torch.equal(e.weight.detach().cpu(), torch.ones(3, 4))


# ---- generators ------------------------------------------------------------------------


def _draws(g):
    return [
        torch.randn(5, device=TPU, generator=g),
        torch.rand(5, device=TPU, generator=g),
        torch.randint(0, 100, (5,), device=TPU, generator=g),
        torch.empty(5, device=TPU).normal_(1.0, 2.0, generator=g),
        torch.empty(5, device=TPU).uniform_(-1, 1, generator=g),
        torch.empty(5, device=TPU).bernoulli_(0.5, generator=g),
        torch.multinomial(torch.tensor([0.2, 0.3, 0.5], device=TPU), 4, replacement=True, generator=g),
        torch.randperm(7, device=TPU, generator=g),
    ]


def test_generator_same_seed_same_numbers_and_independent():
    g1, g2 = torch.Generator(device="tpu"), torch.Generator(device="tpu")
    g1.manual_seed(1234)
    a = [t.cpu() for t in _draws(g1)]
    g1.manual_seed(1234)
    g2.manual_seed(99)
    _draws(g2)  # using another generator changes nothing for g1
    b = [t.cpu() for t in _draws(g1)]
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    g2.manual_seed(98)
    c = [t.cpu() for t in _draws(g2)]
    assert not torch.equal(a[0], c[0])
    assert g1.initial_seed() == 1234 and g1.device.type == "tpu"


def test_generator_state_roundtrip_and_seed():
    g = torch.Generator(device="tpu")
    s = g.seed()
    assert g.initial_seed() == s
    torch.randn(3, device=TPU, generator=g)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    a = torch.randn(8, device=TPU, generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.randn(8, device=TPU, generator=g).cpu(), a)


def test_global_seed_and_fork_rng():
    torch.manual_seed(7)
    a = torch.randn(6, device=TPU).cpu()
    torch.manual_seed(7)
    assert torch.equal(torch.randn(6, device=TPU).cpu(), a)
    with torch.random.fork_rng(device_type="tpu"):
        torch.randn(100, device=TPU)
    b = torch.randn(6, device=TPU).cpu()
    torch.manual_seed(7)
    torch.randn(6, device=TPU)
    assert torch.equal(torch.randn(6, device=TPU).cpu(), b)
    state = torch.tpu.get_rng_state()
    c = torch.rand(4, device=TPU).cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device=TPU).cpu(), c)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpoint_replays_dropout(reentrant):
    # torch.utils.checkpoint saves the device RNG state only when the device
    # module says `_initialized`; the recomputed dropout must draw the same
    # mask, or the gradients are those of another network.
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 8)).to(TPU)
    x = torch.randn(4, 8, device=TPU, requires_grad=True)
    torch.manual_seed(1)
    y = checkpoint(m, x, use_reentrant=reentrant)
    y.sum().backward()
    g_ckpt, x.grad = x.grad.cpu(), None
    torch.manual_seed(1)
    y_plain = m(x)
    y_plain.sum().backward()
    assert torch.equal(y_plain.cpu(), y.cpu())
    assert torch.equal(x.grad.cpu(), g_ckpt)
    assert torch.tpu._initialized
    assert torch.tpu.default_generators[0] is torch.tpu._get_generator(torch.device(TPU))


def test_dropout_follows_the_seed():
    x = torch.ones(64, 64, device=TPU)
    torch.manual_seed(3)
    a = F.dropout(x, 0.5).cpu()
    torch.manual_seed(3)
    b = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, b)
    assert 0.4 < (a == 0).float().mean().item() < 0.6


def test_multinomial_and_randperm_statistics():
    g = torch.Generator(device="tpu").manual_seed(5)
    p = torch.tensor([0.1, 0.0, 0.6, 0.3], device=TPU)
    s = torch.multinomial(p, 20000, replacement=True, generator=g).cpu()
    freq = torch.bincount(s, minlength=4).double() / s.numel()
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.double), atol=0.02, rtol=0)
    no_rep = torch.multinomial(p.expand(50, 4), 3, generator=g).cpu()
    assert all(len(set(r.tolist())) == 3 and 1 not in r.tolist() for r in no_rep)
    perm = torch.randperm(100, device=TPU, generator=g).cpu()
    assert torch.equal(perm.sort().values, torch.arange(100))


def test_generator_bad_input():
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator"):
        torch.randn(3, device=TPU, generator=torch.Generator())
    g = torch.Generator(device="tpu")
    with pytest.raises(RuntimeError, match="wrong size"):
        g.set_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(TypeError, match="ByteTensor"):
        g.set_state(torch.zeros(16, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.Generator(device=f"tpu:{torch.tpu.device_count()}")


@pytest.mark.parametrize("op", ["randn", "rand", "randint", "randperm", "normal_", "bernoulli", "multinomial"])
def test_tpu_generator_with_cpu_tensors_raises_as_cpu(op):
    """A tpu generator sends a CPU op to the tpu kernels (the dispatcher
    counts the generator's device): it must raise CPU's error, not compute."""
    g = torch.Generator(device="tpu")
    calls = {"randn": lambda: torch.randn(3, generator=g), "rand": lambda: torch.rand(3, generator=g),
             "randint": lambda: torch.randint(0, 5, (3,), generator=g),
             "randperm": lambda: torch.randperm(5, generator=g),
             "normal_": lambda: torch.empty(3).normal_(generator=g),
             "bernoulli": lambda: torch.bernoulli(torch.full((3,), 0.5), generator=g),
             "multinomial": lambda: torch.multinomial(torch.ones(4), 2, generator=g)}
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'tpu'"):
        calls[op]()
    assert torch.randperm(5, generator=g, device=TPU).sort().values.cpu().tolist() == [0, 1, 2, 3, 4]


# ---- streams and events -------------------------------------------------------------


def _work(n=30, size=256):
    x = torch.randn(size, size, device=TPU)
    for _ in range(n):
        x = torch.tanh(x @ x) * 0.5
    return x


def test_events_time_device_work():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    assert start.query()  # never recorded: complete, as CUDA
    start.record()
    y = _work()
    end.record()
    end.synchronize()
    assert end.query()
    ms = start.elapsed_time(end)
    assert ms > 0
    # an event recorded after the work is done only once the work is
    e = torch.Event("tpu", enable_timing=True)
    e.record()
    e.synchronize()
    assert e.query() and isinstance(e, torch.tpu.Event)
    assert torch.isfinite(y).all().item()


def test_event_elapsed_needs_recorded_events():
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    a.record()
    with pytest.raises(ValueError, match="recorded"):  # c10::Event's own check, as for CUDA
        a.elapsed_time(b)


def test_streams_api():
    s = torch.tpu.Stream()
    assert isinstance(s, torch.tpu.Stream) and s.device.type == "tpu"
    default = torch.tpu.default_stream()
    assert torch.tpu.current_stream() == default
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        x = torch.ones(4, device=TPU) * 3
        ev = s.record_event()
    assert torch.tpu.current_stream() == default
    default.wait_event(ev)
    default.wait_stream(s)
    s.synchronize()
    assert s.query()
    assert torch.equal(x.cpu(), torch.full((4,), 3.0))
    torch.tpu.set_stream(s)
    assert torch.accelerator.current_stream() == s
    torch.tpu.set_stream(default)
    torch.accelerator.synchronize()
    torch.tpu.synchronize()


def test_event_of_another_device_type():
    ev = torch.tpu.Event()
    with pytest.raises(RuntimeError):
        ev.record(torch.Stream("cpu"))


# ---- memory -----------------------------------------------------------------------------


def test_memory_allocated_moves_by_tensor_size():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    t = torch.ones(256, 1024, device=TPU)  # 1 MiB
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base == 256 * 1024 * 4
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    del t
    assert torch.tpu.memory_allocated() == base
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    torch.tpu.empty_cache()


def _rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_cpu_plugin_host_memory_is_reused_and_returned_by_empty_cache():
    """On the CPU plugin device memory is malloc's, kept for reuse as a
    caching allocator keeps device memory (no page faults per large
    transfer or output; bench: transfer): a loop of 256 MiB transfers and
    outputs computes right, and empty_cache gives the memory back."""
    if torch.tpu.get_device_properties(0).platform != "cpu":
        pytest.skip("the host-memory policy applies to the CPU plugin only")
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    base = _rss_mib()
    h = torch.arange(64 << 20, dtype=torch.float32) % 1000  # 256 MiB
    peaks = []
    for i in range(12):
        x = h.to(TPU)
        y = x * 2 + i
        back = y.cpu()
        assert back[7].item() == 14 + i and back[-1].item() == h[-1].item() * 2 + i
        peaks.append(_rss_mib())
        del x, y, back
    del h
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    # each step held >= 1 GiB; what malloc kept is given back (PJRT frees a
    # buffer on its own threads, so one may land after the trim)
    assert _rss_mib() < max(peaks) - 512, (base, peaks, _rss_mib())


def test_memory_allocated_counts_empty_tensors_as_cuda():
    def held(nbytes):  # a fill's scalar may join the engine's small scalar cache (a few bytes)
        torch.tpu.synchronize()
        return 0 <= torch.tpu.memory_allocated() - base - nbytes < 64

    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.empty(1 << 20, device=TPU)  # no buffer yet, but held, as a CUDA allocation
    assert torch.tpu.memory_allocated() - base == 4 << 20
    x.fill_(1.0)
    assert held(4 << 20)
    del x
    assert held(0)
    m = torch.nn.Linear(256, 128).to_empty(device=TPU)
    assert held((256 * 128 + 128) * 4)
    torch.nn.init.zeros_(m.weight)
    assert held((256 * 128 + 128) * 4)
    st = torch.empty(64, device=TPU).untyped_storage()
    st.resize_(0)
    del m
    assert held(0)
    st.resize_(1024)
    assert held(1024)
    del st
    assert held(0)


def test_storage_resize_releases_and_reallocates():
    x = torch.arange(1 << 16, dtype=torch.float32, device=TPU) + 1  # 256 KiB
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    st = x.untyped_storage()
    st.resize_(0)
    assert st.nbytes() == 0
    assert base - torch.tpu.memory_allocated() >= (1 << 16) * 4
    st.resize_((1 << 16) * 4)  # re-allocated, as FSDP2 does before the all-gather
    x.copy_(torch.full((1 << 16,), 2.0))
    assert x.sum().item() == 2.0 * (1 << 16)


def test_storage_resize_keeps_prefix_and_aliases():
    x = torch.arange(6, dtype=torch.float32, device=TPU)
    v = x[2:4]
    x.resize_(10)  # grows the storage in place
    assert torch.equal(x[:6].cpu(), torch.arange(6, dtype=torch.float32))
    x[3] = 30.0
    assert v.cpu().tolist() == [2.0, 30.0]
    s = torch.UntypedStorage(16, device=TPU)
    assert s.device.type == "tpu" and s.nbytes() == 16
    t = torch.tensor([], device=TPU).set_(s).view(torch.float32)
    assert t.cpu().tolist() == [0.0] * 4


def test_set_past_the_storage_grows_it_as_cpu():
    s = torch.arange(4.0, device=TPU).untyped_storage()
    t = torch.empty(0, device=TPU).set_(s, 0, (10,), (1,))  # crashed in the CPU kernel's host copy
    c = torch.empty(0).set_(torch.arange(4.0).untyped_storage(), 0, (10,), (1,))
    assert s.nbytes() == c.untyped_storage().nbytes() == 40
    assert torch.equal(t[:4].cpu(), c[:4])
    t2 = torch.empty(0, device=TPU).set_(t)  # the Tensor overload shares the storage
    t2[0] = 7.0
    assert t[0].item() == 7.0 and t2.untyped_storage().data_ptr() == s.data_ptr()


def test_view_of_shrunken_storage_raises():
    x = torch.arange(10.0, device=TPU)
    v = x[5:]
    x.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="out of bounds for storage"):
        (v + 1).cpu()


def test_out_of_memory_is_torch_oom_and_recovers():
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 4.00 TiB"):
        z = torch.zeros(1 << 40, device=TPU)  # kept: its buffer must exist
        z[-1].item()
    torch.tpu.set_per_process_memory_fraction(1e-6)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
            o = torch.ones(1 << 22, device=TPU)
            o[-1].item()
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.ones(1 << 22, device=TPU).sum().item() == float(1 << 22)


# ---- pinned memory ------------------------------------------------------------------------


def test_pinned_memory_and_non_blocking_copy():
    x = torch.randn(1000, 100)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    y = p.to(TPU, non_blocking=True)
    z = p[10:20].to(TPU, non_blocking=True)
    del p  # freed while the copy may still read it: held until done
    torch.tpu.synchronize()
    assert torch.equal(y.cpu(), x) and torch.equal(z.cpu(), x[10:20])


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.randn(12, 3), torch.arange(12))
    seen = 0
    for xb, yb in torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True):
        assert xb.is_pinned() and yb.is_pinned()
        out = xb.to(TPU, non_blocking=True) * 2
        torch.testing.assert_close(out.cpu(), xb * 2)
        seen += len(yb)
    assert seen == 12


# ---- torch.tpu mirrors torch.cuda -----------------------------------------------------------


def test_torch_tpu_api():
    assert torch.tpu.is_available() and torch.tpu.device_count() >= 1
    assert torch.tpu.is_bf16_supported()
    props = torch.tpu.get_device_properties(0)
    assert props.total_memory > 0 and isinstance(props.name, str)
    assert torch.tpu.get_device_name() == props.name
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    assert torch.accelerator.current_accelerator().type == "tpu"
    with torch.tpu.amp.autocast():
        y = torch.mm(torch.ones(2, 2, device=TPU), torch.ones(2, 2, device=TPU))
    assert y.dtype == torch.bfloat16
    assert torch.ones(1).tpu().device.type == "tpu" and torch.ones(1, device=TPU).is_tpu
    with pytest.raises(RuntimeError):
        torch.tpu.set_device(torch.tpu.device_count())


def test_device_index_out_of_range_raises_everywhere():
    n = torch.tpu.device_count()
    before = torch.accelerator.current_device_index()
    for set_index in (torch.accelerator.set_device_index, torch.tpu.set_device):
        with pytest.raises(RuntimeError, match="Invalid device index"):
            set_index(n)
    with pytest.raises(RuntimeError, match="Invalid device index"):
        with torch.accelerator.device_index(n + 1):
            pass
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.Stream(device=f"tpu:{n + 1}")
    assert torch.accelerator.current_device_index() == before
    assert torch.ones(1, device=TPU).device.index == before


def test_accelerator_device_capability():
    cap = torch.accelerator.get_device_capability("tpu:0")
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64):
        assert dt in cap["supported_dtypes"]
    assert torch.qint8 not in cap["supported_dtypes"]


def test_dlpack_round_trip_shares_the_tensor():
    x = torch.randn(4, 3).to(TPU)
    for src in (x, x[1:], x.t()):
        y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(src))
        assert y.device == src.device and y.data_ptr() == src.data_ptr()
        torch.testing.assert_close(y.cpu(), src.cpu())
        torch.testing.assert_close((y * 2).cpu(), src.cpu() * 2)
    y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    y.add_(1)  # the same memory: x sees it, as on CUDA
    torch.testing.assert_close(x.cpu(), y.cpu())


def test_pickle_and_legacy_save_round_trip():
    import io
    import pickle
    t = torch.randn(3, 4, device=TPU)
    u = pickle.loads(pickle.dumps(t))
    assert u.device == t.device and torch.equal(u.cpu(), t.cpu())
    buf = io.BytesIO()
    torch.save({"a": t, "row": t[1]}, buf, _use_new_zipfile_serialization=False)
    buf.seek(0)
    d = torch.load(buf)
    assert d["a"].device == t.device and torch.equal(d["a"].cpu(), t.cpu()) and torch.equal(d["row"].cpu(), t[1].cpu())


_FORK = r"""
import multiprocessing as mp, torch
def child(q):
    out = [torch.tpu._is_in_bad_fork()]
    for fn in (torch.tpu.init, lambda: (torch.ones(3, device="tpu") + 1).cpu(), torch.tpu.synchronize):
        try:
            fn()
            out.append("no error")
        except RuntimeError as e:
            out.append(str(e).split(".")[0])
    out.append((torch.ones(2) + 1).sum().item())
    q.put(out)
if __name__ == "__main__":
    x = torch.ones(3, device="tpu") * 2
    print("parent", torch.tpu._is_in_bad_fork())
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("child", q.get(timeout=60))
    p.join(60)
    print("exit", p.exitcode, (x + 1).sum().item())
"""


def test_forked_child_raises_instead_of_hanging():
    r = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "parent False" in r.stdout
    msg = "Cannot re-initialize tpu in forked subprocess"
    assert f"child [True, '{msg}', '{msg}', '{msg}', 4.0]" in r.stdout, r.stdout
    assert "exit 0 9.0" in r.stdout


# ---- lazy start ----------------------------------------------------------------------------

_LAZY = r"""
import torch, torch_tpu
from torch_tpu import _C
maps = open("/proc/self/maps").read()
print("started", _C.initialized(), "plugin_loaded", "xla_cpu_pjrt" in maps, "tpu", torch.tpu.is_available())
torch.manual_seed(1)
print("after_seed", _C.initialized())
x = torch.ones(2, device="tpu")
print("after_use", _C.initialized(), "xla_cpu_pjrt" in open("/proc/self/maps").read(), x.sum().item())
"""


def test_plugin_loads_on_first_use_not_at_import():
    r = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "started False plugin_loaded False tpu True" in r.stdout
    assert "after_seed False" in r.stdout
    assert "after_use True True 2.0" in r.stdout
