"""Double backward of torch's OpInfo convolution samples (``scripts/validate.py --catalogue gradgrad``) that
pyprof counted differently from FlopCounterMode (issue #42), through the user's path (``init()`` +
torch.profiler, parse, prof):

* ``padding='same'`` with an even kernel pads the input first: the final backward runs
  ``ConstantPadNdBackward0`` again under the forward op (``constant_pad_nd`` cropping, by a ``clone``),
  and its pad widths are not recorded. An op that only moves data does no FLOPs whatever those widths
  are: what ran prices it, never the convolution's backward formula.
"""

from __future__ import annotations

import pytest

# (op, input, weight, bias, kwargs): the samples nn.functional.conv2d[12] and conv3d[8] of torch 2.13's OpInfo
# catalogue
SAMPLES = {
    "conv2d_same_dilated": ("conv2d", (1, 4, 5, 5), (1, 4, 2, 3), (1,), {"padding": "same", "dilation": 3}),
    "conv3d_same_even": ("conv3d", (1, 1, 10, 11, 12), (1, 1, 1, 2, 5), None, {"padding": "same"}),
}


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
