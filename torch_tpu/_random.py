"""torch.tpu's RNG functions over the device generators (csrc/torch/
generator.cpp): one default torch.Generator per device, seeded by
torch.manual_seed like CUDA's, usable before the device has started."""
import random as _pyrandom

import torch

from . import _C


def _index(device):
    if device is None:
        return _C.get_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "tpu":
        raise RuntimeError(f"Expected a 'tpu' device, got '{d}'")
    return _C.get_device() if d.index is None else d.index


def default_generator(device=None):
    return _C.default_generator(_index(device))


def manual_seed(seed, device=None):
    default_generator(device).manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(max(_C.device_count(), 1)):
        _C.default_generator(i).manual_seed(int(seed))


def seed(device=None):
    return default_generator(device).seed()


def seed_all():
    s = _pyrandom.getrandbits(63)
    manual_seed_all(s)
    return s


def initial_seed(device=None):
    return default_generator(device).initial_seed()


def get_rng_state(device="tpu"):
    return default_generator(device).get_state()


def set_rng_state(new_state, device="tpu"):
    default_generator(device).set_state(new_state)
