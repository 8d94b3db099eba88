"""Lazy modules (LazyLinear, LazyConv*d, LazyConvTranspose*d, LazyBatchNorm,
LazyInstanceNorm) on tpu: they materialize on the first forward, train, and
match the same module trained on the CPU.

Two ways in:
  - built on the device (device="tpu"): works today;
  - built on the CPU, then .to("tpu"): needs Module.to to keep the
    UninitializedParameter objects (torch._has_compatible_shallow_copy_type
    True for cpu<->tpu, which the C++ device layer provides; until then the
    TEMPORARY `_shallow_copy_shim` fixture of conftest.py stands in for it)
    and the host->tpu copy to accept an UninitializedParameter (today
    ops/core.py's _to_copy reads `.shape` of the Python subclass, which
    raises).  Those tests are expected to fail while that probe fails, and
    run normally (they must pass) once it does not.
"""
import pytest
import torch

import torch_tpu

T = torch.device("tpu")

# (name, constructor, input shape)
LAZY = [
    ("LazyLinear", lambda **kw: torch.nn.LazyLinear(4, **kw), (3, 5)),
    ("LazyConv1d", lambda **kw: torch.nn.LazyConv1d(4, 3, padding=1, **kw), (2, 3, 7)),
    ("LazyConv2d", lambda **kw: torch.nn.LazyConv2d(4, 3, stride=2, **kw), (2, 3, 7, 6)),
    ("LazyConv3d", lambda **kw: torch.nn.LazyConv3d(2, 2, **kw), (1, 3, 4, 5, 4)),
    ("LazyConvTranspose1d", lambda **kw: torch.nn.LazyConvTranspose1d(3, 3, stride=2, **kw), (2, 2, 5)),
    ("LazyConvTranspose2d", lambda **kw: torch.nn.LazyConvTranspose2d(3, 2, **kw), (1, 2, 4, 4)),
    ("LazyConvTranspose3d", lambda **kw: torch.nn.LazyConvTranspose3d(2, 2, **kw), (1, 2, 3, 3, 3)),
    ("LazyBatchNorm1d", lambda **kw: torch.nn.LazyBatchNorm1d(**kw), (6, 3)),
    ("LazyBatchNorm2d", lambda **kw: torch.nn.LazyBatchNorm2d(**kw), (4, 3, 5, 5)),
    ("LazyInstanceNorm2d", lambda **kw: torch.nn.LazyInstanceNorm2d(affine=True, **kw), (2, 3, 4, 4)),
]


def _moving_a_lazy_module_breaks():
    """True while .to("tpu") of an uninitialized lazy module raises (the
    reason the tests below that need it are expected to fail)."""
    lib = None
    if not torch._has_compatible_shallow_copy_type(torch.empty(1), torch.empty(1, device=T)):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_has_compatible_shallow_copy_type", lambda a, b: True, "PrivateUse1")
    try:
        m = torch.nn.LazyLinear(2).to(T)
        m(torch.randn(1, 3, device=T))
        return False
    except Exception:  # noqa: BLE001 - any failure means "not yet"
        return True
    finally:
        if lib is not None:
            lib._destroy()


MOVE_BROKEN = _moving_a_lazy_module_breaks()
needs_lazy_move = pytest.mark.xfail(
    MOVE_BROKEN, strict=True,
    reason="Module.to('tpu') of an uninitialized lazy module: ops/core.py _to_copy reads .shape of the "
           "UninitializedParameter subclass (raises); waits for the C++ device layer")


def _train_and_compare(m_cpu, m_tpu, shape, steps=3):
    """Materialize both, give the tpu copy the CPU's initial values (the two
    devices draw different random inits), train both, compare."""
    x = torch.randn(*shape)
    m_cpu(x)
    m_tpu(x.to(T))
    for (n, pc), (_, pt) in zip(m_cpu.named_parameters(), m_tpu.named_parameters()):
        assert type(pt) is torch.nn.Parameter, f"{n} is still {type(pt).__name__} after the first forward"
        assert pt.device.type == "tpu" and pt.shape == pc.shape, f"{n}: {pt.device} {tuple(pt.shape)}"
    for (n, bc), (_, bt) in zip(m_cpu.named_buffers(), m_tpu.named_buffers()):
        assert bt.device.type == "tpu" and bt.shape == bc.shape, f"buffer {n}: {bt.device} {tuple(bt.shape)}"
    with torch.no_grad():
        for pc, pt in zip(m_cpu.parameters(), m_tpu.parameters()):
            pt.copy_(pc)
        for bc, bt in zip(m_cpu.buffers(), m_tpu.buffers()):
            bt.copy_(bc)
    oc = torch.optim.SGD(m_cpu.parameters(), lr=0.1, momentum=0.9)
    ot = torch.optim.SGD(m_tpu.parameters(), lr=0.1, momentum=0.9)
    fb = torch_tpu.fallback_counts()
    for _ in range(steps):
        x = torch.randn(*shape)
        for m, o, dev in ((m_cpu, oc, "cpu"), (m_tpu, ot, T)):
            o.zero_grad()
            y = m(x.to(dev))
            y.pow(2).mean().backward()
            o.step()
    for (n, pc), (_, pt) in zip(m_cpu.named_parameters(), m_tpu.named_parameters()):
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), atol=1e-5, rtol=1e-4, msg=n)
    for (n, bc), (_, bt) in zip(m_cpu.named_buffers(), m_tpu.named_buffers()):
        torch.testing.assert_close(bt.cpu(), bc, atol=1e-5, rtol=1e-4, msg=f"buffer {n}")
    assert torch_tpu.fallback_counts() == fb, "an op fell back to the CPU"
    # and back to the CPU: same state
    back = m_tpu.cpu()
    for (n, pc), (_, pb) in zip(m_cpu.named_parameters(), back.named_parameters()):
        assert pb.device.type == "cpu"
        torch.testing.assert_close(pb.detach(), pc.detach(), atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("name,make,shape", LAZY, ids=[n for n, _, _ in LAZY])
def test_lazy_module_built_on_tpu_materializes_and_trains(name, make, shape):
    torch.manual_seed(0)
    m_cpu = make()
    m_tpu = make(device=T)
    assert all(isinstance(p, torch.nn.UninitializedParameter) for p in m_tpu.parameters())
    _train_and_compare(m_cpu, m_tpu, shape)


@needs_lazy_move
@pytest.mark.parametrize("name,make,shape", LAZY, ids=[n for n, _, _ in LAZY])
def test_lazy_module_moved_to_tpu_materializes_and_trains(_shallow_copy_shim, name, make, shape):
    torch.manual_seed(0)
    m_cpu = make()
    m_tpu = make().to(T)
    for p in m_tpu.parameters():
        assert isinstance(p, torch.nn.UninitializedParameter) and p.device.type == "tpu"
    _train_and_compare(m_cpu, m_tpu, shape)


@needs_lazy_move
def test_lazy_model_in_sequential_moved_then_trained(_shallow_copy_shim):
    torch.manual_seed(1)

    def make():
        return torch.nn.Sequential(torch.nn.LazyConv2d(4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.LazyLinear(5))

    _train_and_compare(make(), make().to(T), (2, 3, 6, 6))


def test_lazy_module_state_dict_loads_into_tpu_module():
    """A lazy module on tpu takes its shapes and values from a CPU state dict
    (load_state_dict materializes it)."""
    torch.manual_seed(2)
    src = torch.nn.Linear(3, 4)
    m = torch.nn.LazyLinear(4, device=T)
    m.load_state_dict(src.state_dict())
    assert m.weight.device.type == "tpu"
    x = torch.randn(2, 3)
    torch.testing.assert_close(m(x.to(T)).cpu(), src(x), atol=1e-6, rtol=1e-5)
