"""torch.autocast("tpu"): the AutocastPrivateUse1 key.

PyTorch ships autocast policies for CUDA/CPU/XPU only; without kernels for
the tpu autocast key every op would fail inside an autocast region.  Ops
not listed fall through unchanged; matmul-like ops run in the autocast dtype
(bfloat16 by default on a TPU, as TorchTPU) and numerically sensitive ops in
float32, following CUDA's lists."""
import torch
from torch.utils._pytree import tree_map

from ._dispatch import fallthrough, impl, overload

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = [
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "matmul", "linear", "mv", "dot", "vdot",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution", "_convolution", "prelu", "chain_matmul", "linalg_multi_dot", "einsum",
    "scaled_dot_product_attention",
]
FP32 = [
    "softmax.int", "log_softmax.int", "layer_norm", "group_norm", "native_layer_norm", "native_group_norm",
    "cross_entropy_loss", "nll_loss", "nll_loss2d", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy_with_logits", "kl_div", "cosine_similarity", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "exp", "log", "log10", "log2", "log1p", "expm1", "reciprocal", "rsqrt", "sum.dim_IntList", "prod",
    "cumsum", "cumprod", "norm.Scalar", "norm.ScalarOpt_dim", "dist", "erfinv", "acos", "asin", "cosh", "sinh",
    "tan", "softplus", "logsumexp", "renorm", "frobenius_norm.dim", "nuclear_norm", "cdist", "pdist",
    "poisson_nll_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
    "multilabel_margin_loss", "hinge_embedding_loss", "multi_margin_loss",
]

def _kernel(op, policy):
    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "tpu":
            dt = torch.get_autocast_dtype("tpu") if policy == "lower" else torch.float32
            return x.to(dt) if x.dtype != dt else x
        return x

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*tree_map(cast, args), **tree_map(cast, kwargs))

    return kernel


def register():
    fallthrough(_KEY)
    for policy, names in (("lower", LOWER_PRECISION), ("fp32", FP32)):
        for name in names:
            try:
                op = overload(name)
            except AttributeError:
                continue
            try:
                impl(name, _kernel(op, policy), key=_KEY)
            except RuntimeError:
                pass  # already has an autocast kernel for this key
