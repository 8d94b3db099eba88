"""GrowingTensor / GrowingBuffer (torch_tpu/_growing.py): a sequence that
grows along one dim inside a bucketed buffer looks exactly like the plain
tensor it stands for (values compared with the same ops on CPU), and a loop
that appends to it compiles per bucket, not per length."""
import torch
import torch.nn.functional as F

from torch_tpu._growing import GrowingBuffer, GrowingTensor, bucket, unwrap


def _compiles():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


def test_bucket_is_a_power_of_two_of_at_least_64():
    assert [bucket(n) for n in (0, 1, 64, 65, 100, 128, 129)] == [64, 64, 64, 128, 128, 128, 256]
    assert bucket(10, at_least=200) == 256


def test_appended_sequence_equals_plain_cat(tpu):
    torch.manual_seed(0)
    ref = torch.randint(0, 100, (3, 5))
    g = GrowingTensor.wrap(ref.to(tpu), -1, 12)
    assert g.shape == (3, 5) and g.dtype == torch.int64 and g.device.type == "tpu"
    for _ in range(70):  # past the first bucket (64)
        col = torch.randint(0, 100, (3, 1))
        ref = torch.cat([ref, col], dim=-1)
        g = torch.cat([g, col.to(tpu)], dim=-1)
        assert isinstance(g, GrowingTensor) and g.shape == ref.shape
    assert torch.equal(unwrap(g).cpu(), ref)
    assert torch.equal(g[:, -1].cpu(), ref[:, -1])
    assert torch.equal(g[:, -3:].cpu(), ref[:, -3:])
    assert torch.equal(g[..., 2:9].cpu(), ref[..., 2:9])
    assert torch.equal(g[1].cpu(), ref[1])  # another dim: the plain view
    assert torch.equal((g * 2 + 1).cpu(), ref * 2 + 1)  # any other op sees the valid part
    assert torch.equal(g.sum(-1).cpu(), ref.sum(-1))
    assert torch.equal(unwrap(g.to(torch.float32)).cpu(), ref.float())


def test_pad_to_the_bucket_masks_past_the_valid_part(tpu):
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    g = GrowingTensor.wrap(mask.to(tpu), -1, 10)
    g = torch.cat([g, torch.ones(2, 1, dtype=torch.long, device=tpu)], -1)
    b = g.to(dtype=torch.bool)
    assert isinstance(b, GrowingTensor)
    cap = g._shared.buf.capacity
    ref = F.pad(torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], -1).bool(), (0, cap - 4))
    assert torch.equal(F.pad(b, (0, cap - 4)).cpu(), ref)
    assert torch.equal(F.pad(b, (0, 2)).cpu(), ref[:, :6])  # not up to the bucket: the plain pad


def test_appending_to_an_older_tensor_copies_first(tpu):
    base = GrowingTensor.wrap(torch.arange(4.).view(1, 4).to(tpu), -1)
    a = torch.cat([base, torch.full((1, 1), 10., device=tpu)], -1)
    b = torch.cat([base, torch.full((1, 1), 20., device=tpu)], -1)
    assert unwrap(a).cpu().tolist() == [[0., 1., 2., 3., 10.]]
    assert unwrap(b).cpu().tolist() == [[0., 1., 2., 3., 20.]]
    assert unwrap(base).cpu().tolist() == [[0., 1., 2., 3.]]


def test_a_decoding_loop_compiles_per_bucket_not_per_length(tpu):
    g = GrowingTensor.wrap(torch.zeros(2, 3, dtype=torch.long, device=tpu), -1, 40)
    tok = torch.ones(2, dtype=torch.long, device=tpu)
    for _ in range(3):  # warm-up: the step's programs
        g = torch.cat([g, tok[:, None]], -1)
        tok = (g[:, -1] + 1) % 50
    torch.tpu.synchronize()
    before = _compiles()
    for _ in range(30):
        g = torch.cat([g, tok[:, None]], -1)
        tok = (g[:, -1] * 3 + 1) % 50
        tok.cpu()
    assert _compiles() - before <= 2  # the new op mix of the loop body; nothing per length
    assert g.shape == (2, 36)


def test_growing_buffer_write_and_reserve(tpu):
    t = torch.randn(2, 3, 4)
    buf = GrowingBuffer.empty_like(t.to(tpu), 1)
    assert buf.capacity == 64 and buf.length == 0
    buf.append(t.to(tpu))
    more = torch.randn(2, 70, 4)
    buf.append(more.to(tpu))
    assert buf.capacity == 128 and buf.length == 73
    torch.testing.assert_close(buf.valid().cpu(), torch.cat([t, more], 1))
    assert float(buf.data[:, 73:].abs().sum()) == 0.0
