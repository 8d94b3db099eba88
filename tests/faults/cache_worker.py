"""One process of the cache contention test: compiles (or loads from the
shared TORCH_TPU_CACHE_DIR) the programs `shared` (the same in every
process) and `own K` (this process's own shapes), prints their values and
the cache's counters as one JSON line."""
import json
import sys

import torch

import torch_tpu  # noqa: F401


def programs(own):
    """name -> function of a device; the same names give the same programs."""
    progs = {}
    for n in (3, 5, 8):  # shared by every process
        progs[f"shared{n}"] = (lambda n: lambda dev: ((torch.arange(n * n, dtype=torch.float32, device=dev)
                                                       .reshape(n, n) / 7).sin() @ torch.ones(n, 2, device=dev))
                               .relu().cumsum(0))(n)
    for k in (own, own + 100):  # this process's own
        progs[f"own{k}"] = (lambda k: lambda dev: (torch.linspace(-1, 1, k + 4, device=dev).exp() * 3 - k)
                            .tanh().sum(0, keepdim=True))(k)
    return progs


def main():
    own = int(sys.argv[1])
    out = {}
    for name, fn in programs(own).items():
        out[name] = fn("tpu").cpu().tolist()
    s = torch.tpu.cache_stats()
    print("JSON " + json.dumps({"values": out, "stats": {k: s[k] for k in ("disk_hits", "disk_misses", "disk_writes",
                                                                          "disk_errors", "compiles")}}),
          flush=True)


if __name__ == "__main__":
    main()
