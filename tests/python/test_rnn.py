"""RNNs on tpu vs PyTorch CPU: nn.LSTM / GRU / RNN (tanh, relu) and their
cells, by value and by gradient (inputs, initial states, every parameter),
multi-layer, bidirectional, batch_first, proj_size, dropout between layers,
PackedSequence inputs; the fused cell ops called directly; one program per
sequence in fused mode; no CPU fallback anywhere."""
import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pack_sequence

import torch_tpu

T = torch.device("tpu")
ATOL, RTOL = 2e-5, 1e-4


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, torch.nn.utils.rnn.PackedSequence):
        return [o.data]
    out = []
    for v in o:
        out += _flat(v)
    return out


def _weights(outs, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]


def _check_module(m, inputs, run=None, atol=ATOL, rtol=RTOL):
    """m on CPU and a deepcopy on tpu over CPU/tpu copies of `inputs` (a list
    of tensors, or tuples of tensors for hidden states): outputs equal, then
    the gradients of sum(out_i * w_i) for every input and parameter."""
    run = run or (lambda mod, *a: mod(*a))
    m.zero_grad(set_to_none=True)
    mt = copy.deepcopy(m).to(T)

    def copies(dev):
        def one(x):
            if isinstance(x, tuple):
                return tuple(one(v) for v in x)
            if x is None:
                return None
            return x.detach().to(dev).requires_grad_(x.is_floating_point())
        return [one(x) for x in inputs]

    ci, ti = copies("cpu"), copies(T)
    fb = torch_tpu.fallback_counts()
    oc, ot = _flat(run(m, *ci)), _flat(run(mt, *ti))
    assert len(oc) == len(ot)
    for c, t in zip(oc, ot):
        assert t.device.type == "tpu"
        torch.testing.assert_close(t.cpu(), c.detach(), atol=atol, rtol=rtol)
    ws = _weights(oc)
    sum((c * w).sum() for c, w in zip(oc, ws)).backward()
    sum((t * w.to(T)).sum() for t, w in zip(ot, ws)).backward()
    leaves_c = [v for v in _flat([x for x in ci if x is not None]) if v.requires_grad]
    leaves_t = [v for v in _flat([x for x in ti if x is not None]) if v.requires_grad]
    for i, (c, t) in enumerate(zip(leaves_c, leaves_t)):
        assert t.grad is not None, f"input {i}: no gradient on tpu"
        torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol * 5, rtol=rtol * 5, msg=f"grad of input {i}")
    for (name, pc), (_, pt) in zip(m.named_parameters(), mt.named_parameters()):
        assert pt.grad is not None, f"{name}: no gradient on tpu"
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, atol=atol * 5, rtol=rtol * 5, msg=f"grad of {name}")
    assert torch_tpu.fallback_counts() == fb, "an op fell back to the CPU"
    return oc, ot


# ---- layers --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("num_layers,bidirectional,batch_first,bias", [
    (1, False, False, True), (2, True, False, True), (2, False, True, False), (3, True, True, True)])
def test_layers_match_cpu(cls, num_layers, bidirectional, batch_first, bias):
    torch.manual_seed(0)
    m = cls(5, 6, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    x = torch.randn(3, 7, 5) if batch_first else torch.randn(7, 3, 5)
    _check_module(m, [x])


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_layers_with_initial_state(cls):
    torch.manual_seed(1)
    m = cls(4, 5, num_layers=2, bidirectional=True)
    x = torch.randn(6, 2, 4)
    h0 = torch.randn(4, 2, 5)
    hx = (h0, torch.randn(4, 2, 5)) if cls is torch.nn.LSTM else h0
    _check_module(m, [x, hx])


def test_rnn_relu_nonlinearity():
    torch.manual_seed(2)
    m = torch.nn.RNN(4, 6, num_layers=2, nonlinearity="relu", bidirectional=True)
    _check_module(m, [torch.randn(5, 3, 4), torch.randn(4, 3, 6)])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_proj_size(bidirectional):
    torch.manual_seed(3)
    m = torch.nn.LSTM(5, 8, num_layers=2, proj_size=3, bidirectional=bidirectional, batch_first=True)
    D = 2 if bidirectional else 1
    x = torch.randn(2, 6, 5)
    hx = (torch.randn(2 * D, 2, 3), torch.randn(2 * D, 2, 8))
    _check_module(m, [x, hx])


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_unbatched_input(cls):
    torch.manual_seed(4)
    _check_module(cls(3, 4, num_layers=2), [torch.randn(5, 3)])


def test_lstm_single_step_sequence():
    torch.manual_seed(5)
    _check_module(torch.nn.LSTM(3, 4, bidirectional=True), [torch.randn(1, 2, 3)])


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_dropout_between_layers_eval_mode_matches_cpu(cls):
    torch.manual_seed(6)
    m = cls(4, 5, num_layers=3, dropout=0.5).eval()
    _check_module(m, [torch.randn(5, 2, 4)])


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_dropout_one_zeroes_every_layer_input_but_the_first(cls):
    # p=1 makes dropout deterministic: layers 2.. see zeros; the last layer's
    # output is not dropped.  Equal to CPU, and the first layer's weights get
    # no gradient through the network output (only through h_n).
    torch.manual_seed(7)
    m = cls(4, 5, num_layers=2, dropout=1.0).train()
    x = torch.randn(5, 2, 4)
    oc, ot = _check_module(m, [x], run=lambda mod, a: mod(a)[0])
    ref = copy.deepcopy(m)
    with torch.no_grad():
        ref.weight_ih_l1.zero_()  # the second layer's input projection sees only zeros
    torch.testing.assert_close(ot[0].cpu(), ref(x)[0], atol=ATOL, rtol=RTOL)


def test_dropout_in_training_changes_the_output_and_is_random():
    torch.manual_seed(8)
    m = torch.nn.LSTM(6, 16, num_layers=2, dropout=0.5).to(T)
    x = torch.randn(4, 3, 6).to(T)
    m.eval()
    ref = m(x)[0].cpu()
    m.train()
    a, b = m(x)[0].cpu(), m(x)[0].cpu()
    assert not torch.allclose(a, ref) and not torch.allclose(a, b)
    m.eval()
    torch.testing.assert_close(m(x)[0].cpu(), ref)


# ---- packed sequences -----------------------------------------------------------------


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_sequence_matches_cpu(cls, bidirectional):
    torch.manual_seed(9)
    m = cls(3, 4, num_layers=2, bidirectional=bidirectional)
    x = torch.randn(6, 4, 3)
    lengths = torch.tensor([3, 6, 1, 4])  # unsorted: PyTorch permutes

    def run(mod, x):
        out, h = mod(pack_padded_sequence(x, lengths, enforce_sorted=False))
        padded, _ = pad_packed_sequence(out)
        return padded, h

    _check_module(m, [x], run=run)


def test_packed_sequence_lstm_proj_batch_first_with_state():
    torch.manual_seed(10)
    m = torch.nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 5, 3)
    hx = (torch.randn(4, 3, 2), torch.randn(4, 3, 5))

    def run(mod, x, hx):
        packed = pack_padded_sequence(x, torch.tensor([5, 2, 4]), batch_first=True, enforce_sorted=False)
        out, (h, c) = mod(packed, hx)
        return pad_packed_sequence(out, batch_first=True)[0], h, c

    _check_module(m, [x, hx], run=run)


def test_pack_sequence_of_different_lengths():
    torch.manual_seed(11)
    m = torch.nn.GRU(2, 3)
    seqs = [torch.randn(n, 2) for n in (4, 4, 2)]
    _check_module(m, seqs, run=lambda mod, *s: mod(pack_sequence(list(s)))[0].data)


# ---- cells ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls,kw", [(torch.nn.LSTMCell, {}), (torch.nn.LSTMCell, {"bias": False}),
                                    (torch.nn.GRUCell, {}), (torch.nn.GRUCell, {"bias": False}),
                                    (torch.nn.RNNCell, {}), (torch.nn.RNNCell, {"nonlinearity": "relu"})])
def test_cells_match_cpu(cls, kw):
    torch.manual_seed(12)
    m = cls(4, 5, **kw)
    x = torch.randn(3, 4)
    h = torch.randn(3, 5)
    hx = (h, torch.randn(3, 5)) if cls is torch.nn.LSTMCell else h
    _check_module(m, [x, hx])
    _check_module(m, [x])  # zero initial state


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_unbatched_and_unrolled_over_steps(cls):
    torch.manual_seed(13)
    m = cls(3, 4)

    def run(mod, xs):
        state = None
        outs = []
        for t in range(xs.shape[0]):
            state = mod(xs[t], state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outs)

    _check_module(m, [torch.randn(4, 2, 3)], run=run)
    _check_module(m, [torch.randn(3)])


def _lstm_cell_ref(ig, hg, cx, bi, bh):
    g = ig + hg + (bi + bh if bi is not None else 0)
    i, f, c, o = g.chunk(4, 1)
    i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
    cy = f * cx + i * c
    return o * cy.tanh(), cy, torch.cat([i, f, c, o], 1)


def _gru_cell_ref(ig, hg, hx, bi, bh):
    if bi is not None:
        ig, hg = ig + bi, hg + bh
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_op_direct(bias):
    B, H = 3, 5
    ig, hg, cx = torch.randn(B, 4 * H), torch.randn(B, 4 * H), torch.randn(B, H)
    bi, bh = (torch.randn(4 * H), torch.randn(4 * H)) if bias else (None, None)
    want = _lstm_cell_ref(ig, hg, cx, bi, bh)
    dev = [v.to(T) if v is not None else None for v in (ig, hg, cx, bi, bh)]
    got = torch.ops.aten._thnn_fused_lstm_cell(*dev)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, atol=1e-6, rtol=1e-5)
    # the backward op against autograd of the reference formulas
    ghy, gcy = torch.randn(B, H), torch.randn(B, H)
    leaves = [v.clone().requires_grad_() for v in (ig, cx)]
    hy, cy, _ = _lstm_cell_ref(leaves[0], hg, leaves[1], None, None) if not bias else \
        _lstm_cell_ref(leaves[0], hg, leaves[1], bi, bh)
    d_gates, d_cx = torch.autograd.grad([hy, cy], leaves, [ghy, gcy], retain_graph=True)
    out = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(ghy.to(T), gcy.to(T), dev[2], got[1], got[2], bias)
    torch.testing.assert_close(out[0].cpu(), d_gates, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1].cpu(), d_cx, atol=1e-5, rtol=1e-4)
    if bias:
        torch.testing.assert_close(out[2].cpu(), d_gates.sum(0), atol=1e-5, rtol=1e-4)
    else:
        assert out[2] is None or out[2].numel() == 0
    # an absent grad_cy counts as zeros
    only_h = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(ghy.to(T), None, dev[2], got[1], got[2], bias)
    want_h = torch.autograd.grad([hy], leaves, [ghy])
    torch.testing.assert_close(only_h[0].cpu(), want_h[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_op_direct(bias):
    B, H = 4, 3
    ig, hg, hx = torch.randn(B, 3 * H), torch.randn(B, 3 * H), torch.randn(B, H)
    bi, bh = (torch.randn(3 * H), torch.randn(3 * H)) if bias else (None, None)
    want_hy, want_ws = _gru_cell_ref(ig, hg, hx, bi, bh)
    dev = [v.to(T) if v is not None else None for v in (ig, hg, hx, bi, bh)]
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(*dev)
    torch.testing.assert_close(hy.cpu(), want_hy, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ws.cpu(), want_ws, atol=1e-6, rtol=1e-5)
    g = torch.randn(B, H)
    leaves = [v.clone().requires_grad_() for v in (ig, hg, hx)]
    ref, _ = _gru_cell_ref(*leaves, bi, bh)
    want = torch.autograd.grad(ref, leaves, g)
    out = torch.ops.aten._thnn_fused_gru_cell_backward(g.to(T), ws, bias)
    for got, w in zip(out[:3], want):
        torch.testing.assert_close(got.cpu(), w, atol=1e-5, rtol=1e-4)
    if bias:
        torch.testing.assert_close(out[3].cpu(), want[0].sum(0), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out[4].cpu(), want[1].sum(0), atol=1e-5, rtol=1e-4)


def test_fused_cell_bad_shapes_raise_runtime_error():
    with pytest.raises(RuntimeError, match="hidden_gates"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, device=T), torch.randn(2, 12, device=T),
                                    torch.randn(2, 2, device=T))
    with pytest.raises(RuntimeError, match="input_gates"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 3, 6, device=T), torch.randn(2, 3, 6, device=T),
                                   torch.randn(2, 2, device=T))
    with pytest.raises(RuntimeError, match="cx"):
        torch.ops.aten._thnn_fused_lstm_cell(torch.randn(2, 8, device=T), torch.randn(2, 8, device=T),
                                    torch.randn(3, 2, device=T))
    with pytest.raises(RuntimeError, match="both input_bias and hidden_bias"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, device=T), torch.randn(2, 6, device=T),
                                   torch.randn(2, 2, device=T), torch.randn(6, device=T))


def test_lstm_bad_arguments_raise_like_cpu():
    m = torch.nn.LSTM(3, 4)
    mt = copy.deepcopy(m).to(T)
    for mod, dev in ((m, "cpu"), (mt, T)):
        with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
            mod(torch.randn(5, 2, 7, device=dev))
    w = [p.to(T) for p in m._flat_weights]
    with pytest.raises(RuntimeError, match="parameter tensors"):
        torch.lstm(torch.randn(5, 2, 3, device=T), (torch.zeros(1, 2, 4, device=T), torch.zeros(1, 2, 4, device=T)),
                   w[:3], True, 1, 0.0, False, False, False)


# ---- programs, training ---------------------------------------------------------------


def _step_counts(T_steps, mode_cls=torch.nn.LSTM):
    torch.manual_seed(14)
    m = mode_cls(8, 16, num_layers=2, bidirectional=True).to(T)
    x = torch.randn(T_steps, 4, 8).to(T)
    torch.tpu.synchronize()
    s0 = torch.tpu.cache_stats()
    y, _ = m(x)
    y.sum().backward()
    loss = float(m.weight_hh_l0.grad.sum())  # one host read at the end
    s1 = torch.tpu.cache_stats()
    assert loss == loss
    return s1["ops_recorded"] - s0["ops_recorded"], s1["flushes"] - s0["flushes"]


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_op_count_does_not_grow_with_the_sequence(cls):
    ops_short, _ = _step_counts(3, cls)
    ops_long, flushes_long = _step_counts(40, cls)
    assert ops_long == ops_short, f"{ops_short} ops for 3 steps, {ops_long} for 40"
    if torch.tpu.get_eager_mode() == "fused":
        assert flushes_long == 1, f"fused mode flushed {flushes_long} times for one forward+backward"


def test_fused_mode_training_step_is_one_program():
    if torch.tpu.get_eager_mode() != "fused":
        pytest.skip("counts programs of the fused eager mode")
    torch.manual_seed(15)
    m = torch.nn.LSTM(8, 16, num_layers=2, dropout=0.2).to(T)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(30, 4, 8).to(T)
    flushes = []
    for _ in range(3):
        torch.tpu.synchronize()
        s0 = torch.tpu.cache_stats()["flushes"]
        opt.zero_grad()
        y, _ = m(x)
        y.pow(2).mean().backward()
        opt.step()
        torch.tpu.synchronize()
        flushes.append(torch.tpu.cache_stats()["flushes"] - s0)
    assert flushes == [1, 1, 1], flushes


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_training_steps_match_cpu(cls):
    torch.manual_seed(16)
    m = cls(4, 6, num_layers=2, batch_first=True)
    mt = copy.deepcopy(m).to(T)
    head = torch.nn.Linear(6, 2)
    headt = copy.deepcopy(head).to(T)
    opt = torch.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=0.01)
    optt = torch.optim.Adam(list(mt.parameters()) + list(headt.parameters()), lr=0.01)
    for step in range(4):
        x, y = torch.randn(3, 5, 4), torch.randn(3, 2)
        for mod, hd, o, dev in ((m, head, opt, "cpu"), (mt, headt, optt, T)):
            o.zero_grad()
            out, _ = mod(x.to(dev))
            loss = torch.nn.functional.mse_loss(hd(out[:, -1]), y.to(dev))
            loss.backward()
            o.step()
    for (name, a), (_, b) in zip(m.named_parameters(), mt.named_parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-5, rtol=1e-4, msg=name)


def test_bfloat16_lstm_close_to_cpu():
    torch.manual_seed(17)
    m = torch.nn.LSTM(4, 8, num_layers=2).to(torch.bfloat16)
    x = torch.randn(6, 2, 4, dtype=torch.bfloat16)
    _check_module(m, [x], atol=3e-2, rtol=3e-2)


def test_inference_mode_and_no_grad():
    torch.manual_seed(18)
    m = torch.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    mt = copy.deepcopy(m).to(T)
    x = torch.randn(5, 2, 3)
    want = m(x)[0].detach()
    with torch.no_grad():
        torch.testing.assert_close(mt(x.to(T))[0].cpu(), want, atol=ATOL, rtol=RTOL)
    with torch.inference_mode():
        torch.testing.assert_close(mt(x.to(T))[0].cpu(), want, atol=ATOL, rtol=RTOL)
