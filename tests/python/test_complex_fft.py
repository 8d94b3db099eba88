"""Complex tensors and torch.fft on the device (ops/complex.py, ops/fft.py;
rules in csrc/ops/complex.c, fft.c): values and gradients against PyTorch
CPU, and no op through the CPU fallback."""
import pytest
import torch

import torch_tpu
from op_compare import no_fallback

T = torch.device("tpu")
ATOL, RTOL = 1e-4, 1e-4


def _cplx(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


def _close(got, want, atol=ATOL, rtol=RTOL):
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol)


ELEMENTWISE = {
    "add": lambda a, b: a + b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "mul_scalar": lambda a, b: a * (2 - 0.5j),
    "add_real_tensor": lambda a, b: a + b.real,
    "rsub_scalar": lambda a, b: 1 - a,
    "neg": lambda a, b: -a,
    "exp": lambda a, b: torch.exp(a),
    "log": lambda a, b: torch.log(a),
    "sqrt": lambda a, b: torch.sqrt(a),
    "tanh": lambda a, b: torch.tanh(a),
    "sin": lambda a, b: torch.sin(a),
    "cos": lambda a, b: torch.cos(a),
    "reciprocal": lambda a, b: torch.reciprocal(a),
    "square": lambda a, b: torch.square(a),
    "pow2": lambda a, b: a ** 2,
    "abs": lambda a, b: torch.abs(a),
    "angle": lambda a, b: torch.angle(a),
    "sgn": lambda a, b: torch.sgn(a),
    "conj_physical": lambda a, b: torch.conj_physical(a),
    "conj_view_used": lambda a, b: a.conj() * b,
    "real_imag": lambda a, b: a.real * 2 + a.imag,
    "view_as_real": lambda a, b: torch.view_as_real(a) * 1,
    "eq": lambda a, b: a == a.conj_physical(),
    "where": lambda a, b: torch.where(a.real > 0, a, b),
    "sum": lambda a, b: a.sum(),
    "mean_dim": lambda a, b: a.mean(dim=1),
    "mm": lambda a, b: a @ b.transpose(0, 1),
    "bmm": lambda a, b: torch.bmm(a.unsqueeze(0), b.T.unsqueeze(0)),
    "mv": lambda a, b: a @ b[0],
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_complex_op_matches_cpu(name):
    f = ELEMENTWISE[name]
    a, b = _cplx(4, 5, seed=1), _cplx(4, 5, seed=2)
    want = f(a, b)
    got = no_fallback(lambda: f(a.to(T), b.to(T)))
    _close(got, want)


def test_inplace_and_out_variants():
    a, b = _cplx(3, 4, seed=3), _cplx(3, 4, seed=4)
    at, bt = a.to(T), b.to(T)

    def run():
        at.mul_(bt)
        at.add_(1.5)
        out = torch.empty(3, 4, dtype=torch.complex64, device=T)
        torch.sub(at, bt, out=out)
        return out

    out = no_fallback(run)
    a.mul_(b)
    a.add_(1.5)
    _close(at, a)
    _close(out, a - b)


def test_complex_from_parts_and_polar():
    r, i = torch.randn(3, 4), torch.randn(4)
    _close(no_fallback(lambda: torch.complex(r.to(T), i.to(T))), torch.complex(r, i))
    m = r.abs()
    _close(no_fallback(lambda: torch.polar(m.to(T), i.to(T))), torch.polar(m, i))
    # bad input: the CPU's exception type
    with pytest.raises(RuntimeError):
        torch.complex(r.to(T), r.double().to(T))


def test_complex_gradients_match_cpu():
    a, b = _cplx(3, 4, seed=5), _cplx(3, 4, seed=6)

    def loss(x, y):
        z = (x * y.conj() + torch.exp(x / 3)) @ y.transpose(0, 1)
        return (z.abs() ** 2).sum() + torch.angle(x + 2).sum() + torch.view_as_real(y).sum()

    xc, yc = a.clone().requires_grad_(), b.clone().requires_grad_()
    loss(xc, yc).backward()
    xt, yt = a.to(T).requires_grad_(), b.to(T).requires_grad_()
    no_fallback(lambda: loss(xt, yt).backward())
    _close(xt.grad, xc.grad, atol=1e-3, rtol=1e-3)
    _close(yt.grad, yc.grad, atol=1e-3, rtol=1e-3)


FFTS = {
    "fft": (lambda x: torch.fft.fft(x), True),
    "fft_n_pad": (lambda x: torch.fft.fft(x, n=12, dim=0), True),
    "fft_n_trim": (lambda x: torch.fft.fft(x, n=5), True),
    "ifft_ortho": (lambda x: torch.fft.ifft(x, norm="ortho"), True),
    "fft2": (lambda x: torch.fft.fft2(x), True),
    "ifft2_forward": (lambda x: torch.fft.ifft2(x, norm="forward"), True),
    "fftn": (lambda x: torch.fft.fftn(x), True),
    "ifftn_dims": (lambda x: torch.fft.ifftn(x, dim=(0, 2)), True),
    "fft_of_real": (lambda x: torch.fft.fft(x), False),
    "rfft": (lambda x: torch.fft.rfft(x), False),
    "rfft_odd": (lambda x: torch.fft.rfft(x, n=7), False),
    "rfft2": (lambda x: torch.fft.rfft2(x), False),
    "rfftn": (lambda x: torch.fft.rfftn(x, norm="ortho"), False),
    "irfft": (lambda x: torch.fft.irfft(x), True),
    "irfft_n": (lambda x: torch.fft.irfft(x, n=9), True),
    "irfft2": (lambda x: torch.fft.irfft2(x), True),
    "irfftn": (lambda x: torch.fft.irfftn(x, dim=(0, 1, 2)), True),
    "hfft": (lambda x: torch.fft.hfft(x), True),
    "ihfft": (lambda x: torch.fft.ihfft(x), False),
    "roundtrip": (lambda x: torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1]), False),
}


@pytest.mark.parametrize("name", list(FFTS))
def test_fft_matches_cpu_with_gradients(name):
    f, complex_in = FFTS[name]
    x = _cplx(6, 3, 8, seed=7) if complex_in else torch.randn(6, 3, 8)
    xc = x.clone().requires_grad_()
    want = f(xc)
    xt = x.to(T).requires_grad_()
    got = no_fallback(lambda: f(xt))
    _close(got, want.detach(), atol=1e-3, rtol=1e-4)
    g = _cplx(*want.shape, seed=8) if want.is_complex() else torch.randn(want.shape)
    want.backward(g)
    no_fallback(lambda: got.backward(g.to(T)))
    _close(xt.grad, xc.grad, atol=1e-3, rtol=1e-3)


def test_fft_bad_input_raises_like_cpu():
    x = torch.randn(4, 8)
    for f in (lambda t: torch.fft.fft(t, dim=3), lambda t: torch.fft.fft(t, n=0)):
        with pytest.raises(Exception) as cpu:
            f(x)
        with pytest.raises(type(cpu.value)):
            f(x.to(T))


def test_fft_float64():
    x = torch.randn(5, 6, dtype=torch.float64)
    _close(no_fallback(lambda: torch.fft.rfft2(x.to(T))), torch.fft.rfft2(x), atol=1e-10, rtol=1e-10)
    z = torch.fft.fft(x.to(torch.complex128))
    _close(no_fallback(lambda: torch.fft.fft(x.to(torch.complex128).to(T))), z, atol=1e-10, rtol=1e-10)
