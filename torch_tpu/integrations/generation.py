"""Transformers' decoding loops on tpu with bounded shapes.

A decoding step with Transformers' DynamicCache meets a new length every
token: the keys and values grow by one position, and so do the token ids,
the attention mask and the position ids that `generate` keeps.  On tpu each
new length is a new program.  On tpu, therefore:

- a DynamicCache's layers (`DynamicLayer`) keep their keys and values in a
  buffer of a bucketed length (torch_tpu/_growing.py: a power of two, at
  least 64; `generate` sizes the first one for its max_length, up to
  KV_HINT_CAP positions); `update` returns the whole buffer to the
  attention.  The mask is made for the bucket (`get_mask_sizes` answers the
  bucket's length): positions not written yet lie after the query's, so the
  causal mask hides them, as a StaticCache's are hidden.  A step writes its
  keys at a position that is a runtime value of the program;
- the bucket stays inside: a layer's `keys` / `values` are the valid
  positions (views of the buffer, CPU's shapes), and the cache `generate`
  returns or filled holds plain DynamicLayers again (CPU's types, not
  compileable).  A forward that needs the true length leaves the bucket
  first (`disarm`): attention weights collected for the caller
  (`output_attentions`), a caller's 4D mask made for the true length;
- `generate`'s sampling loop (GenerationMixin._sample: greedy and sampling)
  keeps its token ids, attention mask and position ids as GrowingTensors
  (bucketed buffers that look like the valid part); what the loop does with
  them (append a column, read the last one, pad the mask to the cache's
  length) runs on the bucket.  `generate` returns ordinary tensors.

Every step of a bucket is then the same few programs, compiled once (fused
mode: one per layer of the stack and the ends around it).  Results equal the
unpadded computation: the padded positions take part in no sum (masked to
-inf before the softmax).

The patches act on tpu tensors only and follow the CPU path everywhere
else; TORCH_TPU_HF_BUCKETS=0 turns them off.  Beam search and assisted
decoding keep Transformers' own loops (their caches are still bucketed).
"""
import functools
import inspect
import os
import threading

KV_HINT_CAP = 1024  # the first KV bucket covers max_length up to this many positions

_local = threading.local()


def enabled():
    return os.environ.get("TORCH_TPU_HF_BUCKETS", "1") != "0"


def _on_tpu(t):
    import torch
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _make_layer_class(cache_utils):
    from .._growing import GrowingBuffer, bucket

    base = cache_utils.DynamicLayer

    class TpuBucketedLayer(base):
        """A DynamicLayer whose keys and values live in a bucketed buffer (see
        the module's docstring).  `update` returns the whole buffer (the
        attention runs on the bucket, the mask hides the rest); `keys` /
        `values`, what everyone else reads, are the valid positions, views
        of the buffer, shaped as a DynamicLayer's on CPU."""

        is_compileable = True  # static shapes per bucket: masks are made for the bucket

        # `keys` / `values`: the valid part once initialized; before that what
        # DynamicLayer's __init__ stored (None)
        @property
        def keys(self):
            k = self.__dict__.get("_k")
            return k.valid() if k is not None else self.__dict__.get("_keys")

        @keys.setter
        def keys(self, t):
            self.__dict__["_keys"] = t

        @property
        def values(self):
            v = self.__dict__.get("_v")
            return v.valid() if v is not None else self.__dict__.get("_values")

        @values.setter
        def values(self, t):
            self.__dict__["_values"] = t

        def _capacity_for(self, n):
            hint = getattr(_local, "kv_hint", 0)
            if self.is_initialized:
                return max(self._k.capacity, bucket(n))
            return bucket(n, hint)

        def lazy_initialization(self, key_states, value_states):
            self.device = key_states.device
            hint = getattr(_local, "kv_hint", 0)
            self._k = GrowingBuffer.empty_like(key_states, -2, hint)
            self._v = GrowingBuffer.empty_like(value_states, -2, hint)
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self._k.append(key_states)
            self._v.append(value_states)
            return self._k.data, self._v.data

        def get_mask_sizes(self, query_length, *args):
            length = self.get_seq_length() + query_length
            return self._capacity_for(length), 0

        def get_seq_length(self):
            return self._k.length if self.is_initialized else 0

        def get_max_length(self):
            return -1

        def reset(self):
            if self.is_initialized:
                self._k.data.zero_()
                self._v.data.zero_()
                self._k.length = self._v.length = 0
            if hasattr(self, "cumulative_length"):
                self.cumulative_length = 0

        def crop(self, tokens_to_remove):
            if tokens_to_remove > 0:
                raise ValueError(f"Calling `crop` with a positive value (`{tokens_to_remove}`) is not supported. "
                                 "Please use a negative integer to remove that number of tokens from the cache instead.")
            if tokens_to_remove == 0 or not self.is_initialized:
                return
            n = max(self._k.length - abs(tokens_to_remove), 0)
            self._k.length = self._v.length = n  # later positions are hidden by the mask, then overwritten

        def _map(self, fn):
            if self.is_initialized:
                self._k.data = fn(self._k.data)
                self._v.data = fn(self._v.data)

        def batch_repeat_interleave(self, repeats):
            self._map(lambda t: t.repeat_interleave(repeats, dim=0))

        def batch_select_indices(self, indices):
            self._map(lambda t: t[indices, ...])

        def reorder_cache(self, beam_idx):
            self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

        def offload(self):
            self._map(lambda t: t.to("cpu", non_blocking=True))

        def prefetch(self):
            if self.is_initialized and self._k.data.device != self.device:
                self._map(lambda t: t.to(self.device, non_blocking=True))

    TpuBucketedLayer.__name__ = TpuBucketedLayer.__qualname__ = "TpuBucketedLayer"
    return TpuBucketedLayer


_layer_class = None


def arm(cache):
    """Makes the plain DynamicLayers of `cache` bucketed (the cache is about
    to be used on tpu); a layer that holds positions already (a cache
    `generate` returned and the user passes back) copies them into its
    bucket."""
    if _layer_class is None or not enabled():
        return
    import transformers.cache_utils as cu
    from .._growing import GrowingBuffer
    layers = getattr(cache, "layers", None)
    if layers is None:
        return
    if getattr(cache, "layer_class_to_replicate", None) is cu.DynamicLayer:
        cache.layer_class_to_replicate = _layer_class
        if not layers:  # layers come with the first update: make layer 0 now, so its mask size is the bucket's
            layers.append(_layer_class())
    for layer in layers:
        if type(layer) is not cu.DynamicLayer:
            continue
        if not layer.is_initialized:
            layer.__class__ = _layer_class
        elif _on_tpu(layer.keys) and layer.keys.dim() == 4 and layer.keys.shape[-2] > 0:
            keys, values = layer.keys, layer.values
            layer.__class__ = _layer_class
            layer.keys = layer.values = None
            layer._k = GrowingBuffer.empty_like(keys, -2)
            layer._v = GrowingBuffer.empty_like(values, -2)
            layer._k.append(keys)
            layer._v.append(values)


def disarm(cache):
    """Makes the bucketed layers of `cache` plain DynamicLayers again, each
    holding its valid positions (a view of the bucket): what CPU's cache
    holds, for code that needs the true length (attention weights a user
    asked for, a 4D mask of the true length) and for the cache `generate`
    hands back."""
    if _layer_class is None:
        return
    import transformers.cache_utils as cu
    for c in (cache, getattr(cache, "self_attention_cache", None)):
        layers = getattr(c, "layers", None)
        if layers is None:
            continue
        if getattr(c, "layer_class_to_replicate", None) is _layer_class:
            c.layer_class_to_replicate = cu.DynamicLayer
        for layer in layers:
            if type(layer) is not _layer_class:
                continue
            keys, values = layer.keys, layer.values
            for name in ("_k", "_v", "_keys", "_values"):
                layer.__dict__.pop(name, None)
            layer.__class__ = cu.DynamicLayer
            layer.keys, layer.values = keys, values


def _collecting_attentions():
    """Attention weights are being collected for the caller (Transformers'
    output capturing, `output_attentions=True`): they must have the true
    length."""
    try:
        from transformers.utils.output_capturing import _active_collector
        collected = _active_collector.get()
    except Exception:  # an older Transformers: no output capturing
        return False
    return bool(collected) and any("attentions" in k for k in collected)


def _holds_plain_positions(cache):
    """A layer of `cache` is a plain DynamicLayer holding positions (left
    the bucket before, or filled elsewhere)."""
    import transformers.cache_utils as cu
    return any(type(layer) is cu.DynamicLayer and layer.is_initialized for layer in getattr(cache, "layers", ()))


def _mask_off_bucket(cache, attention_mask, q_length):
    """A 4D mask made for another length than the bucket's (a caller's
    custom mask for the true length; generate makes its 4D masks for the
    bucket)."""
    if getattr(attention_mask, "dim", lambda: 0)() != 4:
        return False
    layers = getattr(cache, "layers", None)
    if not layers or type(layers[0]) is not _layer_class:
        return True
    first = layers[0]
    return attention_mask.shape[-1] != first._capacity_for(first.get_seq_length() + q_length)


def _patch_cache_utils(cu):
    global _layer_class
    _layer_class = _make_layer_class(cu)


def _patch_masking_utils(mu):
    original = mu._preprocess_mask_arguments

    @functools.wraps(original)
    def _preprocess_mask_arguments(config, inputs_embeds, attention_mask, cache, *args, **kwargs):
        if cache is not None and _on_tpu(inputs_embeds):
            four_d = getattr(attention_mask, "dim", lambda: 0)() == 4
            if _collecting_attentions() or (four_d and _holds_plain_positions(cache)):
                disarm(cache)  # the true length (no copy into a bucket and back every step)
            else:
                arm(cache)
                if _mask_off_bucket(cache, attention_mask, inputs_embeds.shape[1]):
                    disarm(cache)
        return original(config, inputs_embeds, attention_mask, cache, *args, **kwargs)

    mu._preprocess_mask_arguments = _preprocess_mask_arguments


_GROWING_KWARGS = ("attention_mask", "position_ids", "token_type_ids", "decoder_attention_mask",
                   "decoder_position_ids")


def _patch_generation_utils(gu):
    cls = gu.GenerationMixin
    original = cls._sample
    sig = inspect.signature(original)

    @functools.wraps(original)
    def _sample(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        input_ids = bound.arguments.get("input_ids")
        config = bound.arguments["generation_config"]
        if (not enabled() or not _on_tpu(input_ids) or input_ids.dim() != 2
                or getattr(config, "output_attentions", False)):
            return original(self, *args, **kwargs)
        from .._growing import GrowingTensor, unwrap
        max_length = int(getattr(config, "max_length", 0) or 0)
        model_kwargs = bound.arguments.get("model_kwargs", {})
        cache = model_kwargs.get("cache")
        if cache is not None:
            arm(cache)
        bound.arguments["input_ids"] = GrowingTensor.wrap(input_ids, -1, max_length)
        for k in _GROWING_KWARGS:
            t = model_kwargs.get(k)
            if _on_tpu(t) and t.dim() == 2 and t.shape[-1] == input_ids.shape[-1]:
                model_kwargs[k] = GrowingTensor.wrap(t, -1, max_length)
        _local.kv_hint = min(max_length, KV_HINT_CAP)
        try:
            out = original(*bound.args, **bound.kwargs)
        finally:
            _local.kv_hint = 0
        if isinstance(out, GrowingTensor):
            return unwrap(out)
        if hasattr(out, "sequences"):
            out.sequences = unwrap(out.sequences)
        return out

    cls._sample = _sample

    original_generate = cls.generate

    @functools.wraps(original_generate)
    def generate(self, *args, **kwargs):
        """The cache `generate` returns (or filled, when the caller passed
        one) holds CPU's shapes: its layers are plain DynamicLayers again."""
        out = original_generate(self, *args, **kwargs)
        for cache in (kwargs.get("past_key_values"), kwargs.get("cache"), getattr(out, "past_key_values", None),
                      getattr(out, "cache", None)):
            if cache is not None:
                disarm(cache)
        return out

    cls.generate = generate


def register_all(register):
    register("transformers.cache_utils", _patch_cache_utils)
    register("transformers.masking_utils", _patch_masking_utils)
    register("transformers.generation.utils", _patch_generation_utils)
