"""Embedding kernels (csrc/ops/embedding.c): the lookup and its dense
backward.  An index out of range is a device-side check in the rule
(IndexError "index out of range in self", raised at the next host wait)."""
from .._dispatch import register, run


@register("aten::embedding", out="aten::embedding.out")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    return run("embedding", [weight, indices])[0]


@register("aten::embedding_dense_backward", out="aten::embedding_dense_backward.out")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return run("embedding_dense_backward", [grad_output, indices],
               [int(num_weights), int(padding_idx), int(bool(scale_grad_by_freq))])[0]

