"""Random sampling kernels.  Every sampling rule takes a generator's state
as input 0 and returns the advanced state last; _C.op_random hands them the
generator passed by the user (or the device's default one) and keeps the
new state with it (csrc/torch/generator.cpp)."""
import math

import torch

from .. import _C
from .._dispatch import NotTpuError, Unsupported, _fix_inputs, register, run, write, write_out
from .._dtypes import dtype_code
from .elementwise import _broadcast_check


def _shape_attrs(t_or_shape, dtype):
    shape = list(t_or_shape.shape) if isinstance(t_or_shape, torch.Tensor) else [int(s) for s in t_or_shape]
    return [dtype_code(dtype), len(shape), *shape]


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _write(self, value):
    """write(self, value), for a self of rank > 8 through its flat view."""
    if self.dim() > _MAX_RANK and self.is_contiguous():
        write(self.view(-1), value.reshape(-1))
        return self
    return write(self, value)


def _dev(t):
    return t.device.index or 0 if isinstance(t, torch.Tensor) else 0


def _gen_check(generator, on=None):
    """A generator passed to a tpu kernel must be a tpu one; and a tpu
    generator reaches these kernels for a tensor `on` another device too (the
    dispatcher counts the generator's device), which raises as CPU does."""
    if generator is not None and generator.device.type != "tpu":
        raise RuntimeError(f"Expected a 'tpu' device type for generator but found '{generator.device.type}'")
    dev = on.device if isinstance(on, torch.Tensor) else (torch.device(on) if on is not None else None)
    if dev is not None and dev.type != "tpu":
        raise RuntimeError(f"Expected a '{dev.type}' device type for generator but found 'tpu'")


_MAX_RANK = 8  # TPU_MAX_RANK (csrc/base/dtype.h)


def _sample(rule, like, dtype, extra_inputs, device=0, generator=None):
    _gen_check(generator)
    shape = list(like.shape) if isinstance(like, torch.Tensor) else [int(s) for s in like]
    if len(shape) > _MAX_RANK:
        # the engine's arrays stop at rank 8; a draw's element i depends only on
        # (seed, offset + i) row-major, so the flat draw viewed is the same draw
        flat = [x.reshape(-1) if isinstance(x, torch.Tensor) and x.dim() > 0 else x for x in extra_inputs]
        return _sample(rule, [_numel(shape)], dtype, flat, device, generator).view(shape)
    try:
        return _C.op_random(rule, generator, device, extra_inputs, _shape_attrs(like, dtype))[0]
    except NotTpuError:
        return _C.op_random(rule, generator, device, _fix_inputs(rule, extra_inputs), _shape_attrs(like, dtype))[0]


@register("uniform_")
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _gen_check(generator, self)
    if self.is_complex():  # as on CPU: real and imaginary parts drawn as a real tensor of twice the elements
        uniform_(torch.view_as_real(self), from_, to, generator=generator)
        return self
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"check_uniform_bounds\" not implemented for '{self.dtype}'")
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    return _write(self, _sample("rng_uniform", self, self.dtype, [float(from_), float(to)], _dev(self), generator))


@register("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _gen_check(generator, self)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if self.is_complex():  # as on CPU: both parts real normals of std / sqrt(2) (a circular complex normal)
        normal_(torch.view_as_real(self), mean, std / math.sqrt(2), generator=generator)
        return self
    return _write(self, _sample("rng_normal", self, self.dtype, [float(mean), float(std)], _dev(self), generator))


_SCALAR_NAMES = {torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
                 torch.int32: "Int", torch.int64: "Long"}


@register("exponential_")
def exponential_(self, lambd=1.0, *, generator=None):
    """-log(1 - u) / lambd from a uniform draw u in [0, 1), never 0: like
    PyTorch's CUDA transformation, a draw that rounds to 0 becomes eps/2
    of the dtype (vLLM divides probabilities by these draws)."""
    _gen_check(generator, self)
    if self.dim() > _MAX_RANK and self.is_contiguous():  # through the flat view (engine ranks stop at 8)
        exponential_(self.view(-1), lambd, generator=generator)
        return self
    if not self.dtype.is_floating_point:
        raise RuntimeError("Exponential distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {_SCALAR_NAMES.get(self.dtype, self.dtype)}")
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd:g}")
    work = torch.float64 if self.dtype == torch.float64 else torch.float32
    u = _sample("rng_uniform", self, work, [0.0, 1.0], _dev(self), generator)
    x = torch.log1p(-u).neg_().div_(float(lambd)).to(self.dtype)
    return write(self, x.clamp_min_(torch.finfo(self.dtype).eps / 2))


# c10's names of the integer dtypes in the continuous distributions' errors
_CPP_NAMES = {torch.bool: "bool", torch.uint8: "unsigned char", torch.int8: "signed char", torch.int16: "short int",
              torch.int32: "int", torch.int64: "long int"}


def _uniform(self, generator):
    """A uniform draw in [0, 1) of self's shape, in float32 (float64 for a
    float64 self): the source of the distributions below."""
    work = torch.float64 if self.dtype == torch.float64 else torch.float32
    return _sample("rng_uniform", self, work, [0.0, 1.0], _dev(self), generator)


def _flat(fn, self, *args, generator=None):
    """fn on self's flat view when self's rank passes the engine's (8)."""
    if self.dim() > _MAX_RANK and self.is_contiguous():
        fn(self.view(-1), *args, generator=generator)
        return self
    return None


@register("cauchy_")
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """median + sigma * tan(pi * (u - 1/2)), CPU's and CUDA's transformation."""
    _gen_check(generator, self)
    if not self.dtype.is_floating_point:
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {_CPP_NAMES.get(self.dtype, self.dtype)}")
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma:g}")
    if _flat(cauchy_, self, median, sigma, generator=generator) is not None:
        return self
    u = _uniform(self, generator)
    return write(self, torch.tan((u - 0.5) * math.pi).mul_(float(sigma)).add_(float(median)).to(self.dtype))


@register("log_normal_")
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """exp of a normal draw of (mean, std)."""
    _gen_check(generator, self)
    if not self.dtype.is_floating_point:
        name = _SCALAR_NAMES.get(self.dtype, self.dtype)
        raise NotImplementedError(f"\"log_normal_cpu\" not implemented for '{name}'")
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std:g}")
    if _flat(log_normal_, self, mean, std, generator=generator) is not None:
        return self
    work = torch.float64 if self.dtype == torch.float64 else torch.float32
    x = _sample("rng_normal", self, work, [float(mean), float(std)], _dev(self), generator)
    return write(self, torch.exp(x).to(self.dtype))


@register("geometric_")
def geometric_(self, p, *, generator=None):
    """ceil(log(u) / log1p(-p)) for u in (0, 1] (CUDA's transformation), in
    self's dtype: floats and integers, not bool (as on CPU)."""
    _gen_check(generator, self)
    if self.dtype == torch.bool or self.is_complex():
        name = _SCALAR_NAMES.get(self.dtype, self.dtype)
        raise NotImplementedError(f"\"geometric_cpu\" not implemented for '{name}'")
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p:g}")
    if _flat(geometric_, self, p, generator=generator) is not None:
        return self
    u = _uniform(self, generator)
    x = torch.ceil(torch.log1p(-u).div_(math.log1p(-p)))  # 1 - u is in (0, 1]
    return write(self, x.to(self.dtype))


def _normal_tensor(mean, std, generator, out=None):
    """normal(mean, std) with a tensor mean and/or std: mean + std * N(0, 1)
    over their broadcast shape.  A negative std raises as on CPU (and CUDA),
    which reads the tensor: one host wait."""
    t = mean if isinstance(mean, torch.Tensor) else std
    _gen_check(generator, t)
    dtype = t.dtype  # mean's when a tensor (CPU's), else std's
    if not dtype.is_floating_point:
        raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for '{_SCALAR_NAMES.get(dtype, dtype)}'")
    if isinstance(std, torch.Tensor):
        if std.dim() > _MAX_RANK and not std.is_contiguous():
            raise Unsupported()
        flat_std = std.reshape(-1) if std.dim() > _MAX_RANK else std
        if std.numel() and bool((flat_std < 0).any()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    # the broadcast shape, with CPU's error for shapes that do not broadcast
    shape = t.shape
    if isinstance(mean, torch.Tensor) and isinstance(std, torch.Tensor):
        _broadcast_check(list(mean.shape), list(std.shape))
        shape = torch.broadcast_shapes(mean.shape, std.shape)
    z = torch.empty(shape, dtype=dtype, device=t.device)
    normal_(z, 0.0, 1.0, generator=generator)
    if z.dim() > _MAX_RANK:  # the engine's ranks stop at 8: full-shape contiguous operands through flat views
        ops = [x for x in (mean, std) if isinstance(x, torch.Tensor)]
        if not all(x.shape == z.shape and x.is_contiguous() for x in ops):
            raise Unsupported()
        flat = [x.view(-1) if isinstance(x, torch.Tensor) else x for x in (mean, std)]
        res = z.view(-1).mul_(flat[1]).add_(flat[0]).view(z.shape)
    else:
        res = z.mul_(std).add_(mean)
    if out is None:
        return res
    if out.shape != res.shape:
        out.resize_(res.shape)
    return out.copy_(res)


@register("normal.Tensor_Tensor")
def normal_tensor_tensor(mean, std, *, generator=None):
    return _normal_tensor(mean, std, generator)


@register("normal.Tensor_float")
def normal_tensor_float(mean, std=1.0, *, generator=None):
    return _normal_tensor(mean, float(std), generator)


@register("normal.float_Tensor")
def normal_float_tensor(mean, std, *, generator=None):
    return _normal_tensor(float(mean), std, generator)


@register("normal.Tensor_Tensor_out")
def normal_tensor_tensor_out(mean, std, *, generator=None, out):
    return _normal_tensor(mean, std, generator, out)


@register("normal.Tensor_float_out")
def normal_tensor_float_out(mean, std=1.0, *, generator=None, out):
    return _normal_tensor(mean, float(std), generator, out)


@register("normal.float_Tensor_out")
def normal_float_tensor_out(mean, std, *, generator=None, out):
    return _normal_tensor(float(mean), std, generator, out)


@register("random_.from")
def random_from(self, from_, to=None, *, generator=None):
    _gen_check(generator, self)
    if to is None:
        to = 2 ** 53 if self.dtype.is_floating_point else torch.iinfo(self.dtype).max + 1
    if from_ >= to:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    return _write(self, _sample("rng_randint", self, self.dtype, [int(from_), int(to)], _dev(self), generator))


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
    _gen_check(generator, self)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return _write(self, _sample("rng_bernoulli", self, self.dtype, [float(p)], _dev(self), generator))


@register("bernoulli_.Tensor")
def bernoulli_tensor(self, p, *, generator=None):
    _gen_check(generator, self)
    return _write(self, _sample("rng_bernoulli", self, self.dtype, [p.expand(self.shape)], _dev(self), generator))


@register("bernoulli")
def bernoulli(self, *, generator=None):
    _gen_check(generator, self)
    return _sample("rng_bernoulli", self, self.dtype, [self], _dev(self), generator)


@register("bernoulli.p")
def bernoulli_p(self, p, *, generator=None):
    _gen_check(generator, self)
    return _sample("rng_bernoulli", self, self.dtype, [float(p)], _dev(self), generator)


@register("native_dropout")
def native_dropout(input, p, train):
    if train is False or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    if input.dim() > _MAX_RANK:  # through the flat view (engine ranks stop at 8)
        out, mask = native_dropout(input.reshape(-1), p, train)
        return out.view(input.shape), mask.view(input.shape)
    out, mask = _C.op_random("dropout", None, _dev(input), [input, float(p)])
    return out, mask


@register("native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    return run("dropout_backward", [grad_output, mask, float(scale)])[0]


# ---- sampling by Gumbel keys: multinomial, randperm ---------------------------------------
# log(p) + Gumbel noise, then the largest keys: top-k of one draw samples
# without replacement (in the order sequential draws would give), the arg
# max of independent draws samples with replacement; random 62-bit keys
# sorted give a uniform permutation.  All on the device, no host sync.


def _index_of(device):
    from .. import _C as C
    if device is None:
        return C.get_device()
    d = torch.device(device)
    return C.get_device() if d.index is None else d.index


def _gumbel(shape, device, generator):
    u = _sample("rng_uniform", list(shape), torch.float32, [0.0, 1.0], device, generator)
    return -torch.log(-torch.log(u))


@register("multinomial")
def multinomial(self, num_samples, replacement=False, *, generator=None):
    _gen_check(generator, self)
    if self.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {_tname(self.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = self.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if n > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    probs = run("multinomial_check", [self], [int(bool(replacement))])[0]
    logp = torch.log(probs.float())
    dev = _dev(self)
    if not replacement:
        keys = logp + _gumbel(self.shape, dev, generator)
        return torch.topk(keys, num_samples, dim=-1).indices
    keys = logp.unsqueeze(-2) + _gumbel((*self.shape[:-1], num_samples, n), dev, generator)
    return torch.argmax(keys, dim=-1)


@register("multinomial.out")
def multinomial_out(self, num_samples, replacement=False, *, generator=None, out):
    if out.dtype != torch.int64:
        raise RuntimeError(f"multinomial expects Long tensor out, got: {_tname(out.dtype)}")
    res = multinomial(self, num_samples, replacement, generator=generator)
    return write_out(out, res, "multinomial")


def _tname(dt):
    return {torch.float64: "Double", torch.float32: "Float", torch.int64: "Long", torch.int32: "Int", torch.bool: "Bool", torch.uint8: "Byte",
            torch.int16: "Short", torch.int8: "Char"}.get(dt, str(dt))


@register("randperm.generator", out="randperm.generator_out")
def randperm_generator(n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    # device None is the CPU here (a factory reached because of its generator)
    _gen_check(generator, device if device is not None or generator is None else "cpu")
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    dtype = dtype or torch.int64
    keys = _sample("rng_randint", [n], torch.int64, [0, 2 ** 62], _index_of(device), generator)
    perm = torch.argsort(keys)
    return perm if dtype == torch.int64 else perm.to(dtype)


@register("randperm", out="randperm.out")
def randperm(n, *, dtype=None, layout=None, device=None, pin_memory=None):
    return randperm_generator(n, generator=None, dtype=dtype, device=device)


@register("rrelu_with_noise", inplace="rrelu_with_noise_")
def rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """Randomized leaky ReLU.  Training: each element <= 0 is scaled by a
    slope drawn uniformly from [lower, upper) (written to noise; 1 for the
    others, as the CPU kernel), so the backward op is grad * noise.
    Evaluation: leaky_relu with the mean slope."""
    if not self.dtype.is_floating_point or noise.shape != self.shape:
        raise Unsupported()  # the CPU kernel's error
    if not training:
        return torch.nn.functional.leaky_relu(self, (float(lower) + float(upper)) / 2)
    _gen_check(generator, self)
    work = torch.float64 if self.dtype == torch.float64 else torch.float32
    slope = _sample("rng_uniform", self, work, [float(lower), float(upper)], _dev(self), generator).to(self.dtype)
    neg = self <= 0
    write(noise, torch.where(neg, slope, torch.ones_like(slope)).to(noise.dtype))
    return torch.where(neg, self * slope, self)
