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


def _fused_only():
    if torch.tpu.get_eager_mode() != "fused":
        pytest.skip("graph cuts are a fused-mode mechanism (strict runs op by op)")


def test_a_loop_of_in_place_ops_is_cut_too():
    # in-place ops record under hold_flush (computation + write, one
    # program); the loop cut waits for the write, not forever
    _fused_only()
    x = torch.zeros(3, 4)
    t = x.to("tpu")
    torch.tpu.reset_metrics()
    for i in range(200):
        t.add_(float(i % 7))
        x.add_(float(i % 7))
    torch.testing.assert_close(t.cpu(), x)
    m = torch.tpu.metrics()
    assert m["cuts"]["loop"] >= 4, torch.tpu.metrics_report()
    assert m["compile"]["count"] + m["disk_load"]["count"] <= 4, torch.tpu.metrics_report()


def test_a_cat_of_a_thousand_tensors_is_a_few_small_programs():
    # one program would hold a 1,000-operand concatenate (XLA flattens the
    # chunked cats), seconds to compile; chunk programs share one compile
    _fused_only()
    torch.manual_seed(0)
    xs = [torch.randn(5, 1) for _ in range(1000)]
    ts = [x.to("tpu") for x in xs]
    torch.tpu.synchronize()
    torch.tpu.reset_metrics()
    got = (torch.cat(ts, dim=1) * 2).cpu()
    m = torch.tpu.metrics()
    torch.testing.assert_close(got, torch.cat(xs, dim=1) * 2)
    assert m["cuts"]["wide_op"] >= 16, torch.tpu.metrics_report()
    assert m["compile"]["count"] + m["disk_load"]["count"] <= 4, torch.tpu.metrics_report()
    # mixed dtypes promote as on the CPU, across the chunks
    mixed = [x.to(torch.float16) if i % 3 else x for i, x in enumerate(xs[:130])]
    torch.testing.assert_close(torch.cat([x.to("tpu") for x in mixed]).cpu(), torch.cat(mixed))


def test_a_loop_is_cut_between_statements_not_inside_one():
    # `z = sin(z) * 0.5 + 0.1`: the loop cut falls due when the add is
    # recorded; made then, the statement's temporaries (sin * 0.5, the old
    # z) were alive and became outputs too, and XLA computed the window's
    # chain once per output (3x the work: fused ran 3x slower than strict).
    # Made when the next op starts, each window hands back z alone.
    _fused_only()
    x = torch.randn(64, 64)
    want = x
    for _ in range(100):
        want = torch.sin(want) * 0.5 + 0.1
    torch.tpu.reset_metrics()
    z = x.to("tpu")
    for _ in range(100):
        z = torch.sin(z) * 0.5 + 0.1
    torch.testing.assert_close(z.cpu(), want, rtol=1e-5, atol=1e-5)
    m = torch.tpu.metrics()
    assert m["cuts"]["loop"] >= 4, torch.tpu.metrics_report()
    # (the program list keeps every program of the process)
    windows = [p for p in m["programs"] if p["ops"] >= 32 and p["name"].endswith(": sin+mul+add")]
    assert windows and all(p["outputs"] == 1 for p in windows), m["programs"]
