"""compare(): one op on CPU and on tpu copies of its arguments, outputs and
gradients against PyTorch CPU (the test_ops_<family>.py files share it);
no_fallback(): runs a block and fails if any op in it went to the CPU
fallback."""
import torch

import torch_tpu

T = torch.device("tpu")


def no_fallback(fn):
    """fn(), failing if any aten op in it ran through the CPU fallback."""
    before = torch_tpu.fallback_counts()
    out = fn()
    after = torch_tpu.fallback_counts()
    grown = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not grown, f"ran through the CPU fallback: {grown}"
    return out


def _to(a, dev, rg):
    if isinstance(a, torch.Tensor):
        a = a.detach().clone().to(dev)
        return a.requires_grad_(rg) if rg else a
    return a


def compare(fn, *args, atol=1e-5, rtol=1e-4, grad=True, nograd=(), gtol=10, no_fallback=True):
    """fn on CPU and tpu copies: outputs equal (dtype, shape, values); then
    the gradients of sum(out[0] * r) for every float arg not in nograd; with
    no_fallback, nothing ran through the CPU fallback."""
    def rg(i, a):
        return grad and i not in nograd and isinstance(a, torch.Tensor) and a.is_floating_point()

    cpu = [_to(a, "cpu", rg(i, a)) for i, a in enumerate(args)]
    tpu = [_to(a, T, rg(i, a)) for i, a in enumerate(args)]
    before = torch_tpu.fallback_counts()
    oc, ot = fn(*cpu), fn(*tpu)
    ocs, ots = ([oc], [ot]) if isinstance(oc, torch.Tensor) else (list(oc), list(ot))
    for c, t in zip(ocs, ots):
        assert t.device.type == "tpu"
        assert t.dtype == c.dtype and t.shape == c.shape
        torch.testing.assert_close(t.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)
    if grad and any(isinstance(a, torch.Tensor) and a.requires_grad for a in cpu):
        r = torch.randn(ocs[0].shape, dtype=ocs[0].dtype)
        ocs[0].backward(r)
        ots[0].backward(r.to(T))
        for c, t in zip(cpu, tpu):
            if isinstance(c, torch.Tensor) and c.requires_grad:
                assert t.grad is not None
                torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol * gtol, rtol=rtol * gtol, equal_nan=True)
    if no_fallback:
        after = torch_tpu.fallback_counts()
        grown = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        assert not grown, f"ran through the CPU fallback: {grown}"
