"""Decoding with Transformers on tpu runs on a few programs per bucket of
length (torch_tpu/integrations/generation.py): greedy tokens identical to
CPU, the logits of a hand-written DynamicCache loop equal CPU's, and the
programs compiled while generating tokens 2..N are bounded, in strict and
fused mode."""
import pytest
import torch

from hf_util import T, needs_hf, no_fallback, twin

pytestmark = needs_hf


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    return twin(LlamaForCausalLM, cfg, seed=4)


def _prompt(batch=2, length=7):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 96, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[1, :3] = 0  # left padding
        mask[1, :3] = 0
    return ids, mask


def _compiles():
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]


class _CountAfterFirstToken:
    """A logits processor that counts the programs made from the second
    generated token on (generate calls it once per token)."""

    def __init__(self):
        self.calls = 0
        self.at_second = None

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls == 2:
            torch.tpu.synchronize()
            self.at_second = _compiles()
        return scores


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generate_equals_cpu_and_compiles_per_bucket(llama, batch):
    from transformers import LogitsProcessorList

    cpu, dev = llama
    ids, mask = _prompt(batch)
    n = 48
    ref = cpu.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    counter = _CountAfterFirstToken()
    with no_fallback():
        out = dev.generate(ids.to(T), attention_mask=mask.to(T), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, logits_processor=LogitsProcessorList([counter]))
        torch.tpu.synchronize()
        grown = _compiles() - counter.at_second
    assert type(out) is torch.Tensor and out.device.type == "tpu"
    assert torch.equal(out.cpu(), ref)
    # tokens 2..48: the decoding step's programs for one bucket, compiled at token 2 at most
    # (those of the second token are counted: its programs are the first decoding step's)
    assert grown <= 6, torch.tpu.metrics_report()


def test_dynamic_cache_loop_logits_equal_cpu(llama):
    from transformers import DynamicCache

    cpu, dev = llama
    ids, _ = _prompt(1, 5)
    caches = {"cpu": DynamicCache(config=cpu.config), "tpu": DynamicCache(config=dev.config)}
    steps = {"cpu": ids, "tpu": ids.to(T)}
    for i in range(20):
        outs = {}
        for name, model in (("cpu", cpu), ("tpu", dev)):
            with torch.no_grad():
                o = model(steps[name], cache=caches[name], use_cache=True)
            outs[name] = o.logits[:, -1]
        torch.testing.assert_close(outs["tpu"].cpu(), outs["cpu"], atol=2e-5, rtol=1e-4)
        nxt = outs["cpu"].argmax(-1, keepdim=True)
        steps = {"cpu": nxt, "tpu": nxt.to(T)}
    assert caches["tpu"].get_seq_length() == caches["cpu"].get_seq_length() == 24
    assert type(caches["tpu"].layers[0]).__name__ == "TpuBucketedLayer"
    assert caches["tpu"].layers[0]._k.capacity == 64  # the bucket, inside
    for lt, lc in zip(caches["tpu"].layers, caches["cpu"].layers):  # what a user reads: CPU's shapes and values
        torch.testing.assert_close(lt.keys.cpu(), lc.keys, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(lt.values.cpu(), lc.values, atol=2e-5, rtol=1e-4)


def test_crop_and_beam_search_equal_cpu(llama):
    cpu, dev = llama
    ids, mask = _prompt(1, 6)
    kw = dict(max_new_tokens=6, num_beams=2, do_sample=False)
    ref = cpu.generate(ids, attention_mask=mask, **kw)
    out = dev.generate(ids.to(T), attention_mask=mask.to(T), **kw)
    assert torch.equal(out.cpu(), ref)


def test_compiled_forward_with_dynamic_shapes_decodes_without_recompiling(llama):
    import copy

    from transformers import DynamicCache

    cpu, dev = llama
    dev = copy.deepcopy(dev)
    fwd = torch.compile(dev.forward, backend="tpu", dynamic=True)
    ids, _ = _prompt(1, 5)
    cc, tc = DynamicCache(config=cpu.config), DynamicCache(config=dev.config)
    sc, st = ids, ids.to(T)
    for i in range(24):
        if i == 3:  # prefill and the first decoding steps made their programs
            torch.tpu.synchronize()
            before = _compiles()
        with torch.no_grad():
            lc = cpu(sc, cache=cc, use_cache=True).logits[:, -1]
            lt = fwd(st, cache=tc, use_cache=True).logits[:, -1]
        torch.testing.assert_close(lt.cpu(), lc, atol=2e-5, rtol=1e-4)
        nxt = lc.argmax(-1, keepdim=True)
        sc, st = nxt, nxt.to(T)
    torch.tpu.synchronize()
    assert _compiles() - before == 0, torch.tpu.metrics_report()
    assert type(tc.layers[0]).__name__ == "TpuBucketedLayer"


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2,
                     pad_token_id=0)
    cpu, dev = twin(GPT2LMHeadModel, cfg, seed=6)
    for m in (cpu, dev):
        m.config._attn_implementation = "eager"  # attention weights are returned by the eager path
    return cpu, dev


def _assert_same(path, ref, got, real=None):
    """Every tensor of a generate output (tuples of tuples, caches) has
    CPU's shape and values.  real: [batch, length] 1 where a position holds
    a token (not left padding); a cache's keys and values are compared
    there.  A padding position's keys are the attention of a fully masked
    row (every score the mask's minimum): CPU averages the true length's
    values, tpu the bucket's; the model never reads them."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(got, torch.Tensor), path
        assert tuple(got.shape) == tuple(ref.shape), f"{path}: tpu {tuple(got.shape)}, cpu {tuple(ref.shape)}"
        torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-3, msg=path)
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref), path
        for i, (r, g) in enumerate(zip(ref, got)):
            _assert_same(f"{path}[{i}]", r, g)
    elif hasattr(ref, "layers"):  # a Cache
        assert type(got).__name__ == type(ref).__name__ and len(got.layers) == len(ref.layers), path
        assert [type(x).__name__ for x in got.layers] == [type(x).__name__ for x in ref.layers], path
        assert got.is_compileable == ref.is_compileable, path
        assert got.get_seq_length() == ref.get_seq_length(), path
        for i, (r, g) in enumerate(zip(ref.layers, got.layers)):
            for name in ("keys", "values"):
                rt, gt = getattr(r, name), getattr(g, name)
                if real is not None:
                    assert tuple(gt.shape) == tuple(rt.shape), f"{path}.layers[{i}].{name}"
                    keep = real[:, None, :rt.shape[-2], None].to(rt.dtype)
                    rt, gt = rt * keep, gt.cpu() * keep
                _assert_same(f"{path}.layers[{i}].{name}", rt, gt)


@pytest.mark.parametrize("how", ["greedy", "greedy_attentions", "beam", "beam_attentions"])
def test_generate_dict_outputs_have_cpu_shapes_and_values(gpt2, how):
    """Bucketing is invisible (issue 42 item 0): attention weights, the
    returned cache, scores and logits are CPU's, shape and value."""
    cpu, dev = gpt2
    ids, mask = _prompt(2, 7)
    kw = dict(max_new_tokens=4, do_sample=False, return_dict_in_generate=True, output_scores=True,
              output_logits=True, output_attentions=how.endswith("attentions"),
              num_beams=2 if how.startswith("beam") else 1)
    with torch.no_grad():
        ref = cpu.generate(ids, attention_mask=mask, **kw)
        got = dev.generate(ids.to(T), attention_mask=mask.to(T), **kw)
    assert sorted(got.keys()) == sorted(ref.keys())
    for k in ref.keys():
        if hasattr(ref[k], "layers") and how.startswith("beam"):
            # the final beams' cache rows: a tie between equal beam scores is
            # broken by topk, whose order for equal values PyTorch leaves open
            # (CPU's partial sort and tpu's stable sort differ); shapes only
            assert [tuple(x.keys.shape) for x in got[k].layers] == [tuple(x.keys.shape) for x in ref[k].layers]
            continue
        _assert_same(k, ref[k], got[k], real=torch.cat([mask, torch.ones(2, 4, dtype=mask.dtype)], 1))


def test_custom_4d_mask_of_the_true_length(gpt2):
    """A caller's 4D mask of the true length works with a tpu DynamicCache
    (the cache leaves the bucket for it), logits and cache equal CPU."""
    from transformers import DynamicCache

    cpu, dev = gpt2
    ids, _ = _prompt(2, 6)
    m4 = torch.full((2, 1, 6, 6), torch.finfo(torch.float32).min).triu(1)
    m4[1, :, :, :2] = torch.finfo(torch.float32).min  # the second row ignores its first two tokens
    m4[1, :, :2, :2] = 0
    with torch.no_grad():
        ref = cpu(ids, attention_mask=m4, past_key_values=DynamicCache(config=cpu.config), use_cache=True)
        got = dev(ids.to(T), attention_mask=m4.to(T), past_key_values=DynamicCache(config=dev.config), use_cache=True)
    _assert_same("logits", ref.logits, got.logits)
    _assert_same("past_key_values", ref.past_key_values, got.past_key_values)


def test_generate_continues_from_a_returned_cache(gpt2):
    """The cache generate returned (plain layers, CPU's shapes) passed back
    to generate: bucketed again inside, the same tokens as CPU."""
    cpu, dev = gpt2
    ids, mask = _prompt(1, 5)
    kw = dict(max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    outs = {}
    for name, model, dv in (("cpu", cpu, "cpu"), ("tpu", dev, T)):
        with torch.no_grad():
            first = model.generate(ids.to(dv), attention_mask=mask.to(dv), **kw)
            seq = first.sequences
            outs[name] = model.generate(seq, attention_mask=torch.ones_like(seq), past_key_values=first.past_key_values,
                                        **kw)
    _assert_same("sequences", outs["cpu"].sequences, outs["tpu"].sequences)
    _assert_same("past_key_values", outs["cpu"].past_key_values, outs["tpu"].past_key_values)


def test_compiled_forward_fullgraph_generate_equals_eager(gpt2):
    """generate with a static cache and a compiled forward (CompileConfig
    fullgraph, dynamic=False) after generate with the default cache, as
    Transformers' test_generate_compile_model_forward_fullgraph: the default
    cache generate returns is not compileable, both runs give the same
    tokens and scores, and the second input compiles no new graph."""
    from transformers import CompileConfig

    _, dev = gpt2
    ids, mask = _prompt(2, 7)
    inputs = [dict(input_ids=ids[i:i + 1].to(T), attention_mask=mask[i:i + 1].to(T)) for i in range(2)]
    torch.compiler.reset()
    cc = CompileConfig(fullgraph=True, dynamic=False)
    cc._compile_all_devices = True
    kw = dict(use_cache=True, do_sample=False, max_new_tokens=5, return_dict_in_generate=True, output_scores=True,
              compile_config=cc)
    eager = []
    with torch.compiler.set_stance("force_eager"):
        for i in inputs:
            out = dev.generate(**i, **kw)
            assert type(out.past_key_values).__name__ == "DynamicCache" and not out.past_key_values.is_compileable
            eager.append(out)
    kw["cache_implementation"] = "static"
    compiled = []
    for n, i in enumerate(inputs):
        if n == 1:
            frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        out = dev.generate(**i, **kw)
        assert out.past_key_values.is_compileable and hasattr(dev, "_compiled_call")
        compiled.append(out)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # no recompile for the second input
    for e, c in zip(eager, compiled):
        assert torch.equal(e.sequences.cpu(), c.sequences.cpu())
        for se, sc in zip(e.scores, c.scores):
            torch.testing.assert_close(sc.cpu(), se.cpu(), atol=1e-5, rtol=1e-5)
