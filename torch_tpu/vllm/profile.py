"""Where a serving step's time goes: TORCH_TPU_VLLM_PROFILE=FILE.

The model runner writes one JSON line per step to FILE.  Every step gets
its wall time (``total_ms``, from ``execute_model`` to the end of
``sample_tokens``), the time since the previous step ended
(``between_ms``: vLLM's scheduler, output processing and the wait for
requests), the programs it ran and their device time (the engine's
counters).  Every other step (odd step numbers) is also split: the
device is synchronized at each phase's end so the phase owns its device
work, and the step's time is divided into

- ``input_ms``: vLLM's input preparation on the host and the uploads
  (state update, positions, block tables, the attention metadata);
- ``attention_ms``: the attention calls of every layer (each a program of
  its own: the ragged paged kernel and the gathers around it);
- ``forward_ms``: the rest of the model's forward;
- ``logits_ms``: the logits rows' gather and the LM head;
- ``sampler_ms``: sampling and the sampled ids' read back to the host;
- ``host_other_ms``: the rest (bookkeeping, output building).

The split steps are slower than the others (no overlap of host and device
work across phases); their ``total_ms`` is reported apart
(``split`` true).  ``attention_kernel_ms`` (every step) is the C attention
kernel's own time (the CPU plugin's host kernel, csrc/kernels).
bench/serve.py --profile reads the file."""
import contextlib
import json
import os
import time

import torch

from torch_tpu import _C

from .ragged import HOST_KERNEL

ENV = "TORCH_TPU_VLLM_PROFILE"


class StepProfile:
    PHASES = ("input", "attention", "forward", "logits", "sampler")

    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.step = 0
        self.split = False
        self.prev_end = None
        self.t0 = None
        self.rec = None

    @staticmethod
    def _sync():
        torch.accelerator.synchronize()

    @staticmethod
    def _counters():
        m = _C.metrics()
        return m["executions"], m["execute_seconds"], m["host_wait_seconds"]

    def begin(self, reqs, tokens, decode_only):
        self.step += 1
        self.split = self.step % 2 == 1
        if self.split:
            self._sync()
        self.k0 = _C.host_kernel_stats(HOST_KERNEL)
        now = time.perf_counter()
        self.t0 = now
        self.rec = dict(t=time.time(), step=self.step, split=self.split, reqs=reqs, tokens=tokens,
                        decode_only=decode_only,
                        between_ms=round((now - self.prev_end) * 1e3, 3) if self.prev_end else None,
                        **{p + "_ms": 0.0 for p in self.PHASES})
        self.c0 = self._counters()

    @contextlib.contextmanager
    def phase(self, name):
        """Times one phase of a split step; a phase inside another (the
        attention inside the forward) is taken out of the outer one.  In
        the other steps: the phase's host time (``<phase>_host_ms``)."""
        if self.rec is None:
            yield
            return
        if not self.split:  # host time alone (nothing waits for the device)
            t = time.perf_counter()
            try:
                yield
            finally:
                key = name + "_host_ms"
                self.rec[key] = round(self.rec.get(key, 0.0) + (time.perf_counter() - t) * 1e3, 3)
            return
        inner0 = self.rec["attention_ms"]
        t = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            dt = (time.perf_counter() - t) * 1e3
            self.rec[name + "_ms"] += dt - (self.rec["attention_ms"] - inner0)

    def end(self, padded_tokens):
        if self.rec is None:
            return
        now = time.perf_counter()
        c1 = self._counters()
        r = self.rec
        r["T"] = padded_tokens
        r["total_ms"] = round((now - self.t0) * 1e3, 3)
        r["programs"] = c1[0] - self.c0[0]
        r["device_ms"] = round((c1[1] - self.c0[1]) * 1e3, 3)
        r["host_wait_ms"] = round((c1[2] - self.c0[2]) * 1e3, 3)
        k1 = _C.host_kernel_stats(HOST_KERNEL)
        r["attention_kernel_ms"] = round((k1[1] - self.k0[1]) * 1e3, 3)  # the C kernel's time (host kernel path)
        if self.split:
            r["host_other_ms"] = round(r["total_ms"] - sum(r[p + "_ms"] for p in self.PHASES), 3)
            for p in self.PHASES:
                r[p + "_ms"] = round(r[p + "_ms"], 3)
        else:
            for p in self.PHASES:
                del r[p + "_ms"]
            if "attention_host_ms" in r and "forward_host_ms" in r:
                r["forward_host_ms"] = round(r["forward_host_ms"] - r["attention_host_ms"], 3)
        self.file.write(json.dumps(r) + "\n")
        if self.step % 50 == 0:
            self._programs()
        self.prev_end = now
        self.rec = None

    def _programs(self):
        """FILE.programs.json: every program run so far, most device time
        first (name, ops, executions, device seconds)."""
        progs = sorted(_C.programs(), key=lambda p: -p["execute_seconds"])
        rows = [dict(name=p["name"][:160], ops=p["ops"], executions=p["executions"],
                     device_s=round(p["execute_seconds"], 4),
                     ms_per_run=round(p["execute_seconds"] * 1e3 / max(p["executions"], 1), 4)) for p in progs]
        with open(self.file.name + ".programs.json", "w") as f:
            json.dump(rows, f, indent=1)


def from_env():
    path = os.environ.get(ENV)
    return StepProfile(path) if path else None


ACTIVE = from_env()


def phase(name):
    return ACTIVE.phase(name) if ACTIVE is not None else contextlib.nullcontext()
