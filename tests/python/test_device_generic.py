"""PyTorch's own device-generic test machinery judges tpu (issue 25 item 2).

The harness is PyTorch's (torch.testing._internal.common_device_type):
`instantiate_device_type_tests(..., only_for=("tpu", "cpu"))` makes a CPU
class (`...CPU`) and one for our PrivateUse1 device (`...PRIVATEUSE1`, whose
tests are named `..._tpu_<dtype>`), `@ops` walks OpInfos of `op_db` over the
dtypes each OpInfo claims for the device (for tpu OpInfo falls back to its
`dtypes`, the CPU claims: we support what CPU supports), `@dtypes` picks
dtypes by hand.  The tests are ours: the properties PyTorch's test_ops /
test_view_ops / test_indexing / test_type_promotion / test_torch check per
device (noncontiguous samples, out= semantics and resizing, variant
consistency, in-place vs out-of-place, dtype claims, type promotion, views,
indexing, error types, memory formats, random ops), written anew.

Every test runs for cpu too: a property that fails on cpu is a fault of the
test (or of PyTorch), one that passes on cpu and fails on tpu is ours.
tools/device_generic_report.py counts those.

    TORCH_TPU_DEVICE_GENERIC=sample   (default) a fixed list of OpInfos, few samples: `make test`
    TORCH_TPU_DEVICE_GENERIC=full     every OpInfo of op_db: `make test-pytorch`
    TORCH_TPU_DEVICE_GENERIC_SHARD=i/n  OpInfos i, i+n, ... of the chosen list
"""
import contextlib
import os
import warnings

import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    onlyNativeDeviceTypes,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_map

import torch_tpu  # noqa: F401

FULL = os.environ.get("TORCH_TPU_DEVICE_GENERIC", "sample").strip().lower() == "full"
MAX_SAMPLES = 12 if FULL else 3

# The deterministic sample: OpInfos of every kind (unary, binary, reductions,
# shape ops, indexing, nn.functional) whose properties differ.
_SAMPLE_OPS = {
    "add", "mul", "sub", "div", "abs", "neg", "sin", "exp", "sigmoid", "clamp", "where", "pow",
    "sum", "mean", "amax", "cumsum", "matmul", "cat", "index_select", "gather", "scatter_add",
    "index_add", "masked_fill", "transpose", "nn.functional.relu", "nn.functional.elu", "softmax",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "addcmul", "lerp", "floor_divide",
}
_OPS = [o for o in op_db if FULL or o.name in _SAMPLE_OPS]
if os.environ.get("TORCH_TPU_DEVICE_GENERIC_SHARD"):  # i/n: OpInfos i, i+n, ... (a full run in pieces)
    _i, _n = (int(v) for v in os.environ["TORCH_TPU_DEVICE_GENERIC_SHARD"].split("/"))
    _OPS = _OPS[_i::_n]
_DTYPES = (torch.float32, torch.int64, torch.bool) if FULL else (torch.float32,)


def _samples(op, device, dtype, requires_grad=False):
    it = op.sample_inputs(device, dtype, requires_grad=requires_grad)
    out = []
    for s in it:
        out.append(s)
        if len(out) >= MAX_SAMPLES:
            break
    return out


def _cpu(x):
    return tree_map(lambda t: t.detach().cpu().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t, x)


def _outcome(fn):
    """('ok', result, resize warning seen) or ('raise', exception type, message)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            # read the result back inside: a device-side check (an index out of
            # range) raises at the first host wait, as CUDA's device asserts do
            r = tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, fn())
        except Exception as e:  # noqa: BLE001 - the type is what we compare
            return ("raise", type(e), str(e).split("\n")[0][:200])
    resized = any("was resized" in str(x.message) for x in w)
    return ("ok", r, resized)


def _cpu_sample(sample):
    """The sample for CPU: its tensors moved, and a factory's device= too
    (OpInfo's factory samples name the device under test)."""
    s = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
    if "device" in s.kwargs:
        s.kwargs = dict(s.kwargs, device="cpu")
    return s


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


# What tpu does not do yet: on tpu these tests skip, naming the gap, so `make
# test` passes; tools/device_generic_report.py counts them as tpu-only failures.
_TPU_GAPS = (
    ("_complex32", "tpu has no complex32 (ComplexHalf) dtype"),
    ("test_complex32_like_cpu", "tpu has no complex32 (ComplexHalf) dtype"),
    ("test_python_scalars_promote_like_cpu_tpu_float16", "float16 * complex makes complex32: no such dtype on tpu"),
    ("test_channels_last_layout_like_cpu", "tpu tensors are row-major: a channels_last request gives "
                                           "contiguous strides (values are CPU's)"),
    ("test_claimed_dtypes_agree_with_cpu_polygamma_polygamma_n_1_tpu_int", "trigamma at a negative integer (a pole): "
     "tpu inf, CPU a finite value of its float32 reflection (2e13 at -8; float64 1e31)"),
)


def _exact_of(sample, result_dtype):
    """The sample on CPU with its floating tensors (and an integer input of
    an op with a floating result: polygamma of int8) in float64."""
    def up(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().cpu()
        return t.double() if t.dtype.is_floating_point else t

    s = sample.transform(up)
    if isinstance(s.input, torch.Tensor) and result_dtype.is_floating_point and not s.input.dtype.is_floating_point \
            and s.input.dtype != torch.bool:
        s.input = s.input.double()
    return s


class TestCase(TestCase):  # noqa: F811 - PyTorch's TestCase, with the known tpu gaps skipped
    def setUp(self):
        super().setUp()
        name = self._testMethodName
        if self.device_type != "cpu":
            for pat, why in _TPU_GAPS:
                if pat in name:
                    self.skipTest(f"known tpu gap: {why}")

    def assertLikeCpu(self, actual, ref, exact=None, **tol):
        """actual equals CPU's ref within tol, or, where it does not, is at
        least as close as CPU's to the exact result (`exact()`: the same call
        in float64): CPU's float32 kernels are not the truth everywhere
        (polygamma(1, x) for x < 0 loses up to half its digits in float32 on
        CPU, tpu's is within 1e-7).  Fails for a tpu value farther from the
        truth than CPU's by more than tol."""
        try:
            self.assertEqual(actual, ref, exact_device=False, **tol)
            return
        except AssertionError:
            if exact is None or not (isinstance(ref, torch.Tensor) and ref.dtype.is_floating_point):
                raise
            try:
                e = exact()
            except Exception:  # noqa: BLE001 - no float64 form of the call: CPU's values are the reference
                raise AssertionError from None
        self.assertEqual(actual.dtype, ref.dtype)
        self.assertEqual(actual.shape, ref.shape)
        a, r, e = actual.detach().cpu().double(), ref.detach().cpu().double(), e.detach().cpu().double()
        self.assertEqual(a.isnan(), r.isnan(), msg="NaN where CPU has NaN")
        atol, rtol = tol.get("atol", 1e-5), tol.get("rtol", 1.3e-6)
        fin = ~r.isnan()
        # an exact value beyond the result type's range is its infinity there
        near = e.to(ref.dtype).double()

        def err(x):
            return torch.where(x == near, torch.zeros_like(x), (x - e).abs())[fin]
        err_dev, err_cpu = err(a), err(r)
        bound = err_cpu + atol + rtol * e.abs()[fin]
        bad = ~(err_dev <= bound)
        self.assertFalse(bool(bad.any()), msg=f"tpu differs from CPU and from the float64 result by more than "
                                              f"CPU does: tpu error {err_dev[bad][:3].tolist()}, "
                                              f"CPU error {err_cpu[bad][:3].tolist()}")


class TestDeviceGenericOps(TestCase):
    """The per-OpInfo properties of PyTorch's test_ops, written for us."""

    exact_dtype = True

    @ops(_OPS, allowed_dtypes=_DTYPES)
    def test_noncontiguous_samples_equal_contiguous(self, device, dtype, op):
        for s in _samples(op, device, dtype):
            expected = op(s.input, *s.args, **s.kwargs)
            n = s.noncontiguous()
            actual = op(n.input, *n.args, **n.kwargs)
            self.assertEqual(actual, expected, msg=f"{op.name}: noncontiguous sample {s.summary()}")

    @ops([o for o in _OPS if o.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_noncontiguous_grads_equal_contiguous(self, device, dtype, op):
        for s in _samples(op, device, dtype, requires_grad=True):
            if not isinstance(s.input, torch.Tensor):
                continue
            n = s.noncontiguous()
            grads = []
            for x in (s, n):
                outs = [t for t in _tensors(op(x.input, *x.args, **x.kwargs)) if t.requires_grad]
                if not outs:
                    break
                loss = sum((t.float() * torch.linspace(0.5, 1.5, t.numel(), device=device).reshape(t.shape)).sum()
                           for t in outs)
                grads.append(torch.autograd.grad(loss, x.input, allow_unused=True)[0])
            if len(grads) == 2:
                self.assertEqual(grads[1], grads[0], msg=f"{op.name}: grad of noncontiguous sample")

    @ops([o for o in _OPS if o.supports_out], allowed_dtypes=(torch.float32,))
    def test_out_matches_functional_and_resizes_like_cpu(self, device, dtype, op):
        for s in _samples(op, device, dtype):
            expected = op(s.input, *s.args, **s.kwargs)
            if not isinstance(expected, torch.Tensor):
                continue
            # out of the result's shape and dtype: the same values, the same tensor returned
            out = torch.empty_like(expected)
            r = op(s.input, *s.args, out=out, **s.kwargs)
            self.assertEqual(out, expected)
            self.assertTrue(r is out, msg=f"{op.name}: out= returns out")
            # out of a wrong shape with elements: resized (with CPU's warning) or the same error type
            cs = _cpu_sample(s)
            shape = (expected.numel() + 3,)
            dev = _outcome(lambda: op(s.input, *s.args, out=torch.empty(shape, device=device, dtype=expected.dtype),
                                      **s.kwargs))
            ref = _outcome(lambda: op(cs.input, *cs.args, out=torch.empty(shape, dtype=expected.dtype), **cs.kwargs))
            self.assertEqual(dev[0], ref[0], msg=f"{op.name}: wrong-shaped out: tpu {dev}, cpu {ref}")
            es = _exact_of(s, expected.dtype)
            if ref[0] == "ok":
                self.assertLikeCpu(dev[1], ref[1], lambda: op(es.input, *es.args, **es.kwargs))
                self.assertEqual(dev[2], ref[2], msg=f"{op.name}: the resize warning")
            else:
                self.assertEqual(dev[1], ref[1])
            # out of another dtype: CPU's casting rule (a safe cast works, an unsafe one raises)
            for odt in (torch.float64, torch.int64, torch.bool):
                dev = _outcome(lambda: op(s.input, *s.args, out=torch.empty_like(expected, dtype=odt), **s.kwargs))
                ref = _outcome(lambda: op(cs.input, *cs.args, out=torch.empty_like(expected, dtype=odt, device="cpu"),
                                          **cs.kwargs))
                self.assertEqual(dev[0], ref[0], msg=f"{op.name}: out dtype {odt}: tpu {dev[:1] + dev[2:]}, "
                                                      f"cpu {ref[:1] + ref[2:]}")
                if ref[0] == "ok":
                    self.assertLikeCpu(dev[1], ref[1], lambda: op(es.input, *es.args, **es.kwargs),
                                       atol=1e-5, rtol=1e-5)
                else:
                    self.assertEqual(dev[1], ref[1])

    @ops(_OPS, allowed_dtypes=_DTYPES)
    def test_variants_agree(self, device, dtype, op):
        variants = [v for v in (op.method_variant, op.operator_variant) if v is not None]
        for s in _samples(op, device, dtype):
            expected = op(s.input, *s.args, **s.kwargs)
            for v in variants:
                if v is op.operator_variant and s.kwargs:
                    continue
                self.assertEqual(v(s.input, *s.args, **s.kwargs), expected, msg=f"{op.name}: variant {v}")

    @ops([o for o in _OPS if o.inplace_variant is not None], allowed_dtypes=_DTYPES)
    def test_inplace_matches_outplace(self, device, dtype, op):
        for s in _samples(op, device, dtype):
            if not isinstance(s.input, torch.Tensor) or s.broadcasts_input:
                continue
            expected = op(s.input, *s.args, **s.kwargs)
            if not isinstance(expected, torch.Tensor) or expected.dtype != s.input.dtype:
                continue
            x = s.input.clone()
            r = op.inplace_variant(x, *s.args, **s.kwargs)
            self.assertTrue(r is x, msg=f"{op.name}: in-place returns self")
            self.assertEqual(x, expected, msg=f"{op.name}: in-place {s.summary()}")

    @ops(_OPS)
    def test_claimed_dtypes_agree_with_cpu(self, device, dtype, op):
        # every dtype OpInfo claims for the device runs, with CPU's result dtype and values
        for s in _samples(op, device, dtype)[:1]:
            cs = _cpu_sample(s)
            ref = op(cs.input, *cs.args, **cs.kwargs)
            actual = op(s.input, *s.args, **s.kwargs)
            for i, (a, r) in enumerate(zip(_tensors(actual), _tensors(ref))):
                self.assertEqual(a.dtype, r.dtype)
                if not op.name.startswith(("empty", "new_empty")) and "rand" not in op.name \
                        and "dropout" not in op.name and op.name not in ("bernoulli", "normal", "multinomial",
                                                                          "uniform", "cauchy", "exponential",
                                                                          "geometric", "log_normal"):
                    tol = dict(atol=1e-2, rtol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
                    es = _exact_of(s, r.dtype)
                    self.assertLikeCpu(a, r, lambda: _tensors(op(es.input, *es.args, **es.kwargs))[i], **tol)


_PROMO_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                 torch.float32, torch.float64, torch.complex64)


class TestDeviceGenericPromotion(TestCase):
    """Type promotion (test_type_promotion's properties): tensor-tensor,
    tensor-0-d, tensor-Python scalar, in-place casting rules."""

    def _both(self, fn, device, *cpu_inputs):
        ref = _outcome(lambda: fn(*[t.clone() if isinstance(t, torch.Tensor) else t for t in cpu_inputs]))
        dev = _outcome(lambda: fn(*[t.to(device) if isinstance(t, torch.Tensor) else t for t in cpu_inputs]))
        self.assertEqual(dev[0], ref[0], msg=f"tpu {dev[:1] + dev[2:]} cpu {ref[:1] + ref[2:]}")
        self.assertEqual(dev[1], ref[1], atol=1e-3, rtol=1e-3)
        return dev

    @dtypes(*_PROMO_DTYPES)
    def test_binary_promotes_like_cpu(self, device, dtype):
        a = torch.arange(1, 7).reshape(2, 3).to(dtype)
        for other in (torch.bool, torch.int32, torch.float16, torch.float32, torch.float64):
            b = torch.arange(2, 8).reshape(2, 3).to(other) if other != torch.bool else torch.tensor([True, False, True])
            for fn in (torch.add, torch.mul, torch.sub, torch.div, torch.maximum, torch.eq, torch.lt):
                self._both(fn, device, a, b)
            self._both(torch.add, device, a, torch.tensor(2, dtype=other))  # 0-d: category rule
            self.assertEqual(torch.result_type(a.to(device), b.to(device)), torch.result_type(a, b))

    @dtypes(*_PROMO_DTYPES)
    def test_python_scalars_promote_like_cpu(self, device, dtype):
        a = torch.arange(1, 5).to(dtype)
        for sc in (2, 2.5, True, 1 + 2j):
            for fn in (torch.add, torch.mul, torch.true_divide):
                self._both(lambda x: fn(x, sc), device, a)

    @dtypes(torch.int64, torch.int32, torch.bool, torch.float16)
    def test_inplace_cast_rule_like_cpu(self, device, dtype):
        # in-place ops never change self's dtype and refuse an unsafe cast, as CPU does
        a = torch.arange(1, 5).to(dtype)
        for other in (torch.float32, torch.int64, torch.bool, torch.complex64):
            b = torch.arange(1, 5).to(other)
            self._both(lambda x, y: x.add_(y), device, a.clone(), b)
            self._both(lambda x, y: x.mul_(y), device, a.clone(), b)


class TestDeviceGenericViews(TestCase):
    """View ops share storage on the device as on CPU (test_view_ops)."""

    _VIEWS = {
        "view": lambda x: x.view(4, 6),
        "reshape": lambda x: x.reshape(2, 12),
        "transpose": lambda x: x.transpose(0, 1),
        "t": lambda x: x[0].t(),
        "permute": lambda x: x.permute(2, 0, 1),
        "narrow": lambda x: x.narrow(1, 1, 2),
        "select": lambda x: x.select(2, 1),
        "slice_step": lambda x: x[:, ::2, 1:],
        "diagonal": lambda x: x.diagonal(0, 1, 2),
        "unfold": lambda x: x.unfold(2, 2, 1),
        "expand": lambda x: x[:, :1].expand(2, 5, 4),
        "squeeze": lambda x: x[:, :1].squeeze(1),
        "unsqueeze": lambda x: x.unsqueeze(1),
        "as_strided": lambda x: x.as_strided((3, 3), (4, 1), 2),
        "split": lambda x: x.split(1, 1)[1],
        "chunk": lambda x: x.chunk(2, 2)[1],
        "unbind": lambda x: x.unbind(1)[2],
        "movedim": lambda x: x.movedim(0, 2),
        "mT": lambda x: x.mT,
        "unflatten": lambda x: x.unflatten(2, (2, 2)),
        "flatten": lambda x: x.flatten(),
        "view_dtype": lambda x: x.view(torch.int32),
        "alias": lambda x: x.view_as(x),
    }

    def test_view_ops_share_storage(self, device):
        for name, fn in self._VIEWS.items():
            base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
            cbase = base.clone()
            x = base.to(device)
            v, cv = fn(x), fn(cbase)
            self.assertEqual(v._is_view(), cv._is_view(), msg=f"{name}: a view as on CPU")
            self.assertEqual(v.shape, cv.shape)
            self.assertEqual(v.stride(), cv.stride(), msg=f"{name}: strides as CPU")
            self.assertEqual(v.storage_offset(), cv.storage_offset())
            # a write through the view reaches the base, and a write to the base the view
            # (not through views whose elements overlap: in-place ops on those are undefined)
            if name not in ("expand", "unfold"):
                v.mul_(-1) if v.dtype.is_floating_point else v.add_(1)
                cv.mul_(-1) if cv.dtype.is_floating_point else cv.add_(1)
                self.assertEqual(x, cbase, msg=f"{name}: write through the view")
            x.add_(100)
            cbase.add_(100)
            self.assertEqual(v, cv, msg=f"{name}: view after a write to the base")

    def test_reshape_of_noncontiguous_copies_like_cpu(self, device):
        x = torch.arange(12.0).reshape(3, 4)
        for fn in (lambda t: t.t().reshape(12), lambda t: t[:, ::2].reshape(6), lambda t: t.t().flatten()):
            self.assertEqual(fn(x.to(device))._is_view(), fn(x)._is_view())
            self.assertEqual(fn(x.to(device)), fn(x))
        with self.assertRaises(RuntimeError):
            x.to(device).t().view(12)

    def test_contiguous_view_of_view_chain(self, device):
        x = torch.zeros(4, 5, device=device)
        x[1:3].t()[2:4].fill_(7.0)
        c = torch.zeros(4, 5)
        c[1:3].t()[2:4].fill_(7.0)
        self.assertEqual(x, c)


class TestDeviceGenericIndexing(TestCase):
    """Indexing (test_indexing): boolean masks, empty dims, duplicate indices,
    broadcasting setitem, bounds errors."""

    def _same(self, fn, device, *inputs):
        ref = _outcome(lambda: fn(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]))
        dev = _outcome(lambda: fn(*[t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]))
        self.assertEqual(dev[0], ref[0], msg=f"tpu {dev[:1] + dev[2:]} cpu {ref[:1] + ref[2:]}")
        self.assertEqual(dev[1], ref[1])

    @dtypes(torch.float32, torch.int64)
    def test_boolean_masks(self, device, dtype):
        x = torch.arange(24).reshape(2, 3, 4).to(dtype)
        m = torch.tensor([[True, False, True], [False, False, True]])
        self._same(lambda t, k: t[k], device, x, m)
        self._same(lambda t, k: t[k.any() & False], device, x, m)  # 0-d False mask
        self._same(lambda t, k: t[torch.zeros_like(k)], device, x, m)  # all False
        self._same(lambda t, k: t[:, k[0]], device, x, m)
        self._same(lambda t: t[t > 5], device, x)
        self._same(lambda t, k: t.index_put_((k,), torch.tensor(-1).to(t.dtype)), device, x.clone(), m)
        self._same(lambda t, k: t.masked_fill(k.unsqueeze(-1), 3), device, x, m)
        self._same(lambda t: t[torch.tensor(True)], device, x)

    def test_empty_dims(self, device):
        x = torch.arange(12.0).reshape(3, 4)
        e = torch.empty(0, 4)
        self._same(lambda t: t[torch.tensor([], dtype=torch.long)], device, x)
        self._same(lambda t: t[:, torch.tensor([], dtype=torch.long)], device, x)
        self._same(lambda t: t[torch.zeros(3, dtype=torch.bool)], device, x)
        self._same(lambda t: t[torch.tensor([], dtype=torch.long)], device, e)
        self._same(lambda t: t[..., None, 1:1], device, x)
        self._same(lambda t: t.index_select(0, torch.tensor([], dtype=torch.long)), device, x)
        self._same(lambda t: torch.gather(t, 1, torch.empty(3, 0, dtype=torch.long)), device, x)
        self._same(lambda t: t[torch.empty(0, 2, dtype=torch.long)], device, x)

    @dtypes(torch.float32, torch.int64)
    def test_duplicate_indices_accumulate(self, device, dtype):
        x = torch.zeros(5, 3, dtype=dtype)
        idx = torch.tensor([0, 0, 1, 1, 1, 4])
        v = torch.arange(18).reshape(6, 3).to(dtype)
        self._same(lambda t, i, w: t.index_put_((i,), w, accumulate=True), device, x, idx, v)
        self._same(lambda t, i, w: t.index_put_((i, i % 3), w[:, 0], accumulate=True), device, x, idx, v)
        self._same(lambda t, i, w: t.index_add(0, i, w), device, x, idx, v)
        self._same(lambda t, i: t.index_put_((i,), torch.ones((), dtype=t.dtype), accumulate=True), device, x, idx)
        big = torch.zeros(1000, dtype=dtype)
        bidx = torch.randint(0, 10, (5000,))
        self._same(lambda t, i: t.index_put_((i,), torch.ones(5000, dtype=t.dtype), accumulate=True), device, big, bidx)
        # without accumulate, duplicates write one of their values; all equal values -> deterministic
        self._same(lambda t, i: t.index_put_((i,), torch.full((6, 3), 2).to(t.dtype)), device, x, idx)

    def test_negative_and_broadcast_setitem(self, device):
        x = torch.arange(20.0).reshape(4, 5)
        self._same(lambda t: t[[-1, 0, -2]], device, x)
        self._same(lambda t: t[[[0], [2]], [1, -1]], device, x)

        def setit(t):
            t[[0, 2]] = torch.tensor([1.0, 2, 3, 4, 5]).to(t.device)
            t[1, [0, 3]] = -1.0
            t[:, 1:3] = torch.tensor([[9.0], [8], [7], [6]]).to(t.device)
            return t
        self._same(setit, device, x)

    def test_out_of_bounds_raises_like_cpu(self, device):
        x = torch.arange(12.0).reshape(3, 4)
        self._same(lambda t: t[torch.tensor([0, 3])], device, x)
        self._same(lambda t: t[torch.tensor([-4])], device, x)
        self._same(lambda t: t[:, torch.tensor([4])], device, x)
        self._same(lambda t: t[5], device, x)
        self._same(lambda t: t.index_select(1, torch.tensor([7])), device, x)
        self._same(lambda t: t.index_put_((torch.tensor([3]),), torch.tensor(1.0)), device, x.clone())

    def test_index_fill_scalar_kinds(self, device):
        for dt in (torch.float16, torch.float32, torch.int64):
            x = torch.arange(6).reshape(2, 3).to(dt)
            for val in (2, -1.5, 1 + 1j, True):
                self._same(lambda t: t.index_fill(1, torch.tensor([0, 2]).to(t.device), val), device, x)


class TestDeviceGenericErrors(TestCase):
    """Errors CPU raises: the device raises the same type (test_nn / test_torch cases)."""

    def _same(self, fn, device, *inputs):
        ref = _outcome(lambda: fn(*[t.clone() for t in inputs]))
        dev = _outcome(lambda: fn(*[t.to(device) for t in inputs]))
        self.assertEqual(dev[0], ref[0], msg=f"tpu {dev[:1] + dev[2:]} cpu {ref[:1] + ref[2:]}")
        self.assertEqual(dev[1], ref[1])

    def test_inplace_elu_negative_alpha(self, device):
        x = torch.randn(3, 4)
        self._same(lambda t: F.elu_(t, alpha=-2.0), device, x)
        self._same(lambda t: F.elu(t, alpha=-2.0, inplace=True), device, x)
        self._same(lambda t: F.elu(t, alpha=-2.0), device, x)
        self._same(lambda t: F.celu_(t, alpha=0.0), device, x)

    def test_shape_and_dtype_errors(self, device):
        a, b = torch.randn(3, 4), torch.randn(5, 6)
        self._same(torch.mm, device, a, b)
        self._same(torch.add, device, a, b)
        self._same(lambda x: x.view(5, 5), device, a)
        self._same(lambda x: x.reshape(-1, -1), device, a)
        self._same(lambda x: torch.cat([x, x.t()]), device, a)
        self._same(lambda x: x.sum(3), device, a)
        self._same(lambda x: torch.bitwise_and(x, x), device, a)
        self._same(lambda x: F.cross_entropy(x, torch.tensor([0, 1, 9]).to(x.device)), device, a)
        self._same(lambda x: x.long().add_(x), device, a)

    def test_complex32_like_cpu(self, device):
        x = torch.randn(4, 2)
        self._same(lambda t: torch.view_as_complex(t.half()).to(torch.complex32).shape, device, x)
        self._same(lambda t: torch.empty(3, dtype=torch.complex32, device=t.device).shape, device, x)
        self._same(lambda t: torch.zeros(3, dtype=torch.complex32, device=t.device).to(torch.complex64), device, x)


class TestDeviceGenericMemoryFormat(TestCase):
    """channels_last inputs: CPU's values and CPU's output memory format."""

    _OPS = {
        "conv2d": lambda x: F.conv2d(x, torch.linspace(-1, 1, 6 * 3 * 9).reshape(6, 3, 3, 3).to(x.device), padding=1),
        "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
        "relu": F.relu,
        "add": lambda x: x + 1,
        "mul_bcast": lambda x: x * torch.arange(3.0).reshape(1, 3, 1, 1).to(x.device),
        "max_pool2d": lambda x: F.max_pool2d(x, 2),
        "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
        "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 3),
        "nearest": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        "bilinear": lambda x: F.interpolate(x, size=(9, 7), mode="bilinear", align_corners=False),
        "bicubic": lambda x: F.interpolate(x, size=(9, 7), mode="bicubic", align_corners=False),
        "bicubic_ac": lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True),
        "clone": lambda x: x.clone(),
        "empty_like_shape": lambda x: torch.empty_like(x).fill_(1.0),
        "contiguous": lambda x: x.contiguous(),
    }

    def test_channels_last_values_like_cpu(self, device):
        x = torch.randn(2, 3, 6, 5).contiguous(memory_format=torch.channels_last)
        for name, fn in self._OPS.items():
            self.assertEqual(fn(x.to(device)), fn(x), atol=1e-4, rtol=1e-4, msg=f"{name}: values")

    def test_channels_last_layout_like_cpu(self, device):
        x = torch.randn(2, 3, 6, 5).contiguous(memory_format=torch.channels_last)
        for name, fn in self._OPS.items():
            ref = fn(x)
            r = fn(x.to(device))
            self.assertEqual(r.is_contiguous(memory_format=torch.channels_last),
                             ref.is_contiguous(memory_format=torch.channels_last), msg=f"{name}: memory format")
            self.assertEqual(r.stride(), ref.stride(), msg=f"{name}: strides")

    def test_channels_last_backward_like_cpu(self, device):
        x = torch.randn(2, 3, 6, 5).contiguous(memory_format=torch.channels_last)
        for name in ("conv2d", "bicubic", "bilinear", "max_pool2d"):
            fn = self._OPS[name]
            xc = x.clone().requires_grad_()
            xd = x.clone().to(device).requires_grad_()
            fn(xc).square().sum().backward()
            fn(xd).square().sum().backward()
            self.assertEqual(xd.grad, xc.grad, atol=1e-3, rtol=1e-3, msg=f"{name}: grad")


class TestDeviceGenericRandom(TestCase):
    """Random ops on tensors of many dimensions and on large ones: shapes,
    ranges, a seed reproduces the draw."""

    _SHAPES = ((2, 1, 3, 1, 2, 1, 1, 2, 1, 2), (1,) * 12, (3, 0, 2, 1, 1, 1, 1, 1, 1), (1 << 17, 3))

    @onlyNativeDeviceTypes
    def test_random_ops_high_rank_and_large(self, device):
        draws = {
            "rand": lambda s: torch.rand(s, device=device),
            "randn": lambda s: torch.randn(s, device=device),
            "randint": lambda s: torch.randint(-3, 7, s, device=device),
            "uniform_": lambda s: torch.empty(s, device=device).uniform_(2, 3),
            "normal_": lambda s: torch.empty(s, device=device).normal_(1, 2),
            "bernoulli_": lambda s: torch.empty(s, device=device).bernoulli_(0.5),
            "exponential_": lambda s: torch.empty(s, device=device).exponential_(),
            "random_": lambda s: torch.empty(s, device=device, dtype=torch.int64).random_(0, 5),
            "rand_like": lambda s: torch.rand_like(torch.empty(s, device=device, dtype=torch.float64)),
        }
        lo_hi = {"rand": (0, 1), "randint": (-3, 6), "uniform_": (2, 3), "bernoulli_": (0, 1), "random_": (0, 4),
                 "rand_like": (0, 1)}
        for s in self._SHAPES:
            for name, fn in draws.items():
                torch.manual_seed(5)
                a = fn(s)
                torch.manual_seed(5)
                b = fn(s)
                self.assertEqual(a.shape, torch.Size(s), msg=f"{name} {s}")
                self.assertEqual(a.cpu(), b.cpu(), msg=f"{name} {s}: the seed reproduces the draw")
                if a.numel() and name in lo_hi:
                    lo, hi = lo_hi[name]
                    c = a.cpu()
                    self.assertTrue(bool((c >= lo).all() and (c <= hi).all()), msg=f"{name} {s}: range")
                if a.numel() > 1000 and name in ("rand", "uniform_", "randn"):
                    self.assertGreater(float(a.cpu().double().std()), 0.1, msg=f"{name} {s}: not constant")

    def test_dropout_high_rank(self, device):
        x = torch.ones((2, 1, 3, 1, 2, 1, 1, 2, 1, 2), device=device)
        y = F.dropout(x, 0.5)
        c = y.cpu()
        self.assertTrue(bool(((c == 0) | (c == 2)).all()))

    def test_fills_high_rank(self, device):
        # ones / zeros / full / fill_ / zero_ of rank 10 (contiguous: through the flat view on tpu)
        s = (2, 1, 3, 1, 2, 1, 1, 2, 1, 2)
        self.assertEqual(torch.zeros(s, device=device).cpu(), torch.zeros(s))
        self.assertEqual(torch.full(s, 3, device=device).cpu(), torch.full(s, 3))
        self.assertEqual(torch.empty(s, device=device).fill_(-2.5).cpu(), torch.full(s, -2.5))
        self.assertEqual(torch.ones(s, device=device, dtype=torch.int32).zero_().cpu(), torch.zeros(s, dtype=torch.int32))


instantiate_device_type_tests(TestDeviceGenericOps, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericPromotion, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericViews, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericIndexing, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericErrors, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericMemoryFormat, globals(), only_for=("tpu", "cpu"))
instantiate_device_type_tests(TestDeviceGenericRandom, globals(), only_for=("tpu", "cpu"))
