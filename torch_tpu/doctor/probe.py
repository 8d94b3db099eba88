"""What the doctor records while the user's program runs.

A ``Probe`` is switched on around the program (``start`` / ``stop``) and
collects, besides the engine's own counters (``torch.tpu.metrics()``):

- steps: every ``optimizer.step()`` (PyTorch's global optimizer step
  post-hook) ends a step; the doctor notes its time (with ``--sync-steps``
  after waiting for the device, so that a step's time is its device time and
  not how far the host ran ahead: what ``--tune`` compares), and after the warm-up
  steps snapshots the engine's metrics so that what happens later is told
  apart from what the first steps compiled.  ``--steps N`` ends the program
  at the N-th step by raising ``StopRun`` there (a BaseException, so a
  script's ``except Exception`` does not swallow it); ``--seconds S`` raises
  it from a SIGALRM handler.
- host reads: ``Tensor.item / tolist / cpu / numpy / to(cpu)``, printing or
  formatting a tensor, ``bool()/float()/int()`` of a tensor, and the ops
  whose result shape depends on the data (``nonzero``, ``masked_select``,
  ``argwhere``, ``unique``, indexing with a boolean mask), for tpu tensors
  only, each counted and timed at the user's source line.  The methods are
  wrapped on ``torch.Tensor`` / ``torch`` for the run and restored after it.
- CPU fallbacks: ``torch_tpu._dispatch`` calls ``fallback`` for each op it
  runs on the CPU (its ``_doctor`` hook, None when the doctor is off), with
  the op, its dtype, its seconds and the user's line.
- call signatures: a TorchFunctionMode sees every torch call the program
  makes and keeps, per user source line and torch function, the signatures (tensor shapes and
  dtypes, Python numbers) it has seen; a signature new after the warm-up
  is what a recompile there looks like.  The engine says *why* it
  recompiled (``programs[i]["cause"]``) but not *where*: findings.py joins
  the two.
- the timeline of one steady step (the step after the warm-up), from the
  engine's trace (torch_tpu._trace), with the host reads above on it.

"The user's source line" is the innermost frame whose file is not in
torch, torch_tpu, site-packages or the standard library.
"""
import collections
import os
import signal
import sys
import sysconfig
import threading

import torch
from torch.overrides import TorchFunctionMode

from .. import _C, _dispatch, _trace

# The warm-up: the first step runs without optimizer state, the second is the
# first with it, and what the loop does after `optimizer.step()` (the step's
# tail, counted with the next step) first repeats in the third.  Compiles
# after these steps are "after the warm-up" (target 0).
WARMUP_STEPS = 3
MAX_SIGNATURES = 256      # per source line; past it every signature counts as new


class StopRun(BaseException):
    """Raised inside the user's program to end it (``--steps`` / ``--seconds``)."""


# ---- the user's frame -----------------------------------------------------------

def _internal_prefixes():
    dirs = {os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(p)
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


_INTERNAL = _internal_prefixes()
_file_is_internal = {}  # co_filename -> bool (a cache: the check runs per call)


def _internal(filename):
    v = _file_is_internal.get(filename)
    if v is None:
        v = (filename.startswith("<") or
             (os.path.realpath(filename) + ("" if filename.endswith(os.sep) else "")).startswith(_INTERNAL))
        _file_is_internal[filename] = v
    return v


def user_frame(depth=1):
    """(file, line) of the innermost frame outside torch, torch_tpu,
    site-packages and the standard library; (None, None) if there is none."""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if not _internal(name):
            return name, f.f_lineno
        f = f.f_back
    return None, None


# ---- call signatures ----------------------------------------------------------

class LineCalls:
    """The calls of one torch function made at one source line."""
    __slots__ = ("func", "calls", "seen", "last", "new", "first_new")

    def __init__(self, func):
        self.func = func           # the torch function's name (the first one seen there)
        self.calls = 0
        self.seen = set()
        self.last = None
        self.new = collections.Counter()  # kind of change -> new signatures after the warm-up
        self.first_new = None      # sequence number of the first of them


def _describe(x, shapes, dtypes, numbers):
    if isinstance(x, torch.Tensor):
        shapes.append(tuple(x.shape))
        dtypes.append(x.dtype)
    elif isinstance(x, bool):
        numbers.append(x)
    elif isinstance(x, (int, float)):
        numbers.append(x)
    elif isinstance(x, (list, tuple)) and len(x) <= 16:
        for y in x:
            _describe(y, shapes, dtypes, numbers)


class _Signatures(TorchFunctionMode):
    def __init__(self, probe):
        super().__init__()
        self.probe = probe

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        try:
            self.probe._call(func, args, kwargs, out)
        except Exception:  # the doctor never breaks the program
            pass
        return out


# ---- backward: the forward op's source line ---------------------------------------

_SITE = "torch_tpu_doctor_site"


def _mark_backward_site(out, file, line, name):
    """Marks the autograd nodes a forward call made with its source line
    (node metadata lives as long as the node): what autograd runs for them
    in backward is then told at that line."""
    for t in (out if isinstance(out, (tuple, list)) else (out,)):
        node = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
        if node is not None and _SITE not in node.metadata:
            node.metadata[_SITE] = (file, line, name)


def _backward_site():
    """(file, line, forward op) of the autograd node running now, or None."""
    node = torch._C._current_autograd_node()
    return node.metadata.get(_SITE) if node is not None else None


# ---- host reads: wrapped entry points -----------------------------------------

def _is_tpu(x):
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


_TORCH_TPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _from_torch_tpu():
    """Whether the wrapped method's caller is torch_tpu itself (the CPU
    fallback's copies: counted as the fallback's cost, not as reads)."""
    return sys._getframe(2).f_code.co_filename.startswith(_TORCH_TPU_DIR)


def _bool_mask_index(self, idx):
    if isinstance(idx, torch.Tensor):
        return idx.dtype == torch.bool and idx.dim() > 0
    if isinstance(idx, tuple):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 0 for i in idx)
    return False


# (owner, attribute, label, kind, predicate(self, *args, result) -> counts)
_TENSOR_READS = [
    ("item", ".item()", "host_read"),
    ("tolist", ".tolist()", "host_read"),
    ("cpu", ".cpu()", "host_read"),
    ("numpy", ".numpy()", "host_read"),
    ("__repr__", "printing a tensor", "host_read"),
    ("__format__", "formatting a tensor", "host_read"),
    ("__bool__", "bool(tensor) (an `if` on a tensor)", "host_read"),
    ("__float__", "float(tensor)", "host_read"),
    ("__int__", "int(tensor)", "host_read"),
    ("nonzero", ".nonzero()", "data_dependent_shape"),
    ("masked_select", ".masked_select()", "data_dependent_shape"),
    ("argwhere", ".argwhere()", "data_dependent_shape"),
    ("unique", ".unique()", "data_dependent_shape"),
]
_TORCH_READS = [
    ("nonzero", "torch.nonzero", "data_dependent_shape"),
    ("masked_select", "torch.masked_select", "data_dependent_shape"),
    ("argwhere", "torch.argwhere", "data_dependent_shape"),
    ("unique", "torch.unique", "data_dependent_shape"),
]

_MISSING = object()


class Probe:
    """Records one run of the user's program (see the module's doc)."""

    def __init__(self, steps=None, seconds=None, timeline=True, sync_steps=False):
        self.max_steps = steps
        self.seconds = seconds
        self.sync_steps = sync_steps   # wait for the device at each step's end (--sync-steps)
        self.want_timeline = timeline
        self.step = 0                  # optimizer steps completed
        self.step_times = []           # engine clock at the end of each step
        self.t_start = self.t_end = None
        self.warm = None               # metrics() at the end of the warm-up
        self.warm_programs = 0         # programs made before then
        self.warm_time = None
        self.traced = None             # (first step, engine events) of the traced step
        self.trace_from = None
        self.reads = {}                # (file, line, label) -> [kind, count, steady count, seconds, steady seconds]
        self.read_spans = []           # (start, end, label, file, line) inside the traced step
        self.fallbacks = {}            # (op, dtype, file, line) -> [count, seconds]
        self.backward_of = {}          # a fallback key of an op autograd ran in backward -> the forward op
        self.lines = {}                # (file, line, torch function) -> LineCalls
        self.seq = 0
        self.stopped_by = None
        self._tls = threading.local()
        self._saved = []
        self._mode = None
        self._hook = None
        self._old_alarm = None
        self._tracing = False

    # -- switching on and off --

    def start(self):
        self.t_start = _C.clock_now()
        from torch.optim.optimizer import register_optimizer_step_post_hook
        self._hook = register_optimizer_step_post_hook(self._after_step)
        for name, label, kind in _TENSOR_READS:
            self._wrap(torch.Tensor, name, label, kind)
        for name, label, kind in _TORCH_READS:
            self._wrap(torch, name, label, kind)
        self._wrap_getitem()
        self._wrap_to()
        _dispatch._doctor = self
        self._mode = _Signatures(self)
        self._mode.__enter__()
        if self.seconds:
            self._old_alarm = signal.signal(signal.SIGALRM, self._alarm)
            signal.setitimer(signal.ITIMER_REAL, float(self.seconds))

    def stop(self):
        """Switches everything off (idempotent); waits for the device."""
        if self.seconds and self._old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_alarm)
            self._old_alarm = None
        if self._mode is not None:
            try:
                self._mode.__exit__(None, None, None)
            except Exception:  # the program left modes of its own on the stack
                pass
            self._mode = None
        _dispatch._doctor = None
        for owner, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._saved = []
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._tracing:  # the program ended inside the traced step
            self._tracing = False
            _trace.stop()
        if _C.initialized():
            _C.synchronize()
        self.t_end = _C.clock_now()

    def _alarm(self, signum, frame):
        self.stopped_by = "seconds"
        raise StopRun()

    # -- steps --

    def _after_step(self, optimizer, args, kwargs):
        self.step += 1
        if self.sync_steps and _C.initialized():
            _C.synchronize()  # the step's time is then its device time, as bench/run.py's train figure
        now = _C.clock_now()
        self.step_times.append(now)
        if self._tracing:
            self._tracing = False
            self.traced = (self.step, _trace.stop())
        if self.step == WARMUP_STEPS:
            from .._metrics import metrics
            # compiles still under way on the workers belong to the warm-up
            _C.synchronize()
            self.warm = metrics()
            self.warm_programs = len(self.warm["programs"])
            self.warm_time = now
            if self.want_timeline and not _trace.active() and not _C.trace_active():
                _trace.start()
                self._tracing = True
                self.trace_from = _C.clock_now()
        if self.max_steps and self.step >= self.max_steps:
            self.stopped_by = "steps"
            raise StopRun()

    def steady(self):
        """Whether the program is past its warm-up (or has no steps at all)."""
        return self.step >= WARMUP_STEPS

    # -- wrapped entry points --

    def _save(self, owner, name):
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        return getattr(owner, name)

    def _wrap(self, owner, name, label, kind):
        orig = self._save(owner, name)
        probe = self

        def wrapper(*args, **kwargs):
            tls = probe._tls
            if getattr(tls, "busy", False) or not (args and _is_tpu(args[0])) or _from_torch_tpu():
                return orig(*args, **kwargs)
            tls.busy = True
            t0 = _C.clock_now()
            try:
                return orig(*args, **kwargs)
            finally:
                tls.busy = False
                probe._read(label, kind, t0, _C.clock_now())

        wrapper.__name__ = getattr(orig, "__name__", name)
        wrapper.__doc__ = getattr(orig, "__doc__", None)
        setattr(owner, name, wrapper)

    def _wrap_getitem(self):
        orig = self._save(torch.Tensor, "__getitem__")
        probe = self

        def __getitem__(self, idx):
            tls = probe._tls
            if getattr(tls, "busy", False) or self.device.type != "tpu" or not _bool_mask_index(self, idx):
                return orig(self, idx)
            tls.busy = True
            t0 = _C.clock_now()
            try:
                return orig(self, idx)
            finally:
                tls.busy = False
                probe._read("indexing with a boolean mask", "data_dependent_shape", t0, _C.clock_now())

        torch.Tensor.__getitem__ = __getitem__

    def _wrap_to(self):
        orig = self._save(torch.Tensor, "to")
        probe = self

        def to(self, *args, **kwargs):
            tls = probe._tls
            if getattr(tls, "busy", False) or self.device.type != "tpu" or _from_torch_tpu():
                return orig(self, *args, **kwargs)
            tls.busy = True
            t0 = _C.clock_now()
            try:
                out = orig(self, *args, **kwargs)
            finally:
                tls.busy = False
            if isinstance(out, torch.Tensor) and out.device.type == "cpu":
                probe._read(".to('cpu')", "host_read", t0, _C.clock_now())
            return out

        to.__doc__ = orig.__doc__
        torch.Tensor.to = to

    def _read(self, label, kind, t0, t1):
        file, line = user_frame(3)
        if file is None:
            return
        r = self.reads.get((file, line, label))
        if r is None:
            r = self.reads[(file, line, label)] = [kind, 0, 0, 0.0, 0.0]
        r[1] += 1
        r[3] += t1 - t0
        if self.steady():
            r[2] += 1
            r[4] += t1 - t0
        if self._tracing:
            self.read_spans.append((t0, t1, label, file, line))

    # -- CPU fallbacks (torch_tpu._dispatch._cpu_fallback calls this) --

    def fallback(self, name, args, kwargs, seconds):
        dtype = None
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                dtype = str(a.dtype).replace("torch.", "")
                break
        file, line = user_frame(3)
        if file is None:  # run by autograd in backward: the forward op's line, which _call marked on its node
            site = _backward_site()
            if site is not None:
                file, line, forward = site
                self.backward_of[(name, dtype, file, line)] = forward
        k = (name, dtype, file, line)
        f = self.fallbacks.get(k)
        if f is None:
            f = self.fallbacks[k] = [0, 0.0]
        f[0] += 1
        f[1] += seconds

    # -- call signatures (the TorchFunctionMode calls this) --

    def _call(self, func, args, kwargs, out):
        name = getattr(func, "__name__", "")
        if name == "__get__" or name == "__set__":  # attribute reads (x.shape, x.grad ...)
            return
        if not (_is_tpu(out) or (isinstance(out, (tuple, list)) and out and _is_tpu(out[0]))):
            return
        file, line = user_frame(3)
        if file is None:
            return
        _mark_backward_site(out, file, line, name)
        shapes, dtypes, numbers = [], [], []
        _describe(args, shapes, dtypes, numbers)
        if kwargs:
            _describe(tuple(kwargs.values()), shapes, dtypes, numbers)
        _describe(out, shapes, dtypes, numbers)
        sig = (name, tuple(shapes), tuple(dtypes), tuple(numbers))
        lc = self.lines.get((file, line, name))
        if lc is None:
            lc = self.lines[(file, line, name)] = LineCalls(name)
        lc.calls += 1
        self.seq += 1
        if sig not in lc.seen:
            if lc.last is not None and self.steady():
                last = lc.last
                if last[1] != sig[1]:
                    kind = "shape"
                elif last[2] != sig[2]:
                    kind = "dtype"
                elif last[3] != sig[3]:
                    kind = "scalar"
                else:
                    kind = "other"
                lc.new[kind] += 1
                if lc.first_new is None:
                    lc.first_new = self.seq
            if len(lc.seen) < MAX_SIGNATURES:
                lc.seen.add(sig)
        lc.last = sig
