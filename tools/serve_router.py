"""A small OpenAI-compatible router in front of several vLLM servers
(`make bench-serve` puts it before two tpu replicas).

    .venv-serve/bin/python tools/serve_router.py --port 9000 \
        --workers http://127.0.0.1:8001 http://127.0.0.1:8002 --policy cache_aware

Policies:
- ``round_robin``: request i goes to worker i mod n.
- ``cache_aware``: llm-d's prefix-cache scorer, on the request's text.  The
  prompt (completions: ``prompt``; chat: the messages' roles and contents)
  is cut into blocks of ``--block-chars`` characters whose hashes are chained
  (block i's hash covers blocks 0..i), so two prompts share a hash exactly
  while they share a prefix.  Each worker remembers the chains it was sent
  (an LRU of ``--cache-blocks`` hashes, standing in for what its prefix cache
  holds).  A worker scores 3 x (fraction of the prompt's blocks it holds, as
  a prefix) + 2 x (1 - its requests in flight / the most in flight on any
  worker); the highest score wins, ties go to the worker with fewer requests
  in flight, then to the one holding fewer blocks (so new prefixes spread
  over the workers), then the lower index.

Requests are proxied as they are (bodies, status codes, streamed answers
chunk by chunk); ``GET /v1/models`` answers from the first worker;
``GET /router/stats`` counts the requests each worker got.
"""
import argparse
import asyncio
import collections
import hashlib
import json

from aiohttp import ClientSession, ClientTimeout, web


def prompt_text(body):
    if not isinstance(body, dict):
        return ""
    if "messages" in body and isinstance(body["messages"], list):
        parts = []
        for m in body["messages"]:
            if isinstance(m, dict):
                c = m.get("content")
                parts.append(f"{m.get('role', '')}:{c if isinstance(c, str) else json.dumps(c, sort_keys=True)}\n")
        return "".join(parts)
    p = body.get("prompt", "")
    if isinstance(p, list):
        return json.dumps(p)
    return p if isinstance(p, str) else ""


def block_hashes(text, block_chars):
    """Chained hashes of the text's whole blocks."""
    out, h = [], b""
    for i in range(0, len(text) - block_chars + 1, block_chars):
        h = hashlib.blake2b(h + text[i:i + block_chars].encode(), digest_size=8).digest()
        out.append(h)
    return out


class Policy:
    def __init__(self, n, name, block_chars=64, cache_blocks=200_000):
        self.n, self.name = n, name
        self.block_chars, self.cache_blocks = block_chars, cache_blocks
        self.next = 0
        self.in_flight = [0] * n
        self.sent = [0] * n
        self.caches = [collections.OrderedDict() for _ in range(n)]

    def choose(self, body):
        if self.name == "round_robin":
            w = self.next % self.n
            self.next += 1
            return w
        hashes = block_hashes(prompt_text(body), self.block_chars)
        most = max(max(self.in_flight), 1)
        best, best_key = 0, None
        for w in range(self.n):
            cache, match = self.caches[w], 0
            for h in hashes:
                if h not in cache:
                    break
                match += 1
            prefix = match / len(hashes) if hashes else 0.0
            score = 3.0 * prefix + 2.0 * (1.0 - self.in_flight[w] / most)
            key = (score, -self.in_flight[w], -len(cache), -w)
            if best_key is None or key > best_key:
                best, best_key = w, key
        cache = self.caches[best]
        for h in hashes:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > self.cache_blocks:
            cache.popitem(last=False)
        return best


def make_app(workers, policy):
    app = web.Application(client_max_size=64 << 20)
    state = {}

    async def start(app):
        state["session"] = ClientSession(timeout=ClientTimeout(total=None, sock_connect=30))

    async def close(app):
        await state["session"].close()

    app.on_startup.append(start)
    app.on_cleanup.append(close)

    async def forward(request, w, raw):
        policy.in_flight[w] += 1
        policy.sent[w] += 1
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept", "authorization")}
            async with state["session"].request(request.method, workers[w] + request.path_qs, data=raw,
                                                headers=headers) as r:
                resp = web.StreamResponse(status=r.status)
                for k in ("Content-Type", "Cache-Control"):
                    if k in r.headers:
                        resp.headers[k] = r.headers[k]
                await resp.prepare(request)
                async for chunk in r.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        finally:
            policy.in_flight[w] -= 1

    async def route(request):
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}  # the worker answers the malformed body with its own 400
        return await forward(request, policy.choose(body), raw)

    async def first(request):
        return await forward(request, 0, await request.read())

    async def stats(request):
        return web.json_response({"policy": policy.name, "workers": workers, "sent": policy.sent,
                                  "in_flight": policy.in_flight})

    async def health(request):
        return web.Response(text="ok")

    app.router.add_get("/router/stats", stats)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", route)
    app.router.add_post("/v1/chat/completions", route)
    app.router.add_route("*", "/{tail:.*}", first)
    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--workers", nargs="+", required=True)
    ap.add_argument("--policy", choices=["round_robin", "cache_aware"], default="cache_aware")
    ap.add_argument("--block-chars", type=int, default=64)
    ap.add_argument("--cache-blocks", type=int, default=200_000)
    a = ap.parse_args()
    workers = [w.rstrip("/") for w in a.workers]
    policy = Policy(len(workers), a.policy, a.block_chars, a.cache_blocks)
    web.run_app(make_app(workers, policy), host=a.host, port=a.port, print=None)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    main()
