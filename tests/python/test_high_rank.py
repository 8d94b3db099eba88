"""Tensors of rank 9 to 16 (issue 42 item 7: PyTorch's binary-ufunc tests
broadcast size-1 tensors of many dims; the engine stopped at rank 8 and
said "found tpu and tpu:0").  Values equal CPU's; past the engine's rank
(16) a clear RuntimeError names the rank."""
import pytest
import torch


@pytest.mark.parametrize("rank", [9, 12, 16])
def test_high_rank_ops_equal_cpu(tpu, rank):
    torch.manual_seed(rank)
    x = torch.randn((1,) * (rank - 2) + (3, 4))
    y = torch.randn((2,) + (1,) * (rank - 2) + (4,))
    t, u = x.to(tpu), y.to(tpu)
    cases = [
        lambda a, b: a + b,
        lambda a, b: torch.maximum(a, b) * 2 - 1,
        lambda a, b: (a * b).sum(-1),
        lambda a, b: (a + b).amax(dim=(0, -1), keepdim=True),
        lambda a, b: a.permute(*reversed(range(a.dim()))).contiguous(),
        lambda a, b: a.reshape(3, 4) @ b.reshape(2, 4).t(),
        lambda a, b: torch.cat([a, a], dim=-2),
        lambda a, b: (a + b).softmax(-1),
        lambda a, b: a.expand((2,) + a.shape[1:]).clone(),
        lambda a, b: a[..., 1:, ::2],
        lambda a, b: torch.where(a > 0, a, b),
    ]
    for i, f in enumerate(cases):
        want, got = f(x, y), f(t, u).cpu()
        assert got.shape == want.shape, i
        assert torch.allclose(got, want, atol=1e-6), i


def test_past_the_engine_rank_is_a_clear_error(tpu):
    x = torch.randn((1,) * 16 + (3,))
    with pytest.raises(RuntimeError, match="rank 17"):
        x.to(tpu) + 1
