"""3-d pooling, group norm backward and the margin losses on the device
(torch_tpu/ops/nn_composite.py): values, indices and gradients against
PyTorch CPU, no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

T = torch.device("tpu")


def _check(fn, *inputs, grad=True, atol=1e-5, rtol=1e-4):
    cpu = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    dev = [x.to(T).requires_grad_(grad and x.is_floating_point()) for x in inputs]
    want = fn(*cpu)
    before = torch_tpu.fallback_counts()
    got = fn(*dev)
    want_l = list(want) if isinstance(want, tuple) else [want]
    got_l = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got_l, want_l):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), w.detach(), atol=atol, rtol=rtol)
    if grad:
        seed = torch.Generator().manual_seed(3)
        proj = torch.randn(want_l[0].shape, generator=seed)
        want_l[0].backward(proj)
        got_l[0].backward(proj.to(T))
        for c, d in zip(cpu, dev):
            if c.requires_grad:
                torch.testing.assert_close(d.grad.cpu(), c.grad, atol=atol, rtol=rtol)
    assert torch_tpu.fallback_counts() == before, "an op fell back to the CPU"


AVG = [
    dict(kernel_size=2),
    dict(kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=(1, 0, 1)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3, 3), stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=1, divisor_override=3),
]


@pytest.mark.parametrize("kw", AVG, ids=[str(i) for i in range(len(AVG))])
def test_avg_pool3d(kw):
    x = torch.randn(2, 3, 5, 6, 7)
    _check(lambda t: F.avg_pool3d(t, **kw), x)
    _check(lambda t: F.avg_pool3d(t, **kw), x[0])  # unbatched


@pytest.mark.parametrize("out", [(1, 1, 1), (2, 3, 4), (3, 5, 3), (5, 6, 7)])
def test_adaptive_pools_3d(out):
    x = torch.randn(2, 2, 5, 6, 7)
    _check(lambda t: F.adaptive_avg_pool3d(t, out), x)
    _check(lambda t: F.adaptive_max_pool3d(t, out, return_indices=True), x)


def test_adaptive_max_pool3d_ties_and_nan_pick_the_cpu_index():
    x = torch.zeros(1, 1, 4, 4, 4)
    x[0, 0, 1, 2, 3] = 1.0
    x[0, 0, 3, 0, 0] = 1.0  # a tie in another (d) plane
    x[0, 0, 2, 1, 1] = float("nan")
    for t in (x, torch.zeros(1, 1, 3, 3, 3)):
        v, i = F.adaptive_max_pool3d(t.to(T), (2, 2, 1), return_indices=True)
        vc, ic = F.adaptive_max_pool3d(t, (2, 2, 1), return_indices=True)
        torch.testing.assert_close(v.cpu(), vc, equal_nan=True)
        assert torch.equal(i.cpu(), ic)


def test_max_pool3d_with_indices():
    x = torch.randn(2, 3, 6, 5, 7)
    _check(lambda t: F.max_pool3d(t, 3, stride=2, padding=1, return_indices=True), x)
    _check(lambda t: F.max_pool3d(t, (2, 2, 3), ceil_mode=True, return_indices=True), x)


def test_group_norm_backward():
    x, w, b = torch.randn(4, 6, 5), torch.randn(6), torch.randn(6)
    _check(lambda t, ww, bb: F.group_norm(t, 3, ww, bb), x, w, b, atol=1e-4)


def test_margin_losses():
    x = torch.randn(5, 4)
    y = torch.tensor([0, 3, 1, 1, 2])
    w = torch.rand(4)
    _check(lambda t: F.multi_margin_loss(t, y.to(t.device)), x)
    _check(lambda t: F.multi_margin_loss(t, y.to(t.device), p=2, margin=0.5, weight=w.to(t.device),
                                         reduction="sum"), x)
    ym = torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 0, 0], [-1, 0, 0, 0], [2, 2, -1, 1]])
    _check(lambda t: F.multilabel_margin_loss(t, ym.to(t.device)), x)
    _check(lambda t: F.multilabel_margin_loss(t, ym.to(t.device), reduction="none"), x)
    for target in (torch.tensor(2), torch.tensor([2])):  # 1-d input: the loss takes the target's shape
        _check(lambda t: F.multi_margin_loss(t, target.to(t.device), reduction="none"), torch.randn(4))


@pytest.mark.parametrize("concat", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_ctc_loss(concat, reduction):
    g = torch.Generator().manual_seed(5)
    T_, N, C = 8, 3, 5
    x = torch.randn(T_, N, C, generator=g)
    tl = [4, 0, 3]
    il = [8, 6, 7]
    tg = torch.randint(1, C, (N, 4), generator=g)
    tg[2, 1] = tg[2, 0]  # a repeated label: no skip there
    targets = torch.cat([tg[n, :tl[n]] for n in range(N)]) if concat else tg

    def f(t):
        return F.ctc_loss(t.log_softmax(2), targets.to(t.device), torch.tensor(il), torch.tensor(tl),
                          reduction=reduction)

    _check(f, x, atol=1e-4)

    def raw(t):  # log_probs that are not a log_softmax: PyTorch's gradient convention
        return F.ctc_loss(t, targets.to(t.device), il, tl, reduction=reduction)

    _check(raw, -torch.rand(T_, N, C, generator=g) * 3, atol=1e-4)


def test_ctc_loss_zero_infinity():
    x = torch.randn(3, 1, 4)
    targets, il, tl = torch.tensor([[1, 2, 3, 1]]), [3], [4]  # impossible: target longer than the input

    def f(t):
        return F.ctc_loss(t.log_softmax(2), targets.to(t.device), il, tl, zero_infinity=True)

    _check(f, x)


@pytest.mark.parametrize("shape,dim", [((4, 3, 5), 0), ((4, 3, 5), 2), ((6, 3, 2, 2), 0), ((5, 3), 1)])
def test_weight_norm_interface(shape, dim):
    torch.manual_seed(0)
    v = torch.randn(shape)
    gshape = [1] * len(shape)
    gshape[dim] = shape[dim]
    g = torch.rand(gshape) + 0.5
    _check(lambda v, g: torch._weight_norm_interface(v, g, dim), v, g)


def test_weight_norm_modules():
    # parametrizations.weight_norm (dim 0) and the old hook (Wav2Vec2's
    # positional conv normalizes over the last dim)
    from torch.nn.utils.parametrizations import weight_norm

    def build(old_api):
        torch.manual_seed(1)
        conv = torch.nn.Conv1d(3, 4, 3)
        return torch.nn.utils.weight_norm(conv, dim=2) if old_api else weight_norm(conv)

    for old_api in (False, True):
        cpu, dev = build(old_api), build(old_api).to(T)
        x = torch.randn(2, 3, 7)
        before = torch_tpu.fallback_counts()
        cpu(x).square().sum().backward()
        dev(x.to(T)).square().sum().backward()
        assert torch_tpu.fallback_counts() == before
        for (name, a), b in zip(cpu.named_parameters(), dev.parameters()):
            torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    torch.manual_seed(0)
    grid = torch.rand(2, 4, 6, 2) * 2.6 - 1.3  # points outside [-1, 1] too
    _check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
           torch.randn(2, 3, 5, 7), grid, atol=1e-4 if mode == "bicubic" else 1e-5)  # 16 weighted taps


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_3d_and_affine_grid(mode, padding_mode):
    torch.manual_seed(1)
    grid = torch.rand(2, 3, 2, 4, 3) * 2.6 - 1.3
    _check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=False),
           torch.randn(2, 2, 4, 5, 3), grid)
    _check(lambda t, x: F.grid_sample(x, F.affine_grid(t, x.shape, align_corners=True), mode=mode,
                                      padding_mode=padding_mode, align_corners=True),
           torch.randn(2, 2, 3), torch.randn(2, 3, 8, 8))


def test_composed_kernel_declining_falls_back_with_gradients():
    # a composed kernel registered for autograd that declines a call (half
    # precision here) runs CPU's op between two copies, gradients included
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    g = torch.rand(1, 3, 3, 2, dtype=torch.float64) * 2 - 1
    xs, gs = x.half().float(), g.half().float()
    want_x, want_g = xs.clone().requires_grad_(), gs.clone().requires_grad_()
    F.grid_sample(want_x.half(), want_g.half(), align_corners=False).float().sum().backward()
    dx, dg = xs.half().to(T).requires_grad_(), gs.half().to(T).requires_grad_()
    F.grid_sample(dx, dg, align_corners=False).float().sum().backward()
    torch.testing.assert_close(dx.grad.float().cpu(), want_x.grad, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(dg.grad.float().cpu(), want_g.grad, atol=5e-2, rtol=5e-2)
