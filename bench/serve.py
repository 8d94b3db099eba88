"""Serving benchmark (`make bench-serve`, in .venv-serve): vLLM's OpenAI
server on tpu (the torch_tpu plugin) against vLLM's own CPU backend, and
two tpu replicas behind a router (tools/serve_router.py, and smg, an
existing one), on loopback, all in one run.

    .venv-serve/bin/python bench/serve.py [--quick] [--only cpu,tpu,...] [--also-concurrency 1,32]
    .venv-serve/bin/python bench/serve.py --profile

--profile measures only where a steady decode step of the tpu server goes
(torch_tpu/vllm/profile.py, TORCH_TPU_VLLM_PROFILE): at concurrency 1, 8
and 32, ms per step, programs per step, the C attention kernel's time, and
a split of every other step into input preparation, attention, the rest of
the forward, logits, sampler and other host work
(bench/serve_profile.json, and a table on stdout).

Workload (multi-tenant): TENANTS long system prompts (a few hundred tokens
each, different from the first character), TURNS short user turns per
tenant; the requests are interleaved across tenants and sent CONCURRENCY at
a time, each streamed (greedy, ignore_eos, MAX_TOKENS new tokens).  Before
the measured pass a first pass of the same shape on other tenants runs
(its tokens/s is reported too: a tpu server compiles its programs at
start-up, so its first requests should not be slower); then each server's
prefix cache is reset (POST /reset_prefix_cache,
VLLM_SERVER_DEV_MODE=1), so every configuration starts with an empty cache.

Configurations:
  cpu            vLLM's CPU backend (plugin off), prefix caching on
  tpu            one tpu server, prefix caching on
  sglang         SGLang 0.5.23 on tpu (.venv-sglang, `make sglang-env`; its own
                 attention backend over the same kernel), radix cache on
  cpu@C, tpu@C, sglang@C   the same at the other concurrencies of
                 --also-concurrency (default 1 and 32; --max-num-seqs C)
  tpu_no_prefix  one tpu server, prefix caching off
  rr             two tpu replicas + tools/serve_router.py, round robin
  cache_aware    the same two replicas + tools/serve_router.py, cache-aware
                 (llm-d's prefix scorer)
  smg_rr         the same two replicas + smg (SGLang Model Gateway, an
                 existing Rust router), round robin
  smg_cache_aware  the same + smg's cache_aware policy (a radix tree of the
                 requests' text, load-balanced)
  kv_events      the same two replicas + tools/serve_router.py, KV-event
                 routing (llm-d's precise prefix-cache scorer on the blocks
                 each replica reports holding: the replicas publish vLLM's
                 KV-cache events, --kv-events-config, each on its own port)

Each figure: wall time, output tokens/s (completion tokens / wall),
requests/s, mean and p90 time to first token (first streamed text), mean
latency per request, and the prefix-cache hit rate the servers' /metrics
report for the run (hits / queried tokens, summed over the replicas, and
each replica's), with the requests each replica got; for our router, the
KV events it received and the blocks it saw each replica hold.  Results go to bench/serve_results.json and
bench/serve_results.md.
"""
import argparse
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(ROOT, "tests", "serve"))
from server import DEFAULT_MODEL, Server, free_port  # noqa: E402

NAME = "smollm2"
TOPICS = ["a railway museum", "a public library", "a bicycle repair shop", "a mountain hut",
          "a city aquarium", "a bakery", "a ferry company", "a botanical garden", "a chess club",
          "a ski school", "a planetarium", "a night market"]
QUESTIONS = ["When do you open?", "How much does it cost?", "Can I bring my dog?", "Is there parking?",
             "Do you take cards?", "Where are you?", "Can children come?", "Is it open on holidays?",
             "How long does a visit take?", "Can I book ahead?", "Is there food?", "Who runs it?"]


def system_prompt(i):
    t = TOPICS[i % len(TOPICS)]
    return (f"Tenant {i}. You are the friendly assistant of {t}. " +
            f"Visitors of {t} ask short practical questions about opening hours, prices, rules, access "
            "and services; answer each in one short, polite sentence, and never invent facts you were "
            "not given. Opening hours are nine to six on weekdays and ten to four at weekends. " * 4)


def workload(tenants, turns, first_tenant=0):
    reqs = []
    for u in range(turns):
        for t in range(first_tenant, first_tenant + tenants):
            reqs.append(system_prompt(t) + f"\nUser: {QUESTIONS[(u + t) % len(QUESTIONS)]}\nAssistant:")
    return reqs


def one(url, prompt, max_tokens):
    """(ttft s, latency s, completion tokens) of one streamed completion."""
    import urllib.request
    body = dict(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            ev = json.loads(line[5:])
            if ttft is None and ev.get("choices") and ev["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    return ttft if ttft is not None else time.perf_counter() - t0, time.perf_counter() - t0, tokens


def replay(url, prompts, concurrency, max_tokens):
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        res = list(pool.map(lambda p: one(url, p, max_tokens), prompts))
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in res)
    tokens = sum(r[2] for r in res)
    return dict(requests=len(res), wall_s=round(wall, 3), output_tokens=tokens,
                tokens_per_s=round(tokens / wall, 3), requests_per_s=round(len(res) / wall, 4),
                ttft_mean_s=round(sum(ttfts) / len(ttfts), 4),
                ttft_p90_s=round(ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], 4),
                latency_mean_s=round(sum(r[1] for r in res) / len(res), 4))


def cache_counters(servers):
    return [(s.metric("vllm:prefix_cache_hits_total"), s.metric("vllm:prefix_cache_queries_total"),
             s.metric("vllm:request_success_total")) for s in servers]


def reset_cache(servers):
    for s in servers:
        status, body = s.request("POST", "/reset_prefix_cache")
        if status != 200:
            raise RuntimeError(f"reset_prefix_cache on {s.url}: {status} {body}")


def measure(url, servers, prompts, warm, a):
    first = replay(url, warm, a.concurrency, a.max_tokens)  # the server's first requests
    reset_cache(servers)
    before = cache_counters(servers)
    r = replay(url, prompts, a.concurrency, a.max_tokens)
    after = cache_counters(servers)
    hits = [x[0] - y[0] for x, y in zip(after, before)]
    queries = [x[1] - y[1] for x, y in zip(after, before)]
    r["prefix_cache_hit_rate"] = round(sum(hits) / sum(queries), 4) if sum(queries) else 0.0
    r["prefix_cache_hit_rate_per_replica"] = [round(h / q, 4) if q else 0.0 for h, q in zip(hits, queries)]
    r["requests_per_replica"] = [int(x[2] - y[2]) for x, y in zip(after, before)]
    r["first_pass_tokens_per_s"] = first["tokens_per_s"]
    return r


SGLANG_PY = os.path.join(ROOT, ".venv-sglang", "bin", "python")


def start_sglang(a, log=None):
    """SGLang's server on tpu (.venv-sglang, `make sglang-env`) for the same
    workload: its radix prefix cache on, a KV pool and per-step budget as
    `make serve-sglang` gives it, a.concurrency requests at a time."""
    def argv(port):
        return [SGLANG_PY, "-m", "sglang.launch_server", "--model-path", a.model, "--served-model-name", NAME,
                "--host", "127.0.0.1", "--port", str(port), "--dtype", a.dtype, "--context-length", "1024",
                "--mem-fraction-static", "0.1", "--max-total-tokens", "16384",
                "--max-running-requests", str(a.concurrency), "--chunked-prefill-size", str(a.batched_tokens)]
    return Server("tpu", model=a.model, name=NAME, argv=argv, log_path=log, env={"SGLANG_PLATFORM": "tpu"})


def measure_sglang(s, prompts, warm, a):
    """measure() for SGLang: its cache is emptied with /flush_cache; it
    reports no prefix-cache counters here."""
    first = replay(s.url, warm, a.concurrency, a.max_tokens)
    status, body = s.request("POST", "/flush_cache")
    if status != 200:
        raise RuntimeError(f"flush_cache on {s.url}: {status} {body}")
    r = replay(s.url, prompts, a.concurrency, a.max_tokens)
    r["first_pass_tokens_per_s"] = first["tokens_per_s"]
    return r


def start(backend, a, prefix=True, log=None, kv_events_port=None, env=None, max_seqs=None):
    """kv_events_port: the server publishes its KV-cache events (ZMQ) there."""
    extra = ["--max-model-len", "1024", "--max-num-seqs", str(max_seqs or a.concurrency), "--max-num-batched-tokens",
             str(a.batched_tokens), "--dtype", a.dtype, "--enforce-eager", "--disable-uvicorn-access-log",
             "--enable-prefix-caching" if prefix else "--no-enable-prefix-caching"]
    if backend == "tpu":
        extra += ["--kv-cache-memory-bytes", str(a.kv_bytes)]
    if kv_events_port:
        extra += ["--kv-events-config", json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                                    "endpoint": f"tcp://*:{kv_events_port}", "topic": "kv-events"})]
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache
    return Server(backend, model=a.model, name=NAME, extra=extra, log_path=log, env=env)


PROFILE_FIELDS = ("total_ms", "between_ms", "input_ms", "attention_ms", "forward_ms", "logits_ms", "sampler_ms",
                  "host_other_ms", "programs", "device_ms", "host_wait_ms", "attention_kernel_ms")


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return round(xs[len(xs) // 2], 3) if xs else None


def profile(a, logs, concurrencies=(1, 8, 32), max_tokens=48):
    """Where a steady decode step of the tpu server goes (torch_tpu/vllm/
    profile.py): per concurrency C, C requests of short distinct prompts
    decode max_tokens tokens together; the decode-only steps with C requests
    are summarized (medians): the split steps' phases, the other steps'
    wall time (no synchronization) and the decode tokens/s."""
    path = os.path.join(logs, "profile.jsonl")
    if os.path.exists(path):
        os.remove(path)
    s = start("tpu", a, True, log=os.path.join(logs, "tpu_profile.log"),
              env={"TORCH_TPU_VLLM_PROFILE": path}, max_seqs=max(concurrencies))
    out = {}
    try:
        s.wait_ready()
        for c in concurrencies:
            prompts = [f"Request {i} of {c}. " + QUESTIONS[i % len(QUESTIONS)] + " Answer:" for i in range(c)]
            t0 = time.time()
            r = replay(s.url, prompts, c, max_tokens)
            t1 = time.time()
            with open(path) as f:
                recs = [json.loads(l) for l in f]
            steady = [x for x in recs if t0 <= x["t"] <= t1 and x["decode_only"] and x["reqs"] == c]
            split = [x for x in steady if x["split"]]
            plain = [x for x in steady if not x["split"]]
            row = {"steps": len(steady), "tokens_per_s": r["tokens_per_s"], "T": _median(x["T"] for x in steady),
                   "step_ms": _median(x["total_ms"] for x in plain),
                   "programs": _median(x["programs"] for x in plain),
                   "attention_kernel_ms": _median(x.get("attention_kernel_ms") for x in plain),
                   "host_ms": {k: _median(x.get(k + "_host_ms") for x in plain)
                               for k in ("input", "attention", "forward", "logits", "sampler")}}
            row["split"] = {k: _median(x.get(k) for x in split) for k in PROFILE_FIELDS}
            out[str(c)] = row
            print(f"[bench-serve] profile, concurrency {c}: {json.dumps(row)}", flush=True)
    finally:
        s.stop()
    return out


def profile_table(prof):
    lines = ["Steady decode step of the tpu server (ms; split steps synchronize at each phase's end)", "",
             "| concurrency | T | step ms | programs | tokens/s | attention kernel | split: total | between | input | "
             "attention | forward | logits | sampler | host other | device |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, r in prof.items():
        if "error" in r:
            lines.append(f"| {c} | error: {r['error'][:120]} |")
            continue
        sp = r["split"]
        lines.append(f"| {c} | {r['T']} | {r['step_ms']} | {r['programs']} | {r['tokens_per_s']} | "
                     f"{r['attention_kernel_ms']} | {sp['total_ms']} | {sp['between_ms']} | {sp['input_ms']} | {sp['attention_ms']} | "
                     f"{sp['forward_ms']} | {sp['logits_ms']} | {sp['sampler_ms']} | {sp['host_other_ms']} | "
                     f"{sp['device_ms']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--quick", action="store_true", help="a few requests per configuration (checks it works)")
    ap.add_argument("--only", default="cpu,tpu,sglang,tpu_no_prefix,rr,cache_aware,smg_rr,smg_cache_aware,kv_events")
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--also-concurrency", default="1,32",
                    help="cpu and tpu again at these concurrencies (configs cpu@C, tpu@C; '' for none)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--batched-tokens", type=int, default=512)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--kv-bytes", type=int, default=256 << 20)
    ap.add_argument("--out", default=os.path.join(BENCH, "serve_results.json"))
    ap.add_argument("--profile", action="store_true",
                    help="only the profile of a steady decode step at concurrency 1, 8 and 32 (tpu)")
    a = ap.parse_args()
    if a.quick:
        a.tenants, a.turns, a.max_tokens = 2, 2, 8
    only = a.only.split(",")
    prompts = workload(a.tenants, a.turns)
    warm = workload(a.tenants, a.turns, first_tenant=100)  # the same shapes, other prefixes
    results = dict(machine=dict(node=platform.node(), cpus=os.cpu_count(), python=platform.python_version()),
                   workload=dict(tenants=a.tenants, turns=a.turns, requests=len(prompts),
                                 concurrency=a.concurrency, max_tokens=a.max_tokens, dtype=a.dtype,
                                 system_prompt_chars=len(system_prompt(0)), quick=a.quick),
                   configs={})
    logs = os.path.join(ROOT, "build", "bench_serve")
    os.makedirs(logs, exist_ok=True)
    if a.profile:
        prof = profile(a, logs)
        path = os.path.join(os.path.dirname(a.out), "serve_profile.json")
        with open(path, "w") as f:
            json.dump(dict(machine=results["machine"], dtype=a.dtype, profile=prof), f, indent=1)
        print(profile_table(prof))
        return

    def record(name, fn):
        print(f"[bench-serve] {name} ...", flush=True)
        try:
            results["configs"][name] = fn()
        except Exception as e:  # recorded, the other configurations still run
            results["configs"][name] = {"error": f"{type(e).__name__}: {str(e)[-2000:]}"}
        print(f"[bench-serve] {name}: {json.dumps(results['configs'][name])}", flush=True)

    def single(backend, prefix):
        s = start(backend, a, prefix, log=os.path.join(logs, f"{backend}_{'prefix' if prefix else 'noprefix'}.log"))
        try:
            s.wait_ready()
            return measure(s.url, [s], prompts, warm, a)
        finally:
            s.stop()

    def sglang():
        if not os.path.exists(SGLANG_PY):
            raise RuntimeError(".venv-sglang is missing: make sglang-env")
        s = start_sglang(a, log=os.path.join(logs, f"sglang_{a.concurrency}.log"))
        try:
            s.wait_ready()
            return measure_sglang(s, prompts, warm, a)
        finally:
            s.stop()

    if "cpu" in only:
        record("cpu", lambda: single("cpu", True))
    if "tpu" in only:
        record("tpu", lambda: single("tpu", True))
    if "sglang" in only:
        record("sglang", sglang)
    base = a.concurrency
    for c in [int(x) for x in a.also_concurrency.split(",") if x.strip()]:
        a.concurrency = c  # the same workload, c requests at a time (and --max-num-seqs c)
        for backend in ("cpu", "tpu", "sglang"):
            if backend in only:
                record(f"{backend}@{c}", lambda: dict(sglang() if backend == "sglang" else single(backend, True),
                                                      concurrency=c))
    a.concurrency = base
    if "tpu_no_prefix" in only:
        record("tpu_no_prefix", lambda: single("tpu", False))
    routed = [p for p in ROUTERS if p in only]
    if routed:
        kv_ports = [free_port() for _ in range(2)]
        replicas = [start("tpu", a, True, log=os.path.join(logs, f"replica{i}.log"), kv_events_port=kv_ports[i])
                    for i in range(2)]
        try:
            for r in replicas:
                r.wait_ready()
            for policy in routed:
                port = free_port()
                log = open(os.path.join(logs, f"router_{policy}.log"), "w")
                cmd = ROUTERS[policy](port, [r.url for r in replicas])
                if policy == "kv_events":
                    cmd += ["--tokenizer", a.model, "--kv-events-topic", "kv-events",
                            "--kv-events", *[f"tcp://127.0.0.1:{p}" for p in kv_ports]]
                router = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
                try:
                    url = f"http://127.0.0.1:{port}"
                    _wait_http(url + "/v1/models", router)
                    record(policy, lambda: dict(measure(url, replicas, prompts, warm, a), **_router_stats(url)))
                finally:
                    router.terminate()
                    router.wait(timeout=30)
                    log.close()
        finally:
            for r in replicas:
                r.stop()

    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    md = table(results)
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)


def _ours(policy):
    return lambda port, urls: [sys.executable, os.path.join(ROOT, "tools", "serve_router.py"), "--port", str(port),
                               "--policy", policy, "--workers", *urls]


def _smg(policy):
    """smg (pinned in requirements-serve.txt) routes plain HTTP to the
    replicas' OpenAI servers; it checks their /health before it answers."""
    smg = os.path.join(os.path.dirname(sys.executable), "smg")
    return lambda port, urls: [smg, "launch", "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
                               "--log-level", "warn", "--worker-urls", *urls]


ROUTERS = {"rr": _ours("round_robin"), "cache_aware": _ours("cache_aware"),
           "smg_rr": _smg("round_robin"), "smg_cache_aware": _smg("cache_aware"),
           "kv_events": _ours("kv_events")}


def _router_stats(url):
    """Our router's KV-event counts and blocks held per replica (smg has none)."""
    import urllib.request
    try:
        with urllib.request.urlopen(url + "/router/stats", timeout=10) as r:
            stats = json.loads(r.read())
    except (OSError, ValueError):
        return {}
    if "kv_events" not in stats:
        return {}
    return {"kv_events": [dict(events=k["events"], blocks_held=k["blocks_held"], unlinked=k["unlinked"],
                               missed_batches=k["missed_batches"]) for k in stats["kv_events"]]}


def _wait_http(url, proc, timeout=60):
    import urllib.request
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"router not ready: {url}")


def table(results):
    w = results["workload"]
    lines = [f"Serving: {w['requests']} requests ({w['tenants']} tenants x {w['turns']} turns, system prompt "
             f"{w['system_prompt_chars']} chars), {w['concurrency']} concurrent, {w['max_tokens']} new tokens "
             f"each, {w['dtype']}{', quick' if w['quick'] else ''}", "",
             "| config | tokens/s | first pass tokens/s | req/s | TTFT mean s | TTFT p90 s | latency mean s | prefix hit rate | hit rate per replica | requests per replica |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results["configs"].items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:120]} | | | | | | | | |")
        else:
            lines.append(f"| {name} | {r['tokens_per_s']} | {r.get('first_pass_tokens_per_s', '')} | "
                         f"{r['requests_per_s']} | {r['ttft_mean_s']} | "
                         f"{r['ttft_p90_s']} | {r['latency_mean_s']} | {r.get('prefix_cache_hit_rate', '')} | "
                         f"{r.get('prefix_cache_hit_rate_per_replica', '')} | {r.get('requests_per_replica', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
