"""as_strided over partial views of a storage, and tensor_split with a tpu
tensor of indices (issue 10, "Also"), compared with PyTorch CPU.

as_strided with a storage_offset addresses the input's whole storage, so
both devices must hold the same storage: the tensors here are views of a base
built on each device from the same data (x.to("tpu") of a partial view copies
only the view -- as on CUDA -- which is what made the OpInfo comparison of
as_strided.partial_views look wrong)."""
import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_util as U  # noqa: E402


def _both(fn, base):
    """fn(base on device) on the CPU and on the tpu, results on the CPU."""
    outs = []
    for dev in ("cpu", "tpu"):
        b = base.clone() if dev == "cpu" else base.to("tpu")
        outs.append(fn(b))
    return outs


@pytest.mark.parametrize("storage_offset", [None, 0, 3, 10, 12])
def test_as_strided_of_partial_view_reads_the_storage(storage_offset):
    base = torch.randn(20, generator=torch.Generator().manual_seed(0))
    kw = {} if storage_offset is None else {"storage_offset": storage_offset}

    def fn(b):
        v = b[5:15]
        o = torch.as_strided(v, (2, 2), (1, 2), **kw)
        return o.storage_offset(), o.cpu()

    (co, c), (to, t) = _both(fn, base)
    assert co == to
    torch.testing.assert_close(t, c, rtol=0, atol=0)


@pytest.mark.parametrize("storage_offset", [None, 0, 3, 10])
def test_as_strided_of_partial_view_gradient(storage_offset):
    base = torch.randn(20, generator=torch.Generator().manual_seed(1))
    kw = {} if storage_offset is None else {"storage_offset": storage_offset}
    g = torch.arange(4.0).reshape(2, 2) + 1

    def fn(b):
        v = b[5:15].requires_grad_(True)  # a leaf view, as OpInfo's sample
        o = torch.as_strided(v, (2, 2), (1, 2), **kw)
        (gv,) = torch.autograd.grad(o, v, g.to(b.device))
        return o.detach().cpu(), gv.cpu()

    (c, cg), (t, tg) = _both(fn, base)
    torch.testing.assert_close(t, c, rtol=0, atol=0)
    torch.testing.assert_close(tg, cg, rtol=0, atol=0)


def test_as_strided_of_partial_views_random_reads_and_writes():
    rnd = random.Random(0)
    for trial in range(40):
        n = rnd.randint(4, 30)
        base = torch.randn(n, generator=torch.Generator().manual_seed(trial))
        a = rnd.randint(0, n - 2)
        b_ = rnd.randint(a + 1, n)
        rank = rnd.randint(1, 3)
        size = [rnd.randint(1, 3) for _ in range(rank)]
        perm = list(range(rank))
        rnd.shuffle(perm)
        stride, acc = [0] * rank, 1
        for d in reversed(perm):  # no self-overlap: writes are well defined
            stride[d] = acc
            acc *= size[d] + rnd.randint(0, 1)
        span = sum((s - 1) * st for s, st in zip(size, stride))
        if span >= n:
            continue
        off = rnd.randint(0, n - 1 - span)

        def fn(bb):
            v = bb[a:b_]
            r = torch.as_strided(v, size, stride, off).to("cpu", copy=True)
            torch.as_strided(v, size, stride, off).mul_(-2).add_(1)  # write through it
            return r, bb.to("cpu", copy=True)

        (cr, cb), (tr, tb) = _both(fn, base)
        torch.testing.assert_close(tr, cr, rtol=0, atol=0, msg=f"read, trial {trial}")
        torch.testing.assert_close(tb, cb, rtol=0, atol=0, msg=f"storage after write, trial {trial}")


def test_opinfo_as_strided_partial_views_compares_every_sample():
    """The sweep copies as_strided samples storage and all: every sample
    (the storage_offset=10 one included) is compared, values and gradients."""
    op = U.load_op_db()["as_strided.partial_views"]
    r = U.run_op(op)
    assert r["status"] == "pass", r
    assert r["compared"] == r["samples"] == 3 and r["grad_compared"] == 3 and r["skipped_cpu_error"] == 0


# ---- tensor_split with a tensor of indices ----------------------------------------------

@pytest.mark.parametrize("indices", [[2, 5], [0, 0, 9], [7], 3, 1, 4])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_tensor_split_with_tpu_indices_matches_cpu(indices, dim):
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(2))
    idx = torch.tensor(indices)
    cpu = torch.tensor_split(x, idx, dim)
    xt = x.to("tpu")
    for where in ("tpu", "cpu"):  # indices on the tpu, and (as PyTorch wants) on the CPU
        tpu = torch.tensor_split(xt, idx.to(where), dim)
        assert len(tpu) == len(cpu)
        for a, e in zip(tpu, cpu):
            assert a.device.type == "tpu" and a._base is xt  # views, as on CPU
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)


def test_tensor_split_with_tpu_indices_gradient_and_inference_mode():
    x = torch.randn(10, generator=torch.Generator().manual_seed(3))
    w = torch.arange(3.0)
    xc = x.clone().requires_grad_()
    (torch.tensor_split(xc, torch.tensor([2, 5]))[1] * w).sum().backward()
    xt = x.to("tpu").requires_grad_()
    (torch.tensor_split(xt, torch.tensor([2, 5]).to("tpu"))[1] * w.to("tpu")).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=0, atol=0)
    with torch.inference_mode():
        got = torch.tensor_split(x.to("tpu"), torch.tensor([2, 5]).to("tpu"))
    for a, e in zip(got, torch.tensor_split(x, torch.tensor([2, 5]))):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)


@pytest.mark.parametrize("bad", [torch.tensor([[1]]), torch.tensor([1.5]), torch.tensor(0)])
def test_tensor_split_bad_tpu_indices_raise_as_on_cpu(bad):
    x = torch.arange(6.0)
    with pytest.raises(Exception) as cpu_err:
        torch.tensor_split(x, bad)
    with pytest.raises(type(cpu_err.value)) as tpu_err:
        torch.tensor_split(x.to("tpu"), bad.to("tpu"))
    assert str(tpu_err.value) == str(cpu_err.value)


def test_opinfo_tensor_split_samples_with_every_tensor_on_tpu():
    """OpInfo's own samples with the indices moved to the tpu too (the sweep
    used to retry them with the indices left on the CPU)."""
    op = U.load_op_db()["tensor_split"]
    n = 0
    for sample in op.sample_inputs("cpu", torch.float32):
        cpu = op(sample.input, *sample.args, **sample.kwargs)
        t_in, t_args, t_kwargs = U._sample_copy(sample, "tpu")
        assert all(a.device.type == "tpu" for a in U._flat((t_args, t_kwargs)) if isinstance(a, torch.Tensor))
        got = op(t_in, *t_args, **t_kwargs)
        assert len(got) == len(cpu)
        for a, e in zip(got, cpu):
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)
        n += any(isinstance(a, torch.Tensor) for a in U._flat((sample.args, sample.kwargs)))
    assert n > 0, "no sample passes a tensor of indices"
