"""OpInfo sweep machinery shared by tests/python/test_opinfo.py and
tools/opinfo_sweep.py.

For one OpInfo of torch's op_db: take its float32 sample inputs (made on the
CPU), run the op on the CPU and on "tpu", compare the values (NaN == NaN,
OpInfo tolerance), and where the OpInfo supports autograd compare the
gradients of a random projection of the outputs
(torch.autograd.grad(outputs, inputs, grad_outputs=random) — the gradient of
sum(out * random), without running any extra op on the tpu).

Per op the result is one of
  pass           every compared sample matched, no aten op fell back to CPU
  fallback-pass  every compared sample matched, some aten op ran on the CPU
                 through torch_tpu's fallback (listed in "fallbacks")
  fail           a mismatch or an exception ("error": first error, one line)
  skip           nothing comparable: no float32 on CPU, random op (the CPU
                 reference changes with the seed), every sample raised on
                 CPU, or no input reaches the tpu ("reason" says which)

Samples run in worker subprocesses (`python opinfo_util.py --worker ...`) so
that a crash in the engine is recorded against the op that caused it and the
sweep goes on with the next op; each sample is guarded by try/except (no
per-sample timeout), a worker only gets killed when one op takes longer than
`op_timeout` seconds in total.
"""
import fnmatch
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import types
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BASELINE = os.path.join(HERE, "opinfo_baseline.json")

# Value/gradient tolerance when the OpInfo names no larger one for float32:
# PyTorch's own device-vs-CPU OpInfo test (test_ops.py::test_compare_cpu)
# compares with atol=rtol=1e-3; we are 10x stricter and let an OpInfo's
# float32 toleranceOverride (any test, CPU or generic) widen it.
BASE_ATOL = 1e-4
BASE_RTOL = 1e-4

# Ops whose output is not a function of the inputs (uninitialized memory);
# everything random is found empirically (the CPU reference is run under two
# seeds and compared).
UNCOMPARABLE = {
    "empty": "output is uninitialized memory",
    "empty_like": "output is uninitialized memory",
    "new_empty": "output is uninitialized memory",
    "new_empty_strided": "output is uninitialized memory",
    "empty_strided": "output is uninitialized memory",
    "empty_permuted": "output is uninitialized memory",
}


def nondeterministic_reason(op):
    """The OpInfo's own verdict: op_db marks random ops (and uninitialized
    outputs) with a skip whose reason is "output is non-deterministic"."""
    if op.name in UNCOMPARABLE:
        return UNCOMPARABLE[op.name]
    for d in getattr(op, "decorators", ()) or ():
        for dec in getattr(d, "decorators", None) or ():
            for cell in getattr(dec, "__closure__", None) or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(v, str) and v.strip().lower() == "output is non-deterministic":
                    return "random op (OpInfo: 'output is non-deterministic')"
    return None


def ensure_expecttest():
    """torch.testing._internal imports `expecttest` (a test-only PyPI
    package not in requirements.txt); a stand-in is enough for op_db."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        m = types.ModuleType("expecttest")
        m.TestCase = unittest.TestCase
        sys.modules["expecttest"] = m


def load_op_db():
    """{key: OpInfo}; key = name or name.variant_test_name (unique)."""
    ensure_expecttest()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    out = {}
    for op in op_db:
        out[op_key(op)] = op
    return out


def op_key(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tolerance(op):
    import torch
    from torch.testing._internal.common_device_type import toleranceOverride

    atol, rtol = BASE_ATOL, BASE_RTOL
    for d in getattr(op, "decorators", ()) or ():
        if getattr(d, "device_type", None) not in (None, "cpu"):
            continue
        for dec in getattr(d, "decorators", None) or ():
            if isinstance(dec, toleranceOverride) and torch.float32 in dec.d:
                t = dec.d[torch.float32]
                atol, rtol = max(atol, t.atol), max(rtol, t.rtol)
    return atol, rtol


def one_line(e, limit=400):
    """An exception as one line: type, first message line, plus the
    mismatch statistics of an assert_close failure."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else ""
    extra = [ln for ln in lines[1:] if ln.startswith(("Mismatched elements", "Greatest absolute",
                                                        "Greatest relative", "The values for attribute"))]
    s = f"{type(e).__name__}: {head}"
    if extra:
        s += " | " + " | ".join(extra)
    return s[:limit]


# ---- per-sample machinery ------------------------------------------------------

class _Moved:
    def __init__(self):
        self.tensors = 0
        self.device_kw = False


def _copy_structure(x, fn):
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list):
        return [_copy_structure(v, fn) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_copy_structure(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _copy_structure(v, fn) for k, v in x.items()}
    return x


# Ops whose result depends on the storage outside the input view (as_strided
# with a storage_offset reads the input's whole storage): their samples
# (e.g. as_strided.partial_views: base[5:15]) are copied storage and all, on
# the CPU and the tpu alike.  A plain .to()/.clone() copies only the view, so
# the op would read another storage: PyTorch marks test_compare_cpu an
# expected failure for as_strided.partial_views for that reason.
STORAGE_OPS = {"as_strided", "as_strided_copy", "as_strided_scatter"}


def _storage_copy(t, device, memo=None):
    """A copy of t's whole storage on device, viewed as t is.  Tensors of one
    storage (and dtype) copied with the same memo share the copy, so that
    aliasing (an out= that overlaps an input) survives the copy."""
    import torch
    st = t.untyped_storage()
    key = (st.data_ptr(), st.nbytes(), t.dtype)
    base = memo.get(key) if memo is not None and st.nbytes() else None
    if base is None:
        n = st.nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype).set_(st, 0, (n,), (1,))
        base = flat.clone() if device == "cpu" else flat.to(device)
        if memo is not None and st.nbytes():
            memo[key] = base
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _leaf_copy(device, moved=None, keep_storage=False):
    import torch
    memo = {}

    def fn(t):
        with torch.no_grad():
            if keep_storage and t.layout == torch.strided and t.device.type == "cpu":
                c = _storage_copy(t.detach(), device, memo)
            else:
                c = t.detach().to(device) if device != "cpu" else t.detach().clone()
        if moved is not None:
            moved.tensors += 1
        if t.requires_grad:
            c.requires_grad_(True)
        return c

    return fn


def _is_cpu_device(v):
    import torch
    return (isinstance(v, torch.device) and v.type == "cpu") or (isinstance(v, str) and v in ("cpu", "cpu:0"))


def _sample_copy(sample, device, moved=None, keep_int_args_on_cpu=False, keep_storage=False):
    """A fresh copy of the sample on `device` (leaves that required grad
    still do). On tpu, device arguments naming the CPU name the tpu.
    keep_storage: tensors are copied with their whole storage, tensors of
    one storage sharing the copy (STORAGE_OPS; error inputs)."""
    import torch
    fn = _leaf_copy(device, moved, keep_storage)
    inp = _copy_structure(sample.input, fn)
    afn = fn
    if keep_int_args_on_cpu:
        def afn(t):  # noqa: E306 - e.g. tensor_split's indices must stay on the CPU
            if t.is_floating_point() or t.is_complex():
                return fn(t)
            return t.clone()
    args = _copy_structure(tuple(sample.args), afn)
    kwargs = _copy_structure(dict(sample.kwargs), afn)
    if device != "cpu":
        dev = torch.device(device)
        if "device" in kwargs and (kwargs["device"] is None or _is_cpu_device(kwargs["device"])):
            kwargs["device"] = dev
            if moved is not None:
                moved.device_kw = True
        for k, v in list(kwargs.items()):
            if _is_cpu_device(v):
                kwargs[k] = dev
        if any(_is_cpu_device(v) for v in args):
            args = tuple(dev if _is_cpu_device(v) else v for v in args)
            if moved is not None:
                moved.device_kw = True
    return inp, args, kwargs


def _flat(x):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(x)[0]


def _grad_leaves(inp, args, kwargs):
    import torch
    return [t for t in _flat((inp, args, kwargs))
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]


def _same(a, b):
    """Exact-ish equality of two CPU results (used for the seed check)."""
    import torch
    fa, fb = _flat(a), _flat(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.layout != torch.strided:
                continue
            try:
                torch.testing.assert_close(x.detach(), y.detach(), equal_nan=True, rtol=1e-5, atol=1e-6)
            except AssertionError:
                return False
        else:
            try:
                if x != y and not (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
                    return False
            except Exception:
                return False
    return True


class SampleError(Exception):
    pass


def _compare(actual, expected, atol, rtol, what):
    """actual: tpu result, expected: CPU result (any pytree)."""
    import torch
    fa, fe = _flat(actual), _flat(expected)
    if len(fa) != len(fe):
        raise SampleError(f"{what}: tpu gave {len(fa)} outputs, CPU {len(fe)}")
    for i, (a, e) in enumerate(zip(fa, fe)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise SampleError(f"{what}[{i}]: tpu gave {type(a).__name__}, CPU a tensor")
            if a.device.type != "tpu":
                raise SampleError(f"{what}[{i}]: output on device {a.device}, expected tpu")
            a_cpu = a.detach().cpu()
            e_cpu = e.detach()
            try:
                torch.testing.assert_close(a_cpu, e_cpu, atol=atol, rtol=rtol, equal_nan=True,
                                           check_device=False, check_layout=False)
            except AssertionError as err:
                raise SampleError(f"{what}[{i}] {tuple(e.shape)}: {one_line(err)}") from None
        elif e is None:
            if a is not None and not (isinstance(a, torch.Tensor) and what.startswith("grad")):
                raise SampleError(f"{what}[{i}]: tpu gave {type(a).__name__}, CPU None")
        else:
            if isinstance(a, torch.Tensor):
                a = a.item() if a.numel() == 1 else a.cpu().tolist()
            try:
                torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
            except Exception as err:  # noqa: BLE001
                raise SampleError(f"{what}[{i}]: {a!r} != {e!r} ({one_line(err)})") from None


def _run_cpu(op, sample, seed):
    """The op on a fresh CPU copy of the sample, the RNG seeded with `seed`.
    OpInfos of random ops wrap the op in wrapper_set_seed (which calls
    torch.manual_seed(42)); that call is redirected to `seed` too, so that a
    random op shows as one (different outputs for different seeds)."""
    import torch
    inp, args, kwargs = _sample_copy(sample, "cpu", keep_storage=op.name in STORAGE_OPS)
    real = torch.manual_seed

    def seeded(_ignored=None):
        return real(seed)

    torch.manual_seed = seeded
    try:
        real(seed)
        out = op(inp, *args, **kwargs)
    finally:
        torch.manual_seed = real
    return out, (inp, args, kwargs)


def _random_under_more_seeds(op, sample, ref, seeds=(1, 2, 3, 5, 8, 13, 21, 34)):
    import torch
    with torch.no_grad():
        for sd in seeds:
            try:
                other, _ = _run_cpu(op, sample, sd)
            except Exception:  # noqa: BLE001
                return False
            if not _same(ref, other):
                return True
    return False


def _grad_targets(sample, out):
    """Outputs (after output_process_fn_grad) that carry a gradient."""
    import torch
    processed = sample.output_process_fn_grad(out)
    flat = _flat(processed)
    idx = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad
           and (t.is_floating_point() or t.is_complex())]
    return flat, idx


def run_sample(op, sample, index, atol, rtol, check_grad):
    """Returns ("ok"|"skip-cpu"|"skip-random"|"skip-notpu", info) or raises
    SampleError / any exception (a failure)."""
    import torch

    # 1. CPU reference, twice under different seeds (a random op differs)
    try:
        cpu_out, cpu_in = _run_cpu(op, sample, 1234)
    except Exception as e:  # noqa: BLE001
        return "skip-cpu", one_line(e)
    try:
        with torch.no_grad():
            cpu_out2, _ = _run_cpu(op, sample, 4321)
    except Exception as e:  # noqa: BLE001
        return "skip-cpu", one_line(e)
    if not _same(cpu_out, cpu_out2):
        return "skip-random", "CPU reference differs between seeds"
    del cpu_out2

    grad_idx = []
    cpu_grads = None
    leaves = []
    projections = None
    if check_grad:
        leaves = _grad_leaves(*cpu_in)
        if leaves:
            try:
                flat, grad_idx = _grad_targets(sample, cpu_out)
                if grad_idx:
                    g = torch.Generator().manual_seed(1000 + index)
                    projections = [torch.randn(flat[i].shape, dtype=flat[i].dtype, generator=g) for i in grad_idx]
                    cpu_grads = torch.autograd.grad([flat[i] for i in grad_idx], leaves,
                                                    grad_outputs=projections, allow_unused=True)
            except Exception:  # noqa: BLE001 - no CPU gradient: nothing to compare
                cpu_grads = None

    # 2. tpu
    moved = _Moved()
    t_in = _sample_copy(sample, "tpu", moved, keep_storage=op.name in STORAGE_OPS)
    if moved.tensors == 0 and not moved.device_kw:
        return "skip-notpu", "no tensor input or device argument reaches the tpu"
    torch.manual_seed(1234)
    try:
        tpu_out = op(t_in[0], *t_in[1], **t_in[2])
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if "on cpu" in msg.lower() and "expected" in msg.lower():
            # an argument PyTorch wants on the CPU on every device (indices
            # of tensor_split ...): retry with integer arguments left there
            t_in = _sample_copy(sample, "tpu", _Moved(), keep_int_args_on_cpu=True)
            try:
                tpu_out = op(t_in[0], *t_in[1], **t_in[2])
            except Exception as e2:  # noqa: BLE001
                raise SampleError(f"forward: {one_line(e2)}") from None
        else:
            raise SampleError(f"forward: {one_line(e)}") from None
    try:
        _compare(tpu_out, cpu_out, atol, rtol, "output")
    except SampleError:
        # a random op whose output has little entropy (dropout of a 0-d
        # tensor ...) can agree under two seeds by chance: ask a few more
        if _random_under_more_seeds(op, sample, cpu_out):
            return "skip-random", "CPU reference differs between seeds"
        raise

    grads_checked = False
    if cpu_grads is not None:
        t_leaves = _grad_leaves(*t_in)
        if len(t_leaves) != len(leaves):
            raise SampleError("grad: differentiable inputs differ between tpu and CPU")
        try:
            t_flat, t_idx = _grad_targets(sample, tpu_out)
        except Exception as e:  # noqa: BLE001
            raise SampleError(f"grad (output_process_fn_grad): {one_line(e)}") from None
        if t_idx != grad_idx:
            raise SampleError(f"grad: outputs requiring grad on tpu {t_idx}, on CPU {grad_idx}")
        try:
            t_grads = torch.autograd.grad([t_flat[i] for i in t_idx], t_leaves,
                                          grad_outputs=[p.to("tpu") for p in projections], allow_unused=True)
        except Exception as e:  # noqa: BLE001
            raise SampleError(f"backward: {one_line(e)}") from None
        cg = [torch.zeros_like(l) if g is None else g for g, l in zip(cpu_grads, leaves)]
        tg = [torch.zeros_like(l) if g is None else g for g, l in zip(t_grads, t_leaves)]
        _compare(tg, cg, atol, rtol, "grad")
        grads_checked = True
    return "ok", grads_checked


def run_op(op, max_samples=None, dtype=None):
    """Runs every float32 (or `dtype`: torch.complex64 for the complex
    samples) sample of `op`; returns the op's result dict."""
    import torch
    import torch_tpu

    dtype = dtype or torch.float32

    key = op_key(op)
    res = {"op": key, "status": None, "samples": 0, "compared": 0, "grad_compared": 0,
           "skipped_cpu_error": 0, "skipped_random": 0, "failed_samples": 0,
           "fallbacks": {}, "error": None, "reason": None, "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        why = nondeterministic_reason(op)
        if why:
            res.update(status="skip", reason=f"nondeterministic: {why}")
            return res
        if dtype not in op.supported_dtypes("cpu"):
            res.update(status="skip", reason=f"no {str(dtype)[6:]} support on CPU")
            return res
        atol, rtol = tolerance(op)
        check_grad = bool(op.supports_autograd)
        torch.manual_seed(0)
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=check_grad)
        except Exception as e:  # noqa: BLE001
            res.update(status="skip", reason=f"sample_inputs raised on CPU: {one_line(e)}")
            return res
        fb_before = torch_tpu.fallback_counts()
        notpu = 0
        idx = -1
        it = iter(samples)
        while True:
            try:
                sample = next(it)
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001
                res["skipped_cpu_error"] += 1
                if res["reason"] is None:
                    res["reason"] = f"sample generation raised: {one_line(e)}"
                break
            idx += 1
            if max_samples is not None and idx >= max_samples:
                break
            res["samples"] += 1
            try:
                kind, info = run_sample(op, sample, idx, atol, rtol, check_grad)
            except Exception as e:  # noqa: BLE001 - SampleError or anything from the engine
                res["failed_samples"] += 1
                if res["error"] is None:
                    msg = str(e) if isinstance(e, SampleError) else f"harness: {one_line(e)}"
                    res["error"] = f"sample {idx}: {msg}"[:500]
                continue
            if kind == "ok":
                res["compared"] += 1
                res["grad_compared"] += int(bool(info))
            elif kind == "skip-cpu":
                res["skipped_cpu_error"] += 1
            elif kind == "skip-random":
                res["skipped_random"] += 1
            elif kind == "skip-notpu":
                notpu += 1
        try:
            torch.tpu.synchronize()
        except Exception as e:  # noqa: BLE001
            res["failed_samples"] += 1
            res["error"] = res["error"] or f"synchronize: {one_line(e)}"
        fb_after = torch_tpu.fallback_counts()
        fb = {}
        for name, n in fb_after.items():
            d = n - fb_before.get(name, 0)
            if d > 0:
                fb[name] = fb.get(name, 0) + d
        res["fallbacks"] = dict(sorted(fb.items()))
        if res["failed_samples"]:
            res["status"] = "fail"
        elif res["compared"] == 0:
            res["status"] = "skip"
            if res["skipped_random"]:
                res["reason"] = "random op: the CPU reference changes with the seed"
            elif notpu:
                res["reason"] = "no tensor input or device argument reaches the tpu"
            elif res["samples"] == 0:
                res["reason"] = res["reason"] or "no float32 sample inputs"
            else:
                res["reason"] = "every sample raised on CPU"
        elif fb:
            res["status"] = "fallback-pass"
        else:
            res["status"] = "pass"
        return res
    except Exception as e:  # noqa: BLE001 - never lose the sweep to one op
        res["status"] = "fail"
        res["error"] = f"harness: {one_line(e)} @ {traceback.format_exc().strip().splitlines()[-3][:200]}"
        return res
    finally:
        res["seconds"] = round(time.perf_counter() - t0, 3)


# ---- workers ---------------------------------------------------------------------

def worker_main(keys_file, out_file, max_samples, runner="samples"):
    """Runs the ops named in keys_file, one JSON line per event to out_file.
    runner: "samples" (run_op here) or the name of a module of tests/python
    whose run_op(op, max_samples) returns the op's result dict (e.g.
    "error_inputs_util")."""
    worker_setup()
    if runner == "samples":
        run = run_op
    else:
        import importlib
        sys.path.insert(0, HERE)
        run = importlib.import_module(runner).run_op
    return worker_loop(keys_file, out_file, load_op_db(), lambda op: run(op, max_samples), "not in this torch's op_db")


def worker_setup():
    """A sweep worker's process: the CPU fallback on, warnings off, torch_tpu
    loaded, OPINFO_WORKER_THREADS CPU threads if set."""
    os.environ.setdefault("TORCH_TPU_CPU_FALLBACK", "1")
    warnings.simplefilter("ignore")
    import torch
    import torch_tpu  # noqa: F401
    if int(os.environ.get("OPINFO_WORKER_THREADS", "0")) > 0:
        torch.set_num_threads(int(os.environ["OPINFO_WORKER_THREADS"]))


def worker_loop(keys_file, out_file, db, run, missing):
    """The worker protocol: for each key of keys_file (a JSON list), a
    {"start": key} line, then {"result": run(db[key])} (a skip saying
    `missing` when db has no such key), to out_file as they happen, so the
    parent sees which key a crashed or hung worker was on."""
    with open(keys_file) as f:
        keys = json.load(f)
    with open(out_file, "a", buffering=1) as out:
        for key in keys:
            out.write(json.dumps({"start": key, "t": time.time()}) + "\n")
            out.flush()
            item = db.get(key)
            if item is None:
                res = {"op": key, "status": "skip", "reason": missing}
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = run(item)
            out.write(json.dumps({"result": res}) + "\n")
            out.flush()
    return 0


class _Worker:
    def __init__(self, keys, max_samples, env, tmpdir, wid, log, runner="samples", script=None):
        self.runner = runner
        self.script = script or os.path.abspath(__file__)  # its `--worker` main runs the keys
        self.keys = list(keys)
        self.max_samples = max_samples
        self.env = env
        self.tmpdir = tmpdir
        self.wid = wid
        self.log = log
        self.results = {}
        self.restarts = 0
        self.proc = None
        self.pos = 0  # bytes of out_file consumed
        self.current = None
        self.current_since = None
        self._start()

    def _start(self):
        remaining = [k for k in self.keys if k not in self.results]
        self.keys_file = os.path.join(self.tmpdir, f"keys{self.wid}_{self.restarts}.json")
        self.out_file = os.path.join(self.tmpdir, f"out{self.wid}_{self.restarts}.jsonl")
        with open(self.keys_file, "w") as f:
            json.dump(remaining, f)
        open(self.out_file, "w").close()
        self.pos = 0
        self.current, self.current_since = None, time.time()
        self.stderr = open(os.path.join(self.tmpdir, f"err{self.wid}_{self.restarts}.txt"), "w")
        cmd = [sys.executable, self.script, "--worker", self.keys_file, self.out_file,
               str(self.max_samples if self.max_samples is not None else -1)]
        if self.runner != "samples":
            cmd.append(self.runner)
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.stderr)

    def poll(self, op_timeout):
        """Reads new events; handles crash/timeout. Returns True when done."""
        with open(self.out_file) as f:
            f.seek(self.pos)
            data = f.read()
        complete = data[: data.rfind("\n") + 1]
        self.pos += len(complete.encode())
        for line in complete.splitlines():
            ev = json.loads(line)
            if "start" in ev:
                self.current, self.current_since = ev["start"], time.time()
            else:
                r = ev["result"]
                self.results[r["op"]] = r
                self.current = None
                if self.log:
                    self.log(r)
        rc = self.proc.poll()
        if rc is None:
            if self.current is not None and time.time() - self.current_since > op_timeout:
                self.proc.kill()
                self.proc.wait()
                self._crashed(f"timeout: the op ran over {op_timeout}s (worker killed)")
                return False
            if self.current is None and time.time() - self.current_since > op_timeout + 300:
                self.proc.kill()  # stuck before the first op (import)
                self.proc.wait()
                self._crashed("worker hung before starting an op")
                return False
            return False
        self.stderr.close()
        if rc == 0 and all(k in self.results for k in self.keys):
            return True
        self._crashed(f"worker exited with status {rc}" + (f" (signal {-rc})" if rc < 0 else ""))
        return all(k in self.results for k in self.keys)

    def _crashed(self, why):
        victim = self.current
        started_any = self.current is not None or self.pos > 0
        tail = ""
        try:
            with open(self.stderr.name) as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            interesting = [ln for ln in lines if not ln.startswith(("WARNING: All log", "I0000"))]
            if interesting:
                tail = " | " + interesting[-1][:300]
        except OSError:
            pass
        if not started_any:
            # died before its first op (import failed, e.g. the package is
            # being rebuilt): no op to blame; retry a few times, then give up
            self.start_failures = getattr(self, "start_failures", 0) + 1
            if self.start_failures > 3:
                for k in self.keys:
                    self.results.setdefault(k, {"op": k, "status": "fail", "fallbacks": {},
                                                "error": f"not run: the worker could not start: {why}{tail}"})
                return
            time.sleep(5 * self.start_failures)
            self.restarts += 1
            self._start()
            return
        if victim is not None:
            r = {"op": victim, "status": "fail", "error": f"{why}{tail}", "fallbacks": {},
                 "samples": 0, "compared": 0, "grad_compared": 0, "failed_samples": 1, "seconds": None}
            self.results[victim] = r
            if self.log:
                self.log(r)
        self.restarts += 1
        if self.restarts > 50 or all(k in self.results for k in self.keys):
            for k in self.keys:
                self.results.setdefault(k, {"op": k, "status": "fail", "error": "not run: worker kept crashing",
                                            "fallbacks": {}})
            return
        self._start()


def run_sweep(keys, jobs=2, max_samples=None, op_timeout=600, env=None, log=None, runner="samples", script=None):
    """Runs `keys` in `jobs` worker processes; returns {key: result}.
    runner: what a worker runs per op (see worker_main); script: the worker
    program (default this file; module_util.py runs ModuleInfos with the
    same protocol)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("OPINFO_WORKER_THREADS", "1" if jobs > 1 else "0")
    env["PYTHONWARNINGS"] = "ignore"
    keys = list(keys)
    jobs = max(1, min(jobs, len(keys))) if keys else 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="opinfo_") as tmp:
        workers = [_Worker(keys[i::jobs], max_samples, env, tmp, i, log, runner, script) for i in range(jobs)]
        active = list(workers)
        while active:
            time.sleep(0.2)
            active = [w for w in active if not w.poll(op_timeout)]
        for w in workers:
            results.update(w.results)
    return {k: results[k] for k in keys if k in results}


def summarize(results):
    counts = {"pass": 0, "fallback-pass": 0, "fail": 0, "skip": 0}
    for r in results.values():
        counts[r.get("status", "fail")] = counts.get(r.get("status", "fail"), 0) + 1
    return counts


def fallback_table(results):
    """{aten op: number of OpInfos that needed it through the fallback}."""
    agg = {}
    for r in results.values():
        for name in r.get("fallbacks", {}) or {}:
            agg[name] = agg.get(name, 0) + 1
    return dict(sorted(agg.items(), key=lambda kv: (-kv[1], kv[0])))


def failure_kinds(results):
    """{first error message (type and text, trimmed): [keys that failed with it]},
    the most common first."""
    kinds = {}
    for k, r in results.items():
        if r.get("status") == "fail":
            e = (r.get("error") or "?").split(": ", 1)[-1]
            kinds.setdefault(e.split(" | ")[0][:90], []).append(k)
    return {e: ks for e, ks in sorted(kinds.items(), key=lambda kv: -len(kv[1]))}


def sweep_plan(all_keys, passing, base, jobs, names_var, shard_var, samples_var, budget_var, budget_default, noun,
               caps=(None, 32, 16, 8, 4, 2, 1), verified_cap=None):
    """What a guard test over a sweep runs: (keys, max samples per key,
    description).  `names_var` (fnmatch patterns) or `shard_var` (i/n) pick
    keys with all their samples; `samples_var` forces the cap; by default
    every baseline "pass" key, all samples if the baseline's recorded cost
    (base["cost"]) fits `budget_var` seconds over the workers, else the
    largest cap of `caps` (not above `verified_cap`, the baseline's own)
    that fits, run by `jobs` workers.  test_opinfo.py and test_modules.py
    use it."""
    names = os.environ.get(names_var, "").strip()
    if names:
        pats = [p.strip() for p in names.split(",") if p.strip()]
        keys = sorted({k for k in all_keys for p in pats if fnmatch.fnmatchcase(k, p)} | {p for p in pats if "*" not in p})
        return keys, None, f"{noun} {names}"
    shard = os.environ.get(shard_var, "").strip()
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        if not (0 <= i < n):
            raise ValueError(f"{shard_var}={shard!r}: want i/n with 0 <= i < n")
        return sorted(all_keys)[i::n], None, f"shard {i}/{n}"
    env = os.environ.get(samples_var, "").strip()
    if env:
        ms = int(env)
        return sorted(passing), (ms if ms > 0 else None), f"baseline pass {noun}, <= {ms} samples each"
    budget = float(os.environ.get(budget_var, str(budget_default)))
    cost = (base or {}).get("cost", {})
    ms = 1
    for cap in caps:
        if verified_cap and (cap is None or cap > verified_cap):
            continue
        est = 0.0
        for k in passing:
            c = cost.get(k) or {}
            sec, n = c.get("seconds") or 1.0, max(c.get("samples") or 1, 1)
            est += sec if cap is None else sec * min(1.0, cap / n)
        if est / max(jobs, 1) <= budget:
            ms = cap
            break
    return sorted(passing), ms, f"baseline pass {noun}, " + ("all samples" if ms is None else f"<= {ms} samples each")


def progress_log(total, quiet=False):
    """A run_sweep `log` callback that prints one line per finished key:
    count, elapsed seconds, status, key and the error / fallbacks / skip
    reason (tools/opinfo_sweep.py, tools/module_sweep.py)."""
    t0 = time.time()
    done = [0]

    def log(r):
        done[0] += 1
        if quiet:
            return
        extra = ""
        if r["status"] == "fail":
            extra = "  " + (r.get("error") or "")[:160]
        elif r["status"] == "fallback-pass":
            extra = "  fallback: " + ",".join(r.get("fallbacks", {}))[:160]
        elif r["status"] == "skip":
            extra = "  " + (r.get("reason") or "")[:120]
        print(f"[{done[0]:4d}/{total} {time.time() - t0:6.0f}s] {r['status']:13s} {r['op']}{extra}", flush=True)

    return log


def print_summary(doc, noun, elapsed, out):
    """A sweep's closing lines: the counts, the most common failures, the
    most needed fallbacks."""
    counts, kinds, fb = doc["counts"], doc.get("failure_kinds") or {}, doc.get("fallback_ops") or {}
    print(f"\npass {counts['pass']}  fallback-pass {counts['fallback-pass']}  fail {counts['fail']}  "
          f"skip {counts['skip']}  ({sum(counts.values())} {noun}, {elapsed:.0f}s) -> {os.path.relpath(out, REPO)}")
    if kinds:
        print("failures by kind:")
        for e, ks in list(kinds.items())[:12]:
            print(f"  {len(ks):3d}  {e}   [{', '.join(ks[:4])}{', ...' if len(ks) > 4 else ''}]")
    if fb:
        print(f"most needed fallbacks (aten op: {noun}): " + ", ".join(f"{k} ({v})" for k, v in list(fb.items())[:15]))


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "--worker":
        ms = int(sys.argv[4])
        sys.exit(worker_main(sys.argv[2], sys.argv[3], None if ms < 0 else ms, *sys.argv[5:]))
    print(__doc__)
