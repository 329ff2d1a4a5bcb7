"""The convolution's double backward (``_convolution_double_backward``): figures by hand, then against
torch's own count (FlopCounterMode over the convolutions the double backward runs) for the call a
torch.profiler trace records, over strides, padding, dilation, groups, transposed convolutions and
which gradients reach it."""

from __future__ import annotations

import itertools

import pytest

from pyprof.prof.ops import OpCall, estimate, scalar_arg, tensor_arg


def _call(ggi, ggw, go, w, x, stride=(1, 1), pad=(1, 1), dil=(1, 1), transposed=False, groups=1):
    none = scalar_arg(None)
    args = [tensor_arg(ggi) if ggi else none, tensor_arg(ggw) if ggw else none, none, tensor_arg(go), tensor_arg(w),
            tensor_arg(x), *map(scalar_arg, (list(stride), list(pad), list(dil), transposed, [0, 0], groups,
                                             [True] * 3))]
    return estimate(OpCall("aten::_convolution_double_backward", args, "fprop", None, "aten"))


def test_by_hand():
    # a gradient penalty's first layer: only ggI reached it; ggO = conv(ggI, W) and dW of (ggI, gO), each
    # the forward's 2·N·C_out·H_out·W_out·C_in·k² = 2·8·16·16·16·3·9
    fwd = 2 * 8 * 16 * 16 * 16 * 3 * 9
    c = _call([8, 3, 16, 16], None, [8, 16, 16, 16], [16, 3, 3, 3], [8, 3, 16, 16])
    assert c.flops == 2 * fwd and c.tensor_op
    # ggW too: conv(X, ggW) for ggO and the data gradient of (gO, ggW) on top
    assert _call([8, 3, 16, 16], [16, 3, 3, 3], [8, 16, 16, 16], [16, 3, 3, 3], [8, 3, 16, 16]).flops == 4 * fwd
    # stride 2: the weight gradient runs uncut over (16 + 2 - 2·7 - 1) + 1 = 4 positions per dim, not k = 3
    fwd2 = 2 * 8 * 32 * 8 * 8 * 16 * 9
    c = _call([8, 16, 16, 16], None, [8, 32, 8, 8], [32, 16, 3, 3], [8, 16, 16, 16], stride=(2, 2))
    assert c.flops == fwd2 + 2 * 32 * 16 * 16 * 8 * 64
    # nothing known of the layout: unknown, never 0
    assert _call([8, 3, 16, 16], None, [8, 16, 16, 16], [16, 3], [8, 3, 16, 16]) is None


GRID = list(itertools.product([1, 2], [1, 2], [0, 1], [1, 2], [1, 2], [False, True], ["x", "w", "xw"]))


@pytest.mark.torch
@pytest.mark.parametrize("nd,stride,pad,dil,groups,transposed,grads", GRID[::11])  # a sample of the 192 (all agree)
def test_equals_flopcountermode(nd, stride, pad, dil, groups, transposed, grads):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    from pyprof.parse.kineto.args import kineto_args

    F = torch.nn.functional
    gen = torch.Generator().manual_seed(0)
    sp = [9, 8][nd - 1]
    x = torch.randn(2, 4, *[sp] * nd, generator=gen, requires_grad=True)
    shape = (4, 6 // groups) if transposed else (6, 4 // groups)
    w = torch.randn(*shape, *[3] * nd, generator=gen, requires_grad=True)
    conv = getattr(F, f"conv_transpose{nd}d" if transposed else f"conv{nd}d")
    y = conv(x, w, None, stride, pad, 0, groups, dil) if transposed else conv(x, w, None, stride, pad, dil, groups)
    ins = [t for k, t in (("x", x), ("w", w)) if k in grads]
    gs = torch.autograd.grad((y * torch.randn(y.shape, generator=gen)).sum(), ins, create_graph=True)
    loss = sum((g * torch.randn(g.shape, generator=gen)).sum() for g in gs)
    with FlopCounterMode(display=False) as counter, profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        loss.backward()
    (ev,) = [e for e in p.events() if e.name == "aten::_convolution_double_backward"]
    concrete = ev.concrete_inputs
    types = ["float" if s else "" for s in ev.input_shapes[:6]] + [
        "ScalarList" if isinstance(c, list) else "Scalar" for c in concrete[6:]]
    args = kineto_args(ev.input_shapes, types, ["" if c is None else str(c) for c in concrete])
    cost = estimate(OpCall("aten::_convolution_double_backward", args, "fprop", None, "aten"))
    assert cost is not None and cost.flops == counter.get_total_flops() > 0
