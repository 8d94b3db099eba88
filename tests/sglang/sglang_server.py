"""Starting and stopping SGLang's OpenAI server on loopback for the tests:
the same command line as `make serve-sglang`."""
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
# Small: SGLang's static memory budget (weights + KV pool) is a fraction of
# the device's memory, which on the CPU plugin is this machine's RAM; the KV
# pool is capped at 4096 tokens, one short context.
ARGS = ("--dtype", "float32", "--mem-fraction-static", "0.1", "--max-total-tokens", "4096",
        "--context-length", "512")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m sglang.launch_server` in its own process group, with
    SGLANG_PLATFORM=tpu (an error, not another platform, if tpu is absent)."""

    def __init__(self, model=DEFAULT_MODEL, extra=ARGS, log_path=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, SGLANG_PLATFORM="tpu")
        self.log_path = log_path or os.path.join(ROOT, "build", f"sglang_{self.port}.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model,
               "--host", "127.0.0.1", "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(l for l in f if "is ignored: it is neither" not in l)

    def wait_ready(self, timeout=600):
        """Until the server answers a generation (/health_generate runs one)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sglang server exited ({self.proc.returncode}):\n{self.log_text()[-6000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health_generate", timeout=60) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(2)
        tail = self.log_text()[-6000:]
        self.stop()
        raise TimeoutError(f"sglang server not ready in {timeout} s:\n{tail}")

    def request(self, path, body, timeout=600):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # the scheduler and detokenizer processes of its group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()
