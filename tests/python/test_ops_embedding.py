"""embedding_bag on the device (torch_tpu/ops/embedding.py): values and
gradients against PyTorch CPU, no CPU fallback."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from op_compare import T, compare, no_fallback

IDX = torch.tensor([1, 2, 0, 5, 4, 4, 9, 2])
OFF = torch.tensor([0, 3, 3, 5])  # the second bag is empty


@pytest.mark.parametrize("mode,padding_idx,last", list(itertools.product(["sum", "mean", "max"], [None, 4], [False, True])))
def test_embedding_bag(mode, padding_idx, last):
    torch.manual_seed(0)
    off = torch.cat([OFF, torch.tensor([8])]) if last else OFF
    compare(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx, include_last_offset=last),
            torch.randn(10, 3), IDX, off)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_all_outputs(mode):
    # offset2bag, bag_size and max_indices as CPU's (CPU's sum keeps no offset2bag)
    w = torch.randn(10, 3)
    want = torch._embedding_bag(w, IDX, OFF, False, mode, False, None, False, 4)
    got = no_fallback(lambda: torch._embedding_bag(w.to(T), IDX.to(T), OFF.to(T), False, mode, False, None, False, 4))
    torch.testing.assert_close(got[0].cpu(), want[0])
    for g, c in zip(got[1:], want[1:]):
        if c.numel():
            assert torch.equal(g.cpu(), c)


def test_embedding_bag_per_sample_weights_and_2d_input():
    torch.manual_seed(1)
    compare(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p, padding_idx=2),
            torch.randn(10, 3), IDX, OFF, torch.rand(8))
    compare(lambda w, i: F.embedding_bag(i, w, mode="mean"), torch.randn(10, 3), IDX.reshape(2, 4))
    m = torch.nn.EmbeddingBag(10, 3, mode="max")
    x = IDX.reshape(4, 2)
    no_fallback(lambda: torch.testing.assert_close(m.to(T)(x.to(T)).cpu(), m.cpu()(x)))


def test_embedding_bag_scale_grad_by_freq():
    # Each index's gradient divided by its count in the batch, as
    # F.embedding(scale_grad_by_freq=True) summed per bag (CPU's
    # embedding_bag divides some rows by the count of another index).
    w = torch.randn(10, 3)
    r = torch.randn(4, 3)
    ref = w.clone().requires_grad_()
    rows = F.embedding(IDX, ref, scale_grad_by_freq=True)
    bags = torch.zeros(4, 3).index_add(0, torch.tensor([0, 0, 0, 2, 2, 3, 3, 3]), rows)
    (bags * r).sum().backward()
    dev = w.to(T).requires_grad_()
    out = no_fallback(lambda: F.embedding_bag(IDX.to(T), dev, OFF.to(T), mode="sum", scale_grad_by_freq=True))
    (out * r.to(T)).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), bags.detach())
    torch.testing.assert_close(dev.grad.cpu(), ref.grad)


def test_embedding_bag_index_out_of_range_is_runtime_error():
    # CPU and CUDA raise RuntimeError here (embedding raises IndexError)
    w = torch.randn(5, 3, device=T)
    with pytest.raises(RuntimeError, match="takes value 7 which is not in the valid range"):
        F.embedding_bag(torch.tensor([1, 7], device=T), w, torch.tensor([0], device=T)).cpu()
    assert torch.equal(F.embedding_bag(torch.tensor([1, 2], device=T), w, torch.tensor([0], device=T), mode="sum").cpu(),
                       (w[1] + w[2]).cpu().unsqueeze(0))  # the device keeps working


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_rows_in_place(norm_type):
    torch.manual_seed(0)
    w = torch.randn(6, 4) * 3
    idx = torch.tensor([[1, 2], [2, 5]])  # 2 twice, 0/3/4 untouched
    cpu = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, max_norm=1.0, norm_type=norm_type)
    dev = torch.nn.Embedding.from_pretrained(w.clone().to(T), freeze=False, max_norm=1.0, norm_type=norm_type)
    want = cpu(idx)
    got = no_fallback(lambda: dev(idx.to(T)))
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach())
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad)
