"""Serving under load (issue 28 item 3; `make bench-serve-load`, in .venv-serve):
CLIENTS concurrent clients on loopback for DURATION seconds against vLLM's
OpenAI server on tpu, mixing

  valid      /v1/completions, greedy (temperature 0, ignore_eos), a fixed
             prompt set: the text must equal the unloaded answer
  stream     the same, streamed (SSE): the joined text must equal it, the
             stream must end with [DONE] and report max_tokens tokens
  cancel_stream  a streamed request the client drops after its first event
  cancel     a request the client drops before its answer (after 0-1 s)
  bad        malformed JSON, an empty body, an unknown model, max_tokens
             too large / negative / of the wrong type, a prompt longer than
             max-model-len (as text and as token ids), a 256 KiB prompt,
             wrong types, a missing prompt, a wrong method, an unknown path:
             each must get a 4xx

    .venv-serve/bin/python bench/serve_load.py [--clients 64] [--duration 180]
        [--warmup 60] [--url URL --pid PID]

Without --url it starts one tpu server (tests/serve/server.py, `make serve`'s
command line) and stops it at the end.  Before the load, each prompt of the
set is asked once, alone (the unloaded answers); then a warm-up of WARMUP
seconds with the same mix compiles the programs the load meets (tpu programs
are compiled per shape); then the measured DURATION.  Every few seconds the
resident set of the API server process and of each of its children (vLLM v1
runs the engine core in a child process) is sampled from /proc.  After the
load: no request may remain running or waiting on the server (dropped
clients' requests are aborted), and one last request must be answered.

Results (build/bench_serve/load_results.json, --out): requests served per kind, bad
requests tried with their status codes, p50/p99 latency (valid, stream,
time to first token), RSS at the end of warm-up and at the end (per process
and in total) with the slope of a line fitted through the measured phase,
mismatches against the unloaded answers, 5xx answers and dropped
connections (any other than the ones the clients drop).
"""
import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(ROOT, "tests", "serve"))

NAME = "smollm2"
MAX_LEN = 512
# (prompt, new tokens): different lengths, so batches mix prefills and decodes.
PROMPTS = [
    ("The capital of France is", 8),
    ("One, two, three,", 12),
    ("The largest planet in the solar system is", 16),
    ("Q: What is 7 plus 5?\nA:", 6),
    ("Write a short poem about autumn leaves falling in a quiet park at dusk:", 16),
    ("def add(a, b):", 10),
    ("Translate to French: good morning, my friend. How are you today? I hope", 12),
    ("The three states of water are", 8),
    ("A recipe for pancakes: first", 14),
    ("The museum opens at ten and closes at five, every day except Monday. "
     "Tickets cost eight euros, children under twelve enter free. Question: "
     "when does the museum close?\nAnswer:", 10),
    ("List of prime numbers: 2, 3, 5,", 12),
    ("In 1969, the first humans to walk on the Moon were", 16),
]
# How often each kind is drawn (bad requests are cheap: a client waits a
# little after one, so they do not crowd out the valid traffic).
MIX = [("valid", 40), ("stream", 25), ("cancel_stream", 8), ("cancel", 7), ("bad", 20)]
SERVER_ARGS = ["--max-model-len", str(MAX_LEN), "--max-num-seqs", "32", "--max-num-batched-tokens", "256",
               "--dtype", "float32", "--enforce-eager", "--enable-prefix-caching",
               "--disable-uvicorn-access-log", "--kv-cache-memory-bytes", str(256 << 20)]


def bad_requests(max_len=MAX_LEN):
    """name -> (method, path, body bytes or None)."""
    j = lambda **kw: json.dumps(kw).encode()  # noqa: E731
    return {
        "malformed_json": ("POST", "/v1/completions", b'{"model": "smollm2", "prompt": '),
        "empty_body": ("POST", "/v1/completions", b""),
        "not_an_object": ("POST", "/v1/completions", b'["model", "smollm2"]'),
        "unknown_model": ("POST", "/v1/completions", j(model="no-such-model", prompt="hi", max_tokens=4)),
        "max_tokens_too_large": ("POST", "/v1/completions", j(model=NAME, prompt="hi", max_tokens=max_len * 4)),
        "max_tokens_negative": ("POST", "/v1/completions", j(model=NAME, prompt="hi", max_tokens=-3)),
        "max_tokens_wrong_type": ("POST", "/v1/completions", j(model=NAME, prompt="hi", max_tokens="ten")),
        "prompt_too_long": ("POST", "/v1/completions", j(model=NAME, prompt="hello " * (max_len + 50), max_tokens=4)),
        "prompt_ids_too_long": ("POST", "/v1/completions", j(model=NAME, prompt=[1] * (max_len + 10), max_tokens=4)),
        "prompt_huge": ("POST", "/v1/completions", j(model=NAME, prompt="lorem ipsum " * (256 * 1024 // 12), max_tokens=4)),
        "prompt_wrong_type": ("POST", "/v1/completions", j(model=NAME, prompt={"text": "hi"}, max_tokens=4)),
        "temperature_wrong_type": ("POST", "/v1/completions", j(model=NAME, prompt="hi", max_tokens=4, temperature="hot")),
        "missing_prompt": ("POST", "/v1/completions", j(model=NAME, max_tokens=4)),
        "chat_missing_messages": ("POST", "/v1/chat/completions", j(model=NAME, max_tokens=4)),
        "wrong_method": ("GET", "/v1/completions", None),
        "unknown_path": ("POST", "/v1/no-such-endpoint", j(model=NAME, prompt="hi")),
    }


def completion_body(prompt, max_tokens, stream=False):
    body = dict(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def percentile(xs, q):
    """Nearest rank; None for no samples."""
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, max(0, int(round(q / 100 * len(xs) + 0.5)) - 1))], 4)


# ---- resident set sizes ---------------------------------------------------------

def _children(pid):
    """pid's descendants, from /proc (no psutil needed)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _rss_and_name(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        return int(fields["VmRSS"].split()[0]) * 1024, (cmd or fields["Name"].strip())[:80]
    except (OSError, KeyError, ValueError):
        return None, None


def rss_sample(pid):
    """{"t": time, "procs": {pid: [rss bytes, name]}} for pid and its descendants."""
    procs = {}
    for p in [pid] + _children(pid):
        rss, name = _rss_and_name(p)
        if rss is not None:
            procs[str(p)] = [rss, name]
    return {"t": time.time(), "procs": procs}


def _total(sample, pids=None):
    return sum(v[0] for k, v in sample["procs"].items() if pids is None or k in pids)


def _slope_mb_per_min(samples, pids):
    pts = [(s["t"], _total(s, pids) / 2**20) for s in samples]
    if len(pts) < 3:
        return None
    n = len(pts)
    mt, mr = sum(t for t, _ in pts) / n, sum(r for _, r in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    return round(60 * sum((t - mt) * (r - mr) for t, r in pts) / var, 3) if var else None


# ---- the clients ----------------------------------------------------------------

class Load:
    def __init__(self, url, expected, seed=0, request_timeout=600.0, max_len=MAX_LEN):
        self.url, self.expected, self.seed, self.timeout = url, expected, seed, request_timeout
        self.bad = bad_requests(max_len)
        self.records = []

    async def one(self, session, kind, rng):
        """One request of a kind; returns its record."""
        import aiohttp
        rec = {"kind": kind, "t0": time.time()}
        t0 = time.perf_counter()
        try:
            if kind == "bad":
                case = rng.choice(sorted(self.bad))
                method, path, data = self.bad[case]
                rec["case"] = case
                async with session.request(method, self.url + path, data=data,
                                           headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    rec["status"] = r.status
                    rec["ok"] = 400 <= r.status < 500
            elif kind == "valid":
                i = rng.randrange(len(PROMPTS))
                rec["prompt"] = i
                async with session.post(self.url + "/v1/completions", json=completion_body(*PROMPTS[i])) as r:
                    text = await r.text()
                    rec["status"] = r.status
                    got = json.loads(text)["choices"][0]["text"] if r.status == 200 else text[:300]
                    rec["ok"] = r.status == 200 and got == self.expected[i]
                    if not rec["ok"]:
                        rec["got"] = got
            elif kind in ("stream", "cancel_stream"):
                i = rng.randrange(len(PROMPTS))
                rec["prompt"] = i
                async with session.post(self.url + "/v1/completions",
                                        json=completion_body(*PROMPTS[i], stream=True)) as r:
                    rec["status"] = r.status
                    parts, done, tokens = [], False, None
                    async for line in r.content:
                        line = line.decode().strip()
                        if not line.startswith("data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            done = True
                            break
                        ev = json.loads(payload)
                        if ev.get("choices"):
                            if not parts:
                                rec["ttft_s"] = time.perf_counter() - t0
                            parts.append(ev["choices"][0].get("text") or "")
                            if kind == "cancel_stream":
                                break  # leave the with: the connection is closed mid-stream
                        if ev.get("usage"):
                            tokens = ev["usage"]["completion_tokens"]
                    if kind == "cancel_stream":
                        rec["ok"] = r.status == 200 and bool(parts)
                        r.close()
                    else:
                        got = "".join(parts)
                        rec["ok"] = (r.status == 200 and done and got == self.expected[i]
                                     and tokens == PROMPTS[i][1])
                        if not rec["ok"]:
                            rec["got"], rec["done"], rec["tokens"] = got, done, tokens
            elif kind == "cancel":
                i = rng.randrange(len(PROMPTS))
                rec["prompt"] = i
                wait = rng.uniform(0.0, 1.0)
                rec["cancel_after_s"] = round(wait, 3)

                async def ask():
                    async with session.post(self.url + "/v1/completions", json=completion_body(*PROMPTS[i])) as r:
                        await r.read()
                        return r.status
                try:
                    rec["status"] = await asyncio.wait_for(ask(), wait)  # answered before the client gave up
                except asyncio.TimeoutError:
                    rec["status"] = None
                rec["ok"] = rec["status"] in (None, 200)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
            rec["ok"] = False
            rec["dropped"] = f"{type(e).__name__}: {e}"[:300]
        except Exception as e:  # noqa: BLE001  (a malformed answer: recorded, never fatal to the load)
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        rec["latency_s"] = time.perf_counter() - t0
        return rec

    async def client(self, n, deadline, phase):
        import aiohttp
        rng = random.Random(self.seed * 1000 + n + (0 if phase == "load" else 500))
        kinds, weights = zip(*MIX)
        # each client its own connection(s), as separate users would have
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=1, force_close=False)) as s:
            await asyncio.sleep(rng.uniform(0, 1.0))  # do not all start in the same instant
            while time.time() < deadline:
                kind = rng.choices(kinds, weights)[0]
                rec = await self.one(s, kind, rng)
                rec["phase"], rec["client"] = phase, n
                self.records.append(rec)
                if kind == "bad":
                    await asyncio.sleep(rng.uniform(0.1, 0.5))

    async def phase(self, clients, seconds, name):
        deadline = time.time() + seconds
        await asyncio.gather(*(self.client(n, deadline, name) for n in range(clients)))


async def _sampler(pid, interval, samples, stop):
    while not stop.is_set():
        samples.append(rss_sample(pid))
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


async def unloaded_answers(url, timeout=900):
    """Each prompt once, alone: the reference answers."""
    import aiohttp
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        for p, n in PROMPTS:
            async with s.post(url + "/v1/completions", json=completion_body(p, n)) as r:
                body = await r.json(content_type=None)
                if r.status != 200:
                    raise RuntimeError(f"unloaded answer to {p!r}: {r.status} {body}")
                out.append(body["choices"][0]["text"])
    return out


async def _metrics(s, url):
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    vals = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and not line.startswith("#"):
            key = line.split("{")[0].split()[0]
            try:
                vals[key] = vals.get(key, 0.0) + float(line.split()[-1])
            except ValueError:
                pass
    return vals


async def _settle(url, timeout=120):
    """Waits until the server holds no running or waiting request; returns
    the last gauges read (and the count of requests the engine finished)."""
    import aiohttp
    deadline = time.time() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        while True:
            m = await _metrics(s, url)
            gauges = {k: m.get(k) for k in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                             "vllm:kv_cache_usage_perc", "vllm:request_success_total")}
            if (not gauges["vllm:num_requests_running"] and not gauges["vllm:num_requests_waiting"]) \
                    or time.time() > deadline:
                return gauges
            await asyncio.sleep(1.0)


def summarize(records, kinds=("valid", "stream", "cancel_stream", "cancel", "bad")):
    out = {}
    for k in kinds:
        rs = [r for r in records if r["kind"] == k]
        out[k] = dict(tried=len(rs), ok=sum(r["ok"] for r in rs))
    bad = {}
    for r in records:
        if r["kind"] == "bad":
            c = bad.setdefault(r["case"], {})
            key = str(r.get("status", "dropped"))
            c[key] = c.get(key, 0) + 1
    out["bad_statuses"] = dict(sorted(bad.items()))
    for k in ("valid", "stream"):
        lat = [r["latency_s"] for r in records if r["kind"] == k and r["ok"]]
        out[k].update(p50_s=percentile(lat, 50), p99_s=percentile(lat, 99), mean_s=round(sum(lat) / len(lat), 4) if lat else None)
    ttft = [r["ttft_s"] for r in records if r["kind"] == "stream" and r["ok"] and "ttft_s" in r]
    out["stream"].update(ttft_p50_s=percentile(ttft, 50), ttft_p99_s=percentile(ttft, 99))
    answered = [r for r in records if r["kind"] in ("valid", "stream") and r["ok"]]
    out["served"] = len(answered)
    # the most requests the clients had open at once
    edges = sorted([(r["t0"], 1) for r in records] + [(r["t0"] + r["latency_s"], -1) for r in records])
    depth = out["max_in_flight"] = 0
    for _, d in edges:
        depth += d
        out["max_in_flight"] = max(out["max_in_flight"], depth)
    out["mismatches"] = [dict(kind=r["kind"], prompt=r["prompt"], got=r.get("got"), status=r.get("status"))
                         for r in records if r["kind"] in ("valid", "stream") and not r["ok"]
                         and "dropped" not in r and r.get("status") == 200][:20]
    out["server_errors"] = [dict(kind=r["kind"], case=r.get("case"), status=r["status"], got=r.get("got"))
                            for r in records if (r.get("status") or 0) >= 500][:20]
    out["server_errors_count"] = sum(1 for r in records if (r.get("status") or 0) >= 500)
    out["dropped"] = [dict(kind=r["kind"], case=r.get("case"), error=r["dropped"]) for r in records if "dropped" in r][:20]
    out["dropped_count"] = sum(1 for r in records if "dropped" in r)
    out["errors"] = [dict(kind=r["kind"], error=r["error"]) for r in records if "error" in r][:20]
    out["failed"] = [dict((k, v) for k, v in r.items() if k not in ("t0",)) for r in records if not r["ok"]][:20]
    out["failed_count"] = sum(1 for r in records if not r["ok"])
    return out


def rss_report(samples, warm_end, pid):
    """RSS at the end of warm-up (the last sample before warm_end) and at the
    end, per process and in total (MiB), and the measured phase's slope."""
    before = [s for s in samples if s["t"] <= warm_end]
    after = [s for s in samples if s["t"] > warm_end]
    if not before or not after:
        return {}
    start, end = before[-1], after[-1]
    pids = sorted(set(start["procs"]) & set(end["procs"]), key=int)
    mb = lambda b: round(b / 2**20, 1)  # noqa: E731
    procs = {p: dict(name=end["procs"][p][1], warm_mb=mb(start["procs"][p][0]), end_mb=mb(end["procs"][p][0]),
                     max_mb=mb(max(s["procs"].get(p, [0])[0] for s in after)))
             for p in pids}
    w, e = _total(start, pids), _total(end, pids)
    return dict(api_server_pid=pid, processes=procs, warm_total_mb=mb(w), end_total_mb=mb(e),
                growth_mb=mb(e - w), growth_pct=round(100 * (e - w) / w, 2),
                max_total_mb=mb(max(_total(s, pids) for s in after)),
                slope_mb_per_min=_slope_mb_per_min(after, pids), samples=len(samples),
                new_processes=sorted(set(end["procs"]) - set(start["procs"])),
                gone_processes=sorted(set(start["procs"]) - set(end["procs"])))


async def run_load(url, pid, clients=64, duration=180.0, warmup=60.0, interval=3.0, seed=0,
                   max_len=MAX_LEN, log=print):
    """The whole run against a server at url whose API process is pid."""
    t_start = time.time()
    samples, stop = [], asyncio.Event()
    sampler = asyncio.create_task(_sampler(pid, interval, samples, stop))
    log(f"[serve-load] unloaded answers for {len(PROMPTS)} prompts ...")
    expected = await unloaded_answers(url)
    load = Load(url, expected, seed=seed, max_len=max_len)
    log(f"[serve-load] warm-up: {clients} clients for {warmup:.0f} s ...")
    await load.phase(clients, warmup, "warmup")
    finished_before = (await _settle(url))["vllm:request_success_total"] or 0
    samples.append(rss_sample(pid))
    warm_end = time.time()
    log(f"[serve-load] load: {clients} clients for {duration:.0f} s ...")
    t0 = time.time()
    await load.phase(clients, duration, "load")
    wall = time.time() - t0
    gauges = await _settle(url)
    await asyncio.sleep(interval)
    samples.append(rss_sample(pid))
    stop.set()
    await sampler
    final = await unloaded_answers(url)
    measured = [r for r in load.records if r["phase"] == "load"]
    res = dict(clients=clients, duration_s=duration, warmup_s=warmup, load_wall_s=round(wall, 1),
               total_wall_s=round(time.time() - t_start, 1), seed=seed, mix=dict(MIX),
               prompts=[dict(prompt=p, max_tokens=n, unloaded=e) for (p, n), e in zip(PROMPTS, expected)],
               load=summarize(measured), warmup=summarize([r for r in load.records if r["phase"] == "warmup"]),
               after_load=dict(gauges=gauges, final_answers_equal=final == expected,
                               final_answers=final if final != expected else None),
               rss=rss_report(samples, warm_end, pid),
               rss_timeline_mb=[[round(s["t"] - t_start, 1), round(_total(s) / 2**20, 1)] for s in samples])
    res["load"]["requests_per_s"] = round(len(measured) / wall, 3)
    # vLLM counts the requests its engine finished (stop, length), not the
    # ones the API server aborts when their client goes away: the requests
    # that reached the server less those it finished are the dropped ones
    # it stopped (or never started), at most all the dropped ones.
    finished = int((gauges["vllm:request_success_total"] or 0) - finished_before)
    reached = sum(1 for r in measured if r["kind"] in ("valid", "stream", "cancel_stream", "cancel"))
    res["load"]["engine_finished"] = finished
    res["load"]["dropped_not_finished"] = reached - finished
    res["load"]["dropped_by_clients"] = sum(1 for r in measured if r["kind"] == "cancel_stream"
                                            or (r["kind"] == "cancel" and r.get("status") is None))
    return res


def check(res):
    """The properties a run must have; a list of what failed."""
    bad = []
    for phase in ("warmup", "load"):
        L = res[phase]
        for k in ("valid", "stream", "cancel_stream", "cancel", "bad"):
            if L[k]["ok"] != L[k]["tried"]:
                bad.append(f"{phase} {k}: {L[k]['tried'] - L[k]['ok']} of {L[k]['tried']} failed: "
                           f"{[r for r in L['failed'] if r['kind'] == k][:2]}")
        if L["server_errors_count"]:
            bad.append(f"{phase}: {L['server_errors_count']} answers 5xx: {L['server_errors'][:3]}")
        if L["dropped_count"]:
            bad.append(f"{phase}: {L['dropped_count']} connections dropped: {L['dropped'][:3]}")
    L = res["load"]
    if L["dropped_by_clients"] and not 0 < L["dropped_not_finished"] <= L["dropped_by_clients"]:
        bad.append(f"{L['dropped_not_finished']} requests not finished by the engine for "
                   f"{L['dropped_by_clients']} the clients dropped")
    g = res["after_load"]["gauges"]
    if g["vllm:num_requests_running"] or g["vllm:num_requests_waiting"]:
        bad.append(f"requests left on the server after the load: {g}")
    if not res["after_load"]["final_answers_equal"]:
        bad.append(f"answers after the load differ: {res['after_load']['final_answers']}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of measured load")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds of the same load before it")
    ap.add_argument("--interval", type=float, default=3.0, help="seconds between RSS samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--url", help="a running server (default: start one on tpu)")
    ap.add_argument("--pid", type=int, help="its API server process (with --url)")
    ap.add_argument("--backend", default="tpu", help="tpu, or cpu (vLLM's CPU backend) for comparison")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_serve", "load_results.json"))
    a = ap.parse_args()
    server = None
    if a.url is None:
        from server import Server
        log_path = os.path.join(ROOT, "build", "bench_serve", f"load_{a.backend}.log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        server = Server(a.backend, name=NAME, extra=SERVER_ARGS, log_path=log_path)
        print(f"[serve-load] starting a {a.backend} server (log {log_path}) ...", flush=True)
        server.wait_ready()
        url, pid = server.url, server.proc.pid
    else:
        if a.pid is None:
            ap.error("--url needs --pid (the API server process, for its RSS)")
        url, pid = a.url.rstrip("/"), a.pid
    try:
        res = asyncio.run(run_load(url, pid, a.clients, a.duration, a.warmup, a.interval, a.seed,
                                   log=lambda m: print(m, flush=True)))
    finally:
        if server is not None:
            rc, secs, leftover = server.stop()
    res["machine"] = dict(node=platform.node(), cpus=os.cpu_count(), python=platform.python_version())
    res["backend"] = a.backend
    res["server_args"] = SERVER_ARGS if server is not None else None
    if server is not None:
        res["server_stop"] = dict(rc=rc, seconds=round(secs, 1), leftover=leftover)
    res["problems"] = check(res)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(report(res))
    print(f"[serve-load] results in {a.out}")
    sys.exit(1 if res["problems"] else 0)


def report(res):
    L, R = res["load"], res["rss"]
    lines = [f"Serving under load: {res['clients']} clients, {res['duration_s']:.0f} s measured after "
             f"{res['warmup_s']:.0f} s warm-up ({res.get('backend', 'tpu')})",
             f"  served {L['served']} valid requests ({L['valid']['ok']} plain, {L['stream']['ok']} streamed), "
             f"{L['requests_per_s']} requests/s in all, at most {L['max_in_flight']} in flight",
             f"  latency p50/p99: plain {L['valid']['p50_s']}/{L['valid']['p99_s']} s, streamed "
             f"{L['stream']['p50_s']}/{L['stream']['p99_s']} s, first token {L['stream']['ttft_p50_s']}/"
             f"{L['stream']['ttft_p99_s']} s",
             f"  cancelled: {L['cancel_stream']['tried']} mid-stream, {L['cancel']['tried']} before the answer; "
             f"the engine did not finish {L.get('dropped_not_finished')} of the {L.get('dropped_by_clients')} "
             "dropped unanswered",
             f"  bad requests: {L['bad']['tried']} tried, {L['bad']['ok']} got 4xx: "
             + ", ".join(f"{c} {s}" for c, s in L["bad_statuses"].items()),
             f"  mismatches {len(L['mismatches'])}, 5xx {L['server_errors_count']}, dropped {L['dropped_count']}"]
    if R:
        lines.append(f"  RSS (API server + engine core + children): {R['warm_total_mb']} MiB after warm-up, "
                     f"{R['end_total_mb']} MiB at the end ({R['growth_mb']:+} MiB, {R['growth_pct']:+}%), max "
                     f"{R['max_total_mb']}, slope {R['slope_mb_per_min']} MiB/min")
        for p, v in R["processes"].items():
            lines.append(f"    {p} {v['name'][:50]}: {v['warm_mb']} -> {v['end_mb']} MiB (max {v['max_mb']})")
    lines.append("  problems: " + ("; ".join(res["problems"]) if res.get("problems") else "none"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
