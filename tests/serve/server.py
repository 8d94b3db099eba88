"""Starting and stopping a vLLM OpenAI server on loopback for the tests
(and the benchmark): the same command line as `make serve`."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "build", "models", "SmolLM2-135M-Instruct")
ENTRY = "vllm.entrypoints.launchers.api_server.entry"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(model, port, name, extra=()):
    return [sys.executable, "-m", ENTRY, "--model", model, "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), *extra]


class Server:
    """One server process (and its engine core) in its own process group."""

    def __init__(self, backend, model=DEFAULT_MODEL, name="smollm2", extra=(), log_path=None, argv=None, env=None):
        """argv: a function of the port giving another command line (the
        `vllm serve` console command); default: `make serve`'s.  env: extra
        environment variables of the server."""
        self.backend, self.name = backend, name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra_env, env = env, dict(os.environ)
        if backend == "cpu":
            env["VLLM_PLUGINS"] = ""  # the tpu plugin off: vLLM's own CPU backend
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        else:
            env.pop("VLLM_PLUGINS", None)
        env.update(extra_env or {})
        self.log_path = log_path or os.path.join(ROOT, "build", f"serve_{backend}_{self.port}.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "w")
        cmd = argv(self.port) if argv is not None else command(model, self.port, name, extra)
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, n=4000):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(l for l in f.read().splitlines(True) if "is ignored: it is neither" not in l)[-n:]

    def first_failure(self, n=3000):
        """The log from the first line that reports a failure (a traceback,
        an error, an abort or an XLA check), n characters: the engine core's
        root cause, which the API process's traceback at the tail only names."""
        with open(self.log_path, errors="replace") as f:
            lines = f.read().splitlines(True)
        marks = ("Traceback", "ERROR", "Error:", "error:", "Aborted", "Check failed", "terminate called", "Fatal",
                 "Cannot allocate memory")
        for i, line in enumerate(lines):
            # (vLLM's warnings name errors they only foresee: "fd limit errors like `OSError`")
            if " WARNING " in line or "is ignored: it is neither" in line:
                continue
            if any(m in line for m in marks):
                return "".join(lines[max(0, i - 5):])[:n]
        return ""

    def wait_ready(self, timeout=900):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if not self.log.closed:
                    self.log.flush()
                tail = self.log_tail()
                killed = ""
                if "'EngineCore': -9" in tail:  # SIGKILL: the kernel's OOM killer, most often
                    with open("/proc/meminfo") as f:
                        avail = next((l.split()[1] for l in f if l.startswith("MemAvailable:")), "?")
                    killed = (f"the engine core was killed by SIGKILL (the OOM killer when memory runs out; "
                              f"MemAvailable now {avail} kB)\n")
                raise RuntimeError(f"{self.backend} server exited ({self.proc.returncode}); {killed}first failure "
                                   f"in {self.log_path}:\n{self.first_failure()}\n...\nlog tail:\n{tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(2)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"{self.backend} server not ready in {timeout} s:\n{tail}")

    def request(self, method, path, body=None, raw=None, timeout=600):
        """(status, parsed JSON or text) of one request."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def stream(self, path, body, timeout=600):
        """The data: events of a streamed answer, parsed, and whether it ended with [DONE]."""
        req = urllib.request.Request(self.url + path, data=json.dumps(dict(body, stream=True)).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        events, done = [], False
        with urllib.request.urlopen(req, timeout=timeout) as r:
            assert r.status == 200, r.status
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    break
                events.append(json.loads(payload))
        return events, done

    def metric(self, name):
        """Sum of a Prometheus counter's samples from /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                key = line.split()[0]
                if key == name or key.startswith(name + "{"):
                    total += float(line.split()[-1])
        return total

    def stop(self, timeout=90):
        """SIGTERM to the server.  Returns (exit code, seconds, whether any
        process of its group outlived it); stragglers are then killed."""
        if self.proc.poll() is not None:
            self.log.close()
            return self.proc.returncode, 0.0, False
        t = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        elapsed = time.time() - t
        leftover = False
        for _ in range(20):  # the engine core may take a moment after the API process
            leftover = self._group_alive()
            if not leftover:
                break
            time.sleep(0.5)
        if leftover or rc is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if rc is None:
            rc = self.proc.wait()
        self.log.close()
        return rc, elapsed, leftover

    def _group_alive(self):
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False
