"""torch.compile(backend="tpu"): graphs run as one fused program each and
match eager CPU by value and gradient."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def _models():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    ref = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    ref.load_state_dict(m.state_dict())
    return m.to("tpu"), ref


def test_compiled_training_matches_cpu():
    torch._dynamo.reset()
    m, ref = _models()
    cm = torch.compile(m, backend="tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for i in range(6):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(cm(x.to("tpu")), y.to("tpu"))
        loss.backward()
        opt.step()
        ropt.zero_grad()
        rloss = F.cross_entropy(ref(x), y)
        rloss.backward()
        ropt.step()
        torch.testing.assert_close(loss.cpu(), rloss, rtol=1e-4, atol=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_compiled_forward_is_one_program_and_compiles_once():
    torch._dynamo.reset()
    m, ref = _models()
    cm = torch.compile(m, backend="tpu")
    x = torch.randn(4, 6)
    with torch.no_grad():
        cm(x.to("tpu")).cpu()
        cm(x.to("tpu")).cpu()
        xt = x.to("tpu")
        torch.tpu.synchronize()
        s0 = torch.tpu.cache_stats()
        out = cm(xt)
        torch.tpu.synchronize()
        s1 = torch.tpu.cache_stats()
    assert s1["executions"] - s0["executions"] == 1
    assert s1["mem_misses"] == s0["mem_misses"]
    torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-4, atol=1e-5)


def test_default_backend_trains_on_tpu_as_on_cpu():
    """torch.compile(model) unchanged from a CUDA program: graphs on tpu go to
    the tpu backend (Inductor's own "tpu" code generator needs JAX)."""
    torch._dynamo.reset()
    m, ref = _models()
    cm = torch.compile(m)  # default backend
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(cm(x.to("tpu")), y.to("tpu"))
        loss.backward()
        opt.step()
        ropt.zero_grad()
        rloss = F.cross_entropy(ref(x), y)
        rloss.backward()
        ropt.step()
        torch.testing.assert_close(loss.cpu(), rloss, rtol=1e-4, atol=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_default_backend_graph_that_makes_tpu_tensors_from_cpu_inputs():
    torch._dynamo.reset()
    f = torch.compile(lambda a: torch.sin(a.to("tpu")) * 2 + torch.ones(3, device="tpu"))
    a = torch.randn(3)
    out = f(a)
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), torch.sin(a) * 2 + 1)


def test_default_backend_routes_only_tpu_graphs():
    from torch_tpu._compile import graph_touches_tpu
    seen = []

    def spy(gm, inputs):
        seen.append(graph_touches_tpu(gm, inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda a: a * 2, backend=spy)(torch.ones(2))
    torch.compile(lambda a: a * 2, backend=spy)(torch.ones(2, device="tpu"))
    torch.compile(lambda a: a.to("tpu") + 1, backend=spy)(torch.ones(2))
    assert seen == [False, True, True]


@pytest.mark.parametrize("kw", [{}, {"mode": "reduce-overhead"}, {"dynamic": False}, {"dynamic": None},
                                {"mode": "max-autotune"}], ids=str)
def test_default_backend_with_graph_breaks_modes_and_new_shapes(kw):
    def f(a, b):
        x = torch.relu(a @ b)
        torch._dynamo.graph_break()
        return (x * 2).sum(1)

    torch._dynamo.reset()
    g = torch.compile(f, **kw)
    b = torch.randn(5, 3)
    for n in (4, 6):  # a second shape: recompiled (dynamic=None: symbolic)
        a = torch.randn(n, 5)
        torch.testing.assert_close(g(a.to("tpu"), b.to("tpu")).cpu(), f(a, b))


def test_default_backend_fullgraph():
    torch._dynamo.reset()
    h = torch.compile(lambda a: torch.tanh(a) + 1, fullgraph=True)
    a = torch.randn(4, 5)
    torch.testing.assert_close(h(a.to("tpu")).cpu(), torch.tanh(a) + 1)
