"""The special functions PyTorch computes with Cephes-style algorithms
(ATen's native/Math.h): ndtri, log_ndtr, erfcx, the Airy function Ai, the
Bessel functions J0 / J1 / Y0 / Y1, the modified Bessel functions K0 / K1
(plain and exponentially scaled), the spherical Bessel j0, the orthogonal
polynomials (Chebyshev T / U / V / W and their shifted forms, Hermite H /
He, Laguerre L, Legendre P) and the regularized incomplete gamma functions
igamma / igammac.

No lowering rule of their own: each kernel is composed of tpu device ops
(math.py's and elementwise.py's rules), so a call is a few dozen
elementwise nodes instead of a host round trip through the CPU fallback.
The algorithms are ATen's, branch by branch:

- a rational or polynomial approximation is a Horner evaluation
  (`_poly`), a Chebyshev series Clenshaw's (`_cheb`); ATen's coefficient
  tables are the constants below;
- the branches of a piecewise definition are all computed and chosen per
  element with torch.where (a branch's NaN or inf on elements it does not
  own is discarded), edge values (0, negative, inf, NaN) last, in ATen's
  order of precedence;
- a loop that runs until convergence in ATen runs a fixed count here, the
  count that converges for every argument of the branch that uses it (the
  terms it adds after convergence are below the dtype's epsilon);
- a polynomial's recurrence is unrolled to the largest degree of the call
  (one host read of max(n) when n is a tensor) and each element takes the
  value at its own degree.

Where ATen's choice of branch costs a loop with no static bound (igamma's
power series near a ~ x for a > 200, up to 2000 terms), the kernel uses the
uniform asymptotic expansion that ATen uses next to that region; it is as
accurate there.  A degree above _MAX_DEGREE, and dtypes other than float32
/ float64 (integers, the half types), run through the CPU fallback.
Autograd is PyTorch's: the kernels are registered below autograd, so the
derivatives.yaml formulas (ndtri, log_ndtr, erfcx, igamma's second
argument) and its "not implemented" errors are CPU's.
"""
import math

import torch

from .._dispatch import Unsupported, register
from .._dtypes import scalar_type_name
from .elementwise import _broadcast_check


# ---- helpers ---------------------------------------------------------------------------

_FLOATS = (torch.float32, torch.float64)
_MAX_DEGREE = 256  # the longest recurrence unrolled on the device


def _float_operand(x):
    """A unary kernel's argument in its result dtype (int and bool promote to
    the default float dtype, as on CPU); Unsupported for the other dtypes."""
    dt = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    if dt not in _FLOATS or x.is_complex():
        raise Unsupported(f"special function of dtype {x.dtype}")
    return x.to(dt)


def _poly(y, coefs):
    """coefs[0] y^(n-1) + ... + coefs[-1] by Horner's rule (Cephes' polevl)."""
    acc = y * coefs[0] + coefs[1]
    for c in coefs[2:]:
        acc = acc * y + c
    return acc


def _cheb(z, coefs):
    """Clenshaw's recurrence over coefs (ATen's loop: a = z q - p + c), its
    half difference 0.5 (a - p)."""
    p, q, a = 0.0, 0.0, coefs[0]
    for c in coefs[1:]:
        p, q = q, a
        a = z * q - p + c
    return 0.5 * (a - p)


def _where(cond, a, b):
    return torch.where(cond, a, b)


def _const(like, v):
    return torch.full_like(like, v)


# ---- the normal distribution: ndtri, log_ndtr, erfcx -------------------------------------

_EXP_M2 = 0.13533528323661269189  # exp(-2)


@register("aten::special_ndtri", out="aten::special_ndtri.out")
def ndtri(self):
    """The inverse of the standard normal CDF: a rational approximation in
    y - 0.5 on the central range, in 1/sqrt(-2 log y) on the tails."""
    y0 = _float_operand(self)
    c = _NDTRI
    flip = y0 > 1.0 - _EXP_M2
    y = _where(flip, 1.0 - y0, y0)
    yc = y - 0.5
    y2 = yc * yc
    central = (yc + yc * (y2 * _poly(y2, c["P0"]) / _poly(y2, c["Q0"]))) * 2.50662827463100050242
    x = torch.sqrt(-2.0 * torch.log(y))
    x0 = x - torch.log(x) / x
    z = 1.0 / x
    x1 = _where(x < 8.0, z * _poly(z, c["P1"]) / _poly(z, c["Q1"]), z * _poly(z, c["P2"]) / _poly(z, c["Q2"]))
    tail = x0 - x1
    r = _where(y > _EXP_M2, central, _where(flip, tail, -tail))
    r = _where((y0 < 0) | (y0 > 1), _const(r, math.nan), r)
    r = _where(y0 == 1, _const(r, math.inf), r)
    return _where(y0 == 0, _const(r, -math.inf), r)


def _erfcx(x):
    """exp(x^2) erfc(x): the product for 0 <= x < 5, Laplace's continued
    fraction (8 levels in float32, 16 in float64: converged) above; for
    x < 0, 2 exp(x^2) - erfcx(-x)."""
    ax = torch.abs(x)
    small = torch.exp(ax * ax) * torch.erfc(ax)
    t = ax
    for k in range(8 if x.dtype == torch.float32 else 16, 0, -1):
        t = ax + (0.5 * k) / t
    large = 0.56418958354775628694807945156 / t  # 1/sqrt(pi) / (x + 1/2 / (x + 1 / ...))
    pos = _where(ax < 5.0, small, large)
    neg = 2.0 * torch.exp(x * x) - pos
    return _where(x < 0, neg, pos)


@register("aten::special_erfcx", out="aten::special_erfcx.out")
def erfcx(self):
    return _erfcx(_float_operand(self))


@register("aten::special_log_ndtr", out="aten::special_log_ndtr.out")
def log_ndtr(self):
    x = _float_operand(self)
    t = x * 0.70710678118654752440
    lower = torch.log(_erfcx(-t) / 2.0) - t * t
    upper = torch.log1p(-torch.erfc(t) / 2.0)
    return _where(x < -1.0, lower, upper)


# ---- Bessel functions ----------------------------------------------------------------------

_TWO_OVER_PI = 0.636619772367581343075535053490057448
_SQRT_TWO_OVER_PI = 0.797884560802865355879892119868763737
_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163


def _hankel(x, c, w, phase, y):
    """The large-argument form of J / Y: P cos(x - phase) - 5/x Q sin(...)
    (J), P sin(...) + 5/x Q cos(...) (Y), times sqrt(2 / (pi x))."""
    p = _poly(w, c["PP"]) / _poly(w, c["PQ"])
    q = 5.0 / x * (_poly(w, c["QP"]) / _poly(w, c["QQ"]))
    s = x - phase
    v = p * torch.sin(s) + q * torch.cos(s) if y else p * torch.cos(s) - q * torch.sin(s)
    return v * _SQRT_TWO_OVER_PI / torch.sqrt(x)


def _j0(x):
    x = torch.abs(x)
    x2 = x * x
    c = _J0
    small = (x2 - 5.78318596294678452118e+00) * (x2 - 3.04712623436620863991e+01) * _poly(x2, c["RP"]) \
        / _poly(x2, c["RQ"])
    small = _where(x < 0.00001, 1.0 - x2 / 4.0, small)
    return _where(x <= 5.0, small, _hankel(x, c, 25.0 / x2, _PI_4, False))


def _j1(x):
    ax = torch.abs(x)
    x2 = ax * ax
    c = _J1
    small = _poly(x2, c["RP"]) / _poly(x2, c["RQ"]) * ax * (x2 - 1.46819706421238932572e+01) \
        * (x2 - 4.92184563216946036703e+01)
    w = 5.0 / ax * (5.0 / ax)
    r = _where(ax <= 5.0, small, _hankel(ax, c, w, _3PI_4, False))
    return _where(x < 0, -r, r)


def _edge_y(x, r):
    """Y0 / Y1 / K0 / K1 at 0 (-inf or inf) and below (NaN)."""
    r = _where(x < 0, _const(r, math.nan), r)
    return _where(x == 0, _const(r, -math.inf), r)


@register("aten::special_bessel_j0", out="aten::special_bessel_j0.out")
def bessel_j0(self):
    return _j0(_float_operand(self))


@register("aten::special_bessel_j1", out="aten::special_bessel_j1.out")
def bessel_j1(self):
    return _j1(_float_operand(self))


@register("aten::special_bessel_y0", out="aten::special_bessel_y0.out")
def bessel_y0(self):
    x = _float_operand(self)
    x2 = x * x
    c = _Y0
    small = _poly(x2, c["YP"]) / _poly(x2, c["YQ"]) + _TWO_OVER_PI * torch.log(x) * _j0(x)
    return _edge_y(x, _where(x <= 5.0, small, _hankel(x, c, 25.0 / x2, _PI_4, True)))


@register("aten::special_bessel_y1", out="aten::special_bessel_y1.out")
def bessel_y1(self):
    x = _float_operand(self)
    x2 = x * x
    c = _Y1
    small = x * (_poly(x2, c["YP"]) / _poly(x2, c["YQ"])) + _TWO_OVER_PI * (_j1(x) * torch.log(x) - 1.0 / x)
    w = 5.0 / x * (5.0 / x)
    return _edge_y(x, _where(x <= 5.0, small, _hankel(x, c, w, _3PI_4, True)))


def _k(x, order, scaled):
    """K0 / K1 (exp(x) K for scaled): Chebyshev series in x^2 - 2 with the
    I0 / I1 log term on (0, 2], in 8/x - 2 above."""
    c = _K0 if order == 0 else _K1
    a = _cheb(x * x - 2.0, c["A"])
    logh = torch.log(0.5 * x)
    if order == 0:
        small = a - logh * torch.special.modified_bessel_i0(x)
    else:
        small = logh * torch.special.modified_bessel_i1(x) + a / x
    large = _cheb(8.0 / x - 2.0, c["B"]) / torch.sqrt(x)
    if scaled:
        small = small * torch.exp(x)
    else:
        large = torch.exp(-x) * large
    r = _where(x <= 2.0, small, large)
    r = _where(x < 0, _const(r, math.nan), r)
    return _where(x == 0, _const(r, math.inf), r)


register("aten::special_modified_bessel_k0", out="aten::special_modified_bessel_k0.out")(
    lambda self: _k(_float_operand(self), 0, False))
register("aten::special_modified_bessel_k1", out="aten::special_modified_bessel_k1.out")(
    lambda self: _k(_float_operand(self), 1, False))
register("aten::special_scaled_modified_bessel_k0", out="aten::special_scaled_modified_bessel_k0.out")(
    lambda self: _k(_float_operand(self), 0, True))
register("aten::special_scaled_modified_bessel_k1", out="aten::special_scaled_modified_bessel_k1.out")(
    lambda self: _k(_float_operand(self), 1, True))


@register("aten::special_spherical_bessel_j0", out="aten::special_spherical_bessel_j0.out")
def spherical_bessel_j0(self):
    x = _float_operand(self)
    x2 = x * x
    series = 1.0 + x2 * _poly(x2, (1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0,
                                   1.0 / 120.0, -1.0 / 6.0))
    r = _where(torch.abs(x) < 0.5, series, torch.sin(x) / x)
    return _where(torch.isinf(x), torch.zeros_like(r), r)


@register("aten::special_airy_ai", out="aten::special_airy_ai.out")
def airy_ai(self):
    """Ai: asymptotic forms below -2.09 and from 2.09 on, the Maclaurin
    series f(x) c1 - g(x) c2 between (a fixed number of terms: |x^3| < 9.2
    converges in 12 in float32, 16 in float64)."""
    x = _float_operand(self)
    c = _AIRY
    # x < -2.09
    zeta_n = -2.0 * x * torch.sqrt(-x) / 3.0
    z = 1.0 / zeta_n
    zz = z * z
    t = zeta_n + 0.25 * math.pi
    neg = 5.64189583547756286948e-01 / torch.sqrt(torch.sqrt(-x)) * (
        torch.sin(t) * (1.0 + zz * _poly(zz, c["AFN"]) / _poly(zz, c["AFD"]))
        - torch.cos(t) * (z * _poly(zz, c["AGN"]) / _poly(zz, c["AGD"])))
    # x >= 2.09
    zeta = 2.0 * x * torch.sqrt(x) / 3.0
    iz = 1.0 / zeta
    pos = 5.64189583547756286948e-01 * (_poly(iz, c["AN"]) / _poly(iz, c["AD"])) \
        / (2.0 * torch.sqrt(torch.sqrt(x)) * torch.exp(zeta))
    # the series between
    z3 = x * x * x
    f, g, m, n = 1.0, x, 1.0, x
    k = 1.0
    for _ in range(12 if x.dtype == torch.float32 else 16):
        m = m * z3 / (k + 1.0)
        n = n * z3 / (k + 2.0)
        m = m / (k + 2.0)
        f = f + m
        n = n / (k + 3.0)
        g = g + n
        k += 3.0
    mid = 0.355028053887817239260 * f - 0.258819403792806798405 * g
    r = _where(x < -2.09, neg, _where(x >= 2.09, pos, mid))
    r = _where(x > 103.892, torch.zeros_like(r), r)
    return _where(torch.isinf(x), _const(r, math.nan), r)


# ---- orthogonal polynomials -----------------------------------------------------------------


def _poly_args(x, n):
    """(x, n) as tensors of the result dtype on the device, broadcast, and n
    as ATen reads it: truncated to an integer, non-finite or out of int64's
    range -> -1 (a negative degree)."""
    dt = torch.result_type(x, n)
    dt = dt if dt.is_floating_point else torch.get_default_dtype()  # as CPU: integers promote
    if dt not in _FLOATS:
        raise Unsupported(f"orthogonal polynomial of dtype {dt}")
    dev = (x if isinstance(x, torch.Tensor) and x.device.type != "cpu" else n).device
    if isinstance(x, torch.Tensor) and isinstance(n, torch.Tensor):
        _broadcast_check(list(x.shape), list(n.shape))
    xt = x.to(dev, dt) if isinstance(x, torch.Tensor) else torch.full((), x, dtype=dt, device=dev)
    nt = n.to(dev, dt) if isinstance(n, torch.Tensor) else torch.full((), n, dtype=dt, device=dev)
    xt, nt = torch.broadcast_tensors(xt, nt)
    ok = torch.isfinite(nt) & (torch.abs(nt) < 2.0 ** 63)
    nt = _where(ok, torch.trunc(nt), _const(nt, -1.0))
    return xt, nt


def _max_degree(n):
    """The largest degree of the call (one host read); Unsupported above
    _MAX_DEGREE, where the unrolled recurrence would be too long."""
    if n.numel() == 0:
        return 0
    top = int(n.max().item())
    if top > _MAX_DEGREE:
        raise Unsupported(f"polynomial degree {top} > {_MAX_DEGREE}")
    return top


def _recurrence(n, top, p, q, step):
    """The value at each element's degree of the three-term recurrence
    r_k = step(k, p, q) (r_1 = q, r_0 = p), unrolled up to degree top."""
    res = q
    for k in range(2, top + 1):
        p, q = q, step(k, p, q)
        res = _where(n == k, q, res)
    return res


def _low(n, r, v0, v1):
    """Degrees 0 and 1, and 0 for a negative degree."""
    r = _where(n == 1, v1 if isinstance(v1, torch.Tensor) else _const(r, v1), r)
    r = _where(n == 0, _const(r, 1.0), r)
    return _where(n < 0, torch.zeros_like(r), r)


def _even(n):
    return torch.fmod(n, 2.0) == 0


# Chebyshev T, U, V, W of y (y = x, or 2x - 1 for the shifted ones): the
# first-degree value, the closed form for large degrees on (-1, 1), and the
# value at y = 1 and y = -1 (x == 1 and x == 0 for the shifted ones, as ATen).
def _cheb_q1(kind, y):
    return {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]


def _cheb_closed(kind, y, n, shifted):
    th = torch.acos(y)
    if kind == "t":
        return torch.cos(n * th)
    if kind == "u":
        s = torch.sin(th)
        return _where(s != 0, torch.sin((n + 1.0) * th) / s, (n + 1.0) * torch.cos((n + 1.0) * th) / y)
    odd_sign = _where(_even(n), n + n + 1.0, -(n + n + 1.0))
    if kind == "v":
        return _where(torch.sin(th / 2.0) != 1.0, torch.cos((n + 0.5) * th) / torch.cos(th / 2.0), odd_sign)
    ends = _where(_even(n), _const(n, 1.0), _const(n, -1.0))
    if not shifted:
        ends = _where(y > 0, n + n + 1.0, ends)
    return _where(torch.cos(th / 2.0) != 1.0, torch.sin((n + 0.5) * th) / torch.sin(th / 2.0), ends)


def _cheb_ends(kind, n, plus):
    """The value at y = 1 (plus) and y = -1."""
    sign = _where(_even(n), _const(n, 1.0), _const(n, -1.0))
    if kind == "t":
        return _const(n, 1.0) if plus else sign
    if kind == "u":
        return n + 1.0 if plus else sign * (n + 1.0)
    if kind == "v":
        return _const(n, 1.0) if plus else sign * (n + n + 1.0)
    return n + n + 1.0 if plus else sign


def _chebyshev(kind, shifted):
    big = {("t", False): 6, ("u", False): 8, ("v", False): 8, ("w", False): 8,
           ("t", True): 6, ("u", True): 6, ("v", True): 6, ("w", True): 4}[(kind, shifted)]

    def kernel(x, n):
        x, n = _poly_args(x, n)
        y = x + x - 1.0 if shifted else x
        q1 = _cheb_q1(kind, y)
        two_y = y + y
        closed = (n > big) & (torch.abs(y) < 1.0)
        top = _max_degree(_where(closed, torch.zeros_like(n), n))  # the closed form needs no recurrence
        r = _recurrence(n, top, _const(y, 1.0), q1, lambda k, p, q: two_y * q - p)
        r = _low(n, r, 1.0, q1)
        r = _where(closed, _cheb_closed(kind, y, n, shifted), r)
        if shifted:
            r = _where(x == 0, _cheb_ends(kind, n, False), r)
            r = _where(x == 1, _cheb_ends(kind, n, True), r)
        else:
            r = _where(x == -1, _cheb_ends(kind, n, False), r)
            r = _where(x == 1, _cheb_ends(kind, n, True), r)
        return _where(n < 0, torch.zeros_like(r), r)

    return kernel


def _hermite(physicists):
    def kernel(x, n):
        x, n = _poly_args(x, n)
        limit = 128 if x.dtype == torch.float32 else 512
        q1 = x + x if physicists else x
        if physicists:
            two_x = x + x
            step = lambda k, p, q: two_x * q - (2.0 * (k - 1)) * p  # noqa: E731
        else:
            step = lambda k, p, q: x * q - float(k - 1) * p  # noqa: E731
        top = _max_degree(_where(n > limit, torch.zeros_like(n), n))  # NaN above the limit
        r = _recurrence(n, top, _const(x, 1.0), q1, step)
        r = _where(n > limit, _const(r, math.nan), r)
        return _low(n, r, 1.0, q1)

    return kernel


def _laguerre(x, n):
    x, n = _poly_args(x, n)
    q1 = 1.0 - x
    r = _recurrence(n, _max_degree(n), _const(x, 1.0), q1,
                    lambda k, p, q: ((float(2 * (k - 1)) + (1.0 - x)) * q - float(k - 1) * p) / float(k))
    r = _low(n, r, 1.0, q1)
    r = _where(torch.abs(x) == 0, _const(r, 1.0), r)
    return _where(n < 0, torch.zeros_like(r), r)


def _legendre(x, n):
    x, n = _poly_args(x, n)
    r = _recurrence(n, _max_degree(n), _const(x, 1.0), x,
                    lambda k, p, q: (float(2 * k - 1) * x * q - float(k - 1) * p) / float(k))
    r = _low(n, r, 1.0, x)
    sign = _where((x > 0) | _even(n), _const(r, 1.0), _const(r, -1.0))
    r = _where(torch.abs(x) == 1, sign, r)
    return _where(n < 0, torch.zeros_like(r), r)


def _register_polynomial(name, fn):
    base = f"aten::special_{name}"
    register(base, out=f"{base}.out")(fn)
    register(f"{base}.x_scalar", out=f"{base}.x_scalar_out")(fn)
    register(f"{base}.n_scalar", out=f"{base}.n_scalar_out")(fn)


for _kind in "tuvw":
    _register_polynomial(f"chebyshev_polynomial_{_kind}", _chebyshev(_kind, False))
    _register_polynomial(f"shifted_chebyshev_polynomial_{_kind}", _chebyshev(_kind, True))
_register_polynomial("hermite_polynomial_h", _hermite(True))
_register_polynomial("hermite_polynomial_he", _hermite(False))
_register_polynomial("laguerre_polynomial_l", _laguerre)
_register_polynomial("legendre_polynomial_p", _legendre)


# ---- the regularized incomplete gamma functions ---------------------------------------------------

_LANCZOS_G = 6.024680040776729583740234375


def _lanczos_sum_expg_scaled(a):
    """Boost's Lanczos sum (ATen's ratevl: a polynomial ratio in a for
    a <= 1, in 1/a above; a > 0)."""
    num, den = _LANCZOS["num"], _LANCZOS["den"]
    inner = _poly(a, num) / _poly(a, den)
    ia = 1.0 / a
    outer = _poly(ia, num[::-1]) / _poly(ia, den[::-1])
    return _where(torch.abs(a) > 1.0, outer, inner)


def _igam_fac(a, x):
    """x^a exp(-x) / gamma(a), through the Lanczos approximation near a ~ x."""
    maxlog = 88.72283905206835 if a.dtype == torch.float32 else 7.09782712893383996843E2
    ax = a * torch.log(x) - x - torch.lgamma(a)
    direct = _where(ax < -maxlog, torch.zeros_like(ax), torch.exp(ax))
    fac = a + _LANCZOS_G - 0.5
    res = torch.sqrt(fac / 2.718281828459045) / _lanczos_sum_expg_scaled(a)
    near = res * torch.exp(a - x) * torch.pow(x / fac, a)
    numfac = (x - a - _LANCZOS_G + 0.5) / fac
    far = res * torch.exp(a * (torch.log1p(numfac) - numfac) + x * (0.5 - _LANCZOS_G) / fac)
    lanczos = _where((a < 200) & (x < 200), near, far)
    return _where(torch.abs(a - x) > 0.4 * torch.abs(a), direct, lanczos)


def _igam_series(a, x, fac):
    """P(a, x) by DLMF 8.11.4, fac = _igam_fac(a, x) (x <= a or x <= 1
    outside the asymptotic region: converged in 48 terms in float32, 112
    in float64)."""
    c = torch.ones_like(x)
    ans = c
    for i in range(1, (48 if a.dtype == torch.float32 else 112) + 1):
        c = c * (x / (a + float(i)))
        ans = ans + c
    return ans * fac / a


def _igamc_series(a, x):
    """Q(a, x) by DLMF 8.7.3 (x <= 1.1: converged in 16 / 24 terms)."""
    fac = torch.ones_like(x)
    s = torch.zeros_like(x)
    for n in range(1, (16 if a.dtype == torch.float32 else 24) + 1):
        fac = fac * (-x / float(n))
        s = s + fac / (a + float(n))
    logx = torch.log(x)
    return -torch.expm1(a * logx - torch.lgamma(1.0 + a)) - torch.exp(a * logx - torch.lgamma(a)) * s


def _igamc_fraction(a, x, fac):
    """Q(a, x) by the continued fraction DLMF 8.9.2, Cephes' recurrence with
    its rescaling, fac = _igam_fac(a, x) (x > 1.1, x >= a: converged in 24
    / 88 steps)."""
    f32 = a.dtype == torch.float32
    big, biginv = (16777216.0, 5.9604644775390625E-8) if f32 else (4.503599627370496e15, 2.22044604925031308085e-16)
    y = 1.0 - a
    z = x + y + 1.0
    pkm2, qkm2 = torch.ones_like(x), x
    pkm1, qkm1 = x + 1.0, z * x
    ans = pkm1 / qkm1
    for i in range(1, (24 if f32 else 88) + 1):
        y = y + 1.0
        z = z + 2.0
        yc = y * float(i)
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        ans = _where(qk != 0, pk / qk, ans)
        scale = _where(torch.abs(pk) > big, _const(pk, biginv), _const(pk, 1.0))
        pkm2, pkm1, qkm2, qkm1 = pkm1 * scale, pk * scale, qkm1 * scale, qk * scale
    return ans * fac


_IGAM_D_CACHE = {}


def _igam_d(dt, device):
    key = (dt, str(device))
    if key not in _IGAM_D_CACHE:
        _IGAM_D_CACHE[key] = torch.tensor(_IGAM_D, dtype=dt).t().contiguous().to(device)  # [power, k]
    return _IGAM_D_CACHE[key]


def _igam_asymptotic(a, x, lower):
    """P (lower) or Q by the uniform asymptotic expansion DLMF 8.12.3/8.12.4
    in eta (a > 20 and |x - a| / a small): the 13 first coefficient series
    of ATen's table, every power of eta."""
    sigma = (x - a) / a
    eta = torch.sqrt(-2.0 * (torch.log1p(sigma) - sigma))
    eta = _where(x < a, -eta, _where(x > a, eta, torch.zeros_like(eta)))
    sgn = -1.0 if lower else 1.0
    res = 0.5 * torch.erfc(sgn * eta * torch.sqrt(a / 2.0))
    d = _igam_d(a.dtype, a.device)
    pw = [torch.ones_like(eta)]
    for _ in range(d.shape[0] - 1):
        pw.append(pw[-1] * eta)
    ck = (torch.stack(pw, -1).unsqueeze(-1) * d).sum(-2)  # [..., k]
    ia = 1.0 / a
    af = [torch.ones_like(a)]
    for _ in range(d.shape[1] - 1):
        af.append(af[-1] * ia)
    s = (ck * torch.stack(af, -1)).sum(-1)
    return res + sgn * torch.exp(-0.5 * a * eta * eta) * s / torch.sqrt(2.0 * math.pi * a)


def _igam_args(a, x, name):
    dt = torch.result_type(a, x)
    if not dt.is_floating_point:
        raise NotImplementedError(f'"{name}_cpu" not implemented for \'{scalar_type_name(dt)}\'')
    if dt not in _FLOATS:
        raise Unsupported(f"{name} of dtype {dt}")
    dev = (a if a.device.type != "cpu" else x).device
    _broadcast_check(list(a.shape), list(x.shape))
    return torch.broadcast_tensors(a.to(dev, dt), x.to(dev, dt))


def _igam_asym_region(a, x):
    """ATen's asymptotic region (a in (20, 200), |x - a| / a < 0.3; a > 200,
    |x - a| / a < 4.5 / sqrt(a)), widened to |x - a| / a < 0.3 for every
    a > 20 (where ATen's series would need up to 2000 terms)."""
    r = torch.abs(x - a) / a
    return (a > 20.0) & ((r < 0.3) | (r < 4.5 / torch.sqrt(a)))


def _igam_edges(a, x, r, lower):
    """ATen's values on the boundary, in its order of precedence."""
    one, zero = _const(r, 1.0), torch.zeros_like(r)
    nan = _const(r, math.nan)
    r = _where(torch.isinf(x), one if lower else zero, r)
    r = _where(torch.isinf(a), _where(torch.isinf(x), nan, zero if lower else one), r)
    r = _where(x == 0, zero if lower else one, r)
    r = _where(a == 0, _where(x > 0, one if lower else zero, nan), r)
    return _where((x < 0) | (a < 0), nan, r)


def _igammac_core(a, x):
    fac = _igam_fac(a, x)
    series_c = 1.0 - _igam_series(a, x, fac)
    above = _where(x < a, series_c, _igamc_fraction(a, x, fac))
    series_q = _igamc_series(a, x)
    small = _where(-0.4 / torch.log(x) < a, series_c, series_q)
    mid = _where(x * 1.1 < a, series_c, series_q)
    return _where(x > 1.1, above, _where(x <= 0.5, small, mid))


@register("aten::igammac", out="aten::igammac.out", inplace="aten::igammac_")
def igammac(self, other):
    a, x = _igam_args(self, other, "igammac")
    r = _where(_igam_asym_region(a, x), _igam_asymptotic(a, x, False), _igammac_core(a, x))
    return _igam_edges(a, x, r, False)


@register("aten::igamma", out="aten::igamma.out", inplace="aten::igamma_")
def igamma(self, other):
    a, x = _igam_args(self, other, "igamma")
    fac = _igam_fac(a, x)
    upper = _where(x > 1.1, _igamc_fraction(a, x, fac), _igamc_series(a, x))  # x > 1, x > a
    r = _where((x > 1.0) & (x > a), 1.0 - upper, _igam_series(a, x, fac))
    r = _where(_igam_asym_region(a, x), _igam_asymptotic(a, x, True), r)
    return _igam_edges(a, x, r, True)


# ---- coefficient tables (ATen's native/Math.h, from Cephes and Boost) ----------------------

_NDTRI = {
    "P0": (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
           1.39312609387279679503E1, -1.23916583867381258016E0),
    "Q0": (1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
           8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
           -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0),
    "P1": (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
           4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
           -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4),
    "Q1": (1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
           4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
           -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4),
    "P2": (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
           1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
           3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9),
    "Q2": (1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
           1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
           3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9),
}

_AIRY = {
    "AN": (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
           1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
           1.40264691163389668864e+01, 9.99999999999999995305e-01),
    "AD": (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
           1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
           1.40959135607834029598e+01, 1.00000000000000000470e+00),
    "AFN": (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
            -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
            -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08),
    "AFD": (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
            9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
            4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07),
    "AGN": (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
            9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
            5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
            8.11789239554389293311e-08, 3.41551784765923618484e-10),
    "AGD": (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
            5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
            4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
            4.91834570062930015649e-09),
}

_J0 = {
    "PP": (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
           5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
           9.99999999999999997821e-01),
    "PQ": (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
           5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
           1.00000000000000000218e+00),
    "QP": (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
           -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
           -5.14105326766599330220e+01, -6.05014350600728481186e+00),
    "QQ": (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
           7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
           2.42005740240291393179e+02),
    "RP": (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
           9.70862251047306323952e+15),
    "RQ": (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
           1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
           3.18121955943204943306e+16, 1.71086294081043136091e+18),
}

_J1 = {
    "PP": (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
           5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
           1.00000000000000000254e+00),
    "PQ": (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
           5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
           9.99999999999999997461e-01),
    "QP": (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
           3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
           2.11688757100572135698e+02, 2.52070205858023719784e+01),
    "QQ": (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
           9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
           3.36093607810698293419e+02),
    "RP": (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
           3.68295732863852883286e+15),
    "RQ": (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
           2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
           8.95222336184627338078e+16, 5.32278620332680085395e+18),
}

_Y0 = {  # Cephes: the asymptotic P/Q tables are _J0's
    **{k: _J0[k] for k in ("PP", "PQ", "QP", "QQ")},
    "YP": (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
           -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
           4.42733268572569800351e+16, -1.84950800436986690637e+16),
    "YQ": (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
           8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
           2.50596256172653059228e+17),
}

_Y1 = {  # Cephes: the asymptotic P/Q tables are _J1's
    **{k: _J1[k] for k in ("PP", "PQ", "QP", "QQ")},
    "YP": (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
           -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17),
    "YQ": (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
           1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
           6.87141087355300489866e+16, 3.97270608116560655612e+18),
}

_K0 = {
    "A": (1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
          1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
          1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
          -5.35327393233902768720e-01),
    "B": (5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
          -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
          6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
          -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
          1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
          -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
          2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
          -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
          2.44030308206595545468e+00),
}

_K1 = {
    "A": (-7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
          -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
          -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
          -3.53155960776544875667e-01, 1.52530022733894777053e+00),
    "B": (-5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
          1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
          -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
          3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
          -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
          2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
          -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
          1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
          2.72062619048444266945e+00),
}

_LANCZOS = {
    "num": (0.006061842346248906525783753964555936883222, 0.5098416655656676188125178644804694509993,
            19.51992788247617482847860966235652136208, 449.9445569063168119446858607650988409623,
            6955.999602515376140356310115515198987526, 75999.29304014542649875303443598909137092,
            601859.6171681098786670226533699352302507, 3481712.15498064590882071018964774556468,
            14605578.08768506808414169982791359218571, 43338889.32467613834773723740590533316085,
            86363131.28813859145546927288977868422342, 103794043.1163445451906271053616070238554,
            56906521.91347156388090791033559122686859),
    "den": (1., 66., 1925., 32670., 357423., 2637558., 13339535., 45995730., 105258076., 150917976.,
            120543840., 39916800., 0.),
}

_IGAM_D = (
    (-3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
          3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5, -2.1854485106799922e-6,
          -1.85406221071516e-6, 8.296711340953086e-7, -1.7665952736826079e-7, 6.7078535434014986e-9,
          1.0261809784240308e-8, -4.3820360184533532e-9, 9.1476995822367902e-10, -2.551419399494625e-11,
          -5.8307721325504251e-11, 2.4361948020667416e-11, -5.0276692801141756e-12, 1.1004392031956135e-13,
          3.3717632624009854e-13, -1.3923887224181621e-13, 2.8534893807047443e-14, -5.1391118342425726e-16,
          -1.9752288294349443e-15),
    (-1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3, -9.9022633744855967e-4,
          2.0576131687242798e-4, -4.0187757201646091e-7, -1.8098550334489978e-5, 7.6491609160811101e-6,
          -1.6120900894563446e-6, 4.6471278028074343e-9, 1.378633446915721e-7, -5.752545603517705e-8,
          1.1951628599778147e-8, -1.7543241719747648e-11, -1.0091543710600413e-9, 4.1627929918425826e-10,
          -8.5639070264929806e-11, 6.0672151016047586e-14, 7.1624989648114854e-12, -2.9331866437714371e-12,
          5.9966963656836887e-13, -2.1671786527323314e-16, -4.9783399723692616e-14, 2.0291628823713425e-14,
          -4.13125571381061e-15),
    (4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4, 2.0093878600823045e-6,
          -1.0736653226365161e-4, 5.2923448829120125e-5, -1.2760635188618728e-5, 3.4235787340961381e-8,
          1.3721957309062933e-6, -6.298992138380055e-7, 1.4280614206064242e-7, -2.0477098421990866e-10,
          -1.4092529910867521e-8, 6.228974084922022e-9, -1.3670488396617113e-9, 9.4283561590146782e-13,
          1.2872252400089318e-10, -5.5645956134363321e-11, 1.1975935546366981e-11, -4.1689782251838635e-15,
          -1.0940640427884594e-12, 4.6622399463901357e-13, -9.905105763906906e-14, 1.8931876768373515e-17,
          8.8592218725911273e-15),
    (6.4943415637860082e-4, 2.2947209362139918e-4, -4.6918949439525571e-4, 2.6772063206283885e-4,
          -7.5618016718839764e-5, -2.3965051138672967e-7, 1.1082654115347302e-5, -5.6749528269915966e-6,
          1.4230900732435884e-6, -2.7861080291528142e-11, -1.6958404091930277e-7, 8.0994649053880824e-8,
          -1.9111168485973654e-8, 2.3928620439808118e-12, 2.0620131815488798e-9, -9.4604966618551322e-10,
          2.1541049775774908e-10, -1.388823336813903e-14, -2.1894761681963939e-11, 9.7909989511716851e-12,
          -2.1782191880180962e-12, 6.2088195734079014e-17, 2.126978363279737e-13, -9.3446887915174333e-14,
          2.0453671226782849e-14),
    (-8.618882909167117e-4, 7.8403922172006663e-4, -2.9907248030319018e-4, -1.4638452578843418e-6,
          6.6414982154651222e-5, -3.9683650471794347e-5, 1.1375726970678419e-5, 2.5074972262375328e-10,
          -1.6954149536558306e-6, 8.9075075322053097e-7, -2.2929348340008049e-7, 2.956794137544049e-11,
          2.8865829742708784e-8, -1.4189739437803219e-8, 3.4463580499464897e-9, -2.3024517174528067e-13,
          -3.9409233028046405e-10, 1.8602338968504502e-10, -4.356323005056618e-11, 1.2786001016296231e-15,
          4.6792750266579195e-12, -2.1492464706134829e-12, 4.9088156148096522e-13, -6.3385914848915603e-18,
          -5.0453320690800944e-14),
    (-3.3679855336635815e-4, -6.9728137583658578e-5, 2.7727532449593921e-4, -1.9932570516188848e-4,
          6.7977804779372078e-5, 1.419062920643967e-7, -1.3594048189768693e-5, 8.0184702563342015e-6,
          -2.2914811765080952e-6, -3.252473551298454e-10, 3.4652846491085265e-7, -1.8447187191171343e-7,
          4.8240967037894181e-8, -1.7989466721743515e-14, -6.3061945000135234e-9, 3.1624176287745679e-9,
          -7.8409242536974293e-10, 5.1926791652540407e-15, 9.3589442423067836e-11, -4.5134262161632782e-11,
          1.0799129993116827e-11, -3.661886712685252e-17, -1.210902069055155e-12, 5.6807435849905643e-13,
          -1.3249659916340829e-13),
    (5.3130793646399222e-4, -5.9216643735369388e-4, 2.7087820967180448e-4, 7.9023532326603279e-7,
          -8.1539693675619688e-5, 5.6116827531062497e-5, -1.8329116582843376e-5, -3.0796134506033048e-9,
          3.4651553688036091e-6, -2.0291327396058604e-6, 5.7887928631490037e-7, 2.338630673826657e-13,
          -8.8286007463304835e-8, 4.7435958880408128e-8, -1.2545415020710382e-8, 8.6496488580102925e-14,
          1.6846058979264063e-9, -8.5754928235775947e-10, 2.1598224929232125e-10, -7.6132305204761539e-16,
          -2.6639822008536144e-11, 1.3065700536611057e-11, -3.1799163902367977e-12, 4.7109761213674315e-18,
          3.6902800842763467e-13),
    (3.4436760689237767e-4, 5.1717909082605922e-5, -3.3493161081142236e-4, 2.812695154763237e-4,
          -1.0976582244684731e-4, -1.2741009095484485e-7, 2.7744451511563644e-5, -1.8263488805711333e-5,
          5.7876949497350524e-6, 4.9387589339362704e-10, -1.0595367014026043e-6, 6.1667143761104075e-7,
          -1.7562973359060462e-7, -1.2974473287015439e-12, 2.695423606288966e-8, -1.4578352908731271e-8,
          3.887645959386175e-9, -3.8810022510194121e-17, -5.3279941738772867e-10, 2.7437977643314845e-10,
          -6.9957960920705679e-11, 2.5899863874868481e-17, 8.8566890996696381e-12, -4.403168815871311e-12,
          1.0865561947091654e-12),
    (-6.5262391859530942e-4, 8.3949872067208728e-4, -4.3829709854172101e-4, -6.969091458420552e-7,
          1.6644846642067548e-4, -1.2783517679769219e-4, 4.6299532636913043e-5, 4.5579098679227077e-9,
          -1.0595271125805195e-5, 6.7833429048651666e-6, -2.1075476666258804e-6, -1.7213731432817145e-11,
          3.7735877416110979e-7, -2.1867506700122867e-7, 6.2202288040189269e-8, 6.5977038267330006e-16,
          -9.5903864974256858e-9, 5.2132144922808078e-9, -1.3991589583935709e-9, 5.382058999060575e-16,
          1.9484714275467745e-10, -1.0127287556389682e-10, 2.6077347197254926e-11, -5.0904186999932993e-18,
          -3.3721464474854592e-12),
    (-5.9676129019274625e-4, -7.2048954160200106e-5, 6.7823088376673284e-4, -6.4014752602627585e-4,
          2.7750107634328704e-4, 1.8197008380465151e-7, -8.4795071170685032e-5, 6.105192082501531e-5,
          -2.1073920183404862e-5, -8.8585890141255994e-10, 4.5284535953805377e-6, -2.8427815022504408e-6,
          8.7082341778646412e-7, 3.6886101871706965e-12, -1.5344695190702061e-7, 8.862466778790695e-8,
          -2.5184812301826817e-8, -1.0225912098215092e-14, 3.8969470758154777e-9, -2.1267304792235635e-9,
          5.7370135528051385e-10, -1.887749850169741e-19, -8.0931538694657866e-11, 4.2382723283449199e-11,
          -1.1002224534207726e-11),
    (1.3324454494800656e-3, -1.9144384985654775e-3, 1.1089369134596637e-3, 9.932404122642299e-7,
           -5.0874501293093199e-4, 4.2735056665392884e-4, -1.6858853767910799e-4, -8.1301893922784998e-9,
           4.5284402370562147e-5, -3.127053674781734e-5, 1.044986828530338e-5, 4.8435226265680926e-11,
           -2.1482565873456258e-6, 1.329369701097492e-6, -4.0295693092101029e-7, -1.7567877666323291e-13,
           7.0145043163668257e-8, -4.040787734999483e-8, 1.1474026743371963e-8, 3.9642746853563325e-18,
           -1.7804938269892714e-9, 9.7480262548731646e-10, -2.6405338676507616e-10, 5.794875163403742e-18,
           3.7647749553543836e-11),
    (1.579727660730835e-3, 1.6251626278391582e-4, -2.0633421035543276e-3, 2.1389686185689098e-3,
           -1.0108559391263003e-3, -3.9912705529919201e-7, 3.6235025084764691e-4, -2.8143901463712154e-4,
           1.0449513336495887e-4, 2.1211418491830297e-9, -2.5779417251947842e-5, 1.7281818956040463e-5,
           -5.6413773872904282e-6, -1.1024320105776174e-11, 1.1223224418895175e-6, -6.8693396379526735e-7,
           2.0653236975414887e-7, 4.6714772409838506e-14, -3.5609886164949055e-8, 2.0470855345905963e-8,
           -5.8091738633283358e-9, -1.332821287582869e-16, 9.0354604391335133e-10, -4.9598782517330834e-10,
           1.3481607129399749e-10),
    (-4.0725121195140166e-3, 6.4033628338080698e-3, -4.0410161081676618e-3, -2.183732802866233e-6,
           2.1740441801254639e-3, -1.9700440518418892e-3, 8.3595469747962458e-4, 1.9445447567109655e-8,
           -2.5779387120421696e-4, 1.9009987368139304e-4, -6.7696499937438965e-5, -1.4440629666426572e-10,
           1.5712512518742269e-5, -1.0304008744776893e-5, 3.304517767401387e-6, 7.9829760242325709e-13,
           -6.4097794149313004e-7, 3.8894624761300056e-7, -1.1618347644948869e-7, -2.816808630596451e-15,
           1.9878012911297093e-8, -1.1407719956357511e-8, 3.2355857064185555e-9, 4.1759468293455945e-20,
           -5.0423112718105824e-10),
)
