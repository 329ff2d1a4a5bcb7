"""Resampling and random families, worked by hand; interpolate output sizes checked against torch."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod="torch.nn.functional"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


def test_bilinear_interpolate_from_the_corpus_marker():
    # F.interpolate([1, 144, 16, 16], None, 2.0, 'bilinear', False) -> [1, 144, 32, 32] = 147_456 outputs
    args = [T([1, 144, 16, 16]), S(None), S(2.0), S("bilinear"), S(False)]
    c = cost("interpolate", args)
    assert c.flops == 147_456 * 7  # 4 taps: 4 multiplies + 3 adds
    assert c.bytes == (36_864 + 147_456) * 4
    assert cost("interpolate", args, "bprop").flops == 147_456 * 8  # multiply-add onto each tap


def test_nearest_is_a_copy_and_aten_spellings():
    c = cost("interpolate", [T([2, 3, 10]), S(25), S(None), S("nearest")])
    assert c.flops == 0 and c.bytes == (60 + 150) * 4
    a = cost("aten::upsample_bilinear2d", [T([1, 2, 5, 5]), S([10, 10]), S(False)], mod="aten")
    assert a.flops == 2 * 100 * 7


@pytest.mark.torch
@pytest.mark.parametrize("xs, kw", [([1, 2, 7, 9], dict(scale_factor=1.5, mode="bilinear")),
                                    ([1, 2, 7], dict(size=20, mode="linear")),
                                    ([1, 1, 3, 4, 5], dict(scale_factor=[2, 1.5, 0.5], mode="trilinear"))])
def test_interpolate_sizes_match_torch(xs, kw):
    torch = pytest.importorskip("torch")
    y = torch.nn.functional.interpolate(torch.randn(*xs), **kw)
    c = cost("interpolate", [T(xs)] + [S(v, k) for k, v in kw.items()])
    assert c.bytes == (torch.Size(xs).numel() + y.numel()) * 4


def test_random_fills_write_their_output():
    c = cost("uniform_", [T([6, 3, 3, 3])], mod="Tensor")  # corpus: PyProf marker of weight init
    assert c.flops == 0 and c.bytes == 162 * 4
    assert cost("randn", [S(1, "size"), S(7), S(64)], mod="torch").bytes == 448 * 4
    assert cost("randint", [S(0), S(10), S([4, 4])], mod="torch").bytes == 16 * 8
    assert cost("bernoulli", [T([10], "float16"), T([10], "float16")], mod="torch").bytes == 20 + 20
    assert cost("randn", [], mod="torch") is None  # old PyProf kept no size: unknown
    assert cost("uniform_", [T([4])], "bprop").bytes == 0
