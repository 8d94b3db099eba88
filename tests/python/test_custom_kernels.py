"""torch_tpu.library: user kernels (StableHLO text, JAX, Pallas in interpret
mode) as PyTorch custom ops, compared with the same computation in PyTorch
CPU by value and gradient, in the eager mode the suite runs in and under
torch.compile(backend="tpu", fullgraph=True)."""
import importlib.util
import itertools

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import library as L

from conftest import mode

HAVE_JAX = importlib.util.find_spec("jax") is not None
needs_jax = pytest.mark.skipif(
    not HAVE_JAX, reason="JAX is not installed (optional: `make test-kernels` installs requirements-jax.txt)")

_names = itertools.count()


def _name(base):
    # every test defines its own ops (a custom op name is process-wide)
    return f"tk_test::{base}_{next(_names)}"


_ELEM = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64"}


def _t(shape, dtype):
    return "tensor<" + "".join(f"{d}x" for d in shape) + _ELEM[dtype] + ">"


def rms_text(x, w, eps=1e-6):
    """StableHLO (pretty form) of RMSNorm over the last dim for x's shape and
    dtype: computed in float32, the result in x's dtype."""
    shape, dt = tuple(x.shape), x.dtype
    r = len(shape)
    f32 = _t(shape, torch.float32)
    red = _t(shape[:-1], torch.float32)
    tx, tw = _t(shape, dt), _t(w.shape, w.dtype)
    wf = _t(w.shape, torch.float32)
    keep = ", ".join(str(i) for i in range(r - 1))
    return f"""
func.func @rmsnorm(%x: {tx}, %w: {tw}) -> {tx} {{
  %xf = stablehlo.convert %x : ({tx}) -> {f32}
  %sq = stablehlo.multiply %xf, %xf : {f32}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sum = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [{r - 1}] : ({f32}, tensor<f32>) -> {red}
  %n = stablehlo.constant dense<{float(shape[-1])}> : {red}
  %mean = stablehlo.divide %sum, %n : {red}
  %eps = stablehlo.constant dense<{eps:e}> : {red}
  %var = stablehlo.add %mean, %eps : {red}
  %inv = stablehlo.rsqrt %var : {red}
  %invb = stablehlo.broadcast_in_dim %inv, dims = [{keep}] : ({red}) -> {f32}
  %y = stablehlo.multiply %xf, %invb : {f32}
  %wf = stablehlo.convert %w : ({tw}) -> {wf}
  %wb = stablehlo.broadcast_in_dim %wf, dims = [{r - 1}] : ({wf}) -> {f32}
  %out = stablehlo.multiply %y, %wb : {f32}
  %res = stablehlo.convert %out : ({f32}) -> {tx}
  return %res : {tx}
}}
"""


def rms_ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _rms_backward_setup(op):
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        # the backward in PyTorch ops (they run on tpu like any op)
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xd, wd = x.detach().requires_grad_(), w.detach().requires_grad_()
            y = rms_ref(xd, wd)
            gx, gw = torch.autograd.grad(y, (xd, wd), g)
        return gx, gw

    torch.library.register_autograd(op, backward, setup_context=setup_context)


def _close(a, b, atol=1e-5, rtol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), atol=atol, rtol=rtol)


def _programs():
    return torch.tpu.metrics()["programs"]


# ---- StableHLO text ----------------------------------------------------------------------

FIXED = """
func.func @rms(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = stablehlo.multiply %x, %x : tensor<4x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
  %n = stablehlo.constant dense<8.0> : tensor<4xf32>
  %2 = stablehlo.divide %1, %n : tensor<4xf32>
  %e = stablehlo.constant dense<1.0e-6> : tensor<4xf32>
  %3 = stablehlo.add %2, %e : tensor<4xf32>
  %4 = stablehlo.rsqrt %3 : tensor<4xf32>
  %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<4xf32>) -> tensor<4x8xf32>
  %6 = stablehlo.multiply %x, %5 : tensor<4x8xf32>
  %7 = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
  %8 = stablehlo.multiply %6, %7 : tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}
"""


def test_stablehlo_text_matches_cpu(tpu):
    op = L.stablehlo_op(_name("rms_fixed"), FIXED)
    x, w = torch.randn(4, 8), torch.randn(8)
    y = op(x.to(tpu), w.to(tpu))
    assert y.device.type == "tpu" and y.shape == (4, 8) and y.dtype == torch.float32
    _close(y, rms_ref(x, w))


def test_stablehlo_text_for_each_shape_and_dtype(tpu):
    op = L.stablehlo_op(_name("rms"), rms_text)
    for shape, dt in (((3, 5), torch.float32), ((2, 3, 16), torch.float32), ((6, 8), torch.bfloat16)):
        x, w = torch.randn(shape).to(dt), torch.randn(shape[-1]).to(dt)
        y = op(x.to(tpu), w.to(tpu))
        assert y.dtype == dt
        _close(y, rms_ref(x, w), atol=1e-2 if dt == torch.bfloat16 else 1e-5, rtol=1e-2 if dt == torch.bfloat16 else 1e-5)


def test_stablehlo_generic_form(tpu):
    text = """
"func.func"() <{function_type = (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>, sym_name = "axpy"}> ({
^bb0(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>):
  %two = "stablehlo.constant"() <{value = dense<2.0> : tensor<3x4xf32>}> : () -> tensor<3x4xf32>
  %0 = "stablehlo.multiply"(%a, %two) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %1 = "stablehlo.add"(%0, %b) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%1) : (tensor<3x4xf32>) -> ()
}) : () -> ()
"""
    op = L.stablehlo_op(_name("axpy"), text)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    _close(op(a.to(tpu), b.to(tpu)), 2 * a + b)
    # argument attributes before an explicit public visibility (made private)
    text2 = """
"func.func"() <{arg_attrs = [{mhlo.layout_mode = "default"}], function_type = (tensor<2xf32>) -> tensor<2xf32>, sym_name = "neg", sym_visibility = "public"}> ({
^bb0(%a: tensor<2xf32>):
  %0 = "stablehlo.negate"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  "func.return"(%0) : (tensor<2xf32>) -> ()
}) : () -> ()
"""
    neg = L.stablehlo_op(_name("neg"), text2)
    c = torch.randn(2)
    _close(neg(c.to(tpu)) * 3, -c * 3)


def test_module_with_helper_function_and_two_results(tpu):
    # a module as jax.export writes one: a public @main calling a private helper
    text = """
module @m attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<5xf32> {mhlo.layout_mode = "default"}) -> (tensor<5xf32> {jax.result_info = "a"}, tensor<f32>) {
    %0 = call @square(%x) : (tensor<5xf32>) -> tensor<5xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<5xf32>, tensor<f32>) -> tensor<f32>
    return %0, %1 : tensor<5xf32>, tensor<f32>
  }
  func.func private @square(%x: tensor<5xf32>) -> tensor<5xf32> {
    %0 = stablehlo.multiply %x, %x : tensor<5xf32>
    return %0 : tensor<5xf32>
  }
}
"""
    op = L.stablehlo_op(_name("sq"), text)
    x = torch.randn(5)
    sq, total = op(x.to(tpu))
    _close(sq, x * x)
    _close(total, (x * x).sum())


def test_quoted_symbol_names(tpu):
    text = """
module @"a module" {
  func.func public @"my kernel"(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = func.call @"sq-r"(%x) : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
  func.func private @"sq-r"(%x: tensor<3xf32>) -> tensor<3xf32> {
    %0 = stablehlo.multiply %x, %x : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
"""
    text = "// a comment naming func.func @nothing(\n" + text.replace("return %0 : tensor<3xf32>",
                                                                     "return %0 : tensor<3xf32> // a \"//\" b")
    op = L.stablehlo_op(_name("quoted"), text, entry="my kernel")
    x = torch.randn(3)
    _close(op(x.to(tpu)) + 1, x * x + 1)


def test_register_autograd_gradients_match_cpu(tpu):
    op = L.stablehlo_op(_name("rms_grad"), rms_text, reference=rms_ref)
    _rms_backward_setup(op)
    x, w, g = torch.randn(4, 16), torch.randn(16), torch.randn(4, 16)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    rms_ref(xc, wc).backward(g)
    xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
    y = op(xt, wt)
    y.backward(g.to(tpu))
    _close(y, rms_ref(x, w))
    _close(xt.grad, xc.grad)
    _close(wt.grad, wc.grad)
    # the CPU kernel (the reference) with the same autograd formula
    xc2, wc2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    op(xc2, wc2).backward(g)
    _close(xc2.grad, xc.grad)


def test_same_kernel_twice_is_one_program_in_fused_mode(tpu):
    op = L.stablehlo_op(_name("rms_twice"), rms_text)
    x, w = torch.randn(7, 24), torch.randn(24)  # a shape no other test uses: a new program
    n0 = len(_programs())
    xt, wt = x.to(tpu), w.to(tpu)
    z = op(xt * 2, wt) + op(xt, wt)
    _close(z, rms_ref(x * 2, w) + rms_ref(x, w))
    made = [p for p in _programs()[n0:] if "custom_kernel" in p["name"]]
    if mode() == "fused":
        # the kernel is spliced into the program of the ops around it, twice,
        # its function defined once (a second definition would not parse)
        assert len(made) == 1, made
        assert made[0]["ops"] == 4 and "mul" in made[0]["name"] and "add" in made[0]["name"], made
    else:
        # strict / debug: one program per op; the kernel's program has one node
        assert made and all(p["ops"] == 1 for p in made), made


def test_two_kernels_with_the_same_function_name_in_one_program(tpu):
    def text(op_name):
        return f"""
func.func @main(%x: tensor<6xf32>) -> tensor<6xf32> {{
  %0 = stablehlo.{op_name} %x : tensor<6xf32>
  return %0 : tensor<6xf32>
}}
"""
    ex = L.stablehlo_op(_name("exp"), text("exponential"))
    ng = L.stablehlo_op(_name("neg"), text("negate"))
    x = torch.randn(6)
    xt = x.to(tpu)
    _close(ex(xt) + ng(xt), x.exp() - x)


def test_program_cache_is_keyed_by_shape_and_dtype(tpu):
    op = L.stablehlo_op(_name("rms_cache"), rms_text)
    x, w = torch.randn(9, 8).to(tpu), torch.randn(8).to(tpu)
    op(x, w).cpu()
    torch.tpu.synchronize()  # no compile of an earlier test still under way
    c0 = torch.tpu.metrics()["compile"]["count"] + torch.tpu.metrics()["disk_load"]["count"]
    for _ in range(3):
        op(x, w).cpu()
    m = torch.tpu.metrics()
    assert m["compile"]["count"] + m["disk_load"]["count"] == c0  # same shapes: nothing new
    kernel = op._tpu_kernel
    assert len(kernel._variants) == 1
    op(torch.randn(9, 16).to(tpu), torch.randn(16).to(tpu)).cpu()
    assert len(kernel._variants) == 2  # a new shape: a new variant


def test_a_kernel_that_does_not_compile_raises_and_the_process_keeps_working(tpu):
    bad = FIXED.replace("stablehlo.rsqrt", "stablehlo.rsqrtt")
    name = _name("bad")
    op = L.stablehlo_op(name, bad)
    x, w = torch.randn(4, 8).to(tpu), torch.randn(8).to(tpu)
    y0 = x + 1  # pending work before the failing call (fused: the same graph)
    with pytest.raises(RuntimeError) as e:
        op(x, w)
    msg = str(e.value)
    assert name in msg and "tensor<4x8xf32>" in msg and "does not compile" in msg, msg
    _close(y0, x.cpu() + 1)
    good = L.stablehlo_op(_name("good"), FIXED)
    _close(good(x, w) * 2, rms_ref(x.cpu(), w.cpu()) * 2)


def test_wrong_input_types_raise_naming_the_kernel_and_types(tpu):
    name = _name("typed")
    op = L.stablehlo_op(name, FIXED)
    with pytest.raises(RuntimeError, match=r"expects inputs \(tensor<4x8xf32>, tensor<8xf32>\) but got "
                                           r"\(tensor<4x9xf32>, tensor<8xf32>\)"):
        op(torch.randn(4, 9).to(tpu), torch.randn(8).to(tpu))
    with pytest.raises(RuntimeError, match="bf16"):
        op(torch.randn(4, 8, dtype=torch.bfloat16).to(tpu), torch.randn(8).to(tpu))
    with pytest.raises(NotImplementedError, match="no CPU kernel"):
        op(torch.randn(4, 8), torch.randn(8))
    _close(op(torch.ones(4, 8).to(tpu), torch.ones(8).to(tpu)), rms_ref(torch.ones(4, 8), torch.ones(8)))


def test_result_count_must_match_the_op(tpu):
    one = "func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {\n  return %x : tensor<4x8xf32>\n}\n"
    op = L.stablehlo_op(_name("two_declared"), lambda x: one, num_outputs=2)
    with pytest.raises(RuntimeError, match="the function has 1 results, the op declares 2"):
        op(torch.randn(4, 8).to(tpu))


def test_bad_text_raises_at_definition():
    with pytest.raises(L.KernelError, match="defines no func.func"):
        L.stablehlo_op(_name("empty"), "stablehlo.add")
    with pytest.raises(L.KernelError, match="static shapes only"):
        L.stablehlo_op(_name("dyn"), "func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> {\n return %x : tensor<?xf32>\n}")


def test_unbalanced_text_names_the_kernel_and_its_inputs(tpu):
    bad = "func.func @f(%x: tensor<4xf32> -> tensor<4xf32> {\n return %x : tensor<4xf32>\n}"
    name = _name("unbalanced")
    with pytest.raises(L.KernelError, match=rf"custom kernel '{name}': unbalanced '\(\)' in kernel text"):
        L.stablehlo_op(name, bad)
    name = _name("unbalanced_fn")
    op = L.stablehlo_op(name, lambda x: bad, num_inputs=1, num_outputs=1)
    with pytest.raises(L.KernelError, match=rf"custom kernel '{name}' for inputs \(tensor<4xf32>\): unbalanced"):
        op(torch.randn(4).to(tpu))


def test_autocast_does_not_cast_custom_op_inputs(tpu):
    op = L.stablehlo_op(_name("rms_amp"), rms_text)
    a, b, w = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    seen = []
    with torch.autocast("tpu"):
        at, bt, wt = a.to(tpu), b.to(tpu), w.to(tpu)
        y32 = op(at, wt)  # float32 in, float32 kernel
        h = at @ bt  # bfloat16 (autocast's matmul)
        y16 = op(h, wt.to(torch.bfloat16))
        seen = [y32.dtype, h.dtype, y16.dtype]
    assert seen == [torch.float32, torch.bfloat16, torch.bfloat16]
    _close(y32, rms_ref(a, w))
    hc = (a.bfloat16() @ b.bfloat16())
    _close(y16.float(), rms_ref(hc, w.bfloat16()).float(), atol=3e-2, rtol=3e-2)


def test_compiled_fullgraph_values_and_gradients(tpu):
    op = L.stablehlo_op(_name("rms_compiled"), rms_text)
    _rms_backward_setup(op)

    def f(x, w):
        return (op(x * 2, w) + 1).relu().sum()

    x, w = torch.randn(3, 16), torch.randn(16)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (rms_ref(xc * 2, wc) + 1).relu().sum().backward()
    cf = torch.compile(f, backend="tpu", fullgraph=True)
    xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
    n0 = len(_programs())
    out = cf(xt, wt)
    out.backward()
    _close(out, (rms_ref(x * 2, w) + 1).relu().sum(), atol=1e-4, rtol=1e-5)
    _close(xt.grad, xc.grad)
    _close(wt.grad, wc.grad)
    fwd = [p for p in _programs()[n0:] if "custom_kernel" in p["name"]]
    # the forward graph is one program holding the kernel and the ops around it
    assert any(p["ops"] > 1 for p in fwd), fwd


# ---- JAX / Pallas -------------------------------------------------------------------------


def _jax_rms(x, w):
    import jax
    import jax.numpy as jnp
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6) * w.astype(jnp.float32)
    return y.astype(x.dtype)


@needs_jax
def test_jax_op_values_and_jax_vjp_gradients(tpu):
    op = L.jax_op(_name("jrms"), _jax_rms, vjp=True)
    for shape in ((4, 8), (2, 3, 32)):
        x, w, g = torch.randn(shape), torch.randn(shape[-1]), torch.randn(shape)
        xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
        rms_ref(xc, wc).backward(g)
        xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
        y = op(xt, wt)
        y.backward(g.to(tpu))
        _close(y, rms_ref(x, w))
        _close(xt.grad, xc.grad, atol=1e-4, rtol=1e-4)
        _close(wt.grad, wc.grad, atol=1e-4, rtol=1e-4)
    # the CPU kernel runs the same function through JAX
    _close(op(x, w), rms_ref(x, w))


@needs_jax
def test_jax_op_two_outputs(tpu):
    import jax.numpy as jnp

    def f(x):
        return jnp.sort(x)[::-1], jnp.tanh(x).sum()

    op = L.jax_op(_name("jsort"), f, num_outputs=2)
    x = torch.randn(11)
    s, t = op(x.to(tpu))
    _close(s, torch.sort(x, descending=True).values)
    _close(t, torch.tanh(x).sum())


@needs_jax
def test_jax_op_compiled_fullgraph_with_vjp(tpu):
    op = L.jax_op(_name("jrms_c"), _jax_rms, vjp=True)

    def f(x, w):
        return (op(x.sin(), w) * x).sum()

    x, w = torch.randn(5, 16), torch.randn(16)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (rms_ref(xc.sin(), wc) * xc).sum().backward()
    cf = torch.compile(f, backend="tpu", fullgraph=True)
    xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
    out = cf(xt, wt)
    out.backward()
    _close(out, (rms_ref(x.sin(), w) * x).sum(), atol=1e-4, rtol=1e-5)
    _close(xt.grad, xc.grad, atol=1e-4, rtol=1e-4)
    _close(wt.grad, wc.grad, atol=1e-4, rtol=1e-4)


@needs_jax
def test_jax_export_failure_names_the_kernel(tpu):
    def f(x):
        return x.reshape(7)  # 6 elements cannot be 7

    name = _name("jbad")
    op = L.jax_op(name, f)
    with pytest.raises(RuntimeError, match=name + r".*tensor<2x3xf32>.*making its StableHLO failed"):
        op(torch.randn(2, 3).to(tpu))
    _close(op(torch.arange(7.0).to(tpu)), torch.arange(7.0))


@needs_jax
def test_pallas_kernel_in_interpret_mode(tpu):
    pl = pytest.importorskip("jax.experimental.pallas", reason="jax's pallas does not import on this machine")
    import jax

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...] + 1.0

    def f(x, y):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)

    op = L.jax_op(_name("pallas"), f)
    a, b = torch.randn(8, 128), torch.randn(8, 128)
    _close(op(a.to(tpu), b.to(tpu)) - 1, a * b + 1 - 1)


# ---- the example: a Hugging Face Llama with the RMSNorm kernels ----------------------------


def test_example_llama_with_rmsnorm_kernels_equals_stock_model(tpu):
    pytest.importorskip("transformers", reason="the example's model is a Hugging Face Llama")
    import copy
    import importlib.util as iu
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "custom_rmsnorm.py"
    spec = iu.spec_from_file_location("custom_rmsnorm_example", path)
    ex = iu.module_from_spec(spec)
    spec.loader.exec_module(ex)
    ids = torch.randint(0, 128, (2, 8))
    stock = ex.tiny_llama()
    want = ex.loss_and_grads(stock, ids)
    custom = copy.deepcopy(stock)
    assert ex.swap_rmsnorm(custom, ex.rmsnorm_fwd) == 5
    ex.compare("custom on CPU", ex.loss_and_grads(custom, ids), want)
    ex.compare("custom on tpu", ex.loss_and_grads(custom.to(tpu), ids.to(tpu)), want)


def test_views_and_mixed_devices(tpu):
    op = L.stablehlo_op(_name("rms_views"), FIXED)
    big, w = torch.randn(8, 4), torch.randn(8)
    # a transposed view is read as the kernel's [4, 8] argument
    _close(op(big.to(tpu).t(), w.to(tpu)), rms_ref(big.t(), w))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(big.t().contiguous().to(tpu), w)


def test_opcheck(tpu):
    # PyTorch's own custom-op checks: schema, fake kernel, autograd registration, AOT dispatch
    op = L.stablehlo_op(_name("rms_opcheck"), rms_text, reference=rms_ref)
    _rms_backward_setup(op)
    x = torch.randn(3, 8, device=tpu, requires_grad=True)
    w = torch.randn(8, device=tpu, requires_grad=True)
    # (its test_autograd_registration is not implemented for devices but CPU/CUDA/XPU)
    torch.library.opcheck(op, (x, w), test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_compiled_with_dynamic_shapes_specializes_the_kernel(tpu):
    op = L.stablehlo_op(_name("rms_dyn"), rms_text)
    cf = torch.compile(lambda x, w: op(x + 1, w) * 2, backend="tpu", fullgraph=True, dynamic=True)
    for rows in (3, 5, 6):
        x, w = torch.randn(rows, 16), torch.randn(16)
        _close(cf(x.to(tpu), w.to(tpu)), rms_ref(x + 1, w) * 2)


_DISK_SCRIPT = r"""
import sys, torch, torch_tpu
from torch_tpu import library as L
sys.path.insert(0, sys.argv[1])
from test_custom_kernels import FIXED, rms_ref
op = L.stablehlo_op("tk_disk::rms", FIXED)
x, w = torch.ones(4, 8) * 3, torch.ones(8) * 2
y = op(x.to("tpu"), w.to("tpu")) + 1
assert torch.allclose(y.cpu(), rms_ref(x, w) + 1)
m = torch.tpu.metrics()
print(m["compile"]["count"], m["disk_load"]["count"])
"""


def test_kernel_programs_come_back_from_the_disk_tier(tmp_path):
    if mode() != "strict":
        pytest.skip("the disk tier does not depend on the eager mode: runs in strict")
    import os
    import subprocess
    import sys
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    here = os.path.dirname(os.path.abspath(__file__))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _DISK_SCRIPT, here], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append([int(v) for v in r.stdout.split()[-2:]])
    (c1, d1), (c2, d2) = runs
    assert c1 >= 2 and d1 == 0  # the kernel alone (its check) and its program with the add
    assert c2 == 0 and d2 == c1, runs  # the same text: every program from disk
