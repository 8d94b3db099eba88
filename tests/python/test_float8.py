"""The 8-bit floats (float8_e5m2, float8_e4m3fn and their FNUZ variants):
storage, conversions bit for bit as PyTorch's CPU converts (round to nearest
even once, e4m3fn saturating, e5m2 to infinity, FNUZ to NaN), factories and
fills, the data movement ops CPU has for them, and torch._scaled_mm (the
float8 matmul) against CPU."""
import pytest
import torch

import torch_tpu  # noqa: F401

F8 = (torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float8_e4m3fnuz)


def _values():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(20000, generator=g) * s for s in (1e-3, 0.1, 3, 100, 3e4)])
    special = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30, 448, 464, 465, 480,
               -480, 57344, 61440, 61441, 1e6, -1e6, 2.0 ** -17, 2.0 ** -18, 3 * 2.0 ** -19]
    return torch.cat([x, torch.tensor(special)])


def _same_bits(a, b, dtype):
    """Equal bits, any NaN equal to any NaN."""
    a, b = a.cpu(), b.cpu()
    nan = a.float().isnan() & b.float().isnan()
    return bool(((a.view(torch.uint8) == b.view(torch.uint8)) | nan).all())


@pytest.mark.parametrize("dtype", F8, ids=str)
@pytest.mark.parametrize("src", (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64), ids=str)
def test_conversion_matches_cpu_bit_for_bit(dtype, src):
    x = _values()
    x = x.to(src) if src.is_floating_point else x.clamp(-1e6, 1e6).nan_to_num(0).round().to(src)
    assert _same_bits(x.to("tpu").to(dtype), x.to(dtype), dtype)


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_conversion_back_and_between_f8(dtype):
    x = _values().to(dtype)
    t = x.to("tpu")
    assert _same_bits(t, x, dtype)
    for to in (torch.float32, torch.bfloat16, torch.float16) + F8:
        assert _same_bits(t.to(to), x.to(to), to) if to in F8 else torch.equal(t.to(to).cpu(), x.to(to)) or \
            bool((t.to(to).cpu().isnan() == x.to(to).isnan()).all())


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_factories_fills_and_movement(dtype):
    x = (torch.randn(6, 5) * 4).to(dtype)
    t = x.to("tpu")
    cases = [
        (lambda d: torch.eye(4, 3, dtype=dtype, device=d)),
        (lambda d: torch.full((3, 2), 2.75, dtype=dtype, device=d)),
        (lambda d: torch.zeros(5, dtype=dtype, device=d)),
        (lambda d: torch.ones(2, 2, dtype=dtype, device=d)),
    ]
    for make in cases:
        assert _same_bits(make("tpu"), make("cpu"), dtype)
    for fn in (lambda a: torch.cat([a, a], 1), lambda a: torch.stack([a, a]), lambda a: a.t().contiguous(),
               lambda a: a[1:4:2], lambda a: a.flip(0), lambda a: a[[0, 3]], lambda a: a.clone().fill_(-1.5),
               lambda a: a.clone().zero_(), lambda a: a.index_select(1, torch.tensor([4, 0], device=a.device)),
               lambda a: torch.where(a.float() > 0, a, a.flip(1)), lambda a: a.abs(), lambda a: a * a):
        try:
            ref = fn(x)
        except NotImplementedError:  # CPU has no kernel of it for this dtype
            continue
        assert _same_bits(fn(t), ref, dtype)
    assert torch.equal((t == t).cpu(), x == x) and torch.equal(t.isnan().cpu(), x.isnan())
    with pytest.raises(RuntimeError, match="overflow"):
        torch.full((2,), 1e6, dtype=torch.float8_e5m2, device="tpu")


def _scaled_both(*args, **kw):
    def one(dev):
        mv = lambda v: v.to(dev) if isinstance(v, torch.Tensor) else v  # noqa: E731
        try:
            return torch._scaled_mm(*[mv(a) for a in args], **{k: mv(v) for k, v in kw.items()})
        except Exception as e:  # noqa: BLE001 - compared below
            return e
    return one("cpu"), one("tpu")


@pytest.mark.parametrize("a_dt,b_dt", [(torch.float8_e4m3fn, torch.float8_e4m3fn),
                                       (torch.float8_e4m3fn, torch.float8_e5m2),
                                       (torch.float8_e5m2, torch.float8_e4m3fn)], ids=str)
def test_scaled_mm_matches_cpu(a_dt, b_dt):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(16, 32, generator=g).to(a_dt)
    b = torch.randn(48, 32, generator=g).to(b_dt).t()
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    exact = (a.double() * 0.5) @ (b.double() * 2.0)
    for kw in ({}, {"out_dtype": torch.float32}, {"out_dtype": torch.bfloat16, "bias": torch.randn(48).bfloat16()},
               {"out_dtype": torch.float32, "bias": torch.randn(48)}, {"scale_result": torch.tensor(3.0)}):
        c, t = _scaled_both(a, b, sa, sb, **kw)
        assert t.dtype == c.dtype and t.device.type == "tpu" and t.shape == c.shape
        # float32 accumulation order differs: within one rounding of the result type
        ref = exact + (kw["bias"].double() if "bias" in kw else 0)
        tol = 0.13 if c.dtype in F8 else 1e-2 if c.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(t.cpu().double(), ref, atol=tol * 4, rtol=tol)
        torch.testing.assert_close(t.cpu().double(), c.double(), atol=tol * 4, rtol=tol)
    sa_row, sb_row = torch.rand(16, 1, generator=g), torch.rand(1, 48, generator=g)
    c, t = _scaled_both(a, b, sa_row, sb_row, out_dtype=torch.float32)
    torch.testing.assert_close(t.cpu(), c, atol=1e-4, rtol=1e-5)


def test_scaled_mm_errors_match_cpu():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(48, 32).to(torch.float8_e4m3fn).t()
    s = torch.tensor(1.0)
    for args in ((a.float(), b.float(), s, s), (a, b, torch.rand(2), s), (a, b, s.double(), s),
                 (a, torch.randn(31, 4).to(torch.float8_e4m3fn), s, s), (a[0], b, s, s)):
        c, t = _scaled_both(*args)
        assert isinstance(c, Exception) and type(t) is type(c), (c, t)
        assert str(t).splitlines()[0] == str(c).splitlines()[0]
