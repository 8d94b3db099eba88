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


def _batch(events, seq):
    """One ZMQ message as vLLM's publisher sends it: (topic, sequence, msgpack batch)."""
    import msgspec
    from vllm.distributed.kv_events import KVEventBatch
    return [b"kv-events", seq.to_bytes(8, "big"), msgspec.msgpack.Encoder().encode(KVEventBatch(ts=0.0, events=events))]


def _stored(hashes, parent, tokens, size=4):
    from vllm.distributed.kv_events import BlockStored
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=size,
                       lora_id=None, medium="GPU", lora_name=None, extra_keys=[None] * len(hashes), group_idx=0)


def test_kv_event_index_scores_the_blocks_each_worker_holds():
    pytest.importorskip("vllm.distributed.kv_events")
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved
    a = list(range(100, 116))  # tenant a: 4 blocks of 4 tokens
    b = list(range(200, 216))
    p = router.Policy(2, "kv_events")
    w0, w1 = p.indexes
    # worker 0 caches a's first 2 blocks, then (another step, chained by the parent) the next 2;
    # its hashes are ints, worker 1's bytes: each worker's hashes are its own
    w0.receive(_batch([_stored([11, 12], None, a[:8])], 0))
    w0.receive(_batch([_stored([13, 14], 12, a[8:])], 1))
    w1.receive(_batch([_stored([b"x1", b"x2", b"x3"], None, b[:12])], 0))
    assert w0.stats()["blocks_held"] == 4 and w0.block_size == 4
    assert [s[0] for s in p.scores({"prompt": a + [1, 2]})] == [1.0, 0.0]  # the partial block does not count
    assert [s[0] for s in p.scores({"prompt": b})] == [0.0, 0.75]
    assert p.choose({"prompt": a}) == 0 and p.choose({"prompt": b}) == 1
    assert [s[0] for s in p.scores({"prompt": a[:4] + b[4:]})] == [0.25, 0.0]  # only a run from the first block
    # 3 x prefix + 2 x (1 - in flight / most): a full match beats an idle worker, half a match does not
    p.in_flight = [4, 0]
    assert p.choose({"prompt": a}) == 0 and p.choose({"prompt": a[:8] + b[8:]}) == 1
    p.in_flight = [0, 0]
    # a removed block cuts the run; its hash's children stay but are not a prefix
    w0.receive(_batch([BlockRemoved(block_hashes=[12], medium="GPU", group_idx=0)], 2))
    assert p.scores({"prompt": a})[0][0] == 0.25
    # a stored run whose parent the router never saw cannot be keyed
    w1.receive(_batch([_stored([b"y2"], b"unknown", b[12:])], 1))
    assert w1.stats()["unlinked"] == 1 and p.scores({"prompt": b})[1][0] == 0.75
    # a lost message is counted; AllBlocksCleared empties the worker
    w1.receive(_batch([AllBlocksCleared()], 5))
    assert w1.stats()["missed_batches"] == 3 and w1.stats()["blocks_held"] == 0
    assert w1.stats()["events"] == {"BlockStored": 2, "AllBlocksCleared": 1}
    # ties: fewer in flight, then fewer blocks held (new prefixes go to the emptier worker), then the lower index
    assert p.choose({"prompt": list(range(300, 316))}) == 1
    # a restarted publisher (its sequence starts again) has an empty cache
    w0.receive(_batch([], 0))
    assert w0.stats()["blocks_held"] == 0 and p.choose({"prompt": a}) == 0


def test_kv_event_keys_are_chained_and_salted():
    a = router.token_block_keys(list(range(12)), 4)
    b = router.token_block_keys([99] + list(range(1, 12)), 4)
    assert len(a) == 3 and a[1] != b[1] and a[2] != b[2]
    assert router.token_block_keys(list(range(3)), 4) == []
    assert router.block_key(b"", [1, 2]) != router.block_key(b"", [1, 2], ("lora", None))
    p = router.Policy(1, "kv_events")
    salted = _stored([1], None, list(range(4)))
    salted.extra_keys = [("salt",)]
    p.indexes[0].receive(_batch([salted], 0))
    assert p.scores({"prompt": list(range(4))})[0][0] == 0.0  # a salted block is no plain prefix
    # an array-encoded event ([type, fields in order]) is read too
    p.indexes[0].apply(["BlockStored", [2], None, list(range(4)), 4, None, "GPU", None])
    assert p.scores({"prompt": list(range(4))})[0][0] == 1.0


def test_kv_events_from_a_tpu_server_reach_the_router():
    """One tpu server publishing vLLM's KV events (--kv-events-config); the
    router's subscriber keys the blocks by their token ids, which are the
    leading blocks of the prompts as the router tokenizes them (completions
    and chat), so a request sharing the prefix matches that worker."""
    pytest.importorskip("zmq")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from server import DEFAULT_MODEL, Server, free_port
    if not os.path.exists(os.path.join(DEFAULT_MODEL, "config.json")):
        pytest.skip("the default model directory is written by `make serve-env`")
    port = free_port()
    config = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{port}",
                         "topic": "kv-events"})
    server = Server("tpu", name="smollm2", extra=[
        "--max-model-len", "512", "--max-num-seqs", "4", "--max-num-batched-tokens", "128", "--dtype", "float32",
        "--enforce-eager", "--enable-prefix-caching", "--kv-cache-memory-bytes", str(64 << 20),
        "--kv-events-config", config])
    tokenize = router.Tokenizer(DEFAULT_MODEL)
    policy = router.Policy(1, "kv_events", tokenize=tokenize)
    index = policy.indexes[0]
    prompt = SYSTEMS[2] + "User: when do you open?\nAssistant:"
    chat = {"model": "smollm2", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEMS[3]}, {"role": "user", "content": "Hello!"}]}

    async def held_after(client, path, body, tokens):
        r = await client.post(path, json=body)
        assert r.status == 200, await r.text()
        for _ in range(100):  # the events follow the step that computed the blocks
            keys = router.token_block_keys(tokens, index.block_size) if index.block_size else []
            if keys and index.match(keys) == len(keys):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"blocks not received: {index.stats()}")

    async def run():
        client = TestClient(TestServer(router.make_app([server.url], policy, [f"tcp://127.0.0.1:{port}"],
                                                       "kv-events")))
        await client.start_server()
        try:
            assert policy.scores({"prompt": prompt})[0][0] == 0.0
            await held_after(client, "/v1/completions",
                             {"model": "smollm2", "prompt": prompt, "max_tokens": 2, "temperature": 0},
                             tokenize({"prompt": prompt}))
            assert index.events["BlockStored"] >= 1 and index.unlinked == 0
            # the same system prompt, another question: that worker holds its leading blocks
            prefix = policy.scores({"prompt": SYSTEMS[2] + "User: is there parking?\nAssistant:"})[0][0]
            assert 0.5 < prefix < 1.0, prefix
            # chat: the blocks of the chat template as vLLM applies it
            await held_after(client, "/v1/chat/completions", chat, tokenize(chat))
            other = dict(chat, messages=chat["messages"][:1] + [{"role": "user", "content": "Bye!"}])
            assert policy.scores(other)[0][0] > 0.5
            stats = await (await client.get("/router/stats")).json()
            kv = stats["kv_events"][0]
            assert kv["events"]["BlockStored"] >= 2 and kv["blocks_held"] == len(index.held) > 0
        finally:
            await client.close()

    try:
        server.wait_ready()
        asyncio.run(run())
    finally:
        server.stop()
