"""Sparse COO tensors on tpu (torch_tpu/ops/sparse.py) against the same
program on CPU: construction, to_dense / to_sparse, coalesce, sparse x
dense products with gradients, and nn.Embedding(sparse=True) trained with
the optimizers that take sparse gradients."""
import pytest
import torch
from op_compare import no_fallback

T = torch.device("tpu")


def _coo(dense_dims=(), seed=0, dup=True):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, 5, (9,), generator=g), torch.randint(0, 4, (9,), generator=g)])
    if dup:
        idx[:, 1] = idx[:, 0]  # a duplicate index: uncoalesced
    vals = torch.randn(9, *dense_dims, generator=g)
    return torch.sparse_coo_tensor(idx, vals, (5, 4, *dense_dims), check_invariants=False)


def _same_sparse(t, c):
    assert t.device.type == "tpu" and t.layout == torch.sparse_coo
    assert t.shape == c.shape and t.dtype == c.dtype and t.is_coalesced() == c.is_coalesced()
    torch.testing.assert_close(t.cpu().to_dense(), c.to_dense())


@pytest.mark.parametrize("dense_dims", [(), (3,)])
def test_construct_to_dense_coalesce(dense_dims):
    c = _coo(dense_dims)
    t = no_fallback(lambda: torch.sparse_coo_tensor(c._indices().to(T), c._values().to(T), c.shape,
                                                   check_invariants=False))
    assert (t.sparse_dim(), t.dense_dim(), t._nnz()) == (c.sparse_dim(), c.dense_dim(), c._nnz())
    torch.testing.assert_close(no_fallback(t.to_dense).cpu(), c.to_dense())
    tc, cc = no_fallback(t.coalesce), c.coalesce()
    _same_sparse(tc, cc)
    assert torch.equal(tc._indices().cpu(), cc._indices())
    torch.testing.assert_close(tc._values().cpu(), cc._values())
    _same_sparse(c.to(T), c)  # a CPU sparse tensor moved over, and back
    _same_sparse(torch.sparse_coo_tensor(c._indices(), c._values(), c.shape, device=T, check_invariants=False), c)


@pytest.mark.parametrize("sparse_dim", [None, 1, 2])
def test_to_sparse(sparse_dim):
    x = torch.randn(4, 3, 2)
    x[1] = 0
    x[2, 1] = 0
    f = (lambda t: t.to_sparse()) if sparse_dim is None else (lambda t: t.to_sparse(sparse_dim))
    got, want = no_fallback(lambda: f(x.to(T))), f(x)
    _same_sparse(got, want)
    assert torch.equal(got._indices().cpu(), want._indices())


def test_sparse_mm_and_addmm_with_gradients():
    s = _coo()
    w = torch.randn(4, 6)
    bias = torch.randn(5, 6)
    for fn in (lambda a, b, c: torch.sparse.mm(a, b), lambda a, b, c: torch.mm(a, b), lambda a, b, c: a @ b,
               lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0)):
        wc, wt = w.clone().requires_grad_(), w.to(T).requires_grad_()
        bc, bt = bias.clone().requires_grad_(), bias.to(T).requires_grad_()
        want = fn(s, wc, bc)
        got = no_fallback(lambda: fn(s.to(T), wt, bt))
        torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
        want.square().sum().backward()
        no_fallback(lambda: got.square().sum().backward())
        torch.testing.assert_close(wt.grad.cpu(), wc.grad, atol=1e-4, rtol=1e-5)
        if bc.grad is not None:
            torch.testing.assert_close(bt.grad.cpu(), bc.grad, atol=1e-4, rtol=1e-5)


def test_dense_plus_sparse_and_sparse_mask():
    s, d = _coo(), torch.randn(5, 4)
    torch.testing.assert_close(no_fallback(lambda: d.to(T) + s.to(T)).cpu(), d + s)
    torch.testing.assert_close(no_fallback(lambda: torch.add(d.to(T), s.to(T), alpha=-0.5)).cpu(),
                               torch.add(d, s, alpha=-0.5))
    dt = d.to(T)
    no_fallback(lambda: dt.add_(s.to(T), alpha=3))
    torch.testing.assert_close(dt.cpu(), d.add(s, alpha=3))
    m = s.coalesce()
    _same_sparse(no_fallback(lambda: d.to(T).sparse_mask(m.to(T))), d.sparse_mask(m))


def test_other_sparse_ops_run_through_the_fallback():
    s, s2 = _coo(seed=1), _coo(seed=2)
    _same_sparse((s.to(T) + s2.to(T)).coalesce(), (s + s2).coalesce())
    _same_sparse((s.to(T) * 2.5).coalesce(), (s * 2.5).coalesce())
    torch.testing.assert_close(torch.sparse.sum(s.to(T)).cpu(), torch.sparse.sum(s))


@pytest.mark.parametrize("opt", [torch.optim.SGD, torch.optim.SparseAdam, torch.optim.Adagrad])
def test_sparse_embedding_training_matches_cpu(opt):
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(12, 5, sparse=True)
    dev = torch.nn.Embedding(12, 5, sparse=True)
    dev.load_state_dict(cpu.state_dict())
    dev.to(T)
    oc, ot = opt(cpu.parameters(), lr=0.1), opt(dev.parameters(), lr=0.1)
    for step in range(3):
        idx = torch.tensor([[1, 2, 2, 5], [7, 1, 11, 0]]).roll(step)
        for m, o, i in ((cpu, oc, idx), (dev, ot, idx.to(T))):
            o.zero_grad()
            m(i).pow(2).sum().backward()
            assert m.weight.grad.layout == torch.sparse_coo
            o.step()
        torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach(), atol=1e-6, rtol=1e-5)


def test_bad_input_raises_like_cpu():
    s, d = _coo(), torch.randn(3, 2)
    for dev in ("cpu", T):
        with pytest.raises(RuntimeError, match="Expected dim 0 size 4, got 3"):
            torch.mm(s.to(dev), d.to(dev))
        with pytest.raises(RuntimeError, match="same size"):
            torch.randn(2, 2).to(dev) + s.to(dev)


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_sparse_embedding_bag_gradient_on_device(mode, padding_idx):
    torch.manual_seed(0)
    cpu = torch.nn.EmbeddingBag(10, 3, mode=mode, sparse=True, padding_idx=padding_idx)
    dev = torch.nn.EmbeddingBag(10, 3, mode=mode, sparse=True, padding_idx=padding_idx)
    dev.load_state_dict(cpu.state_dict())
    dev.to(T)
    idx, off, w = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4]), torch.randn(2, 3)
    (cpu(idx, off) * w).sum().backward()
    no_fallback(lambda: (dev(idx.to(T), off.to(T)) * w.to(T)).sum().backward())
    got, want = dev.weight.grad, cpu.weight.grad
    assert got.layout == torch.sparse_coo and got._nnz() == want._nnz()
    torch.testing.assert_close(got.cpu().to_dense(), want.to_dense())
