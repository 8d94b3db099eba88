"""Indexing kernels on tpu vs CPU, by value and by gradient."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

T = torch.device("tpu")


def mode():
    return torch.tpu.get_eager_mode()


def _to(a, dev):
    if isinstance(a, torch.Tensor):
        return a.detach().to(dev)
    if isinstance(a, (list, tuple)):
        return type(a)(_to(x, dev) for x in a)
    return a


def _compare(fn, *args, grad=True):
    """Values equal (exactly: indexing moves data), then gradients of
    sum(out * r) equal for every float tensor argument."""
    cpu = [_to(a, "cpu") for a in args]
    tpu = [_to(a, T) for a in args]
    if grad:
        for a in cpu + tpu:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                a.requires_grad_()
    oc, ot = fn(*cpu), fn(*tpu)
    assert ot.device.type == "tpu"
    torch.testing.assert_close(ot.cpu(), oc, atol=1e-6, rtol=1e-6, equal_nan=True)
    if grad and oc.requires_grad:
        r = torch.randn(oc.shape, dtype=oc.dtype)
        oc.backward(r)
        ot.backward(r.to(T))
        for c, t in zip(cpu, tpu):
            if isinstance(c, torch.Tensor) and c.requires_grad:
                torch.testing.assert_close(t.grad.cpu(), c.grad, atol=1e-5, rtol=1e-5)


def test_cat_stack_promotion_and_grad():
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    _compare(lambda a, b: torch.cat([a, b, a]), a, b)
    _compare(lambda a, b: torch.cat([a, b.t()[:2]], dim=1), a, b)
    _compare(lambda a: torch.stack([a, a * 2], dim=-1), a)
    _compare(lambda a: torch.cat([a, torch.empty(0, device=a.device)]), a)
    out = torch.cat([torch.ones(2, device=T, dtype=torch.int64), torch.ones(1, device=T, dtype=torch.float64)])
    assert out.dtype == torch.float64
    many = [torch.full((1,), float(i)) for i in range(150)]
    torch.testing.assert_close(torch.cat([m.to(T) for m in many]).cpu(), torch.cat(many))


def test_cat_errors():
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([torch.randn(2, 3, device=T), torch.randn(2, 4, device=T)])


def test_index_select_gather_take():
    x = torch.randn(5, 4, 3)
    _compare(lambda x: x.index_select(1, torch.tensor([3, 0, 0], device=x.device)), x)
    _compare(lambda x: x.index_select(0, torch.tensor(2, device=x.device)), x)
    idx = torch.randint(0, 4, (5, 2, 3))
    _compare(lambda x: x.gather(1, idx.to(x.device)), x)
    _compare(lambda x: torch.take_along_dim(x, idx.to(x.device), dim=1), x)
    _compare(lambda x: x.take(torch.tensor([[0, -1], [7, 59]], device=x.device)), x)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_variants():
    x = torch.randn(3, 5)
    idx = torch.tensor([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])
    src = torch.randn(2, 5)
    _compare(lambda x, s: x.scatter(0, idx.to(x.device), s), x, src, grad=False)
    _compare(lambda x: x.scatter(1, idx.to(x.device)[:, :2], 2.5), x, grad=False)
    _compare(lambda x, s: x.scatter_add(0, idx.to(x.device), s), x, src)
    _compare(lambda x, s: x.scatter(0, idx.to(x.device), s, reduce="add"), x, src, grad=False)
    _compare(lambda x, s: x.scatter(0, idx.to(x.device), s, reduce="multiply"), x, src, grad=False)
    y = x.clone().to(T)
    y.scatter_(0, idx.to(T), src.to(T))
    torch.testing.assert_close(y.cpu(), x.scatter(0, idx, src))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = torch.randn(4, 3)
    idx = torch.tensor([[0, 1, 0], [0, 3, 3], [1, 1, 0]])
    src = torch.randn(3, 3)
    _compare(lambda x, s: x.scatter_reduce(0, idx.to(x.device), s, reduce, include_self=include_self), x, src,
             grad=reduce in ("sum", "mean"))
    xi = torch.randint(-20, 20, (4, 3))
    si = torch.randint(-20, 20, (3, 3))
    _compare(lambda x, s: x.scatter_reduce(0, idx.to(x.device), s, reduce, include_self=include_self), xi, si,
             grad=False)


@pytest.mark.parametrize("key", [
    "[idx]", "[:, idx]", "[idx, idx2]", "[idx, :, idx2]", "[..., idx]", "[None, idx]", "[idx2d]",
    "[1:, idx]", "[neg]", "[mask]", "[:, mask4]", "[mask34]"])
def test_advanced_index_and_grad(key):
    x = torch.randn(3, 4, 5)
    env = dict(idx=torch.tensor([2, 0, 2]), idx2=torch.tensor([1, 3, 0]), idx2d=torch.tensor([[0, 1], [2, 2]]),
               neg=torch.tensor([-1, -3]), mask=torch.tensor([True, False, True]),
               mask4=torch.tensor([False, True, True, False]), mask34=torch.rand(3, 4) > 0.5)

    def fn(x):
        e = {k: v.to(x.device) for k, v in env.items()}
        return eval("x" + key, {}, dict(x=x, **e))

    _compare(fn, x)


def test_index_with_cpu_index_tensor():
    x = torch.randn(4, 3)
    torch.testing.assert_close(x.to(T)[torch.tensor([3, 1])].cpu(), x[torch.tensor([3, 1])])


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = torch.randn(4, 3)
    v = torch.randn(3, 3)
    idx = torch.tensor([1, 3, 1] if accumulate else [1, 3, 0])
    _compare(lambda x, v: x.index_put((idx.to(x.device),), v, accumulate=accumulate), x, v)
    _compare(lambda x, v: x.index_put((idx.to(x.device), torch.tensor([0, 2, 2], device=x.device)), v[0],
                                      accumulate=accumulate), x, v)
    y = x.to(T)
    y.index_put_((idx.to(T),), torch.tensor(2.0), accumulate=accumulate)
    torch.testing.assert_close(y.cpu(), x.clone().index_put_((idx,), torch.tensor(2.0), accumulate=accumulate))


def test_setitem_forms():
    for fn in (lambda a: a.__setitem__(a > 0, 0.0),
               lambda a: a.__setitem__((slice(None), torch.tensor([0, 2], device=a.device)), 7.0),
               lambda a: a.__setitem__(a[:, 0] > 0, torch.arange(3.0, device=a.device)),
               lambda a: a.__setitem__(torch.tensor([1, 1], device=a.device), -1.0)):
        x = torch.randn(4, 3)
        xc, xt = x.clone(), x.to(T)
        view = xt[1:]  # an alias must see the write
        fn(xc)
        fn(xt)
        torch.testing.assert_close(xt.cpu(), xc)
        torch.testing.assert_close(view.cpu(), xc[1:])


def test_masked_select():
    x = torch.randn(3, 4)
    _compare(lambda x: torch.masked_select(x, x > 0.2), x)
    _compare(lambda x: torch.masked_select(x, torch.tensor([True, False, True, True], device=x.device)), x)


def test_embedding_style_index_add_copy_fill():
    x = torch.randn(5, 3)
    idx = torch.tensor([4, 0, 4])
    _compare(lambda x, s: x.index_add(0, idx.to(x.device), s, alpha=0.5), x, torch.randn(3, 3))
    _compare(lambda x, s: x.index_copy(0, torch.tensor([4, 0, 1], device=x.device), s), x, torch.randn(3, 3))
    _compare(lambda x: x.index_fill(1, torch.tensor([2, 0], device=x.device), -3.0), x)


@pytest.mark.parametrize("k", [-2, 0, 1, 3])
def test_tril_triu(k):
    x = torch.randn(2, 4, 5)
    _compare(lambda x: x.tril(k), x)
    _compare(lambda x: x.triu(k), x)
    y = x.to(T)
    y.triu_(k)
    torch.testing.assert_close(y.cpu(), x.triu(k))


def test_flip_roll_repeat_pad():
    x = torch.randn(3, 4, 2)
    _compare(lambda x: x.flip(0, -1), x)
    _compare(lambda x: x.roll(5), x)
    _compare(lambda x: x.roll((1, -6), (0, 1)), x)
    _compare(lambda x: x.repeat(2, 1, 1, 3), x)
    _compare(lambda x: F.pad(x, (1, 2, 0, -1), value=0.5), x)
    _compare(lambda x: F.pad(x, (2, 2, 1, 1, 1, 0)), x)


def test_out_of_range_index():
    """A device-side check: raised at the read (at the op in debug mode), as
    on CPU; tests/python/test_device_checks.py covers every indexing op."""
    x = torch.randn(5, device=T)
    bad = torch.tensor([0, 7], device=T)
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
        x[bad].cpu()
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, bad).cpu()


def test_bad_index_dtype():
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        torch.randn(3, device=T)[torch.tensor([0.0], device=T)]


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_and_take_backward(accumulate):
    x = torch.randn(3, 4)
    idx = torch.tensor([[0, -1], [5, 5]]) if accumulate else torch.tensor([[0, -1], [5, 6]])
    _compare(lambda x, s: x.put(idx.to(x.device), s, accumulate=accumulate), x, torch.randn(2, 2))
    _compare(lambda x: x.take(idx.to(x.device)), x)


def test_masked_scatter_and_masked_select_backward():
    x = torch.randn(3, 4)
    mask = torch.rand(3, 4) > 0.4
    _compare(lambda x, s: x.masked_scatter(mask.to(x.device), s), x, torch.randn(12))
    _compare(lambda x: torch.masked_select(x, mask.to(x.device)), x)


def test_tensor_unfold_backward():
    from op_compare import compare
    compare(lambda x: x.unfold(1, 3, 2), torch.randn(3, 10))
    compare(lambda x: x.unfold(0, 2, 1), torch.randn(6, 2, 3))
    compare(lambda x: x.unfold(-1, 4, 5), torch.randn(2, 13))
    compare(lambda x: x.unfold(0, 1, 1), torch.tensor(1.5))
