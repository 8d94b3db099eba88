"""tools/serve_router.py: the two policies, and the proxy (bodies, status
codes, streamed chunks) in front of two small aiohttp workers that say who
answered.  Runs in .venv-serve (aiohttp comes with vLLM)."""
import asyncio
import json
import os
import sys

import pytest

pytest.importorskip("aiohttp", reason="aiohttp is installed in .venv-serve (make serve-env)")
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
import serve_router as router  # noqa: E402

SYSTEMS = [f"Tenant {i}: you are the assistant of shop number {i}. " * 8 for i in range(4)]


def test_round_robin_alternates():
    p = router.Policy(3, "round_robin")
    assert [p.choose({"prompt": "x"}) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_cache_aware_keeps_a_tenant_on_one_worker_and_spreads_tenants():
    p = router.Policy(2, "cache_aware", block_chars=16)
    first = {}
    for turn in range(5):
        for t, system in enumerate(SYSTEMS):
            w = p.choose({"prompt": system + f"User: question {turn}?"})
            first.setdefault(t, w)
            assert w == first[t], (t, turn)
    assert sorted(first.values()) == [0, 0, 1, 1]  # idle workers: new tenants go where the queue is shorter
    # chat messages hash their roles and contents
    a = p.choose({"messages": [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "hi"}]})
    b = p.choose({"messages": [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "yo"}]})
    assert a == b


def test_cache_aware_prefers_an_idle_worker_over_a_weak_match():
    p = router.Policy(2, "cache_aware", block_chars=16)
    w = p.choose({"prompt": SYSTEMS[1][:32] + "x" * 400})
    p.in_flight[w] = 5
    # 32 shared characters of a 432-character prompt: the busy worker's small match loses
    assert p.choose({"prompt": SYSTEMS[1][:32] + "y" * 400}) != w
    # a full match wins even against a busier worker
    assert p.choose({"prompt": SYSTEMS[1][:32] + "x" * 400}) == w


def test_block_hashes_are_chained():
    a = router.block_hashes("a" * 16 + "b" * 16 + "c" * 16, 16)
    b = router.block_hashes("z" * 16 + "b" * 16 + "c" * 16, 16)
    assert len(a) == 3 and a[1] != b[1] and a[2] != b[2]
    assert router.block_hashes("a" * 15, 16) == []


def _worker(name):
    async def completions(request):
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "malformed"}}, status=400)
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(f"data: {json.dumps({'worker': name, 'i': i})}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            return resp
        return web.json_response({"worker": name, "prompt": body.get("prompt")})

    async def models(request):
        return web.json_response({"data": [{"id": name}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    return app


def test_proxy_routes_streams_and_passes_errors():
    async def run():
        workers = [TestServer(_worker(f"w{i}")) for i in range(2)]
        for w in workers:
            await w.start_server()
        urls = [str(w.make_url("")).rstrip("/") for w in workers]
        client = TestClient(TestServer(router.make_app(urls, router.Policy(2, "round_robin"))))
        await client.start_server()
        try:
            got = []
            for i in range(4):
                r = await client.post("/v1/completions", json={"prompt": f"p{i}"})
                assert r.status == 200
                got.append(await r.json())
            assert [g["worker"] for g in got] == ["w0", "w1", "w0", "w1"]
            assert [g["prompt"] for g in got] == ["p0", "p1", "p2", "p3"]
            r = await client.post("/v1/completions", json={"prompt": "s", "stream": True})
            text = (await r.text()).split("\n\n")
            assert r.headers["Content-Type"].startswith("text/event-stream")
            assert [json.loads(t[6:])["i"] for t in text if t.startswith("data: {")] == [0, 1, 2]
            assert "data: [DONE]" in text
            r = await client.post("/v1/completions", data=b'{"prompt": ')
            assert r.status == 400 and (await r.json())["error"]["message"] == "malformed"
            r = await client.get("/v1/models")
            assert (await r.json())["data"][0]["id"] == "w0"
            r = await client.get("/router/stats")
            assert (await r.json())["sent"] == [4, 3]
        finally:
            await client.close()
            for w in workers:
                await w.close()

    asyncio.run(run())
