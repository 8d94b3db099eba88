"""Recurrent-network kernels (csrc/ops/rnn.c): LSTM / GRU / RNN layers and
the fused LSTM and GRU cells.

Layers.  aten::lstm / gru / rnn_tanh / rnn_relu (.input: padded, .data:
PackedSequence) are CompositeImplicitAutograd in PyTorch: for a PrivateUse1
device they would unroll the sequence into one matmul pair and one fused
cell op per step, a program that grows with the sequence (and XLA's compile
time faster than that).  They are registered here instead, for the tpu key
and its autograd key, as:
  - the input projection of every step at once, x @ W_ih^T + biases (one
    matmul per layer and direction, differentiated by autograd), and
  - one layer rule per direction (lstm_layer / gru_layer / rnn_layer: a
    while loop over the steps) wrapped in an autograd.Function whose
    backward is the matching *_layer_backward rule (the reverse loop).
Dropout between layers, bidirectional outputs (concatenated), proj_size,
batch_first and PackedSequence inputs (run padded with a batch_sizes mask,
then gathered back into packed order) are handled here.  A whole network,
forward and backward, is a handful of ops whatever the sequence length.
Second derivatives of a layer are not supported (once_differentiable).
Under tracing (fake tensors: torch.compile with dynamo's allow_rnn, export)
the call goes to PyTorch's Python decomposition of the op instead (dynamo
does not trace RNN modules by default: they run as these eager kernels).

Cells.  nn.LSTMCell / nn.GRUCell (aten::lstm_cell / gru_cell, composite)
reach _thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backward ops,
registered here with PyTorch's CUDA layouts.  RNN_TANH / RNN_RELU cells have
no fused op (linear + tanh / relu).
"""
import torch
from torch._decomp import decomposition_table
from torch.autograd.function import once_differentiable

from .._dispatch import impl, register, run


def _opt(t):
    return [] if t is None else [t]


# ---- fused cells ---------------------------------------------------------------------


def _cell_inputs(op, input_gates, hidden_gates, prev, input_bias, hidden_bias):
    if (input_bias is None) != (hidden_bias is None):
        raise RuntimeError(f"{op}: expected both input_bias and hidden_bias or neither, got "
                           f"input_bias={'None' if input_bias is None else list(input_bias.shape)}, "
                           f"hidden_bias={'None' if hidden_bias is None else list(hidden_bias.shape)}")
    return [input_gates, hidden_gates, prev] + _opt(input_bias) + _opt(hidden_bias)


@register("aten::_thnn_fused_lstm_cell", out="aten::_thnn_fused_lstm_cell.out")
def thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    ins = _cell_inputs("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias)
    hy, cy, workspace = run("_thnn_fused_lstm_cell", ins)
    return hy, cy, workspace


@register("aten::_thnn_fused_lstm_cell_backward_impl")
def thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    ins = _opt(grad_hy) + _opt(grad_cy) + [cx, cy, workspace]
    flags = [int(grad_hy is not None), int(grad_cy is not None), int(bool(has_bias))]
    outs = run("_thnn_fused_lstm_cell_backward_impl", ins, flags)
    return outs[0], outs[1], (outs[2] if has_bias else None)


@register("aten::_thnn_fused_gru_cell", out="aten::_thnn_fused_gru_cell.out")
def thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ins = _cell_inputs("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias)
    hy, workspace = run("_thnn_fused_gru_cell", ins)
    return hy, workspace


@register("aten::_thnn_fused_gru_cell_backward")
def thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    outs = run("_thnn_fused_gru_cell_backward", [grad_hy, workspace], [int(bool(has_bias))])
    if has_bias:
        return tuple(outs)
    return outs[0], outs[1], outs[2], None, None


# ---- layers --------------------------------------------------------------------------


class _LSTMLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, w_hh, h0, c0, w_hr, bs, reverse):
        attrs = [int(reverse), int(w_hr is not None), int(bs is not None)]
        y, hT, cT, gates, hp, cp = run("lstm_layer", [xg, w_hh, h0, c0] + _opt(w_hr) + _opt(bs), attrs)
        ctx.attrs = attrs
        ctx.save_for_backward(gates, hp, cp, w_hh, w_hr, bs)
        return y, hT, cT

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, ghT, gcT):
        gates, hp, cp, w_hh, w_hr, bs = ctx.saved_tensors
        outs = run("lstm_layer_backward", [gy, ghT, gcT, gates, hp, cp, w_hh] + _opt(w_hr) + _opt(bs), ctx.attrs)
        return outs[0], outs[3], outs[1], outs[2], (outs[4] if w_hr is not None else None), None, None


class _GRULayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, w_hh, h0, b_hh, bs, reverse):
        attrs = [int(reverse), int(b_hh is not None), int(bs is not None)]
        y, hT, gates, hp = run("gru_layer", [xg, w_hh, h0] + _opt(b_hh) + _opt(bs), attrs)
        ctx.attrs = attrs
        ctx.save_for_backward(gates, hp, w_hh, bs)
        return y, hT

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, ghT):
        gates, hp, w_hh, bs = ctx.saved_tensors
        outs = run("gru_layer_backward", [gy, ghT, gates, hp, w_hh] + _opt(bs), ctx.attrs)
        return outs[0], outs[2], outs[1], (outs[3] if ctx.attrs[1] else None), None, None


class _RNNLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xg, w_hh, h0, bs, reverse, relu):
        attrs = [int(reverse), int(relu), int(bs is not None)]
        y, hT, hp = run("rnn_layer", [xg, w_hh, h0] + _opt(bs), attrs)
        ctx.attrs = attrs
        ctx.save_for_backward(y, hp, w_hh, bs)
        return y, hT

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, ghT):
        y, hp, w_hh, bs = ctx.saved_tensors
        outs = run("rnn_layer_backward", [gy, ghT, y, hp, w_hh] + _opt(bs), ctx.attrs)
        return outs[0], outs[2], outs[1], None, None, None


def _project(x, w_ih, bias):
    """x [..., I] @ w_ih^T (+ bias) -> [..., G]: every step's input gates."""
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    g = torch.addmm(bias, flat, w_ih.t()) if bias is not None else torch.mm(flat, w_ih.t())
    return g.view(*shape[:-1], w_ih.shape[0])


class _Packing:
    """Host-side layout of a PackedSequence (batch_sizes is a CPU tensor):
    packed row r <-> (step t, batch b)."""

    def __init__(self, batch_sizes, device):
        sizes = [int(v) for v in batch_sizes.tolist()]
        if not sizes or sizes[0] < 1 or any(b > a for a, b in zip(sizes, sizes[1:])):
            raise RuntimeError(f"rnn: batch_sizes must be non-empty, positive and non-increasing, got {sizes}")
        self.T, self.B, self.N = len(sizes), sizes[0], sum(sizes)
        pad, pack, r = [], [], 0
        for t, n in enumerate(sizes):
            for b in range(self.B):
                if b < n:
                    pad.append(r)
                    pack.append(t * self.B + b)
                    r += 1
                else:
                    pad.append(self.N)  # a zero row appended to the packed data
        self.pad_idx = torch.tensor(pad, dtype=torch.int64).to(device)
        self.pack_idx = torch.tensor(pack, dtype=torch.int64).to(device)
        self.bs = batch_sizes.to(dtype=torch.int64).to(device)

    def pad(self, g):
        """packed [N, G] -> padded [T, B, G] (zeros past each sequence's end)."""
        g = torch.cat([g, g.new_zeros((1, g.shape[1]))], 0)
        return g.index_select(0, self.pad_idx).view(self.T, self.B, g.shape[1])

    def pack(self, y):
        """padded [T, B, W] -> packed [N, W]."""
        return y.reshape(self.T * self.B, y.shape[2]).index_select(0, self.pack_idx)


def _check(mode, input, h0, c0, params, num_layers, D, stride):
    if len(params) != num_layers * D * stride:
        raise RuntimeError(f"{mode}: expected {num_layers * D * stride} parameter tensors "
                           f"({num_layers} layers x {D} directions x {stride}), got {len(params)}")
    for name, t in [("input", input), ("hx", h0), ("cx", c0)] + [(f"params[{i}]", p) for i, p in enumerate(params)]:
        if t is not None and t.device.type != "tpu":
            raise RuntimeError(f"{mode}: Expected all tensors to be on the same device, but found at least two "
                               f"devices, tpu:0 and {t.device}! ({name})")


def _rnn(mode, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
         batch_sizes=None):
    """The layers of aten::lstm / gru / rnn_tanh / rnn_relu (see the module
    doc); returns (output, h_n) or, for lstm, (output, h_n, c_n)."""
    D = 2 if bidirectional else 1
    if mode == "lstm":
        h0, c0 = hx
        has_proj = h0.shape[-1] != c0.shape[-1]
    else:
        h0, c0, has_proj = hx, None, False
    stride = 2 + 2 * int(has_biases) + int(has_proj)
    params = list(params)
    _check(mode, input, h0, c0, params, num_layers, D, stride)
    packing = None
    if batch_sizes is not None:
        packing = _Packing(batch_sizes, input.device)
        layer_in = input  # [N, I] packed (padded after the first projection)
        bs = packing.bs
    else:
        if input.dim() != 3:
            raise RuntimeError(f"{mode}: input must have 3 dimensions, got {input.dim()}")
        layer_in = input.transpose(0, 1) if batch_first else input  # [T, B, I]
        bs = None
    h_n, c_n = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            i = layer * D + d
            p = params[i * stride:(i + 1) * stride]
            w_ih, w_hh = p[0], p[1]
            b_ih, b_hh = (p[2], p[3]) if has_biases else (None, None)
            if mode == "gru":
                xg = _project(layer_in, w_ih, b_ih)  # b_hh stays inside: n = tanh(x_n + r * (h_n + b_hn))
            else:
                xg = _project(layer_in, w_ih, b_ih + b_hh if has_biases else None)
            if packing is not None and layer == 0:
                xg = packing.pad(xg)
            if mode == "lstm":
                y, hT, cT = _LSTMLayer.apply(xg, w_hh, h0[i], c0[i], p[-1] if has_proj else None, bs, d == 1)
                c_n.append(cT)
            elif mode == "gru":
                y, hT = _GRULayer.apply(xg, w_hh, h0[i], b_hh, bs, d == 1)
            else:
                y, hT = _RNNLayer.apply(xg, w_hh, h0[i], bs, d == 1, mode == "rnn_relu")
            outs.append(y)
            h_n.append(hT)
        layer_in = outs[0] if D == 1 else torch.cat(outs, 2)
        if dropout != 0 and train and layer < num_layers - 1:
            layer_in = torch.nn.functional.dropout(layer_in, dropout, True)
    if packing is not None:
        output = packing.pack(layer_in)
    else:
        output = layer_in.transpose(0, 1) if batch_first else layer_in
    hy = torch.stack(h_n, 0)
    if mode == "lstm":
        return output, hy, torch.stack(c_n, 0)
    return output, hy


def _traced(tensors):
    """True when the call is being traced (fake or functional tensors:
    torch.compile with allow_rnn, torch.export): the engine cannot run
    them, PyTorch's own decomposition can."""
    from torch._subclasses.fake_tensor import is_fake
    return any(isinstance(t, torch.Tensor) and (is_fake(t) or torch._is_functional_tensor(t)) for t in tensors)


def _register_layers(mode):
    ops = {o: getattr(getattr(torch.ops.aten, mode), o) for o in ("input", "data")}

    def on_input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        hxs = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        if _traced([input, *hxs, *params]):
            return decomposition_table[ops["input"]](input, hx, params, has_biases, num_layers, dropout, train,
                                                     bidirectional, batch_first)
        return _rnn(mode, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)

    def on_data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
        hxs = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        if _traced([data, *hxs, *params]):
            return decomposition_table[ops["data"]](data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                                    train, bidirectional)
        return _rnn(mode, data, hx, params, has_biases, num_layers, dropout, train, bidirectional, False,
                    batch_sizes)

    for overload, fn in (("input", on_input), ("data", on_data)):
        name = f"aten::{mode}.{overload}"
        impl(name, fn)
        # and as the autograd kernel: with a tpu kernel registered, PyTorch
        # no longer uses the composite (differentiable) decomposition for
        # AutogradPrivateUse1
        impl(name, fn, key="AutogradPrivateUse1")


for _mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
    _register_layers(_mode)
