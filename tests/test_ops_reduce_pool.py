"""Reduction and pooling families, worked by hand; pooling output shapes checked against torch."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod="torch"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


# ----------------------------------------------------------------------------- reductions
def test_sum_all_and_along_dims():
    x = T([4, 5, 6])
    c = cost("sum", [x])
    assert c.flops == 120 and c.bytes == 120 * 4 + 4  # one add per element, scalar out
    c = cost("sum", [x, S([0, 2]), S(True)])
    assert c.flops == 120 and c.bytes == (120 + 5) * 4  # out [1, 5, 1]
    b = cost("sum", [x, S(1)], "bprop")
    assert b.flops == 0 and b.bytes == (24 + 120) * 4  # broadcast dY [4, 6] back to dX


def test_mean_and_dtype_argument():
    c = cost("mean", [T([8, 10], "float16"), S(1), S(False), S("float32", "dtype")], mod="torch.Tensor")
    assert c.flops == 80 + 8  # adds + one divide per output
    assert c.bytes == 80 * 2 + 8 * 4
    assert cost("mean", [T([8, 10]), S(1)], "bprop").flops == 80


def test_norm_variants():
    x = T([100])
    assert cost("norm", [x]).flops == 2 * 100 + 1  # square+add, one sqrt
    assert cost("norm", [x, S(3.0)]).flops == 3 * 100 + 1  # abs, pow, add
    assert cost("vector_norm", [x], mod="torch.linalg").flops == 201
    assert cost("norm", [x], "bprop").flops == 200
    # the nuclear norm is a sum of singular values: the linalg family's SVD-values count (Golub and
    # Van Loan: 4mn² − (4/3)n³ = 500 − 166.67 for 5x5), not a reduction
    assert cost("norm", [T([5, 5]), S("nuc", "p")]).flops == pytest.approx(500 - 500 / 3)


def test_max_reduction_and_elementwise_forms():
    assert cost("max", [T([6, 7]), S(1)]).flops == 42  # one compare per element
    assert cost("max", [T([6, 7]), S(1)], "bprop").flops == 2 * 42
    elementwise = cost("max", [T([6, 7]), T([6, 7])])
    assert elementwise.flops == 42 and elementwise.bytes == 42 * 4 * 3
    assert cost("argmax", [T([6, 7]), S(1)]).bytes == 42 * 4 + 6 * 8  # int64 result


def test_var_std_logsumexp():
    x = T([10, 20])
    assert cost("var", [x, S(1)]).flops == 4 * 200 + 10
    assert cost("std", [x, S(1)]).flops == 4 * 200 + 2 * 10
    assert cost("logsumexp", [x, S(1)]).flops == 4 * 200 + 2 * 10
    assert cost("var", [x, S(1)], "bprop").flops == 3 * 200


# ----------------------------------------------------------------------------- pooling
def test_max_pool2d_by_hand():
    # x [1, 64, 112, 112], k 3, s 2, p 1 -> 56 x 56 (ResNet's stem)
    c = cost("max_pool2d", [T([1, 64, 112, 112]), S(3), S(2), S(1)], mod="torch.nn.functional")
    n_out = 64 * 56 * 56  # 200_704
    assert c.flops == n_out * 9  # one compare per window element
    assert c.bytes == (64 * 112 * 112 + n_out) * 4
    b = cost("max_pool2d", [T([1, 64, 112, 112]), S(3), S(2), S(1)], "bprop")
    assert b.flops == n_out  # scatter to argmax, one add each
    assert b.bytes == (n_out + 64 * 112 * 112) * 4 + n_out * 8  # dY, dX, int64 indices


def test_avg_pool_default_stride_and_adaptive():
    # avg_pool2d k 2 (stride defaults to k) on [2, 3, 8, 8] -> 4x4: 4 adds + 1 divide per output
    assert cost("avg_pool2d", [T([2, 3, 8, 8]), S(2)]).flops == 96 * 4 + 96
    # adaptive 7x7 -> 1x1: one window of 49 per channel + one divide: 2048 channels
    assert cost("adaptive_avg_pool2d", [T([1, 2048, 7, 7]), S([1, 1])]).flops == 2048 * 49 + 2048
    # adaptive 5 -> 3 along one dim: windows [0,2), [1,4), [3,5) = 2 + 3 + 2 = 7 elements; + 3 divides
    assert cost("adaptive_avg_pool1d", [T([1, 1, 5]), S(3)]).flops == 7 + 3


@pytest.mark.torch
@pytest.mark.parametrize("op, xs, kw", [
    ("max_pool2d", [1, 2, 11, 13], dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("max_pool2d", [1, 2, 10, 10], dict(kernel_size=2, stride=2, ceil_mode=True)),
    ("max_pool1d", [1, 2, 17], dict(kernel_size=4, stride=3, dilation=2)),
    ("avg_pool3d", [1, 1, 7, 8, 9], dict(kernel_size=[1, 2, 2], stride=[1, 2, 2])),
    ("avg_pool2d", [1, 3, 9, 9], dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("adaptive_avg_pool2d", [1, 3, 10, 7], dict(output_size=[3, 4])),
    ("adaptive_max_pool2d", [1, 3, 10, 7], dict(output_size=[3, 4])),
])
def test_pool_output_shapes_match_torch(op, xs, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    y = getattr(F, op)(torch.randn(*xs), **kw)
    c = cost(op, [T(xs)] + [S(v, k) for k, v in kw.items()], mod="torch.nn.functional")
    assert c.bytes == (torch.Size(xs).numel() + y.numel()) * 4


def test_avg_pool_backward_and_no_grad_input():
    # avg_pool2d k 2 on [2, 3, 8, 8]: 96 outputs, 4 window elements each: spread 384 adds + 96 divides
    b = cost("avg_pool2d", [T([2, 3, 8, 8]), S(2)], "bprop")
    assert b.flops == 384 + 96 and b.bytes == (96 + 384) * 4
    none = cost("avg_pool2d", [T([2, 3, 8, 8], grad=False), S(2)], "bprop")
    assert none.flops == 0 and none.bytes == 0


def test_scans():
    c = cost("cumsum", [T([4, 10]), S(1)])
    assert c.flops == 40 and c.bytes == 80 * 4
    assert cost("cumsum", [T([4, 10]), S(1)], "bprop").flops == 40
    assert cost("cumprod", [T([4, 10]), S(1)], "bprop").flops == 120  # 3 per element
    assert cost("logcumsumexp", [T([4, 10]), S(1)]).flops == 120


@pytest.mark.torch
@pytest.mark.parametrize("op, xs, kw", [
    ("sum", [3, 4, 5], dict(dim=[0, 2], keepdim=True)),
    ("sum", [3, 4, 5], dict(dim=-1)),
    ("mean", [3, 4, 5], dict(dim=(1,), keepdim=False)),
    ("amax", [3, 4, 5], dict(dim=0)),
    ("logsumexp", [3, 4, 5], dict(dim=2, keepdim=True)),
    ("var", [3, 4, 5], dict(dim=1)),
])
def test_reduced_shapes_match_torch(op, xs, kw):
    torch = pytest.importorskip("torch")
    y = getattr(torch, op)(torch.randn(*xs), **kw)
    c = cost(op, [T(xs, name="input")] + [S(v, k) for k, v in kw.items()])
    assert c.bytes == (torch.Size(xs).numel() + y.numel()) * 4
