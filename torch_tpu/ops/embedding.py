"""Embedding kernels (csrc/ops/embedding.c): the lookup and its dense
backward, and composed from device ops on that lookup: embedding_bag (its
forward, backward and per-sample-weights backward) and embedding_renorm_
(Embedding's max_norm).  An index out of range is a device-side check in
the rule (IndexError "index out of range in self" for embedding,
RuntimeError for embedding_bag as on CPU, raised at the next host wait)."""
import torch

from .._dispatch import Unsupported, register, run


@register("aten::embedding", out="aten::embedding.out")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    return run("embedding", [weight, indices])[0]


@register("aten::embedding_dense_backward", out="aten::embedding_dense_backward.out")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return run("embedding_dense_backward", [grad_output, indices],
               [int(num_weights), int(padding_idx), int(bool(scale_grad_by_freq))])[0]


# ---- embedding_bag, composed from device ops ------------------------------------------------
# Bag of each index: searchsorted over the bag starts (an empty bag starts
# where the next one does).  Outputs as CPU's: (result, offset2bag,
# bag_size, max_indices); bag_size counts the non-padding indices for mean
# and max (zeros for sum), max_indices is the weight row of each maximum
# (max), the bag sizes (mean) or zeros (sum); an empty bag's result is 0.


def _offset2bag(indices, offsets):
    pos = torch.arange(indices.numel(), device=indices.device, dtype=offsets.dtype)
    return torch.searchsorted(offsets, pos, right=True) - 1


def _kept(indices, padding_idx):
    return None if padding_idx < 0 else indices != padding_idx


@register(["aten::_embedding_bag", "aten::_embedding_bag_forward_only"])
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=-1):
    if weight.dim() != 2 or indices.dim() != 1 or offsets.dim() != 1 or mode not in (0, 1, 2) or \
            not weight.is_floating_point() or (per_sample_weights is not None and mode != 0):
        raise Unsupported("_embedding_bag: arguments")  # CPU raises its messages
    starts = offsets[:-1] if include_last_offset else offsets
    nbags, dim = starts.numel(), weight.shape[1]
    bag = _offset2bag(indices, starts)
    kept = _kept(indices, padding_idx)
    rows = run("embedding", [weight, indices], [1])[0]  # a bad index: CPU's RuntimeError
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    counts = torch.zeros(nbags, dtype=bag.dtype, device=bag.device).index_add(
        0, bag, torch.ones_like(bag) if kept is None else kept.to(bag.dtype))
    if mode == 2:
        if kept is not None:
            rows = rows.masked_fill(~kept.unsqueeze(1), float("-inf"))
        idx = bag.unsqueeze(1).expand(-1, dim)
        best = torch.full((nbags, dim), float("-inf"), dtype=weight.dtype, device=weight.device)
        best = best.scatter_reduce(0, idx, rows, "amax")
        n = indices.numel()
        pos = torch.arange(n, device=bag.device).unsqueeze(1).expand(-1, dim)
        first = torch.full((nbags, dim), n, dtype=pos.dtype, device=bag.device).scatter_reduce(
            0, idx, pos.masked_fill(rows != best.gather(0, idx), n), "amin")
        empty = (counts == 0).unsqueeze(1)
        max_indices = torch.cat([indices, indices.new_zeros(1)])[first].masked_fill(empty, 0)
        return best.masked_fill(empty, 0), bag, counts, max_indices
    if kept is not None:
        rows = rows * kept.unsqueeze(1).to(rows.dtype)
    out = torch.zeros(nbags, dim, dtype=weight.dtype, device=weight.device).index_add(0, bag, rows)
    if mode == 1:
        out = out / counts.clamp(min=1).unsqueeze(1).to(out.dtype)
        return out, bag, counts, counts.clone()
    return out, bag, torch.zeros_like(counts), torch.zeros_like(counts)


@register("aten::_embedding_bag_backward")
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    if grad.dim() != 2 or (sparse and mode == 2):
        raise Unsupported("_embedding_bag_backward: sparse max")  # CPU's error
    dim = grad.shape[1]
    out = torch.zeros(num_weights, dim, dtype=grad.dtype, device=grad.device)
    if mode == 2:
        live = (bag_size != 0).unsqueeze(1).to(grad.dtype)
        cols = torch.arange(dim, device=grad.device).expand_as(maximum_indices)
        return out.index_put((maximum_indices.reshape(-1), cols.reshape(-1)), (grad * live).reshape(-1),
                             accumulate=True)
    bag = _offset2bag(indices, offsets)  # CPU's sum leaves offset2bag empty
    rows = grad.index_select(0, bag)
    if mode == 1:
        rows = rows / bag_size.clamp(min=1).index_select(0, bag).unsqueeze(1).to(rows.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    kept = _kept(indices, padding_idx)
    if kept is not None:
        rows = rows * kept.unsqueeze(1).to(rows.dtype)
    if scale_grad_by_freq:
        freq = torch.zeros(num_weights, dtype=rows.dtype, device=rows.device).index_add(
            0, indices, torch.ones_like(indices, dtype=rows.dtype))
        rows = rows / freq.index_select(0, indices).unsqueeze(1)
    if sparse:  # one entry per looked-up index (the padding index's dropped), uncoalesced as on CPU
        if padding_idx is not None and padding_idx >= 0:
            keep = (indices != padding_idx).nonzero().squeeze(1)
            indices, rows = indices.index_select(0, keep), rows.index_select(0, keep)
        return torch.sparse_coo_tensor(indices.unsqueeze(0), rows, (num_weights, dim), check_invariants=False)
    return out.index_add(0, indices, rows)


@register("aten::_embedding_bag_per_sample_weights_backward")
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    if mode != 0:
        raise Unsupported("_embedding_bag_per_sample_weights_backward: mode")
    bag = _offset2bag(indices, offsets)
    out = (grad.index_select(0, bag) * weight.index_select(0, indices)).sum(1)
    kept = _kept(indices, padding_idx)
    return out if kept is None else out * kept.to(out.dtype)


@register("aten::embedding_renorm_")
def embedding_renorm_(self, indices, max_norm, norm_type):
    """Embedding(max_norm=...): the rows looked up whose norm exceeds
    max_norm are scaled to it in place (CPU's max_norm / (norm + 1e-7));
    a repeated index writes the same row twice."""
    if self.dim() != 2 or not self.is_floating_point() or indices.dtype not in (torch.int32, torch.int64):
        raise Unsupported("embedding_renorm_: arguments")
    idx = indices.reshape(-1).to(torch.int64)
    wide = torch.float32 if self.dtype in (torch.float16, torch.bfloat16) else self.dtype
    rows = run("embedding", [self, idx])[0].to(wide)
    norm = torch.linalg.vector_norm(rows, ord=norm_type, dim=1, keepdim=True)
    scale = torch.where(norm > max_norm, max_norm / (norm + 1e-7), torch.ones_like(norm))
    self.index_copy_(0, idx, (rows * scale).to(self.dtype))
    return self
