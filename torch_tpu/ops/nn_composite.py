"""nn ops with no rule of their own, computed on the device from ops that
have one (no host round trip):

- 3-d average pooling (avg_pool3d, _adaptive_avg_pool3d): a box average is
  separable, so it is a 2-d pool over (H, W) followed by a pool over D (the
  2-d rules, D moved last), divisors included (count_include_pad, ceil_mode
  and adaptive windows are per-dim, and their product is the 3-d divisor);
- adaptive_max_pool3d: the same two passes with adaptive_max_pool2d; the
  D pass picks, per output, the row whose (H, W) index is kept (ties: the
  first in (d, h, w) order, NaN: the last, as the CPU loop);
- max_pool3d_with_indices, multi_margin_loss: PyTorch's own
  decompositions (torch._decomp) over device ops;
- multilabel_margin_loss: the CPU kernel's sum written with gather /
  scatter (PyTorch's decomposition does not match its CPU kernel);
- native_group_norm_backward: PyTorch's decomposition;
- _ctc_loss: the alpha recursion over the extended label sequence, one
  log-sum-exp step per frame (lengths are host values, as on the CPU);
- grid_sampler_2d / grid_sampler_3d (bilinear, nearest, 2-d bicubic;
  zeros, border and reflection padding): the grid unnormalized and padded
  as PyTorch's kernel does, then the 2^d corner taps (bicubic: 4 x 4, each
  padded) gathered from the flattened input and weighted;
- _weight_norm_interface and its backward (weight_norm over the first or
  last dim): w = v * g / |v|, the norm over the other dims in float32 for
  bfloat16 (CPU's rule); grad_g = <grad_w, v> / |v|, grad_v =
  g / |v| * (grad_w - v * grad_g / |v|).

The forward ops whose backward op has no rule are registered at the
AutogradPrivateUse1 key: autograd records the device ops they are made of,
so the gradient is the composition's, with no backward kernel needed.
"""
import torch
from torch._decomp import decomposition_table

import itertools

from .._dispatch import Unsupported, register

aten = torch.ops.aten


def _autograd(name, fn):
    """fn at AutogradPrivateUse1 (differentiated through its device ops) and
    at PrivateUse1 (reached without autograd: no_grad, inference_mode)."""
    register(name, autograd=True)(fn)


def _decomposed(op):
    dec = decomposition_table[op]

    def kernel(*args, **kwargs):
        return dec(*args, **kwargs)

    return kernel


# ---- PyTorch's decompositions --------------------------------------------------------

_autograd("max_pool3d_with_indices", _decomposed(aten.max_pool3d_with_indices.default))
_multi_margin_dec = _decomposed(aten.multi_margin_loss.default)


@register("multi_margin_loss", autograd=True)
def multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    out = _multi_margin_dec(self, target, p, margin, weight, reduction)
    # The decomposition gives a 1-d input's unreduced loss shape [1]; the
    # CPU kernel gives it the target's shape ([] for a 0-d target).
    if reduction == 0 and self.dim() <= 1 and out.shape != target.shape:
        out = out.reshape(target.shape)
    return out

register("native_group_norm_backward")(_decomposed(aten.native_group_norm_backward.default))


# ---- 3-d average pooling as two 2-d pools ---------------------------------------------


def _triple(v, name, default=None):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v and default is not None:
        return list(default)
    if len(v) == 1:
        v = v * 3
    if len(v) != 3:
        raise RuntimeError(f"avg_pool3d: {name} must either be a single int, or a tuple of three ints")
    return [int(x) for x in v]


def _as_5d(x):
    if x.dim() not in (4, 5):
        raise RuntimeError(f"non-empty 4D or 5D (batch mode) tensor expected for input, but got {list(x.shape)}")
    return (x.unsqueeze(0), True) if x.dim() == 4 else (x, False)


def _hw_then_d(x, pool_hw, pool_d):
    """pool_hw over the last two dims of [N, C, D, H, W], then pool_d over D
    (as the last dim of a [N, C, OH*OW, D] view); returns [N, C, OD, OH, OW]."""
    N, C, D, H, W = x.shape
    y = pool_hw(x.reshape(N, C * D, H, W))
    OH, OW = y.shape[-2:]
    y = y.reshape(N, C, D, OH * OW).transpose(2, 3)
    z = pool_d(y)
    OD = z.shape[-1]
    return z.transpose(2, 3).reshape(N, C, OD, OH, OW)


def avg_pool3d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    k = _triple(kernel_size, "kernel_size")
    s = _triple(stride, "stride", k)
    p = _triple(padding, "padding")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    x, unbatched = _as_5d(self)
    F = torch.nn.functional
    if divisor_override:  # sums (divisor 1 in both passes), then the override
        y = _hw_then_d(x, lambda t: F.avg_pool2d(t, k[1:], s[1:], p[1:], ceil_mode, True, 1),
                       lambda t: F.avg_pool2d(t, (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode, True, 1))
        y = y / divisor_override
    else:
        y = _hw_then_d(x, lambda t: F.avg_pool2d(t, k[1:], s[1:], p[1:], ceil_mode, count_include_pad),
                       lambda t: F.avg_pool2d(t, (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode, count_include_pad))
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool3d(self, output_size):
    o = _triple(output_size, "output_size")
    x, unbatched = _as_5d(self)
    F = torch.nn.functional
    y = _hw_then_d(x, lambda t: F.adaptive_avg_pool2d(t, o[1:]),
                   lambda t: F.adaptive_avg_pool2d(t, (t.shape[-2], o[0])))
    return y.squeeze(0) if unbatched else y


_autograd("avg_pool3d", avg_pool3d)
_autograd("_adaptive_avg_pool3d", adaptive_avg_pool3d)


def adaptive_max_pool3d(self, output_size):
    o = _triple(output_size, "output_size")
    x, unbatched = _as_5d(self)
    F = torch.nn.functional
    N, C, D, H, W = x.shape
    v1, i1 = F.adaptive_max_pool2d(x.reshape(N, C * D, H, W), o[1:], return_indices=True)
    OH, OW = v1.shape[-2:]
    v1 = v1.reshape(N, C, D, OH * OW).transpose(2, 3)
    i1 = i1.reshape(N, C, D, OH * OW).transpose(2, 3)
    v2, i2 = F.adaptive_max_pool2d(v1, (OH * OW, o[0]), return_indices=True)  # i2 = row * D + d
    d = i2 % D
    idx = d * (H * W) + torch.gather(i1, 3, d)
    v = v2.transpose(2, 3).reshape(N, C, o[0], OH, OW)
    idx = idx.transpose(2, 3).reshape(N, C, o[0], OH, OW)
    return (v.squeeze(0), idx.squeeze(0)) if unbatched else (v, idx)


_autograd("adaptive_max_pool3d", adaptive_max_pool3d)


def multilabel_margin_loss_forward(self, target, reduction):
    """(loss, is_target) as the CPU kernel: for each sample, the targets are
    target[:k] (k = first -1), each counted once per occurrence, and the
    loss is sum over targets j and non-targets i of
    max(0, 1 - (x[y_j] - x[i])) / C."""
    if self.dim() > 2 or target.shape != self.shape:
        raise RuntimeError(f"multilabel_margin_loss: inconsistent target size: {list(target.shape)} for input of "
                           f"size: {list(self.shape)}")
    x, y = (self.unsqueeze(0), target.unsqueeze(0)) if self.dim() <= 1 else (self, target)
    if x.dim() == 1:  # 0-d input
        x, y = x.reshape(1, 1), y.reshape(1, 1)
    N, C = x.shape
    valid = (y == -1).to(torch.int64).cumsum(1) == 0
    yc = torch.where(valid, y, torch.zeros_like(y))
    is_target = torch.zeros(N, C, dtype=x.dtype, device=x.device).scatter_add(1, yc, valid.to(x.dtype)) > 0
    xt = torch.gather(x, 1, yc)  # [N, C]: x[y_j]
    m = (1 - (xt.unsqueeze(2) - x.unsqueeze(1))).clamp_min(0)  # [N, j, i]
    m = m * valid.unsqueeze(2).to(x.dtype) * (~is_target).unsqueeze(1).to(x.dtype)
    loss = m.sum((1, 2)) / C
    is_target = is_target.to(x.dtype)
    if self.dim() <= 1:
        is_target = is_target.reshape(self.shape)
        loss = loss.reshape(())
    if reduction == 1:
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    return loss, is_target


_autograd("multilabel_margin_loss_forward", multilabel_margin_loss_forward)


# ---- CTC loss: the alpha recursion, one step per time frame ------------------------------


def _lse(*xs):
    """log(sum(exp(x))) over the given tensors, -inf when all are -inf, with
    zero (not NaN) gradients there."""
    m = xs[0]
    for x in xs[1:]:
        m = torch.maximum(m, x)
    ninf = m == float("-inf")
    m0 = torch.where(ninf, torch.zeros_like(m), m)
    s = sum(torch.exp(x - m0) for x in xs)
    zero = s == 0
    s1 = torch.where(zero, torch.ones_like(s), s)
    return torch.where(zero, torch.full_like(s, float("-inf")), m0 + torch.log(s1))


def _host_ints(v):
    return [int(x) for x in (v.tolist() if isinstance(v, torch.Tensor) else v)]


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """(neg_log_likelihood [N], log_alpha [N, T, 2 * max_target_length + 1])
    as aten::_ctc_loss (log_probs [T, N, C]; targets padded [N, S] or
    concatenated 1-d)."""
    T, N, C = log_probs.shape
    in_len, tg_len = _host_ints(input_lengths), _host_ints(target_lengths)
    if len(in_len) != N or len(tg_len) != N:
        raise RuntimeError(f"input_lengths must be of size batch_size ({N})")
    smax = max(tg_len) if tg_len else 0
    dev = log_probs.device
    if targets.dim() == 1:  # concatenated: gather each sample's labels into a padded row
        offs, o = [], 0
        for n in range(N):
            offs.append(o)
            o += tg_len[n]
        idx = [[offs[n] + min(s, max(tg_len[n] - 1, 0)) for s in range(smax)] for n in range(N)]
        tg = targets[torch.tensor(idx, dtype=torch.int64).reshape(N, smax).to(dev)] if smax else \
            targets.new_zeros(N, 0)
    else:
        tg = targets[:, :smax]
    tg = tg.to(torch.int64)
    L = 2 * smax + 1
    ext = torch.full((N, L), blank, dtype=torch.int64, device=dev)
    if smax:
        ext[:, 1::2] = tg
    lp = log_probs.gather(2, ext.unsqueeze(0).expand(T, N, L))  # [T, N, L]
    ninf = torch.full((N, 1), float("-inf"), dtype=log_probs.dtype, device=dev)
    # skip[n, s]: s - 2 -> s allowed (a label different from the one two back)
    skip = torch.zeros(N, L, dtype=torch.bool, device=dev)
    if L > 2:
        skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    start = torch.full((N, L), float("-inf"), dtype=log_probs.dtype, device=dev)
    init = torch.zeros(N, L, dtype=torch.bool)
    init[:, 0] = True
    for n in range(N):
        if tg_len[n] > 0 and L > 1:
            init[n, 1] = True
    alpha = torch.where(init.to(dev), lp[0], start)
    alphas = [alpha]
    for t in range(1, T):
        a1 = alpha
        a2 = torch.cat([ninf, alpha[:, :-1]], 1)
        a3 = torch.where(skip, torch.cat([ninf, ninf, alpha[:, :-2]], 1), torch.full_like(alpha, float("-inf"))) \
            if L > 2 else torch.full_like(alpha, float("-inf"))
        alpha = _lse(a1, a2, a3) + lp[t]
        alphas.append(alpha)
    la = torch.stack(alphas, 1)  # [N, T, L]
    # the end: alpha[T_n - 1, L_n - 1] (+ alpha[T_n - 1, L_n - 2] when the target is not empty)
    last = torch.tensor([[max(in_len[n] - 1, 0), 2 * tg_len[n]] for n in range(N)], dtype=torch.int64)
    prev = torch.tensor([[max(in_len[n] - 1, 0), max(2 * tg_len[n] - 1, 0)] for n in range(N)], dtype=torch.int64)
    rows = torch.arange(N).to(dev)
    e1 = la[rows, last[:, 0].to(dev), last[:, 1].to(dev)]
    e2 = la[rows, prev[:, 0].to(dev), prev[:, 1].to(dev)]
    has = torch.tensor([tg_len[n] > 0 for n in range(N)]).to(dev)
    e2 = torch.where(has, e2, torch.full_like(e2, float("-inf")))
    nll = -_lse(e1, e2)
    # PyTorch's CTC gradient with respect to log_probs is the true one plus
    # exp(log_probs) * grad over the frames t < input_length (it is the
    # gradient through a log_softmax it assumes); a zero-valued term gives
    # the composition the same gradient
    tmask = torch.tensor([[t < in_len[n] for n in range(N)] for t in range(T)], dtype=log_probs.dtype).to(dev)
    e = log_probs.exp()
    nll = nll + ((e - e.detach()) * tmask.unsqueeze(2)).sum((0, 2))
    return nll, la


def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


_autograd("_ctc_loss", ctc_loss)
_autograd("_ctc_loss.Tensor", ctc_loss_tensor)


# ---- weight normalization -------------------------------------------------------------------


def _norm_dims(v, g, dim):
    if v.dim() == 0 or dim not in (0, v.dim() - 1) or g.dim() != v.dim() or not v.is_floating_point():
        raise Unsupported("_weight_norm_interface: dim")  # CPU raises its message
    return [i for i in range(v.dim()) if i != dim]


@register("aten::_weight_norm_interface")
def weight_norm_interface(v, g, dim=0):
    dims = _norm_dims(v, g, dim)
    wide = torch.float32 if g.dtype == torch.bfloat16 else g.dtype
    norm = torch.linalg.vector_norm(v.to(wide), 2, dim=dims, keepdim=True).reshape(g.shape)
    w = v.to(wide) * (g.to(wide) / norm)
    return w.to(v.dtype), norm


@register("aten::_weight_norm_interface_backward")
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    dims = _norm_dims(saved_v, saved_g, dim)
    wide = saved_norms.dtype
    gw, v, g = grad_w.to(wide), saved_v.to(wide), saved_g.to(wide)
    grad_g = (gw * v).sum(dims, keepdim=True).reshape(g.shape) / saved_norms
    grad_v = (g / saved_norms) * (gw - v * (grad_g / saved_norms))
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


# ---- grid sampling --------------------------------------------------------------------------


def _unnormalize(c, size, align_corners):
    return (c + 1) / 2 * (size - 1) if align_corners else ((c + 1) * size - 1) / 2


def _reflect(c, low2, high2):
    """PyTorch's reflect_coordinates over [low2 / 2, high2 / 2]."""
    if low2 == high2:
        return torch.zeros_like(c)
    lo, span = low2 / 2, (high2 - low2) / 2
    c = (c - lo).abs()
    extra = torch.fmod(c, span)
    flips = torch.floor(c / span)
    return torch.where(torch.fmod(flips, 2) == 0, extra + lo, span - extra + lo)


def _pad(c, size, padding_mode, align_corners):
    if padding_mode == 2:  # reflection
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
    if padding_mode in (1, 2):  # border, and reflection's final clip
        c = c.clamp(0, size - 1)
    return c


def _cubic_weights(t, a=-0.75):
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at offset t."""
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners):
    d = input.dim() - 2
    if d not in (2, 3) or grid.dim() != d + 2 or grid.shape[-1] != d or grid.shape[0] != input.shape[0] or \
            interpolation_mode not in (0, 1, 2) or (interpolation_mode == 2 and d != 2) or padding_mode not in (0, 1, 2) or \
            input.dtype != grid.dtype or input.dtype not in (torch.float32, torch.float64):
        raise Unsupported("grid_sampler: arguments")  # bicubic, and CPU's messages
    n, ch = input.shape[:2]
    sizes = list(input.shape[2:])  # (D,) H, W
    out_sp = list(grid.shape[1:-1])
    # grid's last dim is (x, y[, z]): x indexes the last input dim
    raw = [_unnormalize(grid[..., d - 1 - k], sizes[k], align_corners) for k in range(d)]
    coords = [_pad(c, sizes[k], padding_mode, align_corners) for k, c in enumerate(raw)]
    flat = input.reshape(n, ch, -1)
    m = 1
    for s_ in out_sp:
        m *= s_

    def tap(idx):  # idx: per-dim integer tensors; (value, in-bounds mask)
        ok = None
        lin = None
        for k in range(d):
            inb = (idx[k] >= 0) & (idx[k] < sizes[k])
            ok = inb if ok is None else ok & inb
            ik = idx[k].clamp(0, sizes[k] - 1)
            lin = ik if lin is None else lin * sizes[k] + ik
        vals = flat.gather(2, lin.reshape(n, 1, m).expand(n, ch, m))
        return vals, ok.reshape(n, 1, m).to(input.dtype)

    if interpolation_mode == 2:  # bicubic: 4 x 4 taps around the unpadded point, each tap padded
        low = [torch.floor(c) for c in raw]
        weights = [_cubic_weights(c - f) for c, f in zip(raw, low)]
        out = None
        for i, j in itertools.product(range(4), repeat=2):
            idx = [_pad(low[0] + (i - 1), sizes[0], padding_mode, align_corners).to(torch.int64),
                   _pad(low[1] + (j - 1), sizes[1], padding_mode, align_corners).to(torch.int64)]
            vals, ok = tap(idx)
            term = vals * (ok * (weights[0][i] * weights[1][j]).reshape(n, 1, m))
            out = term if out is None else out + term
    elif interpolation_mode == 1:  # nearest, halves to even as nearbyint
        vals, ok = tap([torch.round(c).to(torch.int64) for c in coords])
        # the grid's gradient is zero, but defined (as CPU's)
        out = vals * ok + grid.abs().clamp(max=0).sum()
    else:
        low = [torch.floor(c) for c in coords]
        frac = [c - f for c, f in zip(coords, low)]
        low = [f.to(torch.int64) for f in low]
        out = None
        for corner in itertools.product((0, 1), repeat=d):
            w = None
            for k, hi in enumerate(corner):
                wk = frac[k] if hi else 1 - frac[k]
                w = wk if w is None else w * wk
            vals, ok = tap([low[k] + hi for k, hi in enumerate(corner)])
            term = vals * (ok * w.reshape(n, 1, m))
            out = term if out is None else out + term
    return out.reshape(n, ch, *out_sp)


register("aten::grid_sampler_2d", autograd=True)(_grid_sample)
register("aten::grid_sampler_3d", autograd=True)(_grid_sample)
