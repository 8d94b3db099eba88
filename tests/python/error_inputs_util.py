"""Bad-input sweep: every OpInfo's `error_inputs` on the CPU and on "tpu".

For each ErrorInput(sample_input, error_type, error_regex) of an OpInfo in
torch's op_db (made on the CPU, seed 0), the op runs on a CPU copy and on a
tpu copy of the sample (opinfo_util._sample_copy: tensors moved, device
arguments naming the CPU name the tpu; a sample with no tensor, such as
arange's, gets device="tpu"; storages are copied whole, and tensors sharing
one share the copy: an out= that overlaps an input still does).  The tpu run reads every tensor result back and
synchronizes, so that errors only the device can see surface too.  The
reference is what the CPU actually raises, not the declared type.

Per error input the outcome is
  ok            the tpu raised the CPU's exception type (or a subclass)
  accepted      the tpu raised nothing: a silent wrong answer
  wrong-type    the tpu raised another exception type
  skip-cpu      the CPU raised nothing (the declared error is not raised by
                this torch on the CPU): nothing to compare
  skip-notpu    no tensor or device argument reaches the tpu
  skip-move     the inputs cannot be put on the tpu (unsupported dtype ...)
and a worker that dies on an op makes that op "crash" (opinfo_util's worker
machinery runs ops in subprocesses and records the crash against the op).

Per op: status "pass" (every compared input ok), "fail" (one or more
accepted / wrong-type), "skip" (nothing compared), plus the indices of the
inputs that passed ("ok") -- the baseline guards those one by one.
"""
import re
import time
import traceback

import opinfo_util as U

KINDS = ("accepted", "wrong-type", "crash")


def has_error_inputs(op):
    return getattr(op, "error_inputs_func", None) is not None


def _exc_name(e):
    t = type(e)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _has_tensor(x):
    import torch
    return any(isinstance(t, torch.Tensor) for t in U._flat(x))


def _call(op, inp, args, kwargs, read_back):
    """Runs the op; returns the exception it raised (None if none)."""
    import torch
    try:
        out = op(inp, *args, **kwargs)
        if read_back:
            for t in U._flat(out):
                if isinstance(t, torch.Tensor) and t.device.type == "tpu" and t.layout == torch.strided:
                    t.cpu()
            torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - any exception is the observation
        return e
    return None


def run_error_input(op, ei):
    """(kind, info dict) for one ErrorInput."""
    import torch
    s = ei.sample_input
    info = {"declared": getattr(ei.error_type, "__name__", str(ei.error_type))}
    factory = not _has_tensor((s.input, s.args, s.kwargs))
    # CPU reference (storages copied whole: an out= overlapping an input
    # still does)
    inp, args, kwargs = U._sample_copy(s, "cpu", keep_storage=True)
    if factory and "device" not in kwargs:
        kwargs = dict(kwargs, device="cpu")
        e = _call(op, inp, args, kwargs, False)
        if isinstance(e, TypeError) and "unexpected keyword argument 'device'" in str(e):
            return "skip-notpu", dict(info, why="no tensor and no device argument")
    else:
        e = _call(op, inp, args, kwargs, False)
    if e is None:
        return "skip-cpu", dict(info, why="the CPU raised nothing")
    info["cpu"] = _exc_name(e)
    cpu_type = type(e)
    # tpu
    moved = U._Moved()
    try:
        t_inp, t_args, t_kwargs = U._sample_copy(s, "tpu", moved, keep_storage=True)
    except Exception as e2:  # noqa: BLE001
        return "skip-move", dict(info, why=U.one_line(e2, 200))
    if factory and "device" not in t_kwargs:
        t_kwargs = dict(t_kwargs, device=torch.device("tpu"))
        moved.device_kw = True
    if moved.tensors == 0 and not moved.device_kw:
        return "skip-notpu", dict(info, why="no tensor or device argument reaches the tpu")
    e2 = _call(op, t_inp, t_args, t_kwargs, True)
    if e2 is None:
        return "accepted", info
    info["tpu"] = _exc_name(e2)
    info["tpu_msg"] = U.one_line(e2, 240).split(": ", 1)[-1]
    if isinstance(e2, cpu_type):
        if ei.error_regex:
            info["regex_ok"] = bool(re.search(ei.error_regex, str(e2)))
        return "ok", info
    return "wrong-type", info


def run_op(op, max_inputs=None):
    """Runs every error input of `op` (at most max_inputs); the op's result."""
    import torch
    key = U.op_key(op)
    res = {"op": key, "status": None, "inputs": 0, "compared": 0, "ok": [], "failures": [], "skips": {},
           "error": None, "reason": None, "seconds": 0.0, "fallbacks": {}}
    t0 = time.perf_counter()
    try:
        if not has_error_inputs(op):
            res.update(status="skip", reason="no error_inputs")
            return res
        torch.manual_seed(0)
        try:
            eis = list(op.error_inputs("cpu"))
        except Exception as e:  # noqa: BLE001
            res.update(status="skip", reason=f"error_inputs raised on CPU: {U.one_line(e, 200)}")
            return res
        for i, ei in enumerate(eis):
            if max_inputs is not None and i >= max_inputs:
                break
            res["inputs"] += 1
            try:
                kind, info = run_error_input(op, ei)
            except Exception as e:  # noqa: BLE001 - the harness itself
                kind, info = "wrong-type", {"tpu": "harness", "tpu_msg": U.one_line(e, 240)}
            if kind == "ok":
                res["compared"] += 1
                res["ok"].append(i)
            elif kind in KINDS:
                res["compared"] += 1
                res["failures"].append(dict(i=i, kind=kind, **info))
            else:
                res["skips"][kind] = res["skips"].get(kind, 0) + 1
        try:
            torch.tpu.synchronize()
        except Exception:  # noqa: BLE001 - a late device error must not hide in the next op
            pass
        if res["failures"]:
            res["status"] = "fail"
            f = res["failures"][0]
            res["error"] = f"input {f['i']}: {f['kind']} (CPU {f.get('cpu')}, tpu {f.get('tpu', 'nothing')})"
        elif res["compared"]:
            res["status"] = "pass"
        else:
            res["status"] = "skip"
            res["reason"] = "nothing compared: " + ", ".join(f"{k} {n}" for k, n in res["skips"].items())
        return res
    except Exception as e:  # noqa: BLE001 - never lose the sweep to one op
        res["status"] = "fail"
        res["error"] = f"harness: {U.one_line(e)} @ {traceback.format_exc().strip().splitlines()[-3][:200]}"
        return res
    finally:
        res["seconds"] = round(time.perf_counter() - t0, 3)


def error_keys(db):
    """Sorted keys of the OpInfos that have error_inputs."""
    return sorted(k for k, op in db.items() if has_error_inputs(op))


def outcome_of(r):
    """(ok indices, failures) of one op's result; a crashed op (the worker
    died: no per-input record) is one "crash" failure."""
    if r is None:
        return set(), []
    if "inputs" not in r:
        return set(), [{"i": None, "kind": "crash", "tpu_msg": r.get("error")}]
    return set(r.get("ok", [])), list(r.get("failures", []))


def group_failures(results):
    """{kind: {op: [failure, ...]}} over all results."""
    out = {k: {} for k in KINDS}
    for key, r in sorted(results.items()):
        for f in outcome_of(r)[1]:
            out.setdefault(f["kind"], {}).setdefault(key, []).append(f)
    return out


def report(results, out=print, per_op=6):
    """Prints the failures grouped by kind and op; returns the counts."""
    n_ok = sum(len(outcome_of(r)[0]) for r in results.values())
    groups = group_failures(results)
    n_bad = {k: sum(len(v) for v in ops.values()) for k, ops in groups.items()}
    skips = {}
    for r in results.values():
        for k, n in (r.get("skips") or {}).items():
            skips[k] = skips.get(k, 0) + n
    total = n_ok + sum(n_bad.values())
    out(f"error inputs compared: {total}  ok {n_ok} ({100.0 * n_ok / max(total, 1):.1f}%)  "
        + "  ".join(f"{k} {n}" for k, n in n_bad.items())
        + ("  | not compared: " + ", ".join(f"{k} {n}" for k, n in sorted(skips.items())) if skips else ""))
    titles = {"accepted": "accepted silently (CPU raises, tpu raises nothing)",
              "wrong-type": "wrong exception type",
              "crash": "crash (the worker died)"}
    for kind, ops in groups.items():
        if not ops:
            continue
        out(f"\n{titles.get(kind, kind)}: {n_bad[kind]} inputs in {len(ops)} ops")
        for key, fs in ops.items():
            bits = []
            for f in fs[:per_op]:
                if kind == "accepted":
                    bits.append(f"#{f['i']} CPU {f.get('cpu')}")
                elif kind == "wrong-type":
                    bits.append(f"#{f['i']} CPU {f.get('cpu')} tpu {f.get('tpu')}: {(f.get('tpu_msg') or '')[:90]}")
                else:
                    bits.append((f.get("tpu_msg") or "")[:160])
            more = f" (+{len(fs) - per_op})" if len(fs) > per_op else ""
            out(f"  {key}: " + "; ".join(bits) + more)
    return {"ok": n_ok, **n_bad, "compared": total, "not_compared": skips}
