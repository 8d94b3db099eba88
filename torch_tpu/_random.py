"""The device generator: a THREE_FRY state (ui64[2]) kept on the device per
device index; sampling rules take it and return the advanced state, so
random ops never wait for the host.  torch.manual_seed seeds it."""
import torch

from . import _C

_DEFAULT_SEED = 67280421310721  # PyTorch's default_rng_seed_val
_states = {}
_initial = {}


def _fresh_state(seed):
    from ._dispatch import run
    return run("rng_seed_state", [int(seed) & 0x7FFFFFFFFFFFFFFF])[0]


def state(device=0):
    s = _states.get(device)
    if s is None:
        seed = _initial.setdefault(device, _DEFAULT_SEED)
        s = _states[device] = _fresh_state(seed)
    return s


def advance(new_state, device=0):
    _states[device] = new_state


def manual_seed(seed, device=0):
    seed = int(seed)
    _initial[device] = seed
    _states[device] = _fresh_state(seed)


def manual_seed_all(seed):
    for d in range(max(_C.device_count(), 1)):
        manual_seed(seed, d)


def seed(device=0):
    import random as _r
    s = _r.getrandbits(63)
    manual_seed(s, device)
    return s


def initial_seed(device=0):
    return _initial.setdefault(device, _DEFAULT_SEED)


def get_rng_state(device=0):
    s = state(device).cpu()  # uint64[2]
    return torch.frombuffer(bytearray(s.numpy().tobytes()), dtype=torch.uint8).clone()


def set_rng_state(new_state, device=0):
    if new_state.dtype != torch.uint8 or new_state.numel() != 16:
        raise RuntimeError("tpu: RNG state must be a uint8 tensor of 16 bytes (from get_rng_state)")
    words = torch.frombuffer(bytearray(new_state.cpu().numpy().tobytes()), dtype=torch.uint64).clone()
    _states[device] = words.to(torch.device("tpu", device))
