"""Device-side checks in the op rules (csrc/ops/ops.h tpu_op_check*): errors
only the data shows (an index out of range, an integer divisor of zero, a
target out of range, a probability outside [0, 1]) raise the exception type
PyTorch's CPU kernel raises, at the next host read (at the op in debug mode),
naming the op and the bad value; the device keeps working afterwards; good
inputs give CPU's values.  Runs in every eager mode (TORCH_TPU_EAGER_MODE).
"""
import pytest
import torch
import torch.nn.functional as F

TPU = "tpu"


def _x(dev):
    return torch.arange(12.0, device=dev).reshape(3, 4)


def _i(v, dev, dtype=torch.int64):
    return torch.tensor(v, dtype=dtype, device=dev)


# name -> (fn(dev, i) with i the index to put in, good i, bad i's, CPU's
# exception type, a piece of CPU's message the tpu message must contain)
INDEX_CASES = {
    "gather": (lambda d, i: torch.gather(_x(d), 0, _i([[i, 0, 2, 1]], d)), 2, [3, -1],
               RuntimeError, "is out of bounds for dimension 0 with size 3"),
    "gather_dim1": (lambda d, i: torch.gather(_x(d), 1, _i([[i], [0], [3]], d)), 3, [4, -2],
                    RuntimeError, "is out of bounds for dimension 1 with size 4"),
    "index_select": (lambda d, i: torch.index_select(_x(d), 0, _i([0, i], d)), 2, [3, -1],
                     IndexError, "index out of range in self"),
    "index_select_dim1": (lambda d, i: torch.index_select(_x(d), 1, _i([0, i], d)), 3, [4, -1],
                          RuntimeError, "INDICES element is out of DATA bounds, id="),
    "index_select_int32": (lambda d, i: torch.index_select(_x(d), 0, _i([i, 1], d, torch.int32)), 2, [3],
                           IndexError, "index out of range in self"),
    "embedding": (lambda d, i: F.embedding(_i([[0, i], [1, 1]], d), _x(d)), 2, [3, -1],
                  IndexError, "index out of range in self"),
    "scatter_value": (lambda d, i: _x(d).scatter_(0, _i([[i, 0, 0, 0]], d), 7.0), 1, [3, -1],
                      RuntimeError, "is out of bounds for dimension 0 with size 3"),
    "scatter_src": (lambda d, i: _x(d).scatter(1, _i([[i, 0]], d), torch.ones(1, 2, device=d)), 3, [4],
                    RuntimeError, "is out of bounds for dimension 1 with size 4"),
    "scatter_add": (lambda d, i: _x(d).scatter_add_(0, _i([[i, 0, 0, 0]], d), torch.ones(1, 4, device=d)), 2,
                    [3, -3], RuntimeError, "is out of bounds for dimension 0 with size 3"),
    "scatter_reduce": (lambda d, i: _x(d).scatter_reduce(0, _i([[i, 0, 1, 0]], d), torch.ones(1, 4, device=d),
                                                         "amax", include_self=False), 0, [3],
                       RuntimeError, "is out of bounds for dimension 0 with size 3"),
    "index_add": (lambda d, i: _x(d).index_add_(0, _i([0, i], d), torch.ones(2, 4, device=d)), 2, [3, -1],
                  RuntimeError, "is out of bounds for dimension 0 with size 3"),
    "index_copy": (lambda d, i: _x(d).index_copy_(1, _i([0, i], d), torch.ones(3, 2, device=d)), 3, [4],
                   IndexError, "index_copy_(): index 4 is out of bounds for dimension 1 with size 4"),
    "index_fill": (lambda d, i: _x(d).index_fill_(0, _i([i], d), -1.0), -1, [3, -4],
                   IndexError, "is out of bounds for dimension 0 with size 3"),
    "getitem": (lambda d, i: _x(d)[_i([0, i], d)], -3, [3, -4],
                IndexError, "is out of bounds for dimension 0 with size 3"),
    "getitem_dim1": (lambda d, i: _x(d)[:, _i([[i], [1]], d)], -4, [4],
                     IndexError, "index 4 is out of bounds for dimension 1 with size 4"),
    "getitem_two": (lambda d, i: _x(d)[_i([0, 1], d), _i([i, 0], d)], 3, [9],
                    IndexError, "index 9 is out of bounds for dimension 1 with size 4"),
    "setitem": (lambda d, i: _x(d).index_put_((_i([i, 0], d),), torch.tensor(5.0, device=d)), -1, [3, -4],
                IndexError, "is out of bounds for dimension 0 with size 3"),
    "index_put_acc": (lambda d, i: _x(d).index_put_((_i([i], d), _i([1], d)), torch.tensor([5.0], device=d),
                                                    accumulate=True), 2, [5],
                      IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    "take": (lambda d, i: torch.take(_x(d), _i([0, i], d)), -12, [12, -13],
             IndexError, "out of range: tried to access index"),
    "put": (lambda d, i: _x(d).put_(_i([i], d), torch.tensor([9.0], device=d)), 11, [12],
            IndexError, "out of range: tried to access index 12 on a tensor of 12 elements."),
    "put_acc": (lambda d, i: _x(d).put_(_i([i, i], d), torch.tensor([9.0, 1.0], device=d), accumulate=True), -1,
                [-13], IndexError, "out of range: tried to access index -13 on a tensor of 12 elements."),
    "nll_loss": (lambda d, i: F.nll_loss(_x(d), _i([0, i, 1], d)), 3, [4, -1],
                 IndexError, "out of bounds."),
    "nll_loss_ignore": (lambda d, i: F.nll_loss(_x(d), _i([0, i, 1], d), ignore_index=-5), -5, [-6],
                        IndexError, "Target -6 is out of bounds."),
    "cross_entropy": (lambda d, i: F.cross_entropy(_x(d), _i([0, i, 1], d)), -100, [7],
                      IndexError, "Target 7 is out of bounds."),
}


def _run(fn, dev, i):
    r = fn(dev, i)
    return r.cpu() if dev != "cpu" else r


def _check_raises(fn, i, exc, msg):
    with pytest.raises(exc):  # CPU raises this type
        _run(fn, "cpu", i)
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _run(fn, TPU, i)  # recorded, raised at the read (at the op in debug mode)


@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_index_out_of_range_raises_as_cpu_and_device_keeps_working(name):
    fn, good, bads, exc, msg = INDEX_CASES[name]
    want = _run(fn, "cpu", good)
    torch.testing.assert_close(_run(fn, TPU, good), want)
    for bad in bads:
        _check_raises(fn, bad, exc, msg)
        # reported once; the device keeps working and good input is unchanged
        torch.testing.assert_close(_run(fn, TPU, good), want)
    torch.tpu.synchronize()


def test_message_names_the_bad_index():
    with pytest.raises(RuntimeError, match=r"gather\(\): index 7 is out of bounds for dimension 0 with size 3"):
        torch.gather(_x(TPU), 0, _i([[0, 7, 1, 2]], TPU)).cpu()
    with pytest.raises(IndexError, match=r"index 9 for dimension 0 with size 3"):
        torch.index_select(_x(TPU), 0, _i([1, 9, 0], TPU)).cpu()


def test_error_raised_at_the_next_read_of_any_tensor():
    """CUDA's contract: the error comes at the first host wait after the op,
    whatever is read; the program's other results stay usable."""
    x = _x(TPU)
    if torch.tpu.get_eager_mode() == "debug":  # raises at the op itself
        with pytest.raises(RuntimeError, match="out of bounds"):
            torch.gather(x, 0, _i([[3, 0, 0, 0]], TPU))
        torch.testing.assert_close((x * 2).cpu(), _x("cpu") * 2)
        return
    y = torch.gather(x, 0, _i([[3, 0, 0, 0]], TPU))
    z = x * 2
    with pytest.raises(RuntimeError, match="out of bounds"):
        z.cpu()
    torch.testing.assert_close(z.cpu(), _x("cpu") * 2)
    del y


def test_error_raised_at_synchronize():
    try:
        y = torch.take(_x(TPU), _i([40], TPU))
    except IndexError:
        assert torch.tpu.get_eager_mode() == "debug"
        return
    with pytest.raises(IndexError, match="tried to access index 40"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once
    del y


def test_in_graph_of_many_ops_and_backward():
    """An embedding lookup inside a training-like step: the bad index raises
    at the loss read; a good step afterwards gives CPU's loss and grads."""
    def step(dev, idx):
        w = torch.arange(20.0, device=dev).reshape(5, 4).requires_grad_()
        e = F.embedding(_i(idx, dev), w)
        loss = (e.tanh() * 0.5).sum()
        loss.backward()
        return loss.detach().cpu(), w.grad.cpu()

    with pytest.raises(IndexError, match="index out of range in self"):
        step(TPU, [[0, 5], [1, 2]])
    l_t, g_t = step(TPU, [[0, 4], [1, 4]])
    l_c, g_c = step("cpu", [[0, 4], [1, 4]])
    torch.testing.assert_close(l_t, l_c)
    torch.testing.assert_close(g_t, g_c)


# ---- integer division and remainder by zero --------------------------------------------

DIV_CASES = {
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "remainder_scalar_tensor": lambda a, b: torch.remainder(a, b[1]),
    "inplace_floor_divide": lambda a, b: a.clone().floor_divide_(b),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("name", sorted(DIV_CASES))
def test_integer_division_by_zero_raises_zero_division_error(name, dtype):
    fn = DIV_CASES[name]
    a = torch.tensor([7, 5, 9], dtype=dtype)
    good, bad = torch.tensor([2, 3, 4], dtype=dtype), torch.tensor([2, 0, 4], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, bad)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a.to(TPU), bad.to(TPU)).cpu()
    assert torch.equal(fn(a.to(TPU), good.to(TPU)).cpu(), fn(a, good))


def test_float_division_by_zero_is_not_an_error():
    a = torch.tensor([1.0, -1.0, 0.0])
    b = torch.zeros(3)
    for fn in (torch.div, lambda x, y: x // y, torch.remainder, torch.fmod):
        torch.testing.assert_close(fn(a.to(TPU), b.to(TPU)).cpu(), fn(a, b), equal_nan=True)
    # true division of integers is a float division
    ai, bi = torch.tensor([3, 0]), torch.tensor([0, 0])
    torch.testing.assert_close(torch.div(ai.to(TPU), bi.to(TPU)).cpu(), torch.div(ai, bi), equal_nan=True)


# ---- binary_cross_entropy --------------------------------------------------------------


@pytest.mark.parametrize("v", [1.5, -0.25, float("nan")])
def test_binary_cross_entropy_input_outside_0_1(v):
    x, y = torch.tensor([0.5, v]), torch.tensor([1.0, 0.0])
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(x, y)
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(x.to(TPU), y.to(TPU)).item()
    good = torch.tensor([0.5, 0.25])
    torch.testing.assert_close(F.binary_cross_entropy(good.to(TPU), y.to(TPU)).cpu(),
                               F.binary_cross_entropy(good, y))


# ---- turned off ------------------------------------------------------------------------------


def test_device_checks_can_be_turned_off():
    # TORCH_TPU_DEVICE_CHECKS=0 (to measure the flags' cost): programs carry
    # no error state, a bad index is not reported (the gather clamps it)
    import os
    import subprocess
    import sys

    code = ("import torch, torch_tpu\n"
            "x = torch.arange(5.0, device='tpu')\n"
            "print(x[torch.tensor([7], device='tpu')].cpu().tolist())\n")
    env = dict(os.environ, TORCH_TPU_DEVICE_CHECKS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[4.0]"
    with pytest.raises(IndexError):
        torch.arange(5.0, device=TPU)[torch.tensor([7], device=TPU)].cpu()
