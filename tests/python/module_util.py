"""ModuleInfo sweep machinery shared by tests/python/test_modules.py and
tools/module_sweep.py (the OpInfo sweep's sibling: worker processes,
comparison and classification come from opinfo_util.py).

For one ModuleInfo of torch's module_db that supports float32, for each
training flag PyTorch's own module tests use (train, and eval too when the
ModuleInfo says the two differ) and each float32 ModuleInput built on the
CPU:
  - the module is constructed on the CPU (floating constructor tensors cast
    to float32: ModuleInfo makes some in float64 whatever the dtype under
    test, e.g. FractionalMaxPool's _random_samples, which the CPU kernel
    itself rejects next to a float32 input);
  - the CPU reference runs on a copy; the tpu runs on deepcopy(module)
    .to("tpu") (plain tensor attributes that .to() leaves behind, such as
    _random_samples, are moved too, as if the module had been built on the
    device); a lazy module is built again and moved to tpu uninitialized,
    materialized by a first forward, then given the CPU module's values;
  - outputs, the module's buffers after the forward (running statistics),
    and the gradients of a random projection of the outputs with respect to
    the inputs and every parameter are compared (OpInfo tolerance rules,
    widened per module below where PyTorch's own tests widen it).
A mode whose CPU output changes with the seed (dropout-like randomness) is
not compared by value in that mode ("random"); the same module is compared
in eval mode.

Per module the result is
  pass           every compared sample matched, no aten op ran on the CPU
  fallback-pass  matched, but some aten op ran through torch_tpu's CPU
                 fallback (listed in "fallbacks")
  fail           a mismatch or an exception ("error": the first one)
  skip           nothing comparable ("reason")
"""
import copy
import os
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import opinfo_util as OU  # noqa: E402

BASELINE = os.path.join(HERE, "module_baseline.json")
BASE_ATOL, BASE_RTOL = OU.BASE_ATOL, OU.BASE_RTOL

# Wider tolerances, each with its reason (PyTorch's module tests compare CPU
# and device at 1e-5..1e-3 depending on the module; deep stacks accumulate).
TOLERANCE = {
    "nn.Transformer": (1e-3, 1e-3, "six encoder/decoder layers of float32 matmuls and layer norms"),
    "nn.TransformerEncoder": (1e-3, 1e-3, "stacked encoder layers"),
    "nn.TransformerDecoderLayer": (5e-4, 5e-4, "attention + feed-forward + layer norms"),
    "nn.TransformerEncoderLayer": (5e-4, 5e-4, "attention + feed-forward + layer norm"),
    "nn.MultiheadAttention": (5e-4, 5e-4, "softmax of float32 matmuls"),
}


def load_module_db():
    """{name: ModuleInfo} of the ModuleInfos that support float32 on CPU."""
    import torch
    OU.ensure_expecttest()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_modules import module_db
    return {mi.name: mi for mi in module_db if torch.float32 in mi.supported_dtypes("cpu")}


def training_flags(mi):
    """PyTorch's choice (common_modules.modules): train, plus eval when the
    module behaves differently in the two."""
    return [True, False] if mi.train_and_eval_differ else [True]


def _cast_ctor(x):
    import torch
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float32:
        return x.to(torch.float32)
    return x


def _build(mi, module_input, training):
    import torch
    ci = module_input.constructor_input
    args = OU._copy_structure(tuple(ci.args), _cast_ctor)
    kwargs = OU._copy_structure(dict(ci.kwargs), _cast_ctor)
    m = mi.module_cls(*args, **kwargs)
    if not mi.is_lazy:
        m.to(torch.float32)
    m.train(training)
    return m


def _move_attrs(m, device):
    """Tensor attributes that are neither parameters nor buffers (Module.to
    does not move them) follow the module to `device`."""
    import torch
    for mod in m.modules():
        for k, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
                setattr(mod, k, v.to(device))
    return m


def _inputs(module_input, device, moved=None):
    fi = module_input.forward_input
    fn = OU._leaf_copy(device, moved)
    return OU._copy_structure(tuple(fi.args), fn), OU._copy_structure(dict(fi.kwargs), fn)


def _float_outputs(out):
    import torch
    flat = OU._flat(out)
    idx = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return flat, idx


def _seeded(seed, fn):
    import torch
    torch.manual_seed(seed)
    return fn()


def _state(m):
    return {k: v.detach() for k, v in m.state_dict().items()}


def run_sample(mi, module_input, index, training, atol, rtol):
    """One ModuleInput in one mode: ("ok", grads_checked) | ("skip-random" |
    "skip-cpu", why); raises OU.SampleError or anything from the engine."""
    import torch

    if module_input.forward_input is None:
        return "skip-cpu", "no forward input"
    # 1. the module, on the CPU; a pristine copy for every run
    try:
        base = _seeded(0, lambda: _build(mi, module_input, training))
        if mi.is_lazy:  # materialize on the CPU (the tpu module is materialized on the tpu, below)
            with torch.no_grad():
                a, k = _inputs(module_input, "cpu")
                _seeded(0, lambda: base(*a, **k))
    except Exception as e:  # noqa: BLE001
        return "skip-cpu", f"construction on CPU: {OU.one_line(e)}"

    def cpu_run(seed):
        m = copy.deepcopy(base)
        a, k = _inputs(module_input, "cpu")
        out = _seeded(seed, lambda: m(*a, **k))
        return m, (a, k), out

    try:
        m_cpu, cpu_in, cpu_out = cpu_run(1234)
        with torch.no_grad():
            _, _, cpu_out2 = cpu_run(4321)
    except Exception as e:  # noqa: BLE001
        return "skip-cpu", OU.one_line(e)
    if not OU._same(cpu_out, cpu_out2):
        return "skip-random", f"{'train' if training else 'eval'} mode output changes with the seed"

    leaves = OU._grad_leaves(None, cpu_in[0], cpu_in[1]) + [p for p in m_cpu.parameters() if p.requires_grad]
    flat, gidx = _float_outputs(cpu_out)
    cpu_grads = projections = None
    if leaves and gidx:
        g = torch.Generator().manual_seed(1000 + index)
        projections = [torch.randn(flat[i].shape, dtype=flat[i].dtype, generator=g) for i in gidx]
        try:
            cpu_grads = torch.autograd.grad([flat[i] for i in gidx], leaves, grad_outputs=projections,
                                            allow_unused=True)
        except Exception:  # noqa: BLE001 - no CPU gradient: nothing to compare
            cpu_grads = None

    # 2. the tpu copy
    try:
        if mi.is_lazy:
            m_tpu = _seeded(0, lambda: _build(mi, module_input, training)).to("tpu")
            a, k = _inputs(module_input, "tpu")
            with torch.no_grad():
                m_tpu(*a, **k)  # materializes on the device
                m_tpu.load_state_dict(base.state_dict())
        else:
            m_tpu = _move_attrs(copy.deepcopy(base).to("tpu"), "tpu")
    except Exception as e:  # noqa: BLE001
        raise OU.SampleError(f"to('tpu'): {OU.one_line(e)}") from None
    t_in = _inputs(module_input, "tpu")
    try:
        tpu_out = _seeded(1234, lambda: m_tpu(*t_in[0], **t_in[1]))
    except Exception as e:  # noqa: BLE001
        raise OU.SampleError(f"forward: {OU.one_line(e)}") from None
    OU._compare(tpu_out, cpu_out, atol, rtol, "output")
    # buffers after the forward (running statistics ...)
    sc, st = _state(m_cpu), _state(m_tpu)
    bufs = [n for n, _ in m_cpu.named_buffers()]
    if bufs:
        OU._compare([st[n] for n in bufs if n in st], [sc[n] for n in bufs if n in st], atol, rtol, "buffer")

    if cpu_grads is None:
        return "ok", False
    t_leaves = OU._grad_leaves(None, t_in[0], t_in[1]) + [p for p in m_tpu.parameters() if p.requires_grad]
    if len(t_leaves) != len(leaves):
        raise OU.SampleError(f"grad: {len(t_leaves)} differentiable leaves on tpu, {len(leaves)} on CPU")
    t_flat, t_idx = _float_outputs(tpu_out)
    if t_idx != gidx:
        raise OU.SampleError(f"grad: outputs requiring grad on tpu {t_idx}, on CPU {gidx}")
    try:
        t_grads = torch.autograd.grad([t_flat[i] for i in t_idx], t_leaves,
                                      grad_outputs=[p.to("tpu") for p in projections], allow_unused=True)
    except Exception as e:  # noqa: BLE001
        raise OU.SampleError(f"backward: {OU.one_line(e)}") from None
    cg = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(cpu_grads, leaves)]
    tg = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(t_grads, t_leaves)]
    OU._compare(tg, cg, atol, rtol, "grad")
    return "ok", True


def run_module(mi, max_samples=None):
    """Every float32 ModuleInput of `mi` in each training flag; returns the
    module's result dict (the "op" field is the ModuleInfo name, as the
    sweep's worker protocol keys results by it)."""
    import torch
    import torch_tpu

    res = {"op": mi.name, "status": None, "samples": 0, "compared": 0, "grad_compared": 0,
           "skipped_cpu_error": 0, "skipped_random": 0, "failed_samples": 0, "modes": {},
           "fallbacks": {}, "error": None, "reason": None, "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        atol, rtol = TOLERANCE.get(mi.name, (BASE_ATOL, BASE_RTOL, ""))[:2]
        fb_before = torch_tpu.fallback_counts()
        for training in training_flags(mi):
            mode = "train" if training else "eval"
            stats = res["modes"].setdefault(mode, {"samples": 0, "compared": 0, "random": 0, "failed": 0})
            torch.manual_seed(0)
            try:
                inputs = mi.module_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=True,
                                               training=training)
            except Exception as e:  # noqa: BLE001
                res["reason"] = f"module_inputs_func raised on CPU: {OU.one_line(e)}"
                continue
            for idx, module_input in enumerate(inputs):
                if max_samples is not None and idx >= max_samples:
                    break
                res["samples"] += 1
                stats["samples"] += 1
                try:
                    kind, info = run_sample(mi, module_input, idx, training, atol, rtol)
                except Exception as e:  # noqa: BLE001 - SampleError or anything from the engine
                    res["failed_samples"] += 1
                    stats["failed"] += 1
                    if res["error"] is None:
                        msg = str(e) if isinstance(e, OU.SampleError) else f"harness: {OU.one_line(e)}"
                        desc = getattr(module_input, "desc", "") or ""
                        res["error"] = f"{mode} sample {idx} ({desc}): {msg}"[:500]
                    continue
                if kind == "ok":
                    res["compared"] += 1
                    stats["compared"] += 1
                    res["grad_compared"] += int(bool(info))
                elif kind == "skip-random":
                    res["skipped_random"] += 1
                    stats["random"] += 1
                else:
                    res["skipped_cpu_error"] += 1
                    res["reason"] = res["reason"] or info
        try:
            torch.tpu.synchronize()
        except Exception as e:  # noqa: BLE001
            res["failed_samples"] += 1
            res["error"] = res["error"] or f"synchronize: {OU.one_line(e)}"
        fb = {}
        for name, n in torch_tpu.fallback_counts().items():
            d = n - fb_before.get(name, 0)
            if d > 0:
                fb[name] = fb.get(name, 0) + d
        res["fallbacks"] = dict(sorted(fb.items()))
        if res["failed_samples"]:
            res["status"] = "fail"
        elif res["compared"] == 0:
            res["status"] = "skip"
            if res["skipped_random"]:
                res["reason"] = "random in every mode compared"
            else:
                res["reason"] = res["reason"] or "no sample ran on CPU"
        elif fb:
            res["status"] = "fallback-pass"
        else:
            res["status"] = "pass"
        return res
    except Exception as e:  # noqa: BLE001 - never lose the sweep to one module
        res["status"] = "fail"
        res["error"] = f"harness: {OU.one_line(e)} @ {traceback.format_exc().strip().splitlines()[-3][:200]}"
        return res
    finally:
        res["seconds"] = round(time.perf_counter() - t0, 3)


def worker_main(keys_file, out_file, max_samples):
    """Runs the modules named in keys_file (opinfo_util's worker protocol)."""
    OU.worker_setup()
    return OU.worker_loop(keys_file, out_file, load_module_db(), lambda mi: run_module(mi, max_samples),
                          "not in this torch's module_db (float32)")


def run_sweep(keys, jobs=2, max_samples=None, timeout=600, log=None):
    return OU.run_sweep(keys, jobs=jobs, max_samples=max_samples, op_timeout=timeout, log=log,
                        script=os.path.abspath(__file__))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        ms = int(sys.argv[4])
        sys.exit(worker_main(sys.argv[2], sys.argv[3], None if ms < 0 else ms))
    print(__doc__)
