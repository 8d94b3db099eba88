"""The fast paths of nn.MultiheadAttention, nn.TransformerEncoderLayer and
nn.TransformerEncoder (taken in eval mode without grad, PrivateUse1 being
one of their supported devices), composed on the device:

- _native_multi_head_attention: one packed in-projection, scaled scores,
  a boolean mask filled with -inf (mask_type 0: (L, S), 1: key padding
  (B, S), 2: merged (B, H, L, S)), softmax, the out-projection; a row
  with every key masked is NaN, as on CPU; weights averaged over heads
  on request, None when not needed;
- _transformer_encoder_layer_fwd: attention, residual, layer norms and the
  ReLU/GELU feed-forward in the order of norm_first;
- nested tensors: TransformerEncoder packs a padded batch with
  _nested_tensor_from_mask, runs each layer on it and unpacks it with
  to_padded_tensor.  A nested tpu tensor is PyTorch's NestedTensorImpl over
  a packed tpu buffer (its metadata on the host, as on CPU); the layer runs
  on the padded form with the key padding mask, so the valid rows are those
  of the packed computation and padding comes back as the fill value.
"""
import math

import torch
import torch.nn.functional as F

from .._dispatch import Unsupported, impl, register

aten = torch.ops.aten
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_NESTED_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.NestedTensorCPU)
_NESTED = "NestedTensorPrivateUse1"


# ---- multi-head attention -----------------------------------------------------------------


@register("aten::_native_multi_head_attention")
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
    if query.dim() != 3 or query.shape != key.shape or key.shape != value.shape or embed_dim % num_head:
        raise Unsupported("_native_multi_head_attention: shapes")  # CPU raises its messages
    b, n, e = query.shape
    if key is query and value is query:
        q, k, v = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        (wq, wk, wv), (bq, bk, bv) = qkv_weight.chunk(3), qkv_bias.chunk(3)
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
    d = e // num_head
    q, k, v = (t.reshape(b, n, num_head, d).transpose(1, 2) for t in (q, k, v))
    scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(-2, -1)
    if mask is not None:
        if mask_type == 1:
            mask = mask.reshape(b, 1, 1, n)
        scores = scores.masked_fill(mask.bool(), float("-inf"))
    probs = scores.softmax(-1)
    out = (probs @ v).transpose(1, 2).reshape(b, n, e)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (probs.mean(1) if average_attn_weights else probs)


# ---- encoder layer ------------------------------------------------------------------------


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
                   norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
                   ffn_bias_2, mask=None, mask_type=None):
    shape = (embed_dim,)
    x = F.layer_norm(src, shape, norm_weight_1, norm_bias_1, eps) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                    mask, False, True, mask_type)[0] + src
    if not norm_first:
        x = F.layer_norm(x, shape, norm_weight_1, norm_bias_1, eps)
    h = F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps) if norm_first else x
    h = F.linear(h, ffn_weight_1, ffn_bias_1)
    h = F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)
    x = h + x
    return x if norm_first else F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps)


@register("aten::_transformer_encoder_layer_fwd")
def transformer_encoder_layer_fwd(src, *args):
    if src.dim() != 3:
        raise Unsupported("_transformer_encoder_layer_fwd: not (B, L, E)")
    if src.numel() == 0:
        return src.clone()
    return _encoder_layer(src, *args)


# ---- nested tensors over a packed tpu buffer --------------------------------------------------


def _meta(nt):
    return tuple(getattr(aten, op).default.redispatch(_NESTED_CPU, nt)
                 for op in ("_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets"))


def _nest(buffer, sizes, strides, offsets):
    # PyTorch's kernel only wraps the buffer with the host metadata; its
    # registration is CPU's, the wrapping is the same for a tpu buffer.
    return aten._nested_view_from_buffer.default.redispatch(_CPU, buffer, sizes, strides, offsets)


def _left(lengths, n):
    """The host mask of a left-aligned batch of these lengths."""
    return torch.arange(n) < lengths.reshape(-1, 1)


def _packed_rows(lengths, n):
    """Flat (batch * n) positions of the valid rows of a left-aligned batch."""
    return _left(lengths, n).reshape(-1).nonzero().squeeze(1)


def _row_lengths(nt):
    sizes, strides, offsets = _meta(nt)
    if sizes.dim() != 2 or sizes.shape[1] != 2:
        raise NotImplementedError("tpu: nested tensors of (length, features) rows only")
    feat = sizes[:, 1]
    if (feat != feat[0]).any() or (strides[:, 1] != 1).any() or (strides[:, 0] != feat).any():
        raise NotImplementedError("tpu: nested tensors of contiguous rows of one width only")
    packed = torch.cat([torch.zeros(1, dtype=torch.int64), (sizes[:, 0] * feat).cumsum(0)[:-1]])
    if not torch.equal(offsets, packed):
        raise NotImplementedError("tpu: nested tensors of packed rows only")
    return sizes[:, 0], int(feat[0]), (sizes, strides, offsets)


def _padded(nt, fill, n=None):
    lengths, e, _ = _row_lengths(nt)
    b = lengths.numel()
    n = int(lengths.max()) if n is None else n
    values = aten.values.default.redispatch(_NESTED_CPU, nt)
    rows = _packed_rows(lengths, n).to(values.device)
    out = torch.full((b * n, e), fill, dtype=values.dtype, device=values.device)
    out = out.index_copy(0, rows, values.reshape(-1, e))
    return out.reshape(b, n, e), lengths, rows


@register("aten::_nested_tensor_from_mask")
def nested_tensor_from_mask(t, mask, mask_check=True):
    if t.dim() != 3 or mask.dim() != 2 or mask.dtype != torch.bool or mask.shape != t.shape[:2]:
        raise Unsupported("_nested_tensor_from_mask: shapes")
    keep = mask.cpu()  # the one host read: the nested sizes live on the host
    lengths = keep.sum(1)
    if mask_check and not torch.equal(_left(lengths, keep.shape[1]), keep):
        raise RuntimeError("Mask must be left-aligned without gaps")
    b, n, e = t.shape
    rows = _packed_rows(lengths, n).to(t.device)
    values = t.reshape(b * n, e).index_select(0, rows).reshape(-1)
    sizes = torch.stack([lengths, torch.full_like(lengths, e)], 1)
    strides = torch.stack([torch.full_like(lengths, e), torch.ones_like(lengths)], 1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), (lengths * e).cumsum(0)[:-1]])
    return _nest(values, sizes, strides, offsets)


@register("aten::_nested_tensor_from_mask_left_aligned")
def nested_from_mask_left_aligned(t, mask):
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise Unsupported("_nested_tensor_from_mask_left_aligned: mask")
    lengths = mask.sum(1, keepdim=True)
    left = torch.arange(mask.shape[1], device=mask.device) < lengths
    return bool(torch.equal(left, mask))


def _nested_to_padded(self, padding, output_size=None):
    n = None
    if output_size is not None:
        if len(output_size) != 3:
            raise NotImplementedError("tpu: to_padded_tensor of (batch, length, features) only")
        n = output_size[1]
    return _padded(self, padding, n)[0]


def _nested_encoder_layer(src, *args):
    # the dispatcher drops trailing arguments left at their default
    if len(args) > 17 and args[17] is not None:  # TransformerEncoder passes no mask with nested input
        raise NotImplementedError("tpu: _transformer_encoder_layer_fwd of a nested tensor with a mask")
    padded, lengths, rows = _padded(src, 0.0)
    b, n, e = padded.shape
    pad = (~_left(lengths, n)).to(padded.device)
    out = _encoder_layer(padded, *args[:17], pad, 1)
    values = out.reshape(b * n, e).index_select(0, rows).reshape(-1)
    return _nest(values, *_meta(src))


def _nested_meta_op(name):
    op = getattr(aten, name).default
    return lambda nt: op.redispatch(_NESTED_CPU, nt)


impl("to_padded_tensor", _nested_to_padded, key=_NESTED)
impl("_transformer_encoder_layer_fwd", _nested_encoder_layer, key=_NESTED)
for _name in ("_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets"):
    impl(_name, _nested_meta_op(_name), key=_NESTED)
