"""Fused mode cuts a long Python loop's graph at its period (runtime/loop.c):
a 200-step LSTMCell loop, forward and backward, runs on a bounded number of
programs, a second iteration compiles nothing, and values and gradients
equal CPU's."""
import pytest
import torch

import torch_tpu  # noqa: F401


class Seq(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.LSTMCell(1, 17)
        self.l2 = torch.nn.LSTMCell(17, 17)
        self.lin = torch.nn.Linear(17, 1)

    def forward(self, x):
        b = x.size(0)
        h, c, h2, c2 = (torch.zeros(b, 17, device=x.device) for _ in range(4))
        outs = []
        for t in x.split(1, dim=1):
            h, c = self.l1(t, (h, c))
            h2, c2 = self.l2(h, (h2, c2))
            outs.append(self.lin(h2))
        return torch.cat(outs, dim=1)


def step(m, x, y):
    m.zero_grad()
    loss = ((m(x) - y) ** 2).mean()
    loss.backward()
    return loss.item(), [p.grad.cpu() for p in m.parameters()]


def test_a_long_loop_runs_on_few_programs_and_matches_cpu():
    if torch.tpu.get_eager_mode() != "fused":
        pytest.skip("loop cuts are a fused-mode mechanism (strict runs op by op)")
    torch.manual_seed(0)
    ref = Seq()
    x, y = torch.randn(5, 200), torch.randn(5, 200)
    m = Seq()
    m.load_state_dict(ref.state_dict())
    m = m.to("tpu")
    want = step(ref, x, y)
    torch.tpu.reset_metrics()
    got = step(m, x.to("tpu"), y.to("tpu"))
    first = torch.tpu.metrics()
    assert first["cuts"]["loop"] > 10, torch.tpu.metrics_report()
    assert first["compile"]["count"] + first["disk_load"]["count"] <= 10, torch.tpu.metrics_report()
    torch.tpu.reset_metrics()
    got = step(m, x.to("tpu"), y.to("tpu"))
    again = torch.tpu.metrics()
    assert again["compile"]["count"] + again["disk_load"]["count"] == 0, torch.tpu.metrics_report()
    assert got[0] == pytest.approx(want[0], rel=1e-5)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
