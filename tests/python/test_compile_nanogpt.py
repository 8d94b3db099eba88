"""torch.compile(backend="tpu") training of a nanoGPT-shaped model: weight
tying, causal SDPA, GELU, LayerNorm with and without bias, AdamW (fused=False)
with weight-decay groups, grad clipping, bfloat16 autocast on tpu.  Compiled
losses, gradients and parameters are compared with CPU eager.

The regression: AOTAutograd plans strides with the meta kernels (a _to_copy
of a transposed tensor keeps its permuted layout) while tpu kernels return
contiguous results, so a `view` in the attention backward under autocast was
refused ("view size is not compatible ...").  _compile.conform_layouts gives
the operands of stride-reading ops the planned layout."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_tpu import _compile

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 65, 32, 2, 2, 64


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's bias=False)."""

    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self, bias, dropout):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD, bias=bias)
        self.c_proj = nn.Linear(EMBD, EMBD, bias=bias)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, bias, dropout):
        super().__init__()
        self.ln_1 = LayerNorm(EMBD, bias)
        self.attn = Attention(bias, dropout)
        self.ln_2 = LayerNorm(EMBD, bias)
        self.c_fc = nn.Linear(EMBD, 4 * EMBD, bias=bias)
        self.gelu = nn.GELU()
        self.mlp_proj = nn.Linear(4 * EMBD, EMBD, bias=bias)
        self.mlp_drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_drop(self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x)))))


class GPT(nn.Module):
    def __init__(self, bias=True, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(bias, dropout) for _ in range(LAYERS))
        self.ln_f = LayerNorm(EMBD, bias)
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * LAYERS) if name.endswith("proj.weight") else 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def _optimizer(model, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), fused=False)


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, VOCAB, (4, BLOCK), generator=g), torch.randint(0, VOCAB, (4, BLOCK), generator=g))
            for _ in range(n)]


def _train(device, compiled, amp, bias, steps=3, lr=1e-3, dropout=0.0, record_grads=False):
    torch.manual_seed(0)
    model = GPT(bias, dropout).to(device)
    opt = _optimizer(model, lr)
    run = torch.compile(model, backend="tpu") if compiled else model
    losses, grads = [], []
    for x, y in _batches(steps):
        x, y = x.to(device), y.to(device)
        if amp:
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                _, loss = run(x, y)
        else:
            _, loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if record_grads and not grads:
            grads = [p.grad.detach().float().cpu() for p in model.parameters()]
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().float().cpu())
    return model, torch.stack(losses), grads


def _rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("bias", [True, False])
def test_compiled_gpt_float32_matches_cpu_eager(bias):
    torch._dynamo.reset()
    model, losses, grads = _train("tpu", True, False, bias, record_grads=True)
    ref, rlosses, rgrads = _train("cpu", False, False, bias, record_grads=True)
    torch.testing.assert_close(losses, rlosses, rtol=1e-5, atol=1e-5)
    for g, rg in zip(grads, rgrads):
        torch.testing.assert_close(g, rg, rtol=1e-3, atol=1e-5)
    assert model.wte.weight is model.lm_head.weight  # tying survives compile and steps
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=2e-5, msg=name)


@pytest.mark.parametrize("bias", [True, False])
def test_compiled_gpt_autocast_bfloat16_matches_cpu_eager(bias):
    # failed before the fix: the attention backward's view under autocast
    torch._dynamo.reset()
    model, losses, grads = _train("tpu", True, True, bias, record_grads=True)
    ref, rlosses, rgrads = _train("cpu", False, True, bias, record_grads=True)
    torch.testing.assert_close(losses, rlosses, rtol=0, atol=5e-3)
    for g, rg in zip(grads, rgrads):  # bfloat16 products: compare as vectors
        assert _rel(g, rg) < 3e-2
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        p = p.detach().float().cpu()
        # a bias whose gradient is rounding noise (the key bias: softmax does
        # not see it) moves by Adam's lr in either direction: a looser bound
        assert _rel(p, q.detach()) < (1e-2 if p.dim() >= 2 else 5e-2), name


def test_compiled_gpt_dropout_trains_and_evaluates_as_cpu():
    torch._dynamo.reset()
    model, losses, _ = _train("tpu", True, True, False, steps=3, lr=3e-3, dropout=0.1)
    assert torch.isfinite(losses).all()
    ref = GPT(False, 0.1)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    model.eval()
    ref.eval()  # dropout off: the trained weights must give CPU's logits
    x, y = _batches(1)[0]
    with torch.no_grad():
        logits, loss = torch.compile(model, backend="tpu")(x.to("tpu"), y.to("tpu"))
        rlogits, rloss = ref(x, y)
    torch.testing.assert_close(logits.cpu(), rlogits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss.cpu(), rloss, rtol=1e-5, atol=1e-5)


def test_view_after_layout_keeping_op_forward_and_backward():
    # on CPU the _to_copy keeps the transposed layout, so the second transpose
    # is contiguous and the view valid; tpu's _to_copy is contiguous
    def f(x):
        y = x.transpose(1, 2).to(torch.bfloat16)
        return y.transpose(1, 2).reshape(2, 3, 20).float().sin()

    torch._dynamo.reset()
    x = torch.randn(2, 3, 4, 5)
    xt = x.to("tpu").requires_grad_()
    out = torch.compile(f, backend="tpu")(xt)
    xr = x.clone().requires_grad_()
    ref = f(xr)
    torch.testing.assert_close(out.cpu(), ref)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xr.grad)


def test_as_strided_reads_the_planned_layout():
    # mul of a transposed tensor keeps its layout on CPU: as_strided of the
    # result reads the storage in that order
    def f(x):
        return (x.t() * 2).as_strided((3, 4), (4, 1))

    torch._dynamo.reset()
    x = torch.arange(12.0).view(4, 3)
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x.to("tpu")).cpu(), f(x))


def test_conform_layouts_leaves_matching_layouts_alone():
    t = torch.randn(3, 4, device="tpu")
    assert _compile._planned_layout(t, (3, 4), (4, 1)) is t
    assert _compile._planned_layout(t, (3, 4), (1, 3)).stride() == (1, 3)
    torch.testing.assert_close(_compile._planned_layout(t, (3, 4), (1, 3)).cpu(), t.cpu())
    assert _compile._dense((2, 3, 4), (12, 1, 3)) and not _compile._dense((2, 3), (6, 2))
