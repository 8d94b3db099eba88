"""SGLang's step on tpu: its bookkeeping on the host, its forward padded to
buckets.

Every program is compiled per shape, and SGLang (no CUDA graphs, so no
padding) runs its step at the exact counts: each new extend length, decode
batch size, or pair of batch sizes met when requests join or leave (the
scheduler's ``seq_lens[keep]``, ``cat``, ``seq_lens + 1`` on the device)
made new programs during requests.  Here:

- **The scheduler's tensors live on the host.**  The request-to-token table
  (``ReqToTokenPool``: SGLang's ``ScheduleBatch`` takes its device from it)
  and the paged allocator (memory.py) are built on the CPU, so a batch's
  lengths, slots, request rows, sampled ids and the radix tree's indices
  are host tensors; ``ForwardBatch.init_new`` builds the step's tensors
  (positions, extend lengths) on the host too (`_init_new_on_host`).  The
  attention backend reads block tables from the host table: no device
  read per step.
- **The forward is padded** (`pad`, in place of the eager runner's
  ``load_batch``, which copies the live batch into its static buffers): the
  step's N tokens to the token bucket T (a power of two) -- input ids,
  positions and KV slots uploaded as ``[T]`` (padding tokens write slot 0,
  SGLang's padding slot, which no request reads; the attention metadata
  gives them no request) -- and, for an extend, the extend lengths the
  logits processor gathers its rows with to the request bucket R (zeros:
  padding rows repeat the last token).  The layers, the attention and the
  logits run programs of T and R only.
- **Sampling runs on the host** (`sample`): the logits rows come to the
  host (``[R, vocab]``, the step's one device read), the real rows are cut
  there, and SGLang's sampler runs on the CPU with the batch's host
  sampling tensors (penalties, grammars, logprobs included).

`warm_up` runs every bucket before the server answers (`WARMUP_*`).
"""
import dataclasses
import logging
import os
import time

import numpy as np
import torch

from .attention import bucket, compile_count

logger = logging.getLogger(__name__)

HOST = "cpu"
WARMUP_REQS = 16  # request buckets warmed (TORCH_TPU_SGLANG_WARMUP_REQS); larger ones compile when met


def _up(a, device, dtype=torch.int64):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dtype).to(device)


def _host(t):
    return t.numpy() if t.device.type == "cpu" else t.cpu().numpy()


# ---- the scheduler's side on the host ---------------------------------------

def req_pool_init(original, self, *args, **kwargs):
    """ReqToTokenPool.__init__ with the table on the host (the stock pool
    only: subclasses carry device state of their own)."""
    if type(self).__name__ == "ReqToTokenPool" and "device" in kwargs:
        kwargs["device"] = HOST
    return original(self, *args, **kwargs)


def future_map_init(original, self, device, spec_algo, req_to_token_pool, *args, **kwargs):
    """FutureMap.__init__ (last step's sampled ids, by request row: the next
    decode's input ids) on the request table's device."""
    return original(self, req_to_token_pool.device, spec_algo, req_to_token_pool, *args, **kwargs)


def init_new_on_host(original, cls, batch, model_runner, *args, **kwargs):
    """ForwardBatch.init_new building the step's tensors on the host (the
    model runner's device is the host's while it runs; `pad` uploads)."""
    if getattr(batch, "device", None) != HOST or str(model_runner.device).split(":")[0] != "tpu":
        return original(cls, batch, model_runner, *args, **kwargs)
    device, model_runner.device = model_runner.device, HOST
    try:
        return original(cls, batch, model_runner, *args, **kwargs)
    finally:
        model_runner.device = device


# ---- the forward, padded ------------------------------------------------------

def pad(forward_batch, device):
    """The device batch of a host ForwardBatch: input ids, positions and KV
    slots [T], extend lengths [R] (see the module docstring)."""
    mode = forward_batch.forward_mode
    if mode.is_idle() or forward_batch.input_ids is None or forward_batch.input_ids.device.type != "cpu":
        return forward_batch
    n = forward_batch.input_ids.shape[0]
    t = bucket(n)
    ids = np.zeros(t, np.int64)
    pos = np.zeros(t, np.int64)
    loc = np.zeros(t, np.int64)
    ids[:n] = _host(forward_batch.input_ids)
    pos[:n] = _host(forward_batch.positions)
    loc[:n] = _host(forward_batch.out_cache_loc)
    fields = dict(input_ids=_up(ids, device), positions=_up(pos, device), out_cache_loc=_up(loc, device))
    # every row runs attention (SGLang's real-rows-only path would slice at N)
    fields["global_num_token_non_padded_cpu"] = None
    if mode.is_extend() and forward_batch.extend_seq_lens is not None:
        lens = _host(forward_batch.extend_seq_lens)
        # input logprobs: SGLang's gather by host lists, at the exact counts
        r = len(lens) if forward_batch.return_logprob else bucket(len(lens))
        padded = np.zeros(r, np.int64)
        padded[:len(lens)] = lens
        fields["extend_seq_lens"] = _up(padded, device, forward_batch.extend_seq_lens.dtype)
    out = dataclasses.replace(forward_batch, **fields)
    out.tpu_real_tokens = n
    return out


def load_batch(original, self, forward_batch, pp_proxy_tensors=None, **kwargs):
    """EagerRunner.load_batch: the padded device batch (its static buffers
    would copy at the exact counts)."""
    if forward_batch.input_ids is not None and forward_batch.input_ids.device.type == "cpu":
        return pad(forward_batch, self.model_runner.device)
    return original(self, forward_batch, pp_proxy_tensors, **kwargs)


def sample(original, self, logits_output, forward_batch, *args, **kwargs):
    """ModelRunner.sample on the host: the logits rows come to the host, the
    real ones are kept, SGLang's sampler runs on the CPU."""
    logits = getattr(logits_output, "next_token_logits", None)
    if logits is not None and logits.device.type != "cpu" and forward_batch.seq_lens.device.type == "cpu":
        logits_output.next_token_logits = logits.cpu()[:forward_batch.batch_size]
        for name in ("next_token_logprobs", "hidden_states"):
            v = getattr(logits_output, name, None)
            if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                setattr(logits_output, name, v.cpu())
    return original(self, logits_output, forward_batch, *args, **kwargs)


# ---- warm-up -------------------------------------------------------------------

def _fake_batch(runner, mode, qlens, prefix):
    """A host ForwardBatch of len(qlens) made-up requests (request row 0,
    SGLang's padding row; every token writes slot 0) after `prefix` tokens
    each."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

    qlens = np.asarray(qlens, np.int64)
    seq = qlens + prefix
    n = int(qlens.sum())
    positions = np.concatenate([np.arange(prefix, s) for s in seq])
    host = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int64))  # noqa: E731
    kw = dict(forward_mode=mode, batch_size=len(qlens), input_ids=host(np.zeros(n)),
              req_pool_indices=host(np.zeros(len(qlens))), seq_lens=host(seq), out_cache_loc=host(np.zeros(n)),
              seq_lens_sum=int(seq.sum()), seq_lens_cpu=host(seq), positions=host(positions),
              orig_seq_lens=host(seq).to(torch.int32), return_logprob=False, global_forward_mode=mode,
              spec_algorithm=runner.spec_algorithm, capture_hidden_mode=CaptureHiddenMode.NULL, lora_ids=[None] * len(qlens))
    if mode.is_extend():
        kw.update(extend_seq_lens=host(qlens).to(torch.int32), extend_prefix_lens=host(np.full(len(qlens), prefix)).to(torch.int32),
                  extend_seq_lens_cpu=qlens.tolist(), extend_prefix_lens_cpu=[prefix] * len(qlens),
                  extend_num_tokens=n, extend_start_loc=host(np.concatenate([[0], np.cumsum(qlens)[:-1]])).to(torch.int32),
                  extend_logprob_start_lens_cpu=[int(q) for q in qlens])
    return ForwardBatch(**kw)


def _run(runner, fb):
    out = runner.forward(fb).logits_output
    out.next_token_logits.cpu()


def warm_up(runner, max_tokens):
    """Runs every step shape before the first request: one extend step per
    token bucket T (with the largest request bucket R it holds, up to
    WARMUP_REQS), one extend and one decode per R (at T = R), and, for the
    other (T, R) pairs, the logits processor's row gather alone (its one
    program of both).  Returns (steps, programs, seconds)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    t0, c0 = time.perf_counter(), compile_count()
    max_reqs = min(runner.req_to_token_pool.size, int(os.environ.get("TORCH_TPU_SGLANG_WARMUP_REQS", WARMUP_REQS)))
    ts = [1 << i for i in range(bucket(max_tokens).bit_length())]
    rs = [r for r in ts if r <= bucket(max_reqs)]
    steps = 0
    # The first step writes the caches for the first time: it runs twice.
    for t in [1] + ts:
        r = max(x for x in rs if x <= t)
        _run(runner, _fake_batch(runner, ForwardMode.EXTEND, [t // r] * r, 0))
        steps += 1
    for r in rs:
        _run(runner, _fake_batch(runner, ForwardMode.DECODE, [1] * r, 1))
        steps += 1
    hidden = runner.model_config.hidden_size
    dtype = runner.model_config.dtype
    for t in ts:
        for r in rs:
            if r >= t:
                continue
            # as the logits processor has them: hidden states a program's
            # output, the rows cumsum(lengths) - 1 of uploaded lengths
            states = torch.zeros((t, hidden), dtype=dtype, device=runner.device) * 1
            lens = torch.ones(r, dtype=torch.int32).to(runner.device)
            states[torch.cumsum(lens, dim=0) - 1].cpu()
    torch.tpu.synchronize()
    return steps, compile_count() - c0, time.perf_counter() - t0
