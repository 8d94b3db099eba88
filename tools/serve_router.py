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
- ``kv_events``: llm-d's precise prefix-cache scorer, on the blocks each
  worker's prefix cache holds according to the KV-cache events it
  publishes.  Each worker is started with vLLM's ``--kv-events-config
  '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
  "tcp://*:5557", "topic": "kv-events"}'`` (its own port); the router
  subscribes to them::

      ... --policy kv_events --tokenizer build/models/SmolLM2-135M-Instruct
          --kv-events tcp://127.0.0.1:5557 tcp://127.0.0.1:5558 --kv-events-topic kv-events

  ``KVEventIndex`` keeps, per worker, the blocks it holds, keyed by our own
  hash chained over the token ids that ``BlockStored`` carries (so vLLM's
  block-hash function and seed do not matter).  The request is tokenized as
  vLLM's server does (``Tokenizer``; without ``--tokenizer`` only prompts
  given as token ids are scored) and cut into whole blocks of the worker's
  block size; a worker scores 3 x (the longest run of the request's leading
  blocks it holds / the request's blocks) + 2 x (1 - its requests in flight
  / the most in flight on any worker), with cache_aware's tie rules (fewer
  blocks held: the blocks the events report).  Routing does not record
  anything: a worker holds a prefix once its events say so (a step after
  the prefill), so a burst of requests on a new prefix is spread by load.

Requests are proxied as they are (bodies, status codes, streamed answers
chunk by chunk); ``GET /v1/models`` answers from the first worker;
``GET /router/stats`` counts the requests each worker got and, with
``--kv-events``, each worker's events by type, batches (missed: sequence
gaps), unlinked stores and blocks held.
"""
import argparse
import array
import asyncio
import collections
import hashlib
import json

import msgspec
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


def block_key(parent, token_ids, extra=None):
    """Our key of one KV block: a hash chained over the blocks before it
    (parent: the previous block's key, b"" for the first) and its token ids.
    extra (a LoRA name, vLLM's per-block extra keys: cache salt,
    multimodal inputs) makes a block that plain tokens never match."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(array.array("q", token_ids).tobytes())
    if extra is not None:
        h.update(repr(extra).encode())
    return h.digest()


def token_block_keys(tokens, block_size):
    """The chained keys of the token list's whole blocks."""
    out, key = [], b""
    for i in range(0, len(tokens) - block_size + 1, block_size):
        key = block_key(key, tokens[i:i + block_size])
        out.append(key)
    return out


class KVEventIndex:
    """The blocks one worker's prefix cache holds, from the KV-cache events
    it publishes (vLLM's vllm/distributed/kv_events.py).

    Wire format: ZMQ multipart messages (topic, sequence number as 8 bytes
    big-endian, payload); the payload is a msgpack-encoded event batch, an
    array [timestamp, events, data-parallel rank].  Each event is a msgpack
    map tagged by its "type": BlockStored (block_hashes, parent_block_hash,
    token_ids of all the blocks in order, block_size, lora_name, medium,
    extra_keys, group_idx, ...), BlockRemoved (block_hashes, medium,
    group_idx) or AllBlocksCleared (vLLM 0.32).  An event encoded as an
    array, [type, fields in declaration order] (msgspec's array_like
    tagged structs), is read too.

    vLLM's block hashes depend on its hash function and seed (per process),
    so the index keys each block by its own chained hash of the token ids
    (``block_key``) and remembers, per worker, which key each of vLLM's
    hashes stands for: a BlockStored's parent_block_hash names the key its
    first block chains from (remembered after the block's removal too, for
    the newest LINKS hashes).  A BlockStored whose parent it never saw (the
    router started after the worker) cannot be keyed and is counted as
    unlinked.  As in llm-d's index, a hash is held or not: storing it again
    does not count twice, one BlockRemoved removes it."""

    EVENT_TYPES = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
    STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                     "lora_name", "extra_keys", "group_idx")
    REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")
    LINKS = 1 << 20

    def __init__(self):
        self.keys = {}  # (medium, group, vLLM block hash) -> our key, of the blocks held
        self.held = collections.Counter()  # our key -> vLLM blocks holding it
        self.links = collections.OrderedDict()  # every hash seen -> our key (parents), the newest LINKS
        self.block_size = None
        self.events = collections.Counter()
        self.batches = self.missed = self.unlinked = 0
        self.last_seq = None
        self._decoder = msgspec.msgpack.Decoder()

    def receive(self, frames):
        """One ZMQ message: (topic, sequence, payload) frames."""
        if len(frames) < 3:
            return
        seq = int.from_bytes(frames[-2], "big", signed=True)
        if self.last_seq is not None:
            if seq <= self.last_seq:  # the publisher restarted: its cache starts empty
                self.clear()
            elif seq > self.last_seq + 1:
                self.missed += seq - self.last_seq - 1
        self.last_seq = seq
        self.apply_batch(frames[-1])

    def apply_batch(self, payload):
        batch = self._decoder.decode(payload)
        self.batches += 1
        for event in batch[1]:
            self.apply(event)

    def clear(self):
        self.keys.clear()
        self.held.clear()
        self.links.clear()

    def apply(self, event):
        if isinstance(event, (list, tuple)):  # array-encoded: [type, fields...]
            kind = event[0]
            names = self.STORED_FIELDS if kind == "BlockStored" else self.REMOVED_FIELDS
            event = dict(zip(("type",) + names, event))
        kind = event.get("type")
        self.events[kind if kind in self.EVENT_TYPES else "other"] += 1
        medium, group = event.get("medium"), event.get("group_idx") or 0
        if kind == "BlockStored":
            hashes, tokens = event.get("block_hashes") or [], event.get("token_ids") or []
            if not hashes or len(tokens) % len(hashes):
                self.unlinked += 1
                return
            size = len(tokens) // len(hashes)
            parent = event.get("parent_block_hash")
            key = b"" if parent is None else self.links.get((medium, group, parent))
            if key is None:
                self.unlinked += 1
                return
            extras = event.get("extra_keys") or [None] * len(hashes)
            lora = event.get("lora_name")
            self.block_size = size
            for i, h in enumerate(hashes):
                extra = extras[i] if i < len(extras) else None
                key = block_key(key, tokens[i * size:(i + 1) * size],
                                None if extra is None and lora is None else (lora, extra))
                self.links[(medium, group, h)] = key
                self.links.move_to_end((medium, group, h))
                old = self.keys.get((medium, group, h))
                if old == key:
                    continue  # stored again: still one block (llm-d's index: a set per hash)
                if old is not None:
                    self._drop(old)
                self.keys[(medium, group, h)] = key
                self.held[key] += 1
            while len(self.links) > self.LINKS:
                self.links.popitem(last=False)
        elif kind == "BlockRemoved":
            for h in event.get("block_hashes") or []:
                key = self.keys.pop((medium, group, h), None)
                if key is not None:
                    self._drop(key)
        elif kind == "AllBlocksCleared":
            self.clear()

    def _drop(self, key):
        self.held[key] -= 1
        if self.held[key] <= 0:
            del self.held[key]

    def match(self, keys):
        """How many of the leading keys the worker holds, in a row."""
        n = 0
        for k in keys:
            if k not in self.held:
                break
            n += 1
        return n

    def stats(self):
        return dict(events=dict(self.events), batches=self.batches, missed_batches=self.missed,
                    unlinked=self.unlinked, blocks_held=len(self.held), block_size=self.block_size)


def message_text(content):
    """A message's content as vLLM renders it for a string-content chat
    template: the text parts joined with newlines."""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


class Tokenizer:
    """The request's prompt token ids as vLLM's OpenAI server makes them:
    completions tokenize the prompt with special tokens (add_special_tokens,
    default true); chat applies the model's chat template with vLLM's
    defaults (add_generation_prompt true, continue_final_message false,
    chat_template_kwargs and tools passed on) and tokenizes the text
    without adding special tokens (add_special_tokens, default false)."""

    def __init__(self, path):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(path)

    def __call__(self, body):
        if not isinstance(body, dict):
            return []
        try:
            if isinstance(body.get("messages"), list):
                msgs = [dict(m, content=message_text(m.get("content")))
                        for m in body["messages"] if isinstance(m, dict)]
                kwargs = dict(body.get("chat_template_kwargs") or {})
                if body.get("tools"):
                    kwargs["tools"] = body["tools"]
                text = self.tok.apply_chat_template(
                    msgs, tokenize=False, add_generation_prompt=body.get("add_generation_prompt", True),
                    continue_final_message=body.get("continue_final_message", False), **kwargs)
                return self.tok.encode(text, add_special_tokens=body.get("add_special_tokens", False))
            p = body.get("prompt", "")
            if isinstance(p, list) and p and isinstance(p[0], (str, list)):
                p = p[0]  # a batch: route by its first prompt
            if isinstance(p, list):
                return p
            if not isinstance(p, str):
                return []
            return self.tok.encode(p, add_special_tokens=body.get("add_special_tokens", True))
        except Exception:  # the worker answers a request it cannot render with its own error
            return []


def prompt_tokens(body):
    """Without a tokenizer: only prompts given as token ids."""
    p = body.get("prompt") if isinstance(body, dict) else None
    if isinstance(p, list) and p and isinstance(p[0], list):
        p = p[0]
    return p if isinstance(p, list) and all(isinstance(t, int) for t in p) else []


class Policy:
    def __init__(self, n, name, block_chars=64, cache_blocks=200_000, tokenize=None):
        self.n, self.name = n, name
        self.block_chars, self.cache_blocks = block_chars, cache_blocks
        self.next = 0
        self.in_flight = [0] * n
        self.sent = [0] * n
        self.caches = [collections.OrderedDict() for _ in range(n)]
        self.indexes = [KVEventIndex() for _ in range(n)]
        self.tokenize = tokenize or prompt_tokens

    def scores(self, body):
        """kv_events: (prefix fraction, score) per worker."""
        tokens = self.tokenize(body)
        most = max(max(self.in_flight), 1)
        keys_by_size, out = {}, []
        for w, index in enumerate(self.indexes):
            size = index.block_size
            if size and size not in keys_by_size:
                keys_by_size[size] = token_block_keys(tokens, size)
            keys = keys_by_size.get(size, [])
            prefix = index.match(keys) / len(keys) if keys else 0.0
            out.append((prefix, 3.0 * prefix + 2.0 * (1.0 - self.in_flight[w] / most)))
        return out

    def choose(self, body):
        if self.name == "round_robin":
            w = self.next % self.n
            self.next += 1
            return w
        if self.name == "kv_events":
            best, best_key = 0, None
            for w, (_, score) in enumerate(self.scores(body)):
                key = (score, -self.in_flight[w], -len(self.indexes[w].held), -w)
                if best_key is None or key > best_key:
                    best, best_key = w, key
            return best
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


async def subscribe(endpoint, topic, index):
    """Feeds one worker's KV events to its index until cancelled."""
    import zmq
    import zmq.asyncio
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sock.connect(endpoint)
    try:
        while True:
            frames = await sock.recv_multipart()
            try:
                index.receive(frames)
            except Exception:  # a malformed batch: counted, the stream goes on
                index.events["undecodable"] += 1
    finally:
        sock.close(linger=0)


def make_app(workers, policy, kv_events=(), kv_topic=""):
    """kv_events: each worker's KV-event endpoint (in worker order), to
    subscribe to; their events feed policy.indexes."""
    app = web.Application(client_max_size=64 << 20)
    state = {}

    async def start(app):
        state["session"] = ClientSession(timeout=ClientTimeout(total=None, sock_connect=30))
        state["subscribers"] = [asyncio.ensure_future(subscribe(e, kv_topic, index))
                                for e, index in zip(kv_events, policy.indexes)]

    async def close(app):
        for t in state["subscribers"]:
            t.cancel()
        await asyncio.gather(*state["subscribers"], return_exceptions=True)
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
        out = {"policy": policy.name, "workers": workers, "sent": policy.sent, "in_flight": policy.in_flight}
        if kv_events:
            out["kv_events"] = [dict(index.stats(), endpoint=e)
                                for e, index in zip(kv_events, policy.indexes)]
        return web.json_response(out)

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
    ap.add_argument("--policy", choices=["round_robin", "cache_aware", "kv_events"], default="cache_aware")
    ap.add_argument("--block-chars", type=int, default=64)
    ap.add_argument("--cache-blocks", type=int, default=200_000)
    ap.add_argument("--kv-events", nargs="+", default=[], metavar="ENDPOINT",
                    help="each worker's KV-event endpoint (its --kv-events-config endpoint, e.g. "
                         "tcp://127.0.0.1:5557), in worker order")
    ap.add_argument("--kv-events-topic", default="", help="the topic to subscribe to (default: all)")
    ap.add_argument("--tokenizer", help="the model's tokenizer directory (kv_events)")
    a = ap.parse_args()
    workers = [w.rstrip("/") for w in a.workers]
    if a.policy == "kv_events" and len(a.kv_events) != len(workers):
        ap.error("kv_events needs one --kv-events endpoint per worker")
    tokenize = Tokenizer(a.tokenizer) if a.tokenizer else None
    policy = Policy(len(workers), a.policy, a.block_chars, a.cache_blocks, tokenize=tokenize)
    web.run_app(make_app(workers, policy, a.kv_events, a.kv_events_topic), host=a.host, port=a.port, print=None)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    main()
