"""What the serving integrations (torch_tpu/vllm, torch_tpu/sglang) share,
importing neither: step buckets, program cuts, the compile counter."""
import torch


def bucket(n, lo=1, hi=None):
    """n rounded up to a power of two, at least lo (and at most hi)."""
    b = max(int(lo), 1 << max(int(n) - 1, 0).bit_length())
    return b if hi is None else min(b, int(hi))


def buckets(lo, hi):
    """(b, first n with bucket(n, lo, hi) == b) for every bucket."""
    out, b, first = [], int(lo), 1
    while b < hi:
        out.append((b, first))
        first, b = b + 1, b * 2
    return out + [(int(hi), first)]


def cut():
    """Runs what is pending (fused mode), so a step's programs end where
    their shapes change (the layers, the attention, the logits, the sampler
    each a program of its own)."""
    if torch.tpu.get_eager_mode() == "fused":
        from torch_tpu import _C

        _C.flush(_C.CUT_OTHER)


def compile_count():
    """Programs compiled or loaded from the disk tier so far."""
    m = torch.tpu.metrics()
    return m["compile"]["count"] + m["disk_load"]["count"]
