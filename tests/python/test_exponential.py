"""exponential_ on tpu (vLLM's sampler draws with it): distribution, the
generator's determinism, never 0, and CPU's errors."""
import math

import pytest
import torch

import torch_tpu  # noqa: F401

TPU = torch.device("tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("lambd", [1.0, 2.5])
def test_exponential_distribution(dtype, lambd):
    g = torch.Generator(device="tpu").manual_seed(11)
    x = torch.empty(200_000, device=TPU, dtype=dtype).exponential_(lambd, generator=g).cpu().double()
    assert x.min() > 0
    n = x.numel()
    # mean 1/lambda and P(x > t) = exp(-lambda t), within ~5 standard errors
    assert abs(x.mean().item() - 1 / lambd) < 5 / lambd / math.sqrt(n) + (0.01 if dtype == torch.bfloat16 else 0)
    for t in (0.1, 1.0, 2.0):
        p = math.exp(-lambd * t)
        tol = 5 * math.sqrt(p * (1 - p) / n) + (0.01 if dtype == torch.bfloat16 else 0)
        assert abs((x > t).double().mean().item() - p) < tol, t


def test_exponential_generator_determinism_and_views():
    g = torch.Generator(device="tpu")
    g.manual_seed(7)
    a = torch.empty(4, 1000, device=TPU).exponential_(generator=g).cpu()
    g.manual_seed(7)
    b = torch.empty(4, 1000, device=TPU).exponential_(generator=g).cpu()
    assert torch.equal(a, b)
    # a row drawn in place (vLLM: q[i].exponential_(generator=g_i)) depends on its generator only
    q = torch.ones(3, 1000, device=TPU)
    q[1].exponential_(generator=torch.Generator(device="tpu").manual_seed(7))
    row = torch.empty(1000, device=TPU).exponential_(generator=torch.Generator(device="tpu").manual_seed(7))
    got = q.cpu()
    if torch.tpu.get_eager_mode() == "fused":
        # One program computes both here, and XLA's CPU code generator
        # emits the row written into q (a pad fusion) with other float code
        # than the standalone result: the same draws, last bits may differ.
        torch.testing.assert_close(got[1], row.cpu(), rtol=3e-7, atol=0)
    else:
        assert torch.equal(got[1], row.cpu())
    assert torch.equal(got[[0, 2]], torch.ones(2, 1000))
    c = torch.empty(1000, device=TPU).exponential_(generator=torch.Generator(device="tpu").manual_seed(8)).cpu()
    assert not torch.equal(c, row.cpu())


def test_exponential_race_samples_the_distribution():
    """probs / Exp(1) then argmax (vLLM's random_sample) draws from probs."""
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 40_000
    g = torch.Generator(device="tpu").manual_seed(3)
    q = torch.empty(n, 4, device=TPU).exponential_(generator=g)
    idx = (probs.to(TPU).expand(n, 4) / q).argmax(dim=-1).cpu()
    freq = torch.bincount(idx, minlength=4).double() / n
    assert torch.allclose(freq, probs.double(), atol=0.015), freq


@pytest.mark.parametrize("dtype,lambd", [(torch.int32, 1.0), (torch.int64, 1.0), (torch.bool, 1.0),
                                         (torch.float32, 0.0), (torch.float32, -1.5),
                                         (torch.float32, float("nan"))])
def test_exponential_errors_match_cpu(dtype, lambd):
    with pytest.raises(RuntimeError) as cpu:
        torch.empty(3, dtype=dtype).exponential_(lambd)
    with pytest.raises(RuntimeError) as tpu:
        torch.empty(3, dtype=dtype, device=TPU).exponential_(lambd)
    assert str(tpu.value) == str(cpu.value)
