"""Random sampling kernels on the device generator (see _random.py)."""
import torch

from .. import _random
from .._dispatch import register, run, write
from .._dtypes import dtype_code


def _shape_attrs(t_or_shape, dtype):
    shape = list(t_or_shape.shape) if isinstance(t_or_shape, torch.Tensor) else [int(s) for s in t_or_shape]
    return [dtype_code(dtype), len(shape), *shape]


def _dev(t):
    return t.device.index or 0 if isinstance(t, torch.Tensor) else 0


def _sample(rule, like, dtype, extra_inputs, device=0):
    st = _random.state(device)
    *vals, new_state = run(rule, [st, *extra_inputs], _shape_attrs(like, dtype))
    _random.advance(new_state, device)
    return vals[0]


def _gen_check(generator):
    if generator is not None and generator.device.type != "tpu":
        raise RuntimeError(f"Expected a 'tpu' device type for generator but found '{generator.device.type}'")


@register("uniform_")
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _gen_check(generator)
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"check_uniform_bounds\" not implemented for '{self.dtype}'")
    return write(self, _sample("rng_uniform", self, self.dtype, [float(from_), float(to)], _dev(self)))


@register("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _gen_check(generator)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return write(self, _sample("rng_normal", self, self.dtype, [float(mean), float(std)], _dev(self)))


@register("random_.from")
def random_from(self, from_, to=None, *, generator=None):
    _gen_check(generator)
    if to is None:
        to = 2 ** 53 if self.dtype.is_floating_point else torch.iinfo(self.dtype).max + 1
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    return write(self, _sample("rng_randint", self, self.dtype, [int(from_), int(to)], _dev(self)))


@register("random_.to")
def random_to(self, to, *, generator=None):
    return random_from(self, 0, to, generator=generator)


@register("random_")
def random_(self, *, generator=None):
    hi = 2 ** 24 if self.dtype == torch.float32 else (2 ** 53 if self.dtype.is_floating_point else
                                                        (2 if self.dtype == torch.bool else torch.iinfo(self.dtype).max + 1))
    return random_from(self, 0, hi, generator=generator)


@register("bernoulli_.float")
def bernoulli_float(self, p=0.5, *, generator=None):
    _gen_check(generator)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return write(self, _sample("rng_bernoulli", self, self.dtype, [float(p)], _dev(self)))


@register("bernoulli_.Tensor")
def bernoulli_tensor(self, p, *, generator=None):
    _gen_check(generator)
    return write(self, _sample("rng_bernoulli", self, self.dtype, [p.expand(self.shape)], _dev(self)))


@register("bernoulli")
def bernoulli(self, *, generator=None):
    _gen_check(generator)
    return _sample("rng_bernoulli", self, self.dtype, [self], _dev(self))


@register("bernoulli.p")
def bernoulli_p(self, p, *, generator=None):
    _gen_check(generator)
    return _sample("rng_bernoulli", self, self.dtype, [float(p)], _dev(self))


@register("native_dropout")
def native_dropout(input, p, train):
    if train is False or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    dev = _dev(input)
    st = _random.state(dev)
    out, mask, new_state = run("dropout", [st, input, float(p)])
    _random.advance(new_state, dev)
    return out, mask


@register("native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    return run("dropout_backward", [grad_output, mask, float(scale)])[0]
