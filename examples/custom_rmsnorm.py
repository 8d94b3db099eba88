"""A fused RMSNorm as a user kernel in a Hugging Face Llama model.

The forward and the backward are StableHLO functions written here (one
kernel each: torch_tpu.library.stablehlo_op), tied together with
torch.library.register_autograd; every LlamaRMSNorm of a tiny Llama is
replaced by a module calling them.  With JAX installed (requirements-jax.txt)
the same norm is also a JAX function (torch_tpu.library.jax_op, backward by
jax.vjp).  The script checks that the outputs and gradients equal the stock
model's, on tpu and on CPU, and times a fused training step of both models.

    python examples/custom_rmsnorm.py            # TORCH_TPU_EAGER_MODE=fused by default here
"""
import copy
import os
import sys
import time

os.environ.setdefault("TORCH_TPU_EAGER_MODE", "fused")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torch_tpu  # noqa: E402,F401
from torch_tpu import library  # noqa: E402

_ELEM = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _t(shape, dtype):
    return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEM[dtype] + ">"


def _common(shape, eps):
    """Types and the lines computing xf (x in f32), inv (1/rms, broadcast)
    and xhat = xf * inv, shared by the forward and backward kernels."""
    r = len(shape)
    f32, red = _t(shape, torch.float32), _t(shape[:-1], torch.float32)
    keep = ", ".join(str(i) for i in range(r - 1))
    lines = f"""
  %sq = stablehlo.multiply %xf, %xf : {f32}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %ss = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [{r - 1}] : ({f32}, tensor<f32>) -> {red}
  %n = stablehlo.constant dense<{float(shape[-1]):e}> : {red}
  %ms = stablehlo.divide %ss, %n : {red}
  %eps = stablehlo.constant dense<{eps:e}> : {red}
  %var = stablehlo.add %ms, %eps : {red}
  %inv0 = stablehlo.rsqrt %var : {red}
  %inv = stablehlo.broadcast_in_dim %inv0, dims = [{keep}] : ({red}) -> {f32}
  %xhat = stablehlo.multiply %xf, %inv : {f32}"""
    return f32, red, keep, lines


def rmsnorm_forward_text(x, w, eps):
    """y = w * (x / rms(x)).to(x.dtype), as LlamaRMSNorm computes it."""
    shape, dt, r = tuple(x.shape), x.dtype, x.dim()
    tx, tw = _t(shape, dt), _t(w.shape, w.dtype)
    f32, _, _, lines = _common(shape, eps)
    return f"""
func.func @rmsnorm_fwd(%x: {tx}, %w: {tw}) -> {tx} {{
  %xf = stablehlo.convert %x : ({tx}) -> {f32}{lines}
  %xh = stablehlo.convert %xhat : ({f32}) -> {tx}
  %wb = stablehlo.broadcast_in_dim %w, dims = [{r - 1}] : ({tw}) -> {tx}
  %y = stablehlo.multiply %wb, %xh : {tx}
  return %y : {tx}
}}
"""


def rmsnorm_backward_text(x, w, dy, eps):
    """(dx, dw) of the forward for upstream gradient dy (f32 inside)."""
    shape, dt, r = tuple(x.shape), x.dtype, x.dim()
    tx, tw = _t(shape, dt), _t(w.shape, w.dtype)
    f32, red, keep, lines = _common(shape, eps)
    hf = _t(w.shape, torch.float32)
    lead = ", ".join(str(i) for i in range(r - 1))
    return f"""
func.func @rmsnorm_bwd(%x: {tx}, %w: {tw}, %dy: {tx}) -> ({tx}, {tw}) {{
  %xf = stablehlo.convert %x : ({tx}) -> {f32}{lines}
  %dyf = stablehlo.convert %dy : ({tx}) -> {f32}
  %gwf = stablehlo.multiply %dyf, %xhat : {f32}
  %gw0 = stablehlo.reduce(%gwf init: %zero) applies stablehlo.add across dimensions = [{lead}] : ({f32}, tensor<f32>) -> {hf}
  %gw = stablehlo.convert %gw0 : ({hf}) -> {tw}
  %wf = stablehlo.convert %w : ({tw}) -> {hf}
  %wb = stablehlo.broadcast_in_dim %wf, dims = [{r - 1}] : ({hf}) -> {f32}
  %dxh = stablehlo.multiply %dyf, %wb : {f32}
  %p = stablehlo.multiply %dxh, %xhat : {f32}
  %ps = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [{r - 1}] : ({f32}, tensor<f32>) -> {red}
  %pm = stablehlo.divide %ps, %n : {red}
  %pb = stablehlo.broadcast_in_dim %pm, dims = [{keep}] : ({red}) -> {f32}
  %xp = stablehlo.multiply %xhat, %pb : {f32}
  %d = stablehlo.subtract %dxh, %xp : {f32}
  %gxf = stablehlo.multiply %inv, %d : {f32}
  %gx = stablehlo.convert %gxf : ({f32}) -> {tx}
  return %gx, %gw : {tx}, {tw}
}}
"""


EPS = 1e-6


def _ref_forward(x, w, eps=EPS):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _ref_backward(x, w, dy, eps=EPS):
    # the backward kernel's formula in PyTorch (a kernel runs below autograd)
    xf, dyf = x.float(), dy.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    xhat = xf * inv
    gw = (dyf * xhat).sum(dim=tuple(range(x.dim() - 1))).to(w.dtype)
    dxh = dyf * w.float()
    gx = inv * (dxh - xhat * (dxh * xhat).mean(-1, keepdim=True))
    return gx.to(x.dtype), gw


# The ops (their CPU kernels: the same formula in PyTorch, so the custom
# model runs on CPU too).  One kernel variant per shape/dtype, compiled once.
rmsnorm_fwd = library.stablehlo_op("example::rmsnorm", lambda x, w: rmsnorm_forward_text(x, w, EPS),
                                   reference=_ref_forward)
rmsnorm_bwd = library.stablehlo_op("example::rmsnorm_backward",
                                   lambda x, w, dy: rmsnorm_backward_text(x, w, dy, EPS), num_outputs=2,
                                   reference=lambda x, w, dy: tuple(_ref_backward(x, w, dy)))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    x, w = ctx.saved_tensors
    return tuple(rmsnorm_bwd(x, w, dy.contiguous()))


torch.library.register_autograd(rmsnorm_fwd, _backward, setup_context=_setup)


def jax_rmsnorm_op():
    """The same norm as a JAX function (None without JAX)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def rms(x, w):
        xf = x.astype(jnp.float32)
        xhat = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + EPS)
        return w * xhat.astype(x.dtype)

    return library.jax_op("example::rmsnorm_jax", rms, vjp=True)


class CustomRMSNorm(nn.Module):
    """LlamaRMSNorm's parameters, the kernel's computation."""

    def __init__(self, norm, op):
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = getattr(norm, "variance_epsilon", getattr(norm, "eps", EPS))
        if self.variance_epsilon != EPS:
            raise ValueError(f"the kernels are built for eps={EPS}, the model has {self.variance_epsilon}")
        self.op = op

    def forward(self, hidden_states):
        return self.op(hidden_states.contiguous(), self.weight)


def swap_rmsnorm(model, op):
    """Replaces every *RMSNorm module of the model; returns how many."""
    n = 0
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            if type(child).__name__.endswith("RMSNorm"):
                setattr(mod, cname, CustomRMSNorm(child, op))
                n += 1
    return n


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=EPS, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    return out.logits.detach().cpu(), out.loss.detach().cpu(), {
        n.removeprefix("_orig_mod."): p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}


def compare(tag, got, want, atol=2e-5, rtol=1e-4):
    logits, loss, grads = got
    wl, wloss, wgrads = want
    torch.testing.assert_close(logits, wl, atol=atol, rtol=rtol)
    torch.testing.assert_close(loss, wloss, atol=atol, rtol=rtol)
    assert grads.keys() == wgrads.keys(), (tag, sorted(set(grads) ^ set(wgrads)))
    worst = 0.0
    for k in grads:
        torch.testing.assert_close(grads[k], wgrads[k], atol=atol, rtol=rtol, msg=lambda m: f"{tag} {k}: {m}")
        worst = max(worst, (grads[k] - wgrads[k]).abs().max().item())
    print(f"{tag}: logits, loss and {len(grads)} gradients equal the stock CPU model's "
          f"(largest gradient difference {worst:.2e})")


def time_step(model, ids, steps=10):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()

    for _ in range(3):
        step()
    torch.tpu.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.tpu.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3


def main():
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    stock = tiny_llama()
    want = loss_and_grads(stock, ids)

    custom = copy.deepcopy(stock)
    n = swap_rmsnorm(custom, rmsnorm_fwd)
    print(f"replaced {n} LlamaRMSNorm modules with the StableHLO kernel (eager mode {torch.tpu.get_eager_mode()})")
    compare("custom model on CPU", loss_and_grads(custom, ids), want)
    compare("custom model on tpu", loss_and_grads(custom.to("tpu"), ids.to("tpu")), want)
    stock_tpu = copy.deepcopy(stock).to("tpu")
    compare("stock model on tpu", loss_and_grads(stock_tpu, ids.to("tpu")), want)

    cf = copy.deepcopy(stock)
    swap_rmsnorm(cf, rmsnorm_fwd)
    cf = cf.to("tpu")
    compiled = torch.compile(cf, backend="tpu", fullgraph=True)
    compare("custom model compiled (backend tpu, fullgraph)", loss_and_grads(compiled, ids.to("tpu")), want)

    jop = jax_rmsnorm_op()
    if jop is not None:
        jm = copy.deepcopy(stock)
        swap_rmsnorm(jm, jop)
        compare("JAX-kernel model on tpu", loss_and_grads(jm.to("tpu"), ids.to("tpu")), want)
    else:
        print("JAX is not installed: the jax_op route is skipped (pip install -r requirements-jax.txt)")

    if "--no-time" not in sys.argv:
        a = time_step(stock_tpu, ids.to("tpu"))
        b = time_step(custom, ids.to("tpu"))
        a2 = time_step(stock_tpu, ids.to("tpu"))
        b2 = time_step(custom, ids.to("tpu"))
        print(f"training step on tpu ({torch.tpu.get_eager_mode()}): stock RMSNorm {min(a, a2):.2f} ms, "
              f"custom kernel {min(b, b2):.2f} ms (best of two runs of 10 steps each)")


if __name__ == "__main__":
    main()
