"""torch._assert_async / _assert_async.msg / _functional_assert_async.msg on
the device (rule "assert_async" in csrc/ops/elementwise.c, a device-side
check): no host sync at the call; a false assertion raises CPU's exception
type and message at the next host wait (at the op in debug mode); a true one
raises nothing; the device keeps working; inside torch.compile(backend="tpu")
too.  Runs in every eager mode.
"""
import pytest
import torch

TPU = "tpu"


def _debug():
    return torch.tpu.get_eager_mode() == "debug"


def _host_waits():
    return torch.tpu.metrics()["host_wait"]["count"]


def _assert_fallbacks():
    """How many assertion calls ran on CPU so far."""
    return sum(v for k, v in torch.tpu.metrics()["fallbacks"].items() if "assert" in k)


def _cpu_error(fn, x):
    try:
        fn(x.cpu())
    except Exception as e:  # noqa: BLE001 - the reference outcome
        return type(e), str(e)
    return None


CALLS = {
    "default": lambda t: torch._assert_async(t),
    "msg": lambda t: torch._assert_async(t, "positions out of range for the rope cache"),
    "empty_msg": lambda t: torch._assert_async(t, ""),
    "functional": lambda t: torch.ops.aten._functional_assert_async.msg(t, "dep token check", torch.empty(0, device=t.device)),
}

ZEROS = {
    "float32": lambda d: torch.tensor([1.0, 0.0], device=d)[1],
    "int64": lambda d: torch.tensor(0, device=d),
    "bool": lambda d: torch.tensor([False], device=d),
    "float16_computed": lambda d: (torch.ones(3, dtype=torch.float16, device=d) * 0).sum(),
    "complex64": lambda d: torch.tensor(0j, dtype=torch.complex64, device=d),
}

NONZEROS = {
    "float32": lambda d: torch.tensor([1.0, -2.5], device=d)[1],
    "int32": lambda d: torch.tensor([7], dtype=torch.int32, device=d),
    "bool_computed": lambda d: (torch.arange(4, device=d) < 10).all(),
    "nan": lambda d: torch.tensor(float("nan"), device=d),
    "complex64_imag": lambda d: torch.tensor(2j, dtype=torch.complex64, device=d),
}


def _expect_later(call, x, exc, msg, at_op=None):
    """call(x) on tpu: no host wait at the call, `exc` with CPU's message at
    the next synchronize (debug: at the call)."""
    if _debug() if at_op is None else at_op:
        with pytest.raises(exc) as info:
            call(x)
    else:
        torch.tpu.synchronize()
        before = _host_waits()
        call(x)  # no raise, no wait here
        assert _host_waits() == before, "the assertion synced the host"
        with pytest.raises(exc) as info:
            torch.tpu.synchronize()
    assert str(info.value).startswith(msg), (str(info.value), msg)


@pytest.mark.parametrize("dt", sorted(ZEROS))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_false_assertion_raises_cpu_error_at_next_wait_without_sync_at_call(call, dt):
    fb = _assert_fallbacks()
    x = ZEROS[dt](TPU)
    ref = _cpu_error(CALLS[call], x)
    assert ref is not None and ref[0] is RuntimeError
    _expect_later(CALLS[call], x, ref[0], ref[1])
    assert _assert_fallbacks() == fb


@pytest.mark.parametrize("dt", sorted(NONZEROS))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_true_assertion_raises_nothing_and_does_not_sync(call, dt):
    fb = _assert_fallbacks()
    x = NONZEROS[dt](TPU)
    assert _cpu_error(CALLS[call], x) is None
    torch.tpu.synchronize()
    before = _host_waits()
    r = CALLS[call](x)
    if not _debug():
        assert _host_waits() == before
    torch.tpu.synchronize()
    if call == "functional":
        assert r.device.type == "tpu" and r.shape == (0,)
    else:
        assert r is None
    assert _assert_fallbacks() == fb


def test_functional_assert_returns_a_copy_of_its_dep_token():
    tok = torch.arange(3.0, device=TPU)
    r = torch.ops.aten._functional_assert_async.msg(torch.tensor(1, device=TPU), "m", tok)
    ref = torch.ops.aten._functional_assert_async.msg(torch.tensor(1), "m", tok.cpu())
    assert r.dtype == ref.dtype and torch.equal(r.cpu(), ref)
    tok.add_(1)  # a copy, not an alias
    assert torch.equal(r.cpu(), ref)


@pytest.mark.parametrize("shape", [(0,), (2,), (1, 2)])
def test_not_one_element_raises_cpu_error_at_the_call(shape):
    x = torch.ones(shape, device=TPU)
    for call in CALLS.values():
        ref = _cpu_error(call, x)
        with pytest.raises(ref[0]) as info:
            call(x)
        assert str(info.value) == ref[1]


def test_device_keeps_working_after_a_failed_assertion():
    x = torch.arange(6.0, device=TPU)
    _expect_later(CALLS["msg"], (x == 100).any(), RuntimeError, "positions out of range")
    y = (x * 3 + 1).sum()
    assert y.item() == (torch.arange(6.0) * 3 + 1).sum().item()
    torch._assert_async(x[1])  # a true one after the report: nothing
    torch.tpu.synchronize()


def test_failed_assertion_is_reported_by_the_next_host_read():
    if _debug():
        pytest.skip("debug mode raises at the op (test_false_assertion_...)")
    x = torch.arange(4.0, device=TPU)
    torch._assert_async(x[0], "first element is zero")
    z = x + 1  # recorded after the assertion: its read runs the assertion's program
    with pytest.raises(RuntimeError, match="^first element is zero"):
        z.sum().item()
    assert torch.equal(z.cpu(), torch.arange(4.0) + 1)


def test_assertion_reported_once():
    x = torch.zeros(1, device=TPU)
    _expect_later(CALLS["default"], x, RuntimeError, "Expected Tensor with single nonzero value")
    torch.tpu.synchronize()  # already reported: clean


def test_message_the_check_cannot_carry_runs_on_cpu_with_its_message():
    # "{}" is the check's payload placeholder: such a call takes the CPU
    # fallback (a host sync), raising CPU's error at the call
    x = torch.zeros((), device=TPU)
    with pytest.raises(RuntimeError, match=r"^bad \{\} value$"):
        torch._assert_async(x, "bad {} value")


def _bounded(pos, n):
    torch._assert_async(((pos >= 0) & (pos < n)).all(), "rope: position out of range")
    return pos.float() * 2


def test_assert_inside_torch_compile():
    torch._dynamo.reset()
    fb = _assert_fallbacks()
    cf = torch.compile(_bounded, backend="tpu")
    pos = torch.tensor([0, 3, 5], device=TPU)
    r = cf(pos, 8)
    torch.tpu.synchronize()
    assert torch.equal(r.cpu(), _bounded(pos.cpu(), 8))
    # a compiled graph is one program: reported at the next host wait, at
    # the compiled call in debug mode
    _expect_later(lambda p: cf(p, 4), pos, RuntimeError, "rope: position out of range")
    r = cf(pos, 8)  # keeps working
    assert torch.equal(r.cpu(), _bounded(pos.cpu(), 8))
    assert _assert_fallbacks() == fb


def test_compiled_graph_holds_the_assertion():
    # no graph break: the assertion is an op of the graph the tpu backend
    # records as one program (not an eager call between two graphs)
    import torch_tpu._compile as compile_mod

    torch._dynamo.reset()
    graphs = []
    runner = compile_mod._fused_runner

    def spy(gm, example_inputs):
        graphs.append(str(gm.graph))
        return runner(gm, example_inputs)

    compile_mod._fused_runner = spy
    try:
        torch.compile(_bounded, backend="tpu")(torch.tensor([1, 2], device=TPU), 8)
    finally:
        compile_mod._fused_runner = runner
    assert len(graphs) == 1 and "aten._assert_async.msg" in graphs[0], graphs
