"""Launching the worker processes of the distributed tests.

Each test starts N processes of tests/python/dist_worker.py with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT on a free port), waits for them with a deadline, and kills every
one of them (their whole session) on the way out, passing or failing: no
process outlives its test.  A worker reports by its exit status (its checks
raise) and a JSON file of results."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Result:
    def __init__(self, rank, returncode, output, data):
        self.rank, self.returncode, self.output, self.data = rank, returncode, output, data

    def __repr__(self):
        return f"rank {self.rank}: exit {self.returncode}\n{self.output[-6000:]}"


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def launch(scenario, nproc=2, timeout=60, env=None, args=(), cmd=None):
    """Runs `scenario` on nproc ranks; returns one Result per rank (in rank
    order).  Raises AssertionError if the ranks do not finish within
    `timeout` seconds (after killing them)."""
    out = tempfile.mkdtemp(prefix="tpu_dist_")
    port = free_port()
    procs, logs = [], []
    try:
        for r in range(nproc):
            e = dict(os.environ)
            e.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                     GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TPU_DIST_OUT=out,
                     OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            e["PYTHONPATH"] = os.pathsep.join([ROOT, HERE] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
            if env:
                e.update({k: str(v) for k, v in env.items()})
            log = open(os.path.join(out, f"log{r}.txt"), "w+")
            logs.append(log)
            argv = cmd if cmd is not None else [sys.executable, WORKER, scenario, *map(str, args)]
            procs.append(subprocess.Popen(argv, env=e, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                _kill(procs)
                raise AssertionError(f"{scenario}: ranks still running after {timeout}s (killed)\n"
                                     + "\n".join(repr(r) for r in _results(procs, logs, out)))
            time.sleep(0.05)
        return _results(procs, logs, out)
    finally:
        _kill(procs)
        for log in logs:
            log.close()
        shutil.rmtree(out, ignore_errors=True)


def _results(procs, logs, out):
    res = []
    for r, (p, log) in enumerate(zip(procs, logs)):
        log.flush()
        log.seek(0)
        text = log.read()
        data = None
        path = os.path.join(out, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                data = json.load(f)
        res.append(Result(r, p.poll(), text, data))
    return res


def run_ok(scenario, nproc=2, timeout=60, env=None, args=()):
    """launch(), asserting every rank exited 0; returns the ranks' JSON data."""
    res = launch(scenario, nproc, timeout, env, args)
    bad = [r for r in res if r.returncode != 0]
    assert not bad, f"{scenario}: " + "\n".join(repr(r) for r in bad)
    return [r.data for r in res]
