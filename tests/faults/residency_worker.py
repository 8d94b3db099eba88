"""One process compiling many distinct programs (tests/faults/test_residency.py,
bench/run.py's residency section).

    python residency_worker.py MODE N [--reload K] [--samples S]

MODE: strict (one op per shape: ``x * 3`` over ``[n]``, one program a
shape), fused (a five-op block over ``[n, 16]``, one program a shape) or
compile (``torch.compile(backend="tpu")`` of that block, static shapes, one
graph a shape).  Every result is checked against the CPU.  Prints one JSON
line: the process's memory maps, RSS and seconds sampled S times (20 by
default), the cache's counters; with --reload K, the first K shapes run
again at the end (evicted ones come back from the disk tier: counted as
disk loads, not compiles) and are checked again.  The environment sets the
bound (TORCH_TPU_CACHE_MAX_MAPS) and the cache directory.
"""
import argparse
import json
import os
import sys
import time


def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["strict", "fused", "compile"])
    ap.add_argument("n", type=int)
    ap.add_argument("--reload", type=int, default=0)
    ap.add_argument("--samples", type=int, default=20)
    a = ap.parse_args()
    os.environ["TORCH_TPU_EAGER_MODE"] = "strict" if a.mode == "strict" else "fused"
    import torch
    import torch_tpu  # noqa: F401

    torch.manual_seed(0)
    w_cpu = torch.randn(16, 16)
    w = w_cpu.to("tpu")

    def block(x, w):
        y = torch.tanh(x @ w)
        return torch.softmax(y, -1) * 2 + x

    compiled = None
    if a.mode == "compile":
        import torch._dynamo as dynamo
        dynamo.config.cache_size_limit = 10**6
        if hasattr(dynamo.config, "recompile_limit"):
            dynamo.config.recompile_limit = 10**6
        dynamo.config.automatic_dynamic_shapes = False
        compiled = torch.compile(block, backend="tpu", dynamic=False)

    def one(i):
        n = i + 1
        if a.mode == "strict":
            x = torch.arange(n, dtype=torch.float32)
            got = torch.mul(x.to("tpu"), 3).cpu()
            want = x * 3
        else:
            x = torch.linspace(-1, 1, n * 16).reshape(n, 16)
            fn = compiled if compiled is not None else block
            got = fn(x.to("tpu"), w).cpu()
            want = block(x, w_cpu)
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            raise AssertionError(f"shape {n}: tpu {got.flatten()[:4].tolist()} != cpu {want.flatten()[:4].tolist()}")

    def programs():
        m = torch.tpu.metrics()
        return m["compile"]["count"], m["disk_load"]["count"]

    t0 = time.time()
    samples = []
    every = max(1, a.n // max(1, a.samples))
    for i in range(a.n):
        one(i)
        if (i + 1) % every == 0 or i + 1 == a.n:
            s = torch.tpu.cache_stats()
            samples.append(dict(programs=i + 1, maps=maps(), rss_mib=round(rss_mib(), 1),
                                seconds=round(time.time() - t0, 2),
                                mem_entries=s["mem_entries"], map_evictions=s["map_evictions"]))
    seconds = time.time() - t0
    out = dict(mode=a.mode, n=a.n, seconds=round(seconds, 2), samples=samples)
    c0, d0 = programs()
    out.update(compiles=c0, disk_loads=d0)
    if a.reload:
        t1 = time.time()
        for i in range(a.reload):
            one(i)
        c1, d1 = programs()
        out.update(reload=a.reload, reload_seconds=round(time.time() - t1, 3), reload_compiles=c1 - c0,
                   reload_disk_loads=d1 - d0)
    s = torch.tpu.cache_stats()
    out["cache"] = {k: s[k] for k in ("mem_entries", "evictions", "map_evictions", "memory_evictions", "maps",
                                      "mem_max_maps", "compiles", "disk_hits")}
    out["maps_end"] = maps()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
