"""The ops Transformers reaches on tpu that used to run through the CPU
fallback, on the device and against PyTorch CPU: nonzero (one count read),
nonzero_static (none), argwhere / where(cond) / boolean-mask indexing,
linalg_cholesky_ex with LAPACK's info (torch.distributions'
positive-definite check), multinomial with a seeded tpu generator, and SDPA
with enable_gqa=True (grouped-query attention)."""
import pytest
import torch
import torch.nn.functional as F

from hf_util import T, no_fallback


def _mask_inputs():
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(7, generator=g).gt(0.3),
        torch.randint(0, 3, (4, 5), generator=g).float(),
        torch.randint(0, 2, (2, 3, 4), generator=g),
        torch.randint(0, 2, (3, 2, 2, 3), generator=g).to(torch.uint8),
        torch.zeros(3, 3),
        torch.ones(2, 2, dtype=torch.bool),
        torch.tensor(2.5),
        torch.tensor(0),
        torch.tensor([float("nan"), 0.0, -0.0, 1.0]),
        torch.empty(0, 3),
    ]


@pytest.mark.parametrize("i", range(10))
def test_nonzero_matches_cpu(i):
    x = _mask_inputs()[i]
    with no_fallback():
        got = torch.nonzero(x.to(T))
        tup = torch.nonzero(x.to(T), as_tuple=True)
        arg = torch.argwhere(x.to(T))
    ref = torch.nonzero(x)
    assert got.device.type == "tpu" and got.dtype == torch.long and got.is_contiguous()
    assert got.shape == ref.shape and torch.equal(got.cpu(), ref)
    assert torch.equal(arg.cpu(), torch.argwhere(x))
    for a, b in zip(tup, torch.nonzero(x, as_tuple=True)):
        assert torch.equal(a.cpu(), b)
    out = torch.full((1, 1), 7, dtype=torch.long, device=T)
    torch.nonzero(x.to(T), out=out)
    assert torch.equal(out.cpu(), ref)


@pytest.mark.parametrize("size,fill", [(0, -1), (2, -1), (5, 9), (40, -3)])
@pytest.mark.parametrize("i", [1, 2, 4, 6, 9])
def test_nonzero_static_matches_cpu_without_a_host_read(i, size, fill):
    x = _mask_inputs()[i]
    with no_fallback():
        got = torch.nonzero_static(x.to(T), size=size, fill_value=fill)
    assert torch.equal(got.cpu(), torch.nonzero_static(x, size=size, fill_value=fill))


def test_nonzero_static_bad_size_raises_as_cpu():
    with pytest.raises(RuntimeError, match="nonzero_static: 'size' must be an non-negative integer"):
        torch.nonzero_static(torch.ones(3, device=T), size=-1)


def test_boolean_mask_indexing_uses_the_device_nonzero():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=g)
    m = x > 0
    with no_fallback():
        xt, mt = x.to(T), m.to(T)
        sel = xt[mt]
        rows = xt[mt[:, 0]]
        y = xt.clone()
        y[mt] = torch.arange(int(m.sum()), dtype=torch.float32, device=T)
        ms = torch.masked_select(xt, mt)
    assert torch.equal(sel.cpu(), x[m]) and torch.equal(rows.cpu(), x[m[:, 0]]) and torch.equal(ms.cpu(), x[m])
    ref = x.clone()
    ref[m] = torch.arange(int(m.sum()), dtype=torch.float32)
    assert torch.equal(y.cpu(), ref)


def test_nonzero_program_depends_on_the_shape_only():
    """Masks of one shape with different counts reuse nonzero's one compiled
    program (the count is a value, not a shape; what consumes the result
    sees its own shape, as on any device)."""
    masks = []
    for k in range(6):
        m = torch.zeros(16)
        m[:k * 3] = 1
        masks.append(m.to(T))
    torch.tpu.synchronize()
    torch.nonzero(masks[0])
    start = torch.tpu.cache_stats()["mem_misses"]
    got = [torch.nonzero(masks[k]) for k in range(1, 6)]
    assert torch.tpu.cache_stats()["mem_misses"] == start
    for k, r in enumerate(got, 1):
        assert torch.equal(r.cpu(), torch.arange(k * 3).unsqueeze(1))


def _spd(batch, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch,n", [((), 1), ((), 5), ((3,), 4), ((2, 2), 6), ((0,), 3), ((), 0)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex_matches_cpu(dtype, batch, n, upper):
    a = _spd(batch, n, dtype)
    a = a + torch.triu(torch.ones_like(a), 1) * (0.5 if upper else 0)  # upper=False must read the lower triangle
    a = a + torch.tril(torch.ones_like(a), -1) * (0.0 if upper else 0.5)  # and upper=True the upper one
    ref_l, ref_info = torch.linalg.cholesky_ex(a, upper=upper)
    with no_fallback():
        l, info = torch.linalg.cholesky_ex(a.to(T), upper=upper)
        l2 = torch.linalg.cholesky(a.to(T), upper=upper)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(l.cpu(), ref_l, atol=tol, rtol=tol)
    torch.testing.assert_close(l2.cpu(), ref_l, atol=tol, rtol=tol)
    assert info.dtype == torch.int32 and torch.equal(info.cpu(), ref_info)


def test_cholesky_ex_info_names_the_first_failing_minor_per_matrix():
    a = torch.stack([_spd((), 4, torch.float64), _spd((), 4, torch.float64, 1), _spd((), 4, torch.float64, 2),
                     torch.full((4, 4), float("nan"), dtype=torch.float64)])
    a[1, 2, 2] = -50.0  # minor of order 3 fails
    a[2, 0, 0] = 0.0  # order 1
    ref = torch.linalg.cholesky_ex(a).info
    assert ref.tolist() == [0, 3, 1, 1]
    with no_fallback():
        info = torch.linalg.cholesky_ex(a.to(T)).info
    assert torch.equal(info.cpu(), ref)
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\).*leading minor of order 3"):
        torch.linalg.cholesky_ex(a.to(T), check_errors=True)
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 3 is not positive-definite"):
        torch.linalg.cholesky(a[1].to(T))


def test_positive_definite_constraint_as_transformers_uses_it():
    """Transformers' resize_token_embeddings checks the covariance with
    torch.distributions.constraints.positive_definite (cholesky_ex info)."""
    from torch.distributions import constraints

    good = _spd((), 6, torch.float32)
    bad = good.clone()
    bad[3, 3] = -1.0
    with no_fallback():
        got = [bool(constraints.positive_definite.check(m.to(T)).all()) for m in (good, bad)]
    assert got == [True, False]


def test_cholesky_ex_bad_input_raises_as_cpu():
    for x, msg in [(torch.ones(3), "at least 2 dimensions"), (torch.ones(2, 3), "2 by 3 matrices"),
                   (torch.ones(2, 2, dtype=torch.long), "Expected a floating point or complex tensor as input. Got Long")]:
        with pytest.raises(RuntimeError, match=msg):
            torch.linalg.cholesky_ex(x.to(T))


def test_multinomial_with_a_seeded_tpu_generator_is_reproducible_and_on_device():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(3, 40, generator=g), -1).to(T)
    with no_fallback():
        a = torch.multinomial(probs, 5, generator=torch.Generator(device="tpu").manual_seed(7)).cpu()
        b = torch.multinomial(probs, 5, generator=torch.Generator(device="tpu").manual_seed(7)).cpu()
        c = torch.multinomial(probs, 5, generator=torch.Generator(device="tpu").manual_seed(8)).cpu()
        gen = torch.Generator(device="tpu").manual_seed(7)
        d1 = torch.multinomial(probs, 1, replacement=True, generator=gen).cpu()
        state = gen.get_state()
        d2 = torch.multinomial(probs, 1, replacement=True, generator=gen).cpu()
        gen.set_state(state)
        d3 = torch.multinomial(probs, 1, replacement=True, generator=gen).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(d2, d3) and d1.shape == (3, 1)
    for row in a:  # without replacement: distinct categories
        assert len(set(row.tolist())) == 5


@pytest.mark.parametrize("causal,mask", [(True, False), (False, True)])
def test_sdpa_enable_gqa_matches_cpu_with_gradients(causal, mask):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 5, 16, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 5, 16, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 5, 16, generator=g, requires_grad=True)
    m = torch.randn(2, 1, 5, 5, generator=g) > -0.5 if mask else None
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=True)
    ref.square().sum().backward()
    qt, kt, vt = [t.detach().to(T).requires_grad_() for t in (q, k, v)]
    with no_fallback():
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=None if m is None else m.to(T), is_causal=causal,
                                             enable_gqa=True)
        out.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for a, b in ((qt, q), (kt, k), (vt, v)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4)
