"""SGLang's tpu attention backend (torch_tpu/sglang/attention.py) in
process, no server: a mixed step (a decode, an extend after a cached
prefix, a fresh prefill) against plain causal attention on CPU, through the
tpu KV pool's paged layout with pages scattered over the pool; and a steady
decode that compiles nothing once its bucket has run."""
import importlib.util
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang is not installed here (its environment is .venv-sglang: make sglang-env)",
                allow_module_level=True)

import torch  # noqa: E402

if not (hasattr(torch, "tpu") and torch.tpu.is_available()):
    pytest.skip("tpu is not available (torch_tpu did not load)", allow_module_level=True)

from sglang.srt.layers.radix_attention import AttentionType  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from torch_tpu.sglang.attention import TpuAttnBackend, TpuMHATokenToKVPool  # noqa: E402

HQ, HKV, D, PAGE, CTX, SLOTS, MAX_REQS = 4, 2, 16, 4, 64, 256, 8


def make(dtype=torch.float32):
    pool = TpuMHATokenToKVPool(size=SLOTS, page_size=PAGE, dtype=dtype, head_num=HKV, head_dim=D, layer_num=1,
                               device="tpu", enable_memory_saver=False)
    req_to_token = torch.zeros(MAX_REQS + 1, CTX, dtype=torch.int32)
    runner = SimpleNamespace(device="tpu", token_to_kv_pool=pool,
                             req_to_token_pool=SimpleNamespace(size=MAX_REQS, req_to_token=req_to_token))
    layer = SimpleNamespace(layer_id=0, tp_q_head_num=HQ, tp_k_head_num=HKV, head_dim=D, qk_head_dim=D,
                            v_head_dim=D, scaling=D ** -0.5, is_cross_attention=False,
                            attn_type=AttentionType.DECODER, sliding_window_size=-1, logit_cap=0.0)
    return runner, layer


class Requests:
    """Requests whose slots lie on pages taken in a scattered order; keeps
    every token's key and value on the host for the reference."""

    def __init__(self, runner, seed=0):
        self.runner, self.g = runner, torch.Generator().manual_seed(seed)
        self.free = torch.randperm(SLOTS // PAGE - 1, generator=self.g).tolist()  # page 0: SGLang's padding page
        self.free = [p + 1 for p in self.free]
        self.table = {}  # req slot -> [slots]
        self.kv = {}     # req slot -> (k [n, HKV, D], v)
        self.r2t = runner.req_to_token_pool.req_to_token.clone()

    def grow(self, req, n):
        slots = self.table.setdefault(req, [])
        new = []
        for _ in range(n):
            if len(slots) % PAGE == 0:
                page = self.free.pop()
                slots_page = list(range(page * PAGE, page * PAGE + PAGE))
                self._page = {**getattr(self, "_page", {}), req: slots_page}
            s = self._page[req][len(slots) % PAGE]
            slots.append(s)
            new.append(s)
        self.r2t[req, :len(slots)] = torch.tensor(slots, dtype=torch.int32)
        return new

    def rand(self, *shape):
        return torch.randn(*shape, generator=self.g)

    def step(self, backend, layer, reqs, qlens, decode, dtype=torch.float32):
        """One forward of the backend: reqs get qlens new tokens each.
        Returns (tpu output [T, HQ * D], reference)."""
        locs, q, k, v = [], [], [], []
        for r, n in zip(reqs, qlens):
            locs += self.grow(r, n)
            q.append(self.rand(n, HQ, D))
            k.append(self.rand(n, HKV, D))
            v.append(self.rand(n, HKV, D))
            old = self.kv.get(r, (torch.zeros(0, HKV, D), torch.zeros(0, HKV, D)))
            self.kv[r] = (torch.cat([old[0], k[-1]]), torch.cat([old[1], v[-1]]))
        seq_lens = torch.tensor([len(self.table[r]) for r in reqs])
        self.runner.req_to_token_pool.req_to_token = self.r2t.to("tpu")
        fb = SimpleNamespace(
            forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND, seq_lens_cpu=seq_lens,
            extend_seq_lens_cpu=list(qlens), req_pool_indices=torch.tensor(reqs).to("tpu"),
            out_cache_loc=torch.tensor(locs).to("tpu"))
        backend.init_forward_metadata(fb)
        qc, kc, vc = torch.cat(q), torch.cat(k), torch.cat(v)
        dev = [x.to(dtype).to("tpu") for x in (qc, kc, vc)]
        fwd = backend.forward_decode if decode else backend.forward_extend
        out = fwd(dev[0].reshape(-1, HQ * D), dev[1], dev[2], layer, fb).cpu().float()
        return out, self.reference(reqs, qlens, q, dtype)

    def reference(self, reqs, qlens, q, dtype):
        outs = []
        for r, n, qr in zip(reqs, qlens, q):
            k, v = (x.to(dtype).float() for x in self.kv[r])
            ctx = k.shape[0] - n
            qr = qr.to(dtype).float()
            mask = torch.arange(k.shape[0])[None, :] <= (ctx + torch.arange(n))[:, None]
            o = torch.nn.functional.scaled_dot_product_attention(
                qr.transpose(0, 1), k.repeat_interleave(HQ // HKV, 1).transpose(0, 1),
                v.repeat_interleave(HQ // HKV, 1).transpose(0, 1), attn_mask=mask, scale=D ** -0.5)
            outs.append(o.transpose(0, 1).reshape(n, HQ * D))
        return torch.cat(outs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mixed_step_matches_plain_attention(dtype):
    """Prefill two requests, then one step holding a decode (request 1), an
    extend after a 9-token context (request 2: chunked prefill / a prefix
    hit look the same), and a fresh 5-token prefill (request 3)."""
    runner, layer = make(dtype)
    backend = TpuAttnBackend(runner)
    reqs = Requests(runner)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    out, ref = reqs.step(backend, layer, [1, 2], [13, 9], decode=False, dtype=dtype)
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    out, ref = reqs.step(backend, layer, [1, 2, 3], [1, 7, 5], decode=False, dtype=dtype)
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    out, ref = reqs.step(backend, layer, [1, 2, 3], [1, 1, 1], decode=True, dtype=dtype)
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    # SGLang's own views of the pool see the same keys
    k = runner.token_to_kv_pool.get_key_buffer(0)
    slots = torch.tensor(reqs.table[2])
    torch.testing.assert_close(k.cpu()[slots].float(), reqs.kv[2][0].to(dtype).float())


def compiles():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


def test_steady_decode_compiles_nothing_after_warm_up():
    """Three requests decoding across page boundaries: once the first
    decode steps have run, the lengths growing compile no program."""
    runner, layer = make()
    backend = TpuAttnBackend(runner)
    reqs = Requests(runner, seed=1)
    reqs.step(backend, layer, [1, 2, 3], [6, 3, 10], decode=False)
    for _ in range(2):
        reqs.step(backend, layer, [1, 2, 3], [1, 1, 1], decode=True)
    before = compiles()
    for _ in range(9):
        out, ref = reqs.step(backend, layer, [1, 2, 3], [1, 1, 1], decode=True)
    assert compiles() == before, torch.tpu.metrics_report()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
