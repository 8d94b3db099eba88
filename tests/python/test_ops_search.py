"""Kernels of torch_tpu/ops/search.py and linalg.py's grouped_mm (rules in
csrc/ops/search.c and linalg.c) on tpu vs PyTorch CPU, with no CPU
fallback: isin, searchsorted, bucketize, histc, _grouped_mm (+ gradients)."""
import pytest
import torch

import torch_tpu
from op_compare import no_fallback

T = torch.device("tpu")


def _same(t, c):
    assert t.device.type == "tpu" and t.dtype == c.dtype and t.shape == c.shape
    torch.testing.assert_close(t.cpu(), c, atol=0, rtol=0)


@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_cpu_with_promotion_and_invert(invert):
    x = torch.randint(0, 20, (3, 5))
    for test in (torch.tensor([3, 7, 19, 100]), torch.tensor([2.0, 4.5]), torch.tensor([], dtype=torch.long),
                 torch.tensor([[1, 2], [3, 4]])):
        c = torch.isin(x, test, invert=invert)
        _same(no_fallback(lambda: torch.isin(x.to(T), test.to(T), invert=invert)), c)
    _same(no_fallback(lambda: torch.isin(x.to(T), 7)), torch.isin(x, 7))
    _same(no_fallback(lambda: torch.isin(7, x.to(T))), torch.isin(7, x))
    out = torch.empty(0, dtype=torch.bool, device=T)
    torch.isin(x.to(T), torch.tensor([1, 2]).to(T), out=out)
    _same(out, torch.isin(x, torch.tensor([1, 2])))


def test_isin_float_nan_is_never_in():
    x = torch.tensor([1.0, float("nan"), 2.0])
    t = torch.tensor([float("nan"), 2.0])
    _same(no_fallback(lambda: torch.isin(x.to(T), t.to(T))), torch.isin(x, t))


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_1d_and_batched(right):
    seq = torch.tensor([1.0, 2.0, 2.0, 3.5, 7.0])
    v = torch.tensor([[0.0, 2.0, 2.5], [7.0, 8.0, float("nan")]])
    _same(no_fallback(lambda: torch.searchsorted(seq.to(T), v.to(T), right=right)),
          torch.searchsorted(seq, v, right=right))
    bseq = torch.sort(torch.randn(2, 6), dim=-1).values
    bv = torch.randn(2, 4)
    _same(no_fallback(lambda: torch.searchsorted(bseq.to(T), bv.to(T), side="right" if right else "left",
                                                  out_int32=True)),
          torch.searchsorted(bseq, bv, side="right" if right else "left", out_int32=True))
    _same(no_fallback(lambda: torch.bucketize(v.to(T), seq.to(T), right=right)), torch.bucketize(v, seq, right=right))
    _same(no_fallback(lambda: torch.searchsorted(seq.to(T), 2.0, right=right)), torch.searchsorted(seq, 2.0, right=right))


def test_searchsorted_with_sorter_and_bad_shapes():
    seq = torch.tensor([5, 1, 3, 9])
    sorter = torch.argsort(seq)
    v = torch.tensor([0, 3, 4, 10])
    _same(no_fallback(lambda: torch.searchsorted(seq.to(T), v.to(T), sorter=sorter.to(T))),
          torch.searchsorted(seq, v, sorter=sorter))
    with pytest.raises(RuntimeError, match="boundaries tensor"):
        torch.searchsorted(torch.zeros(2, 3, device=T), torch.zeros(3, 2, device=T))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_histc_matches_cpu(dtype):
    x = torch.randint(0, 8, (50,)).to(dtype)
    ref = torch.histc(x.float(), bins=8, min=0, max=7).to(dtype)  # CPU has no integer histc
    _same(no_fallback(lambda: torch.histc(x.to(T), bins=8, min=0, max=7)), ref)
    if dtype == torch.float32:
        y = torch.randn(100)
        y[3] = float("nan")
        _same(no_fallback(lambda: torch.histc(y.to(T), bins=7, min=-1, max=1.5)), torch.histc(y, bins=7, min=-1, max=1.5))
        z = torch.randn(40)
        _same(no_fallback(lambda: torch.histc(z.to(T), bins=5)), torch.histc(z, bins=5))  # min == max: data range
        c = torch.full((4,), 3.0)
        _same(no_fallback(lambda: torch.histc(c.to(T), bins=4)), torch.histc(c, bins=4))
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x.to(T).float(), bins=3, min=5, max=1)


def _grouped_ref(a, b, offs):
    """The jagged product group by group (positions past offs[-1] are zero)."""
    G, starts, out = len(offs), [0] + offs[:-1], None
    if a.dim() == 2 and b.dim() == 3:
        out = torch.zeros(a.shape[0], b.shape[2], dtype=a.dtype)
        for g in range(G):
            out[starts[g]:offs[g]] = a[starts[g]:offs[g]] @ b[g]
    elif a.dim() == 2 and b.dim() == 2:
        out = torch.stack([a[:, starts[g]:offs[g]] @ b[starts[g]:offs[g]] for g in range(G)])
    elif a.dim() == 3 and b.dim() == 2:
        out = torch.zeros(a.shape[1], b.shape[1], dtype=a.dtype)
        for g in range(G):
            out[:, starts[g]:offs[g]] = a[g] @ b[:, starts[g]:offs[g]]
    return out


@pytest.mark.parametrize("layout", ["2d3d", "2d2d", "3d2d", "3d3d"])
def test_grouped_mm_layouts_match_the_jagged_product(layout):
    offs = [2, 2, 6]  # an empty group, and rows past the last offset
    shapes = {"2d3d": ((7, 4), (3, 4, 5)), "2d2d": ((3, 7), (7, 5)), "3d2d": ((3, 4, 5), (5, 7)),
              "3d3d": ((3, 4, 5), (3, 5, 2))}
    a, b = torch.randn(*shapes[layout][0]), torch.randn(*shapes[layout][1])
    o = torch.tensor(offs, dtype=torch.int32)
    kw = {} if layout == "3d3d" else {"offs": o.to(T)}
    got = no_fallback(lambda: torch._grouped_mm(a.to(T), b.to(T), **kw))
    ref = torch.bmm(a, b) if layout == "3d3d" else _grouped_ref(a, b, offs)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_grouped_mm_gradients_and_bfloat16():
    offs = [3, 3, 8]
    o = torch.tensor(offs, dtype=torch.int32)
    x, w = torch.randn(8, 6), torch.randn(3, 6, 4)
    xt, wt = x.to(T).requires_grad_(), w.to(T).requires_grad_()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    r = torch.randn(8, 4)
    no_fallback(lambda: (torch._grouped_mm(xt, wt, offs=o.to(T)) * r.to(T)).sum().backward())
    (_grouped_ref(xc, wc, offs) * r).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, atol=1e-5, rtol=1e-5)
    got = torch._grouped_mm(x.to(T).bfloat16(), w.to(T).bfloat16(), offs=o.to(T))
    assert got.dtype == torch.bfloat16
    ref = _grouped_ref(x.bfloat16().float(), w.bfloat16().float(), offs)
    torch.testing.assert_close(got.float().cpu(), ref, atol=2e-2, rtol=2e-2)
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(torch.randn(4, 3, device=T), torch.randn(2, 5, 4, device=T),
                          offs=torch.tensor([2, 4], dtype=torch.int32, device=T))
