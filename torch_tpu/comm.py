"""torch.tpu.comm: collectives across the tpu devices of one process.

For a process that drives several devices (a host with several chips, or
TORCH_TPU_NUM_DEVICES=2 on the CPU plugin), as torch.cuda.comm and
torch.cuda.nccl are for GPUs:

- all_reduce / all_gather / reduce_scatter take one tensor per device and
  run as one replicated program over those devices, the plugin's own
  in-process collectives (tpu_rt_collective in the engine); torch.cuda.nccl's
  signatures.
- broadcast, broadcast_coalesced, scatter, gather, reduce_add and
  reduce_add_coalesced are torch.nn.parallel.comm's (what nn.DataParallel
  calls): device-to-device copies and adds.

torch.nn.parallel.comm calls C functions (torch._C._broadcast_coalesced,
_scatter, _gather, ...) that only CUDA builds of PyTorch define, for CUDA
tensors.  install() defines the missing ones for tpu tensors, so
nn.DataParallel and torch.nn.parallel.comm run on tpu with a CPU build of
PyTorch; where torch already has them (a CUDA build) it changes nothing.
"""
import torch
from torch.nn.parallel.comm import (broadcast, broadcast_coalesced, gather, reduce_add,  # noqa: F401
                                    reduce_add_coalesced, scatter)

from . import _C

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "broadcast_coalesced", "gather",
           "reduce_add", "reduce_add_coalesced", "scatter"]

_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER = 0, 1, 2
# torch.cuda.nccl's op numbers (ncclRedOp_t)
_NCCL_OPS = {0: "sum", 1: "product", 2: "max", 3: "min", 4: "avg"}


def _op_name(op):
    if isinstance(op, str):
        name = op.lower()
    elif isinstance(op, int) and not hasattr(op, "name"):
        name = _NCCL_OPS.get(op, str(op))
    else:  # torch.distributed.ReduceOp or its RedOpType
        name = getattr(op, "name", str(op)).rsplit(".", 1)[-1].lower()
    if name == "prod":
        name = "product"
    if name not in ("sum", "avg", "product", "min", "max"):
        raise ValueError(f"torch.tpu.comm: unsupported reduction {op!r} (sum, avg, product, min or max)")
    return name


def _combiner(fn, name, dtype):
    if dtype == torch.bool:
        if name == "avg":
            raise ValueError(f"torch.tpu.comm.{fn}: avg is not defined for bool tensors")
        return "or" if name in ("sum", "max") else "and"
    if dtype.is_complex and name in ("min", "max"):
        raise ValueError(f"torch.tpu.comm.{fn}: {name} is not defined for complex tensors ({dtype})")
    return {"sum": "add", "avg": "add", "product": "multiply", "min": "minimum", "max": "maximum"}[name]


def _members(fn, inputs):
    inputs = list(inputs)
    if not inputs:
        raise ValueError(f"torch.tpu.comm.{fn}: expected at least one tensor")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"torch.tpu.comm.{fn}: input {i} is on {where}; every input must be a tpu tensor")
    return inputs


def _finish_avg(results, name, n):
    if name != "avg":
        return results
    if results[0].dtype.is_floating_point or results[0].dtype.is_complex:
        return [r / n for r in results]
    return [torch.div(r, n, rounding_mode="trunc") for r in results]


def _store(fn, results, outputs, numel_of):
    for i, (o, r) in enumerate(zip(outputs, results)):
        if o.numel() != numel_of(r):
            raise ValueError(f"torch.tpu.comm.{fn}: output {i} has {o.numel()} elements, expected {numel_of(r)}")
        o.copy_(r.reshape(o.shape))


def all_reduce(inputs, outputs=None, op="sum", streams=None, comms=None):
    """Reduces one tensor per device; every output (default: the inputs,
    in place) receives the result.  op: sum, avg, product, min, max (a
    string, torch.distributed.ReduceOp or torch.cuda.nccl's number)."""
    inputs = _members("all_reduce", inputs)
    name = _op_name(op)
    results = _C.collective(_ALL_REDUCE, _combiner("all_reduce", name, inputs[0].dtype), inputs)
    results = _finish_avg(results, name, len(inputs))
    outputs = inputs if outputs is None else list(outputs)
    if len(outputs) != len(inputs):
        raise ValueError(f"torch.tpu.comm.all_reduce: {len(outputs)} outputs for {len(inputs)} inputs")
    _store("all_reduce", results, outputs, lambda r: r.numel())


def all_gather(inputs, outputs, streams=None, comms=None):
    """outputs[i] (n times an input's elements) receives every input,
    flattened and concatenated in device order, as torch.cuda.nccl."""
    inputs = _members("all_gather", inputs)
    outputs = list(outputs)
    if len(outputs) != len(inputs):
        raise ValueError(f"torch.tpu.comm.all_gather: {len(outputs)} outputs for {len(inputs)} inputs")
    results = _C.collective(_ALL_GATHER, None, [t.reshape(-1) for t in inputs])
    _store("all_gather", results, outputs, lambda r: r.numel())


def reduce_scatter(inputs, outputs, op="sum", streams=None, comms=None):
    """Reduces the inputs (each n times an output's elements, flattened) and
    gives outputs[i] block i of the result, as torch.cuda.nccl."""
    inputs = _members("reduce_scatter", inputs)
    outputs = list(outputs)
    n = len(inputs)
    if len(outputs) != n:
        raise ValueError(f"torch.tpu.comm.reduce_scatter: {len(outputs)} outputs for {n} inputs")
    name = _op_name(op)
    comb = _combiner("reduce_scatter", name, inputs[0].dtype)
    results = _C.collective(_REDUCE_SCATTER, comb, [t.reshape(-1) for t in inputs])
    _store("reduce_scatter", _finish_avg(results, name, n), outputs, lambda r: r.numel())


# ---- the C functions torch.nn.parallel.comm calls (CUDA builds only) ----------------


def _tpu_only(name, tensors):
    for t in tensors:
        if t.device.type != "tpu":
            raise RuntimeError(f"torch._C.{name}: this PyTorch build has no CUDA; torch_tpu provides "
                               f"{name} for tpu tensors only (got a tensor on {t.device})")


def _on(index):
    return torch.device("cpu") if index is not None and index < 0 else torch.device("tpu", index)


def _c_broadcast(tensor, devices):
    _tpu_only("_broadcast", [tensor])
    return [tensor if d == tensor.get_device() else tensor.to(_on(d)) for d in devices]


def _c_broadcast_out(tensor, out):
    _tpu_only("_broadcast_out", [tensor, *out])
    for i, o in enumerate(out):
        if o.shape != tensor.shape:
            raise RuntimeError(f"output {i} has shape {tuple(o.shape)}, but the broadcast tensor has "
                               f"{tuple(tensor.shape)}")
        o.copy_(tensor)
    return out


def _c_broadcast_coalesced(tensors, devices, buffer_size):
    tensors = list(tensors)
    _tpu_only("_broadcast_coalesced", tensors)
    if tensors and devices and devices[0] != tensors[0].get_device():
        raise RuntimeError("device of broadcasted tensor must appear as the first on devices list")
    return [tensors] + [[t.to(_on(d)) for t in tensors] for d in devices[1:]]


def _c_scatter(tensor, devices, chunk_sizes, dim, streams):
    _tpu_only("_scatter", [tensor])
    if chunk_sizes is not None:
        if len(chunk_sizes) != len(devices):
            raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got "
                               f"len(devices) = {len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}")
        chunks = tensor.split(list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(devices), dim)
    return [c.to(_on(d), memory_format=torch.contiguous_format) for c, d in zip(chunks, devices)]


def _c_scatter_out(tensor, out, dim, streams):
    _tpu_only("_scatter_out", [tensor, *out])
    chunks = tensor.split([o.size(dim) for o in out], dim)
    for o, c in zip(out, chunks):
        o.copy_(c)
    return out


def _c_gather(tensors, dim, destination):
    _tpu_only("_gather", tensors)
    dev = _on(tensors[0].get_device() if destination is None else destination)
    return torch.cat([t.to(dev) for t in tensors], dim)


def _c_gather_out(tensors, out, dim):
    _tpu_only("_gather_out", tensors)
    return torch.cat([t.to(out.device) for t in tensors], dim, out=out)


def install():
    """Defines the torch._C comm functions this PyTorch build lacks."""
    for name, fn in (("_broadcast", _c_broadcast), ("_broadcast_out", _c_broadcast_out),
                     ("_broadcast_coalesced", _c_broadcast_coalesced), ("_scatter", _c_scatter),
                     ("_scatter_out", _c_scatter_out), ("_gather", _c_gather), ("_gather_out", _c_gather_out)):
        if not hasattr(torch._C, name):
            setattr(torch._C, name, fn)
