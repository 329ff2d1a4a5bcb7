"""Double backward of torch's OpInfo convolution samples (``scripts/validate.py --catalogue gradgrad``) that
pyprof counted differently from FlopCounterMode (issue #42), through the user's path (``init()`` +
torch.profiler, parse, prof):

* ``padding='same'`` with an even kernel pads the input first: the final backward runs
  ``ConstantPadNdBackward0`` again under the forward op (``constant_pad_nd`` cropping, by a ``clone``),
  and its pad widths are not recorded. An op that only moves data does no FLOPs whatever those widths
  are: what ran prices it, never the convolution's backward formula;
* a transposed convolution whose ``output_padding`` reaches its stride (allowed below the dilation):
  the double backward's data gradient of ``(gO, ggW)`` is a convolution of gO that comes out
  ``output_padding // stride`` wider than X per dim, and runs that wide before it is cut.
"""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate, scalar_arg, tensor_arg

# (op, input, weight, bias, kwargs): the samples nn.functional.conv2d[12], conv3d[8], conv_transpose2d[2]
# and conv_transpose3d[2] of torch 2.13's OpInfo catalogue
SAMPLES = {
    "conv2d_same_dilated": ("conv2d", (1, 4, 5, 5), (1, 4, 2, 3), (1,), {"padding": "same", "dilation": 3}),
    "conv3d_same_even": ("conv3d", (1, 1, 10, 11, 12), (1, 1, 1, 2, 5), None, {"padding": "same"}),
    "conv_transpose2d_wide": ("conv_transpose2d", (2, 2, 4, 4), (2, 2, 4, 5), (4,),
                              {"stride": (3, 2), "padding": (1, 2), "output_padding": (2, 3), "groups": 2,
                               "dilation": (4, 4)}),
    "conv_transpose3d_wide": ("conv_transpose3d", (2, 2, 4, 4, 4), (2, 2, 4, 5, 6), (4,),
                              {"stride": (3, 2, 1), "padding": (1, 2, 3), "output_padding": (2, 3, 1),
                               "groups": 2, "dilation": (4, 4, 4)}),
}


def test_transposed_double_backward_runs_its_data_gradient_wide():
    """conv_transpose2d_wide's double backward with ggI, ggW and ggb (Y is 2x4x22x22). The forward's FLOPs
    are 2·N·prod(X spatial)·prod(W) = 2·2·16·80 = 5120: conv(ggI, W) and conv(X, ggW) one each; the
    data gradient of (gO, ggW) runs over 4 x (4 + 3 // 2) = 20 positions, 2·2·20·80 = 6400; the weight
    gradient of (ggI, gO) over the 4 x 5 kernel positions it keeps, 2·2·2·20·2·16 = 5120."""
    x, w, go = [2, 2, 4, 4], [2, 2, 4, 5], [2, 4, 22, 22]
    args = [tensor_arg(x), tensor_arg(w), tensor_arg([4]), tensor_arg(go), tensor_arg(w), tensor_arg(x),
            *map(scalar_arg, ([3, 2], [1, 2], [4, 4], True, [2, 3], 2, [True] * 3))]
    cost = estimate(OpCall("aten::_convolution_double_backward", args, "fprop", None, "aten"))
    assert cost is not None and cost.flops == 5120 + 5120 + 6400 + 5120
    # output_padding not known: the data gradient's width is not either (never the narrow figure)
    args[10] = {"name": "", "type": "unknown"}
    assert estimate(OpCall("aten::_convolution_double_backward", args, "fprop", None, "aten")) is None


@pytest.mark.torch
@pytest.mark.parametrize("sample", list(SAMPLES))
def test_a_conv_sample_double_backward_equals_flopcountermode(sample, tmp_path):
    """The output, the gradients of its inputs with ``create_graph``, a backward through them: pyprof's
    convolution FLOPs per direction equal FlopCounterMode's (under the harness's conventions)."""
    torch = pytest.importorskip("torch")
    from scripts.validation.catalogue import _counter, _pyprof

    op, xs, ws, bs, kw = SAMPLES[sample]
    gen = torch.Generator().manual_seed(0)
    ins = [torch.randn(s, generator=gen, requires_grad=True) if s else None for s in (xs, ws, bs)]

    def step():
        out = getattr(torch.nn.functional, op)(*ins, **kw)
        gs = torch.autograd.grad(out, [t for t in ins if t is not None], torch.ones_like(out), create_graph=True)
        gs = [g for g in gs if g.requires_grad]
        torch.autograd.backward(gs, [torch.ones_like(g) for g in gs])

    counter = _counter()
    with counter:
        step()
    got = _pyprof(step, tmp_path)
    assert counter.flops["bprop"] > 0
    assert got == pytest.approx(counter.flops, rel=1e-9)
