"""Residency of compiled programs (issue 37): one process compiling N
distinct programs (tests/faults/residency_worker.py, strict mode, one op
over a new length each time) with the program cache's memory-map bound on
(TORCH_TPU_CACHE_MAX_MAPS, here 4000 so that N = 1000 already passes it)
and off (-1): the process's peak memory maps, RSS and wall time at N =
1,000 / 3,000 / 6,000; then the cost of an evicted program's reload from
the disk tier against its first compile.  Each run is a fresh process on
an empty cache directory (cold).  With the map bound off, one-op programs
still stop at the entry bound (4,096 programs, ~12,700 maps) and live; a
process of heavier programs dies at vm.max_map_count instead (a ten-op
fused block: ~1,000 programs, 54 maps each -- issue 37's measurement, too
slow to repeat here)."""
import json
import os
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(BENCH), "tests", "faults", "residency_worker.py")
MARKS = (1000, 3000, 6000)
BOUND = 4000


def _run(n, bound, reload):
    with tempfile.TemporaryDirectory(prefix="bench_residency_") as d:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=d, TORCH_TPU_CACHE_MAX_MAPS=str(bound), OMP_NUM_THREADS="1")
        r = subprocess.run([sys.executable, WORKER, "strict", str(n), "--reload", str(reload),
                            "--samples", str(n // 100)], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        tail = (r.stderr or "").strip().splitlines()[-1:] or ["(no output)"]
        return {"error": f"worker exited {r.returncode}: {tail[0][:300]}"}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    fig = {}
    for m in MARKS:
        upto = [s for s in out["samples"] if s["programs"] <= m]
        if upto and upto[-1]["programs"] == m:
            fig[str(m)] = dict(peak_maps=max(s["maps"] for s in upto), rss_mib=upto[-1]["rss_mib"],
                               seconds=upto[-1]["seconds"], mem_entries=upto[-1]["mem_entries"])
    fig["evicted"] = out["cache"]["map_evictions"]
    fig["compile_ms_per_program"] = round(1000 * out["seconds"] / n, 2)
    if reload:
        fig["reload_ms_per_program"] = round(1000 * out["reload_seconds"] / reload, 2)
        fig["reload_compiles"] = out["reload_compiles"]
        fig["reload_disk_loads"] = out["reload_disk_loads"]
    return fig


def measure(measure_fn, quick):
    n = 3000 if quick else MARKS[-1]
    res = {"params": {"n": n, "bound_maps": BOUND}}
    measure_fn(res, "bound_on", lambda: _run(n, BOUND, 100))
    measure_fn(res, "bound_off", lambda: _run(n, -1, 0))
    return res


def markdown_rows(res, cell):
    rows = []
    on, off = res.get("bound_on") or {}, res.get("bound_off") or {}
    for m in MARKS:
        a, b = on.get(str(m)), off.get(str(m))
        if not a and not b:
            continue

        def fmt(x):
            return f"{x['peak_maps']} maps, {x['rss_mib']:.0f} MiB, {x['seconds']:.0f} s" if x else "n/a"
        rows.append([f"{m} distinct programs, one process: peak maps, RSS, wall (bound {BOUND} maps / off)", "",
                     f"{fmt(a)} / {fmt(b)}", "", "strict, one op per shape, cold cache"])
    if on.get("reload_ms_per_program") is not None:
        rows.append(["evicted program: reload from disk vs first compile (ms)", "",
                     f"{on['reload_ms_per_program']:.1f} vs {on['compile_ms_per_program']:.1f}", "",
                     f"{on.get('reload_compiles')} recompiles in the reload"])
    return rows
