"""Upsampling kernels (torch_tpu/ops/upsample.py) on tpu vs CPU, by value and by
gradient, with no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F
from op_compare import compare


# ---- upsampling ----------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(size=(10, 14)), dict(scale_factor=1.7),
                                dict(scale_factor=(0.6, 2.5)), dict(scale_factor=2),
                                dict(scale_factor=1.7, recompute_scale_factor=True)])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest2d(kw, mode):
    compare(lambda x: F.interpolate(x, mode=mode, **kw), torch.randn(2, 3, 5, 7))


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest1d_3d(mode):
    compare(lambda x: F.interpolate(x, size=11, mode=mode), torch.randn(2, 3, 5))
    compare(lambda x: F.interpolate(x, scale_factor=0.7, mode=mode), torch.randn(2, 3, 9))
    compare(lambda x: F.interpolate(x, size=(3, 4, 5), mode=mode), torch.randn(1, 2, 2, 3, 4))
    compare(lambda x: F.interpolate(x, scale_factor=(1.5, 2, 0.5), mode=mode), torch.randn(1, 2, 2, 3, 4))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(size=(1, 1)), dict(scale_factor=2.3),
                                dict(scale_factor=(0.5, 3))])
def test_upsample_bilinear2d(align, kw):
    compare(lambda x: F.interpolate(x, mode="bilinear", align_corners=align, **kw), torch.randn(2, 3, 5, 7))


@pytest.mark.parametrize("align", [False, True])
def test_upsample_linear1d_trilinear3d(align):
    compare(lambda x: F.interpolate(x, size=9, mode="linear", align_corners=align), torch.randn(2, 3, 5))
    compare(lambda x: F.interpolate(x, size=(3, 5, 7), mode="trilinear", align_corners=align),
             torch.randn(1, 2, 2, 3, 4))


def test_upsample_bilinear2d_double_and_half():
    compare(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), torch.randn(1, 2, 4, 6, dtype=torch.float64))
    compare(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"), torch.randn(1, 2, 4, 6).to(torch.bfloat16),
             atol=2e-2, rtol=2e-2, grad=False)


def test_upsample_module_training():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Upsample(scale_factor=2),
                              torch.nn.Conv2d(4, 2, 3, padding=1, padding_mode="reflect"),
                              torch.nn.Upsample(scale_factor=2, mode="bilinear"))
    x = torch.randn(2, 3, 6, 5)
    compare(lambda x, *ps: torch.func.functional_call(net, dict(zip(dict(net.named_parameters()), ps)), (x,)),
             x, *[p.detach() for p in net.parameters()], atol=1e-4)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(9, 4)), dict(scale_factor=2.3), dict(size=(1, 2))])
def test_upsample_bicubic2d(align, kw):
    compare(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw), torch.randn(2, 3, 5, 7))
    compare(lambda x: F.interpolate(x, mode="bicubic", align_corners=align, **kw),
             torch.randn(1, 2, 4, 6, dtype=torch.float64))


@pytest.mark.parametrize("mode,shape", [("nearest", (0, 3, 5)), ("linear", (0, 2, 4)), ("bilinear", (0, 3, 4, 4)),
                                        ("bicubic", (0, 2, 3, 3)), ("nearest-exact", (0, 2, 3, 3)),
                                        ("trilinear", (0, 1, 2, 3, 3))])
def test_upsample_empty_batch_on_device(mode, shape):
    compare(lambda x: F.interpolate(x, scale_factor=2, mode=mode), torch.randn(shape))


def test_upsample_empty_channels_raises_like_cpu():
    with pytest.raises(RuntimeError, match="Non-empty"):
        F.interpolate(torch.randn(2, 0, 4, 4), scale_factor=2)
    with pytest.raises(RuntimeError, match="Non-empty"):
        F.interpolate(torch.randn(2, 0, 4, 4).to("tpu"), scale_factor=2)


# ---- anti-aliased (antialias=True): two matmuls with CPU's own weights --------------------


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kw", [dict(size=(7, 40)), dict(scale_factor=0.37), dict(size=(30, 5), align_corners=True),
                                dict(scale_factor=(0.5, 1.7)), dict(size=(1, 1))])
def test_upsample_antialias(mode, kw):
    compare(lambda x: F.interpolate(x, mode=mode, antialias=True, **kw), torch.randn(2, 3, 17, 23))


def test_upsample_antialias_float64_and_what_cpu_computes():
    compare(lambda x: F.interpolate(x, size=(5, 9), mode="bilinear", antialias=True),
            torch.randn(1, 2, 12, 8, dtype=torch.float64))
    # uint8 (CPU's own fast path) still runs, through the CPU fallback, with CPU's values
    x = torch.randint(0, 255, (1, 3, 16, 16), dtype=torch.uint8)
    got = F.interpolate(x.to("tpu"), size=(5, 7), mode="bilinear", antialias=True).cpu()
    assert torch.equal(got, F.interpolate(x, size=(5, 7), mode="bilinear", antialias=True))
