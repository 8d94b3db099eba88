"""Views and in-place ops: writes reach the base and every alias."""
import torch


def both(x):
    return x.clone(), x.clone().to("tpu")


def test_inplace_on_transposed_slice_updates_base():
    c, t = both(torch.arange(12.0).reshape(3, 4))
    c.t()[1:3].fill_(-1)
    t.t()[1:3].fill_(-1)
    assert torch.equal(t.cpu(), c)


def test_writes_through_two_aliases_are_seen_by_both():
    c, t = both(torch.zeros(4, 4))
    for x in (c, t):
        a = x[1]
        b = x[:, 2]
        a.add_(1)
        b.mul_(3).add_(2)
    assert torch.equal(t.cpu(), c)
    assert torch.equal(t[1].cpu(), c[1])


def test_index_add_inplace_with_index_tensor():
    c, t = both(torch.zeros(5))
    idx = torch.tensor([0, 3])
    c[idx] += 1
    t[idx.to("tpu")] += 1
    assert torch.equal(t.cpu(), c)


def test_detach_shares_storage():
    t = torch.ones(3, device="tpu")
    d = t.detach()
    d.mul_(5)
    assert torch.equal(t.cpu(), torch.full((3,), 5.0))


def test_version_counter_bumps_on_inplace():
    t = torch.ones(3, device="tpu")
    v0 = t._version
    t.add_(1)
    t[0].fill_(2)
    assert t._version > v0


def test_views_of_every_kind_read_correctly():
    c, t = both(torch.arange(60.0).reshape(3, 4, 5))
    cases = [
        lambda x: x.view(12, 5),
        lambda x: x.reshape(4, 15),
        lambda x: x.permute(2, 0, 1),
        lambda x: x.transpose(0, 2),
        lambda x: x[:, ::2, 1::2],
        lambda x: x[1],
        lambda x: x.select(2, 3),
        lambda x: x[:, 1:3],
        lambda x: x[:1].expand(4, 4, 5),
        lambda x: x.as_strided((2, 3), (7, 2), 3),
        lambda x: x[0].diagonal(),
        lambda x: x[0].diagonal(offset=1),
        lambda x: x.flatten()[::7],
        lambda x: x[0].unfold(1, 2, 2),
        lambda x: x.unsqueeze(1).squeeze(1),
        lambda x: x.narrow(2, 1, 3),
        lambda x: x.movedim(0, -1)[..., 1],
    ]
    for i, f in enumerate(cases):
        assert torch.equal(f(t).cpu(), f(c)), f"view case {i}"


def test_inplace_on_views_of_every_kind():
    cases = [
        lambda x: x[:, ::2].mul_(2),
        lambda x: x.t()[2].fill_(9),
        lambda x: x.diagonal().add_(100),
        lambda x: x.view(-1)[3:9].zero_(),
        lambda x: x[1:, 1:].sub_(0.5),
        lambda x: x.as_strided((2, 2), (5, 1), 1).copy_(torch.tensor([[7.0, 8.0], [9.0, 10.0]], device=x.device)),
    ]
    for i, f in enumerate(cases):
        c, t = both(torch.arange(25.0).reshape(5, 5))
        f(c)
        f(t)
        assert torch.equal(t.cpu(), c), f"in-place case {i}"


def test_copy_into_view_from_cpu_and_between_dtypes():
    c, t = both(torch.zeros(4, 4))
    src = torch.arange(4, dtype=torch.int64)
    c[:, 1].copy_(src)
    t[:, 1].copy_(src)
    assert torch.equal(t.cpu(), c)
    t[2].copy_(src.to("tpu"))
    c[2].copy_(src)
    assert torch.equal(t.cpu(), c)


def test_contiguous_clone_of_view_is_independent():
    c, t = both(torch.arange(6.0).reshape(2, 3))
    tt = t.t().contiguous()
    tt.fill_(0)
    assert torch.equal(t.cpu(), c)
    assert tt.is_contiguous()


def test_setitem_with_scalar_and_tensor():
    c, t = both(torch.zeros(3, 4))
    for x in (c, t):
        x[0] = 5
        x[1, 2:] = torch.tensor([1.0, 2.0], device=x.device)
        x[:, 0] = x[:, 1]
    assert torch.equal(t.cpu(), c)


def _programs_made():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


def test_slices_at_new_offsets_are_one_program():
    # a view's offset is a program input: 100 slices at 100 positions, an op
    # on each, make at most two programs (offset 0's static form, the rest)
    src_c = torch.arange(4000.0).reshape(400, 10)
    src = src_c.to("tpu")
    torch.tpu.synchronize()
    before = _programs_made()
    outs = []
    for i in range(100):  # a step each (fused mode runs each as its own graph)
        outs.append((src[i:i + 35] * 2 + 1).sum(0))
        torch.tpu.synchronize()
    assert _programs_made() - before <= 4  # the slice+mul+add and the sum, each at offset 0 and at the rest
    for i in (0, 1, 57, 99):
        torch.testing.assert_close(outs[i].cpu(), (src_c[i:i + 35] * 2 + 1).sum(0))


def test_row_writes_at_new_positions_are_one_program():
    # a KV-cache-like buffer written one row per step
    cache_c = torch.zeros(64, 8)
    cache = cache_c.to("tpu")
    rows = torch.randn(64, 8)
    for i in (0, 1):  # offset 0's program and the one of every other row
        cache[i] = rows[i].to("tpu")
        torch.tpu.synchronize()
    before = _programs_made()
    for i in range(2, 64):
        cache[i] = rows[i].to("tpu")
        cache_c[i] = rows[i]
        torch.tpu.synchronize()
    assert _programs_made() - before == 0
    cache_c[:2] = rows[:2]
    torch.testing.assert_close(cache.cpu(), cache_c)


def test_small_view_reads_need_no_program():
    x = torch.arange(600.0).reshape(20, 30).to("tpu")
    torch.tpu.synchronize()
    before = _programs_made()
    vals = [x[i, 3 + i].item() for i in range(20)] + [x.t()[5].tolist()]
    assert _programs_made() - before == 0
    assert vals[:20] == [float(i * 30 + 3 + i) for i in range(20)]
    assert vals[20] == [float(r * 30 + 5) for r in range(20)]
