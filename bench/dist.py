"""The "dist" section of bench/run.py: torch.distributed on tpu.

  allreduce  all_reduce (sum, float32) of 1, 16 and 64 MiB on 2 processes:
             tpu tensors through the "tpu_dist" backend (host transport:
             staged to host memory, reduced by gloo) vs CPU tensors through
             gloo itself, the same processes, one after the other.  Bus
             bandwidth as NCCL's tests define it: bytes / time * 2 (n-1) / n;
             the tpu figure includes the device -> host -> device staging and
             the wait until the tpu tensor holds the result.
  ddp        a DDP training step of the bench GPT (bench/models.py "gpt",
             batch 8 per process, AdamW, fused mode): 2 processes (DDP over
             tpu_dist) vs 1 process (no DDP), as per-sample throughput
             (samples/s = processes * batch / step time) and their ratio.
             On a 2-core machine the 2 processes share the cores, so the
             ratio says what the transport and DDP cost, not what a second
             device gives.
  fsdp_llama a FSDP2 training step (fully_shard per block and at the root) of a
             small llama-style model with TorchTitan's habits (rotary embedding
             through complex numbers, nn.RMSNorm, bf16 parameters with fp32
             reductions, gradient clipping, fused AdamW; the model and step are
             tests/python/fused_dist_worker.py's), 2 processes, in strict and in
             fused mode: tokens/s (processes * batch * seq / median step time),
             programs run and host waits per step, and the ratio fused/strict
             (issue 24: fused must not be slower).

Each figure runs in fresh worker processes (`python bench/dist.py worker
KIND ...` with torchrun's environment, launched here); rank 0 writes the
figures to a JSON file.
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
SIZES_MIB = (1, 16, 64)
# the fsdp_llama figure's model (tests/python/fused_dist_worker.py's CONFIG keys)
FSDP_LLAMA = dict(vocab=2048, d=256, layers=4, heads=8, hidden=768, seq=64, batch=8,
                  rope=1, nn_norm=1, mp=1, clip=1, opt=2)


# ---- the parent side ----------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(kind, nproc, args, timeout, mode="fused"):
    """Runs `nproc` workers; returns rank 0's JSON (raises with the ranks'
    output tails on failure or timeout; the workers never outlive this)."""
    out = tempfile.mkdtemp(prefix="bench_dist_")
    port = _free_port()
    procs, logs = [], []
    try:
        for r in range(nproc):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc),
                       LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       TORCH_TPU_EAGER_MODE=mode, BENCH_DIST_OUT=out)
            log = open(os.path.join(out, f"log{r}.txt"), "w+")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", kind,
                                           *map(str, args)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=REPO, start_new_session=True))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} x{nproc}: still running after {timeout:.0f}s (killed)" + _tails(logs))
            time.sleep(0.1)
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError(f"{kind} x{nproc}: exit codes {[p.returncode for p in procs]}" + _tails(logs))
        with open(os.path.join(out, "result.json")) as f:
            return json.load(f)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                p.wait()
        for log in logs:
            log.close()
        subprocess.run(["rm", "-rf", out])


def _tails(logs):
    s = ""
    for r, log in enumerate(logs):
        log.flush()
        log.seek(0)
        lines = [ln for ln in log.read().splitlines() if ln.strip() and "Warning" not in ln]
        s += f"\n[rank {r}] " + " | ".join(lines[-3:])
    return s[-1500:]


def sec_dist(torch, measure, quick):
    reps = 3 if quick else 10
    sizes = SIZES_MIB
    warm, steps = (3, 3) if quick else (3, 10)  # DDP rebuilds its buckets after step 1: new programs
    out = {"params": {"processes": 2, "sizes_mib": list(sizes), "allreduce_repeats": reps, "dtype": "float32",
                      "ddp_model": "gpt", "ddp_batch_per_process": 8, "ddp_warmup_steps": warm,
                      "ddp_timed_steps": steps, "eager_mode": "fused", "transport": "host (gloo)"}}
    # per launch: the 2-process DDP run compiles its step programs (cut at
    # the gradient buckets) cold in both processes at once
    limit = 300 if quick else 600
    measure(out, "allreduce", lambda: _launch("allreduce", 2, [reps, *sizes], limit))
    one = measure(out, "ddp_1proc", lambda: _launch("ddp", 1, [warm, steps], limit))
    two = measure(out, "ddp_2proc", lambda: _launch("ddp", 2, [warm, steps], limit))
    if "samples_per_s" in one and "samples_per_s" in two:
        out["ddp_throughput_ratio_2_vs_1"] = two["samples_per_s"] / one["samples_per_s"]
    out["params"]["fsdp_llama_config"] = FSDP_LLAMA
    fs = {}
    for mode in ("strict", "fused"):
        fs[mode] = measure(out, f"fsdp_llama_{mode}", lambda mode=mode: _launch("fsdp_llama", 2, [warm, steps], limit,
                                                                                 mode=mode))
    if "tokens_per_s" in fs["strict"] and "tokens_per_s" in fs["fused"]:
        out["fsdp_llama_fused_vs_strict"] = fs["fused"]["tokens_per_s"] / fs["strict"]["tokens_per_s"]
    return out


def markdown_rows(fig, cell):
    """Rows for bench/results.md: [figure, PyTorch CPU, tpu strict, tpu fused, notes]."""
    rows = []
    ar = fig.get("allreduce") or {}
    for mib in SIZES_MIB:
        f = ar.get(f"{mib}MiB") if "error" not in ar else ar
        ratio = (f or {}).get("tpu_vs_gloo")
        rows.append([f"all_reduce {mib} MiB f32, 2 processes, bus GB/s: gloo (CPU tensors) / tpu_dist (host)",
                     cell((f or {}).get("gloo"), "busbw_GBps", "{:.2f}"), "",
                     cell((f or {}).get("tpu"), "busbw_GBps", "{:.2f}"),
                     f"tpu {ratio:.2f}x gloo" if ratio else ""])
    r = fig.get("ddp_throughput_ratio_2_vs_1")
    rows.append(["DDP GPT step, samples/s: 1 process (no DDP) / 2 processes (DDP)", "", "",
                 cell(fig.get("ddp_1proc"), "samples_per_s", "{:.1f}") + " / " +
                 cell(fig.get("ddp_2proc"), "samples_per_s", "{:.1f}"),
                 f"2 vs 1: {r:.2f}x per-sample throughput" if r else ""])
    r = fig.get("fsdp_llama_fused_vs_strict")
    st, fu = fig.get("fsdp_llama_strict") or {}, fig.get("fsdp_llama_fused") or {}
    progs = (f"; programs/step strict {st['programs_per_step']:.0f}, fused {fu['programs_per_step']:.0f}"
             if "programs_per_step" in st and "programs_per_step" in fu else "")
    rows.append(["FSDP2 llama-style step (TorchTitan habits), 2 processes, tokens/s", "",
                 cell(fig.get("fsdp_llama_strict"), "tokens_per_s", "{:.0f}"),
                 cell(fig.get("fsdp_llama_fused"), "tokens_per_s", "{:.0f}"),
                 (f"fused/strict {r:.2f}x" if r else "") + progs])
    return rows


# ---- the workers --------------------------------------------------------------------------------

def _report(data):
    if int(os.environ["RANK"]) == 0:
        with open(os.path.join(os.environ["BENCH_DIST_OUT"], "result.json"), "w") as f:
            json.dump(data, f, indent=1)


def _worker_allreduce(reps, *sizes):
    import torch
    import torch.distributed as dist
    import torch_tpu  # noqa: F401
    reps = int(reps)
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group()  # tpu -> tpu_dist, cpu -> gloo
    n = dist.get_world_size()
    dev = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    res = {}

    def timed(t, on_tpu):
        ts = []
        for i in range(reps + 1):
            if on_tpu:
                torch.tpu.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if on_tpu:
                t.reshape(-1)[:1].cpu()  # the result is in the tpu tensor (a read waits for it)
            if i:
                ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    for mib in map(int, sizes):
        nbytes = mib << 20
        row = {}
        for name, dv in (("gloo", "cpu"), ("tpu", dev)):
            t = torch.ones(nbytes // 4, device=dv)
            sec = timed(t, name == "tpu")
            # every rank added ones reps+1 times: n ** (reps + 1) everywhere
            want = float(n) ** (reps + 1)
            got = t.reshape(-1)[-1].item()
            assert got == want, f"{name} all_reduce {mib} MiB: {got} != {want}"
            alg = nbytes / sec / 1e9
            row[name] = {"ms": sec * 1e3, "algbw_GBps": alg, "busbw_GBps": alg * 2 * (n - 1) / n}
            del t
        row["tpu_vs_gloo"] = row["tpu"]["busbw_GBps"] / row["gloo"]["busbw_GBps"]
        res[f"{mib}MiB"] = row
    _report(res)
    dist.destroy_process_group()


def _worker_ddp(warm, steps):
    import torch
    import torch.distributed as dist
    import torch_tpu  # noqa: F401
    sys.path.insert(0, BENCH)
    from models import CONFIGS, make_gpt, train_step
    warm, steps = int(warm), int(steps)
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.tpu.set_device(local)
    dev = torch.device("tpu", local)
    if world > 1:
        dist.init_process_group()
    model, opt, x, y = make_gpt("gpt", dev)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    last = list(model.parameters())[-1]
    times, losses = [], []
    for i in range(warm + steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, y)
        losses.append(float(loss.item()))
        last.reshape(-1)[:1].cpu()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    batch = CONFIGS["gpt"]["batch"]
    _report({"ms_per_step": ms, "samples_per_s": world * batch / (ms / 1e3), "processes": world,
             "batch_per_process": batch, "loss_first": losses[0], "loss_last": losses[-1],
             "runs_ms": [round(t * 1e3, 1) for t in times]})
    if world > 1:
        dist.destroy_process_group()


def _worker_fsdp_llama(warm, steps):
    import torch
    import torch.distributed as dist
    import torch_tpu  # noqa: F401
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    import fused_dist_worker as w
    warm, steps = int(warm), int(steps)
    local = int(os.environ["LOCAL_RANK"])
    torch.tpu.set_device(local)
    dist.init_process_group()
    cfg = dict(w.CONFIG, **FSDP_LLAMA)
    _, losses, rows = w.train("fsdp", torch.device("tpu", local), warm + steps, cfg)
    timed = rows[warm:]
    sec = statistics.median(r["seconds"] for r in timed)
    tokens = int(os.environ["WORLD_SIZE"]) * cfg["batch"] * cfg["seq"]
    _report({"ms_per_step": sec * 1e3, "tokens_per_s": tokens / sec,
             "cpu_seconds_per_step": statistics.median(r["cpu_seconds"] for r in timed),
             "programs_per_step": statistics.median(r["executed"] for r in timed),
             "compiles_in_timed_steps": sum(r["compiled"] for r in timed),
             "host_waits_per_step": statistics.median(r["host_waits"] for r in timed),
             "device_seconds_per_step": statistics.median(r["device_seconds"] for r in timed),
             "loss_first": losses[0], "loss_last": losses[-1],
             "runs_ms": [round(r["seconds"] * 1e3, 1) for r in timed]})
    dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    import warnings
    warnings.filterwarnings("ignore")
    {"allreduce": _worker_allreduce, "ddp": _worker_ddp,
     "fsdp_llama": _worker_fsdp_llama}[sys.argv[2]](*sys.argv[3:])
    sys.stdout.flush()
    os._exit(0)
