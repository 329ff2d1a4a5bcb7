"""Convolution family formulas, worked by hand; output shapes and FLOPs cross-checked against torch."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import from_sizes
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod="torch.nn.functional"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


def test_conv2d_forward_by_hand():
    # x [2, 3, 32, 32], w [16, 3, 3, 3], stride 1, padding 1 -> y [2, 16, 32, 32]
    x, w, b = T([2, 3, 32, 32], name="input"), T([16, 3, 3, 3], name="weight"), T([16], name="bias")
    c = cost("conv2d", [x, w, b, S(1, "stride"), S(1, "padding")])
    assert c.flops == 2 * 2 * 32 * 32 * 16 * 3 * 9  # 2·N·HoWo·Cout·Cin·k² = 1_769_472
    assert c.bytes == (6144 + 432 + 16 + 32768) * 4  # x, w, b, y
    assert c.tensor_op and c.dtype == "float32"


def test_conv2d_backward_by_hand():
    x, w = T([2, 3, 32, 32], grad=True), T([16, 3, 3, 3], grad=True)
    bw = cost("conv2d", [x, w, S(None), S(1), S(1)], "bprop")
    assert bw.flops == 2 * 1_769_472  # dgrad + wgrad, each the forward's
    # dX: read dY 32768 + W 432, write dX 6144; dW: read X 6144 + dY 32768, write dW 432
    assert bw.bytes == (32768 + 432 + 6144 + 6144 + 32768 + 432) * 4
    first = cost("conv2d", [T([2, 3, 32, 32], grad=False), w, S(None), S(1), S(1)], "bprop")
    assert first.flops == 1_769_472  # an image input needs no dgrad


def test_grouped_strided_dilated_conv():
    # depthwise: x [1, 32, 15, 15], w [32, 1, 3, 3], groups 32, stride 2, padding 2, dilation 2
    # Ho = (15 + 4 - 2*2 - 1) // 2 + 1 = 8
    c = cost("conv2d", [T([1, 32, 15, 15]), T([32, 1, 3, 3]), S(None), S(2), S(2), S(2), S(32)])
    assert c.flops == 2 * 1 * 8 * 8 * 32 * 1 * 9  # 36_864
    assert cost("conv2d", [T([1, 32, 15, 15]), T([32, 1, 3, 3]), S(None), S(2), S(2), S(2), S(32)],
                "bprop").flops == 2 * 36_864


def test_conv1d_3d_and_padding_strings():
    # conv1d x [4, 8, 100], w [16, 8, 5], padding 'same' -> L 100: 2·4·100·16·8·5
    assert cost("conv1d", [T([4, 8, 100]), T([16, 8, 5]), S(None), S(1), S("same")]).flops == 512_000
    # 'valid' -> L 96
    assert cost("conv1d", [T([4, 8, 100]), T([16, 8, 5]), S(None), S(1), S("valid")]).flops == 491_520
    # conv3d x [1, 2, 8, 8, 8], w [4, 2, 3, 3, 3], no padding -> 6³: 2·216·4·2·27
    assert cost("conv3d", [T([1, 2, 8, 8, 8]), T([4, 2, 3, 3, 3])]).flops == 93_312


def test_conv_transpose2d_by_hand():
    # x [1, 16, 8, 8], w [16, 8, 4, 4] (Cin, Cout/g, k, k), stride 2, padding 1 -> y [1, 8, 16, 16]
    # FLOPs over *input* points: 2·N·H·W·prod(w) = 2·64·2048 = 262_144
    x, w = T([1, 16, 8, 8]), T([16, 8, 4, 4])
    c = cost("conv_transpose2d", [x, w, S(None), S(2), S(1)])
    assert c.flops == 262_144
    assert c.bytes == (1024 + 2048 + 8 * 16 * 16) * 4
    assert cost("conv_transpose2d", [x, w, S(None), S(2), S(1)], "bprop").flops == 2 * 262_144


def test_aten_spellings_bind_their_own_signatures():
    x, w = T([2, 3, 32, 32]), T([16, 3, 3, 3])
    want = 1_769_472
    # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    assert cost("aten::convolution", [x, w, S(None), S([1, 1]), S([1, 1]), S([1, 1]), S(False), S([0, 0]), S(1)],
                mod="aten").flops == want
    # aten::cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): no bias, padding first
    assert cost("aten::cudnn_convolution", [x, w, S([1, 1]), S([1, 1]), S([1, 1]), S(1)], mod="aten").flops == want
    # sizes only (emit_nvtx): stride/padding unknown -> FLOPs unknown, never guessed
    assert cost("aten::cudnn_convolution", from_sizes([[2, 3, 32, 32], [16, 3, 3, 3], [], [], [], []]),
                mod="aten") is None


@pytest.mark.torch
@pytest.mark.parametrize("kind, xs, ws, kw", [
    ("conv2d", [2, 3, 17, 19], [8, 3, 3, 5], dict(stride=2, padding=1)),
    ("conv2d", [1, 8, 14, 14], [8, 2, 3, 3], dict(groups=4, dilation=2)),
    ("conv1d", [3, 4, 50], [6, 4, 7], dict(stride=3)),
    ("conv3d", [1, 2, 6, 7, 8], [3, 2, 2, 3, 3], dict(padding=1)),
    ("conv_transpose2d", [2, 4, 7, 9], [4, 3, 3, 3], dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose1d", [1, 4, 10], [4, 5, 4], dict(stride=3)),
])
def test_conv_agrees_with_torch_and_flopcountermode(kind, xs, ws, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    x, w = torch.randn(*xs, requires_grad=True), torch.randn(*ws, requires_grad=True)
    with FlopCounterMode(display=False) as fc:
        y = getattr(F, kind)(x, w, **kw)
    fwd = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        y.sum().backward()
    args = [T(xs, name="input"), T(ws, name="weight")] + [S(v, k) for k, v in kw.items()]
    c = cost(kind, args)
    ny = y.numel()
    assert c.flops == fwd
    assert c.bytes == (x.numel() + w.numel() + ny) * 4  # output shape is right too
    bw = cost(kind, args, "bprop").flops
    if kw.get("groups", 1) == 1:
        assert bw == fc.get_total_flops()
    else:  # FlopCounterMode prices a grouped conv's weight gradient `groups` times; ours is exact
        assert bw == 2 * fwd and fc.get_total_flops() == fwd + kw["groups"] * fwd


def test_convolution_backward_called_as_itself_by_hand():
    """A compiled backward graph calls ``aten::convolution_backward`` directly: its output_mask says
    which gradients it computes. x [8, 32, 32, 32], w [64, 32, 3, 3], stride 2, pad 1 -> y [8, 64, 16, 16]:
    the forward is 2 * 8 * 16*16 * 64*32*3*3 = 75,497,472 FLOPs; dX and dW cost that each."""
    fwd = 2 * 8 * 16 * 16 * 64 * 32 * 3 * 3

    def call(mask):
        args = [T([8, 64, 16, 16]), T([8, 32, 32, 32]), T([64, 32, 3, 3]), S([64]), S([2, 2]), S([1, 1]),
                S([1, 1]), S(False), S([0, 0]), S(1), S(mask)]
        return estimate(OpCall("convolution_backward", args, "fprop", None, "aten"))

    both = call([True, True, True])
    assert both.flops == 2 * fwd and both.tensor_op
    # bytes (float32): dX reads dY, W and writes dX; dW reads X, dY and writes dW; db reads dY, writes 64
    ny, nx, nw = 8 * 64 * 16 * 16, 8 * 32 * 32 * 32, 64 * 32 * 9
    assert both.bytes == 4 * ((ny + nw + nx) + (nx + ny + nw) + (ny + 64))
    assert call([False, True, False]).flops == fwd
    assert call([False, False, True]).flops == 0
