"""torch.distributed on tpu: the "tpu_dist" c10d backend (also named "tpu").

Registered when torch_tpu is imported (a few dictionary entries; nothing
connects until a process group is made):

    torch.tpu.set_device(local_rank)
    dist.init_process_group()            # tpu tensors -> tpu_dist, cpu tensors -> gloo
    dist.init_process_group("tpu_dist")  # or "tpu": the same backend for tpu and cpu tensors

The backend is C++ (csrc/torch/c10d_backend.cpp), registered for the tpu
device of PyTorch's own ProcessGroup, so DDP's reducer, FSDP2, DTensor and
the functional collectives reach it through PyTorch's dispatch with no
Python frame of ours per collective.

Transports (TORCH_TPU_DIST_TRANSPORT):
  auto  (default) the in-XLA transport where the plugin has cross-process
        collectives, else host; today every plugin gets host
  host  tpu tensors staged through host memory and reduced by gloo on the
        group's store; works with every plugin (the XLA CPU plugin has only
        in-process collectives)
  xla   collectives recorded into the lazy graph as StableHLO collectives
        (not available yet: see docs/ARCHITECTURE.md, "Distributed")

TORCH_TPU_DIST_CHECK=0 turns off the per-collective agreement check (ranks
exchange op, dtype and shape first and raise one clear error on a mismatch).
"""
import os
import socket

import torch

from . import _C

BACKEND_NAMES = ("tpu_dist", "tpu")
TRANSPORTS = ("auto", "host", "xla")


def transport():
    """The transport new process groups use, from TORCH_TPU_DIST_TRANSPORT."""
    name = os.environ.get("TORCH_TPU_DIST_TRANSPORT", "auto").strip().lower() or "auto"
    if name not in TRANSPORTS:
        raise ValueError(f"TORCH_TPU_DIST_TRANSPORT={name!r}: expected one of {', '.join(TRANSPORTS)}")
    if name == "auto":
        return "xla" if _plugin_has_collectives() else "host"
    return name


def _plugin_has_collectives():
    """Whether the loaded plugin runs collectives across processes (PJRT
    multi-node: node_id/num_nodes and the key-value callbacks).  The XLA CPU
    plugin ignores both; no plugin is wired for it yet."""
    return False


def _check_enabled():
    return os.environ.get("TORCH_TPU_DIST_CHECK", "1").strip() not in ("0", "false", "False", "")


def _create_backend(dist_opts, backend_opts=None):
    """Backend.register_backend's creator (extended API): one c10d Backend
    for a new group on every rank."""
    kind = transport()
    if kind == "xla":
        return _create_xla_backend(dist_opts, backend_opts)
    return _create_host_backend(dist_opts)


def _create_host_backend(dist_opts):
    from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo

    rank, size, timeout = dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout
    # who is who: a failed collective names the peers whose process is gone
    # (c10d_backend.cpp, "a failed peer, named"); published before gloo's
    # rendezvous, so every rank's entry is there once it returns
    # torchrun's static rendezvous keeps one store across restarts: keys of
    # the attempt that failed (gloo's addresses of dead ranks) must not be
    # read by the next one, so ours are per attempt
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    peers = PrefixStore(f"tpu_dist_peer/{attempt}/", dist_opts.store)
    peers.set(str(rank), f"{socket.gethostname()} {os.getpid()}")
    # the host collectives get their own gloo context on the group's store
    host = ProcessGroupGloo(PrefixStore(f"tpu_dist_host/{attempt}/", dist_opts.store), rank, size, timeout)
    host.options.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
    host.options.group_name = dist_opts.group_id
    hosts, pids = [], []
    for r in range(size):
        h, p = peers.get(str(r)).decode().rsplit(" ", 1)
        hosts.append(h)
        pids.append(int(p))
    return _C._tpu_dist_host_backend(host, rank, size, timeout.total_seconds(), dist_opts.group_id,
                                     _check_enabled(), hosts, pids, list(dist_opts.global_ranks_in_group))


def _create_xla_backend(dist_opts, backend_opts):
    # The seam for the in-XLA transport: a Backend that records collectives
    # into the lazy graph (StableHLO all_reduce / all_gather / reduce_scatter /
    # all_to_all / collective_permute over the group's replica groups), with
    # the PJRT client created with node_id/num_nodes and its key-value
    # callbacks wired to dist_opts.store.
    raise NotImplementedError(
        "TORCH_TPU_DIST_TRANSPORT=xla: collectives inside XLA programs need a PJRT plugin with cross-process "
        "collectives, and torch_tpu does not wire one yet; use TORCH_TPU_DIST_TRANSPORT=host (the default)")


def register():
    """Registers "tpu_dist" and "tpu" with torch.distributed (idempotent)."""
    if not torch.distributed.is_available():
        return
    from torch.distributed import Backend

    for name in BACKEND_NAMES:
        if name.upper() in Backend._plugins:
            continue
        # cpu too: init_process_group("tpu_dist") then serves cpu tensors
        # (object collectives, DCP's metadata) through the same gloo context;
        # with no backend named, cpu gets gloo (below).
        Backend.register_backend(name, _create_backend, extended_api=True, devices=["tpu", "cpu"])
    _default_config_adds_cpu()
    _set_pg_timeout_knows_tpu_dist()
    _rendezvous_per_attempt()


def _default_config_adds_cpu():
    """init_process_group() with no backend: PyTorch 2.13 maps only the
    accelerator's device (tpu -> tpu_dist) yet sets gloo as the group's
    default backend, so cpu tensors would find no backend.  Groups made with
    no backend get "tpu:tpu_dist,cpu:gloo" instead (PyTorch's own
    BackendConfig, with the cpu entry added after it ran)."""
    from torch.distributed import distributed_c10d as c10d

    cls = c10d.BackendConfig
    if getattr(cls.__init__, "_tpu_adds_cpu", False):
        return
    original = cls.__init__

    def __init__(self, backend):
        original(self, backend)
        if (str(backend) == c10d.Backend.UNDEFINED and set(self.device_backend_map) == {"tpu"}
                and c10d.is_gloo_available()):
            self.device_backend_map["cpu"] = c10d.Backend(c10d.Backend.GLOO)

    __init__._tpu_adds_cpu = True
    cls.__init__ = __init__


def _attempt_store(store):
    """The store of this torchrun attempt: torchrun's static rendezvous (and
    the agent's store under c10d rendezvous) keeps one store across restarts,
    so a restarted attempt read the dead attempt's keys -- PyTorch's gloo
    group for cpu tensors connected to the dead ranks' addresses
    ("connectFullMesh failed ... Connection refused") or waited in
    Pair::waitUntilConnected past the group's timeout.  Every key of an
    attempt goes under its own prefix instead.  Only where one agent starts
    every rank (GROUP_WORLD_SIZE 1: torchrun on one node): agents on
    several nodes can count restarts differently, and there PyTorch's own
    behaviour stays."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or os.environ.get("GROUP_WORLD_SIZE", "1") != "1":
        return store
    from torch.distributed import PrefixStore

    return PrefixStore(f"torch_tpu_attempt/{attempt}/", store)


def _rendezvous_per_attempt():
    """init_process_group's env:// and tcp:// rendezvous yield the attempt's
    store (_attempt_store): every group of the attempt -- gloo for cpu
    tensors, tpu_dist, any other backend -- forms afresh after a restart."""
    import importlib

    # (torch.distributed.rendezvous, the name, is the function)
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    handlers = getattr(rdzv, "_rendezvous_handlers", None)
    if handlers is None:
        return
    for scheme in ("env", "tcp"):
        handler = handlers.get(scheme)
        if handler is None or getattr(handler, "_tpu_per_attempt", False):
            continue

        def per_attempt(url, _handler=handler, **kwargs):
            for store, rank, world_size in _handler(url, **kwargs):
                yield _attempt_store(store), rank, world_size

        per_attempt._tpu_per_attempt = True
        handlers[scheme] = per_attempt


def _tpu_dist_backends(group):
    """The tpu_dist backends of a process group (one object per device type
    it serves: tpu, and cpu when the group was made with "tpu_dist")."""
    out = []
    for dev in group._device_types:
        try:
            b = group._get_backend(dev)
        except RuntimeError:
            continue
        if b.name() == "tpu_dist" and all(b is not o for o in out):
            out.append(b)
    return out


def _set_pg_timeout_knows_tpu_dist():
    """torch.distributed.distributed_c10d._set_pg_timeout (what TorchTitan
    and torchrun's agent call to change a group's timeout after it is made)
    sets the timeout of gloo and NCCL backends only, and warns "Set timeout
    is now only supported for either nccl or gloo" for any other.  PyTorch
    offers no hook for another backend, so the function is wrapped: PyTorch's
    own runs first (it checks the group and sets gloo's / NCCL's), then the
    group's tpu_dist backends get the timeout through c10d's
    Backend.set_timeout (c10d_backend.cpp setTimeout: the backend's options
    and its gloo context, which bounds every host collective), and the
    warning is not shown for a group that has one."""
    import warnings
    from torch.distributed import distributed_c10d as c10d

    original = c10d._set_pg_timeout
    if getattr(original, "_tpu_dist", False):
        return

    def _set_pg_timeout(timeout, group=None):
        g = c10d._get_default_group() if group is None else group
        ours = [] if c10d._rank_not_in_group(g) else _tpu_dist_backends(g)
        with warnings.catch_warnings():
            if ours:
                warnings.filterwarnings("ignore", message="Set timeout is now only supported")
            original(timeout, group)
        for b in ours:
            b.set_timeout(timeout)

    _set_pg_timeout.__doc__ = (original.__doc__ or "") + "\n    (torch_tpu: tpu_dist backends too.)"
    _set_pg_timeout.__wrapped__ = original
    _set_pg_timeout._tpu_dist = True
    c10d._set_pg_timeout = _set_pg_timeout
