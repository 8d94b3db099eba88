"""Tensors grown by torch.cat step after step (issue 42 item 5): a KV cache
written by hand, a rolling history, a token list.  Under no_grad, the cat of
a tensor that a cat made and a shorter piece -- a loop's cat -- makes a
GrowingTensor (torch_tpu/_growing.py), and the ops over it run on the whole
bucket with the padding masked (torch_tpu/_ragged.py).  Every value is
compared with the same program on CPU at every step.  The first loop at a
line of code compiles the bucket's programs at its second step (its first
step was an ordinary cat), and none after; a loop run again from that line
is bucketed from its first step: the steps after it compile at most 4
programs."""
import io
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu._growing as growing
from torch_tpu._growing import GrowingTensor


def _compiles():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


def _close(t, c, atol=1e-5):
    assert tuple(t.shape) == tuple(c.shape), (t.shape, c.shape)
    assert t.dtype == c.dtype
    got = t.cpu()
    assert type(got) is torch.Tensor
    assert torch.allclose(got, c, atol=atol, rtol=1e-5, equal_nan=True), (got - c).abs().max()


def _grown(t, piece, dim):
    """t grown by a loop's cat (twice: the second cat is the loop's)."""
    with torch.no_grad():
        for p in (piece, piece):
            t = torch.cat([t, p], dim)
    assert isinstance(t, GrowingTensor)
    return t


def _attention(q, k, v):
    return (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1) @ v


def _decode(tpu, prompt, steps=32):
    """A hand-written KV cache: compiles after each step."""
    torch.manual_seed(0)
    B, H, D = 2, 3, 16
    k, v = torch.randn(B, H, prompt, D), torch.randn(B, H, prompt, D)
    kt, vt = k.to(tpu), v.to(tpu)
    counts = []
    with torch.no_grad():
        for step in range(steps):
            q, kn, vn = (torch.randn(B, H, 1, D) for _ in range(3))
            k, v = torch.cat([k, kn], 2), torch.cat([v, vn], 2)
            kt, vt = torch.cat([kt, kn.to(tpu)], 2), torch.cat([vt, vn.to(tpu)], 2)
            assert kt.shape == k.shape
            assert isinstance(kt, GrowingTensor) == (step > 0 or bool(counts_before))
            qt = q.to(tpu)
            _close(_attention(qt, kt, vt), _attention(q, k, v))
            _close(F.scaled_dot_product_attention(qt, kt, vt), F.scaled_dot_product_attention(q, k, v))
            counts.append(_compiles())
    _close(kt, k, atol=0)
    return counts


counts_before = []


@pytest.mark.parametrize("prompt", [5, 40])
def test_hand_written_kv_cache_compiles_once_and_equals_cpu(tpu, prompt):
    counts = _decode(tpu, prompt)
    if not counts_before:  # the first loop at this line: bucketed from its second step
        assert counts[-1] - counts[1] <= 4, counts
        counts_before.append(counts)
    counts = _decode(tpu, prompt)  # again: bucketed from its first step
    assert counts[-1] - counts[0] <= 4, counts


def test_rolling_history_statistics(tpu):
    torch.manual_seed(1)
    for run in range(2):
        hist = torch.randn(3, 6)
        ht = hist.to(tpu)
        counts = []
        with torch.no_grad():
            for step in range(32):
                x = torch.randn(1, 6)
                hist, ht = torch.cat([hist, x], 0), torch.cat([ht, x.to(tpu)], 0)
                for f in (lambda h: h.mean(0), lambda h: h.amax(0), lambda h: h.amin(0, keepdim=True),
                          lambda h: (h - h.mean(0)).pow(2).sum(0), lambda h: h.softmax(0)[-1],
                          lambda h: torch.logsumexp(h, 0), lambda h: h.sum(), lambda h: h.abs().mean(),
                          lambda h: h.t() @ h, lambda h: h.sum(1)[-2:]):
                    _close(f(ht), f(hist))
                counts.append(_compiles())
        assert counts[-1] - counts[1 - run] <= 4, (run, counts)


def test_padding_never_reaches_a_value(tpu):
    """Ops that turn the bucket's padding into inf or NaN, then reduce or
    contract over the growing dim."""
    a = torch.rand(2, 9) + 0.5
    g = _grown(a.to(tpu), torch.ones(2, 1, device=tpu), 1)
    c = torch.cat([a, torch.ones(2, 2)], 1)
    for f in (lambda x: torch.log(x - 0.5 * x.detach().clone()).sum(1), lambda x: (1 / (x - x)).isnan().sum(),
              lambda x: (1 / x) @ x.t(), lambda x: torch.log(x * 0).amax(1), lambda x: (x / 0).softmax(1),
              lambda x: torch.sqrt(-x).mean(1), lambda x: x.log_softmax(1)):
        _close(f(g), f(c))


def test_ops_over_the_bucket_equal_cpu(tpu):
    torch.manual_seed(2)
    base = torch.randn(2, 3, 6, 4)
    g = _grown(base.to(tpu), torch.zeros(2, 3, 1, 4, device=tpu), 2)
    c = torch.cat([base, torch.zeros(2, 3, 2, 4)], 2)
    w = torch.randn(4, 5)
    row = torch.randn(4)
    cases = {
        "transpose": lambda x: x.transpose(1, 2) * 2,
        "permute": lambda x: x.permute(2, 0, 3, 1) + 1,
        "unsqueeze_squeeze": lambda x: x.unsqueeze(0).squeeze(0).unsqueeze(-1).squeeze(-1),
        "view_keeps_dim": lambda x: x.reshape(6, 8, 4).exp(),
        "view_merges_dim": lambda x: x.reshape(2, 3, 32),
        "expand": lambda x: x[:, :1].expand(2, 3, 8, 4) - x,
        "slice_other": lambda x: x[:, 1:, :, ::2] * 3,
        "slice_growing": lambda x: x[:, :, 2:5],
        "select_other": lambda x: x[1].relu(),
        "select_growing": lambda x: x[:, :, -1],
        "split_unbind": lambda x: torch.stack([t.sum(-1) for t in x.unbind(1)]) + x.split(2, -1)[0].sum(-1).sum(1),
        "cat_other": lambda x: torch.cat([x, x * 2], -1),
        "pointwise_plain": lambda x: torch.where(x > 0, x, row.to(x.device)) * row.to(x.device),
        "plain_of_the_length": lambda x: x + torch.arange(8.0, device=x.device).view(8, 1),
        "matmul_rows": lambda x: x @ w.to(x.device),  # folded into one [rows, 4] matrix: the plain view
        "mm_rows": lambda x: x[1, 2] @ w.to(x.device),
        "matmul_contract": lambda x: x.transpose(-1, -2) @ x,
        "matmul_cols": lambda x: w.t().to(x.device) @ x.transpose(-1, -2),
        "bmm_batch": lambda x: torch.bmm(x.transpose(0, 2).reshape(8, 6, 4), x.transpose(0, 2).reshape(8, 4, 6)),
        "reductions": lambda x: torch.stack([x.sum((1, 2)), x.mean(2)[:, 0], x.amax((0, 2))[:2],
                                             x.amin(2, keepdim=True)[:, 0, 0]]),
        "reduce_other": lambda x: x.sum(-1, keepdim=True).mean(1) * 2,
        "softmax": lambda x: x.softmax(2) + x.log_softmax(-1),
        "layer_norm": lambda x: F.layer_norm(x, (4,)),
        "int_ops": lambda x: (x > 0).sum(2) + (x > 0).to(torch.int64).amax(2),
        "clone_inplace": lambda x: x.clone().mul_(2),
    }
    for name, f in cases.items():
        want = f(c)
        got = f(g)
        assert tuple(got.shape) == tuple(want.shape), name
        _close(got, want)
    # these run on the bucket, not on a per-length view
    for f in (lambda x: x.transpose(1, 2) * 2, lambda x: x.softmax(2), lambda x: x[0, 0] @ w.to(x.device),
              lambda x: x.reshape(6, 8, 4).exp(), lambda x: x.sum(-1)):
        assert isinstance(f(g), GrowingTensor)


def test_token_list_grows(tpu):
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    it = ids.to(tpu)
    with torch.no_grad():
        for n in range(20):
            nxt = torch.tensor([[n % 7]])
            ids, it = torch.cat([ids, nxt], 1), torch.cat([it, nxt.to(tpu)], 1)
            assert it[:, -1].item() == ids[:, -1].item()
            _close((it == 1).sum(-1), (ids == 1).sum(-1))
            _close(it[:, -3:], ids[:, -3:])
    assert it.tolist() == ids.tolist()


def test_what_users_see_is_a_plain_tensor(tpu):
    a, b = torch.randn(3, 6), torch.randn(3, 2)
    g = _grown(a.to(tpu), b.to(tpu), 1)
    c = torch.cat([a, b, b], 1)
    assert repr(g) == repr(g.valid())  # no subclass in its repr
    assert "Growing" not in repr(g) and "capacity" not in repr(g)
    assert g.tolist() == c.tolist()
    assert g.is_contiguous() and g.stride() == c.stride()
    _close(g.view(30), c.view(30))
    _close(g.as_strided((3, 10), (10, 1)), c)
    _close(g.as_strided((2, 4), (1, 3), 2), c.as_strided((2, 4), (1, 3), 2))
    buf = io.BytesIO()
    torch.save(g, buf)
    loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert type(loaded) is torch.Tensor
    _close(loaded, c)
    g.add_(1)  # in place: the grown tensor itself changes
    _close(g, c + 1)


def test_plain_cats_stay_plain(tpu, monkeypatch):
    a, b = torch.randn(2, 4, device=tpu), torch.randn(2, 1, device=tpu)
    w = b.clone().requires_grad_()
    aw = torch.cat([a, w], 1)
    assert type(torch.cat([aw, w], 1)) is torch.Tensor  # autograd records the cat: it stays exact
    with torch.no_grad():
        once = torch.cat([a, b], 1)
        assert type(once) is torch.Tensor  # a one-off cat (padding, a header)
        assert type(torch.cat([a, a], 1)) is torch.Tensor  # equal halves (rotate_half)
        assert type(torch.cat([b, a], 1)) is torch.Tensor  # a longer piece in front
        assert type(torch.cat([once, b, b], 1)) is torch.Tensor
        assert type(torch.cat([once, torch.randn(1, 5, device=tpu)], 0)) is torch.Tensor  # another dim
        monkeypatch.setattr(growing, "CAT_GROWS", False)  # TORCH_TPU_GROWING_CAT=0
        assert type(torch.cat([once, b], 1)) is torch.Tensor
        monkeypatch.setattr(growing, "CAT_GROWS", True)
        assert isinstance(torch.cat([once, b], 1), GrowingTensor)  # what a cat made, grown again
    a.requires_grad_()
    with torch.inference_mode():
        once = torch.cat([a.detach(), b], 1)
        assert isinstance(torch.cat([once, b], 1), GrowingTensor)


def test_an_older_length_appended_again_copies(tpu):
    base = _grown(torch.arange(3.0, device=tpu).view(1, 3), torch.ones(1, 1, device=tpu), 1)
    base = base - 1  # an op's result
    with torch.no_grad():
        a = torch.cat([base, torch.full((1, 1), 10.0, device=tpu)], 1)
        b = torch.cat([base, torch.full((1, 1), 20.0, device=tpu)], 1)
        c = torch.cat([a * 1, torch.full((1, 1), 30.0, device=tpu)], 1)  # an op's result grows too
    assert base.tolist() == [[-1.0, 0.0, 1.0, 0.0, 0.0]]
    assert a.tolist() == [[-1.0, 0.0, 1.0, 0.0, 0.0, 10.0]]
    assert b.tolist() == [[-1.0, 0.0, 1.0, 0.0, 0.0, 20.0]]
    assert c.tolist() == [[-1.0, 0.0, 1.0, 0.0, 0.0, 10.0, 30.0]]


def _step(q, k, v, kn, vn):
    k, v = torch.cat([k, kn], 2), torch.cat([v, vn], 2)
    return _attention(q, k, v), k, v


def test_compiled_step_grows_its_cache(tpu):
    """torch.compile(backend="tpu") of a decoding step that grows the cache
    it is given and returns it: equal to CPU at every step; dynamo traces 3
    graphs (the first length, a symbolic one, ...) and the device compiles
    at most 4 programs after the first step."""
    import torch._dynamo
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch.manual_seed(4)
    step_fn = torch.compile(_step, backend="tpu")
    B, H, D = 2, 2, 8
    k, v = torch.randn(B, H, 6, D), torch.randn(B, H, 6, D)
    kt, vt = k.to(tpu), v.to(tpu)
    counts = []
    with torch.no_grad():
        for step in range(16):
            q, kn, vn = (torch.randn(B, H, 1, D) for _ in range(3))
            o, k, v = _step(q, k, v, kn, vn)
            ot, kt, vt = step_fn(q.to(tpu), kt, vt, kn.to(tpu), vn.to(tpu))
            assert type(kt) is torch.Tensor  # dynamo is handed plain tensors
            _close(ot, o)
            _close(kt, k, atol=0)
            counts.append(_compiles())
    assert counts[-1] - counts[0] <= 4, counts
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs <= 4


def test_compiled_function_over_a_grown_cache(tpu):
    """torch.compile(backend="tpu") of the attention, the cache grown in
    eager: equal to CPU at every step, at most 4 programs compiled after the
    cache became a bucket (its second step)."""
    torch.manual_seed(3)
    attn = torch.compile(_attention, backend="tpu")
    B, H, D = 1, 2, 8
    k, v = torch.randn(B, H, 4, D), torch.randn(B, H, 4, D)
    kt, vt = k.to(tpu), v.to(tpu)
    after_first = None
    with torch.no_grad():
        for step in range(12):
            q, kn, vn = (torch.randn(B, H, 1, D) for _ in range(3))
            k, v = torch.cat([k, kn], 2), torch.cat([v, vn], 2)
            kt, vt = torch.cat([kt, kn.to(tpu)], 2), torch.cat([vt, vn.to(tpu)], 2)
            _close(attn(q.to(tpu), kt, vt), _attention(q, k, v))
            if step == 1:
                after_first = _compiles()
    assert _compiles() - after_first <= 4


def _grad_mode_decode(tpu, steps=32):
    """The hand-written KV cache loop with autograd on (no torch.no_grad),
    nothing in it requiring grad: compile counts after each step."""
    torch.manual_seed(3)
    B, H, D = 2, 3, 16
    k, v = torch.randn(B, H, 6, D), torch.randn(B, H, 6, D)
    kt, vt = k.to(tpu), v.to(tpu)
    counts = []
    assert torch.is_grad_enabled()
    for step in range(steps):
        q, kn, vn = (torch.randn(B, H, 1, D) for _ in range(3))
        k, v = torch.cat([k, kn], 2), torch.cat([v, vn], 2)
        kt, vt = torch.cat([kt, kn.to(tpu)], 2), torch.cat([vt, vn.to(tpu)], 2)
        assert isinstance(kt, GrowingTensor) == (step > 0 or bool(grad_counts_before))
        _close(F.scaled_dot_product_attention(q.to(tpu), kt, vt), F.scaled_dot_product_attention(q, k, v))
        counts.append(_compiles())
    _close(kt, k, atol=0)
    return counts


grad_counts_before = []


def test_a_cache_grows_the_same_without_no_grad(tpu):
    """Issue 50 item 3: a loop's cat whose inputs do not require grad grows
    a bucket with autograd on too: after its first steps the loop compiles
    nothing (it compiled 8 programs a step, forever), values equal CPU."""
    counts = _grad_mode_decode(tpu)
    assert counts[-1] - counts[2] == 0, counts
    grad_counts_before.append(counts)
    counts = _grad_mode_decode(tpu)  # again: bucketed from its first step, all programs known
    assert counts[-1] - counts[0] == 0, counts


def test_backward_through_a_grown_cache_equals_cpu(tpu):
    """A grown cache (nothing in it requires grad) read by a query that
    does: autograd saves the grown tensor, and the gradient equals CPU's."""
    torch.manual_seed(4)
    B, H, D = 1, 2, 8
    wq = torch.randn(D, D, requires_grad=True)
    wqt = wq.detach().to(tpu).requires_grad_()
    k = torch.randn(B, H, 3, D)
    kt = k.to(tpu)
    lc = lt = 0
    for step in range(6):
        kn, x = torch.randn(B, H, 1, D), torch.randn(B, H, 1, D)
        k, kt = torch.cat([k, kn], 2), torch.cat([kt, kn.to(tpu)], 2)
        lc = lc + F.scaled_dot_product_attention(x @ wq, k, k).pow(2).sum()
        lt = lt + F.scaled_dot_product_attention(x.to(tpu) @ wqt, kt, kt).pow(2).sum()
    assert isinstance(kt, GrowingTensor)
    lc.backward()
    lt.backward()
    torch.testing.assert_close(lt.detach().cpu(), lc.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wqt.grad.cpu(), wq.grad, rtol=1e-5, atol=1e-4)


def test_a_cat_autograd_records_stays_exact_and_its_line_is_known(tpu):
    """An input that requires grad: every step's cat is recorded by
    autograd and exact (a plain tensor, gradients equal CPU's); the line is
    kept for the doctor's fix (growing.GRAD_SITES)."""
    torch.manual_seed(5)
    w = torch.randn(4, requires_grad=True)
    wt = w.detach().to(tpu).requires_grad_()
    h, ht = w.view(1, 4) * 1, wt.view(1, 4) * 1
    for step in range(5):
        h, ht = torch.cat([h, w.view(1, 4) * step], 0), torch.cat([ht, wt.view(1, 4) * step], 0)
        assert type(ht) is torch.Tensor and ht.requires_grad
    h.pow(2).sum().backward()
    ht.pow(2).sum().backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad)
    line = next(n for n, text in enumerate(open(__file__), 1) if "h, ht = torch.cat([h, w.view(1, 4)" in text)
    assert growing.GRAD_SITES.get((__file__, line), 0) >= 3, growing.GRAD_SITES
