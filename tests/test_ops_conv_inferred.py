"""Convolutions from traces that recorded only tensor shapes (PyTorch 1.8's ``record_shapes``): the backward
ops priced from input, grad_output and weight; the forward priced with its backward's output shape."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import CORPUS

from pyprof.prof.ops import OpCall, conv, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T

UNKNOWN = {"name": None, "type": "unknown"}
FWD = 2 * 2 * 32 * 32 * 16 * 3 * 9  # x [2,3,32,32], w [16,3,3,3], y [2,16,32,32]: 2·N·HoWo·Cout·Cin·k²


def test_old_cudnn_backward_sizes_only():
    # PyTorch 1.8: self, grad_output, weight, then 8 arguments the trace did not record
    args = [T([2, 3, 32, 32], None), T([2, 16, 32, 32], None), T([16, 3, 3, 3], None), *[UNKNOWN] * 8]
    c = estimate(OpCall("aten::cudnn_convolution_backward", args, "fprop", None, "aten"))
    assert c.flops == 2 * FWD  # dX and dW, each the forward's; output_mask unknown: both assumed
    assert c.bytes is None  # no dtype recorded: bytes unknown, not 0
    assert "output_mask not recorded" in c.note


def test_convolution_backward_output_mask():
    args = [T([2, 16, 32, 32], dtype="float16"), T([2, 3, 32, 32], dtype="float16"),
            T([16, 3, 3, 3], dtype="float16"), S([16]), S([1, 1]), S([1, 1]), S([1, 1]), S(False), S([0, 0]),
            S(1), S([False, True, True])]
    c = estimate(OpCall("aten::convolution_backward", args, "fprop", None, "aten"))
    assert c.flops == FWD  # the weight gradient only
    # dW: read X 6144 + dY 32768, write dW 432; db: read dY 32768, write 16
    assert c.bytes == (6144 + 32768 + 432 + 32768 + 16) * 2
    assert c.note == ""


def test_forward_priced_with_its_backward_output():
    x, w = T([2, 3, 32, 32]), T([16, 3, 3, 3])
    fwd = OpCall("conv2d", [x, w, *[UNKNOWN] * 5], "fprop", None, "aten")
    assert estimate(fwd) is None  # stride/padding unknown: no geometry
    bwd = OpCall("cudnn_convolution_backward", [x, T([2, 16, 32, 32]), w, *[UNKNOWN] * 8])
    c = conv.price_with_backward(fwd, conv.backward_outputs([bwd]))
    assert c.flops == FWD
    assert "stride 1,1 padding 1,1" in c.note
    # strided: 32 -> 16 with a 3x3 kernel fits stride 2, padding 1 only
    b2 = OpCall("cudnn_convolution_backward", [x, T([2, 16, 16, 16]), w, *[UNKNOWN] * 8])
    c2 = conv.price_with_backward(fwd, conv.backward_outputs([b2]))
    assert c2.flops == FWD // 4 and "stride 2,2 padding 1,1" in c2.note
    # two layers with these shapes but different outputs: which one ran is unknown
    assert conv.price_with_backward(fwd, conv.backward_outputs([bwd, b2])) is None
    assert conv.price_with_backward(fwd, {}) is None


def _resnet50_convs(batch: int) -> list[int]:
    """Forward FLOPs of torchvision's ResNet-50 convolutions (stride on the 3x3), by hand from the layout."""
    layers = [(3, 64, 7, 112)]  # (C_in, C_out, k, output side)
    cin, side = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            out = side // (stride if b == 0 else 1)
            layers += [(cin, width, 1, side), (width, width, 3, out), (width, 4 * width, 1, out)]
            if b == 0:
                layers.append((cin, 4 * width, 1, out))
            cin, side = 4 * width, out
    return [2 * batch * o * o * co * ci * k * k for ci, co, k, o in layers]


def test_resnet50_pytorch18_trace_conv_flops_by_hand():
    path = CORPUS / "kineto" / "pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip(f"corpus trace {path.name} not found")
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.table import build

    df = build(KinetoSource(path).records())
    per = defaultdict(float)
    for op, opid, fl in zip(df["op"], df["opid"], df["flops"], strict=True):
        if fl == fl and op in ("conv2d", "cudnn_convolution_backward"):
            per[(op, opid)] += fl
    fwd = [v for (op, _), v in sorted(per.items(), key=lambda kv: kv[0][1]) if op == "conv2d"]
    bwd = [v for (op, _), v in per.items() if op == "cudnn_convolution_backward"]
    hand = _resnet50_convs(32)
    assert len(fwd) == 6 * len(hand)  # six training steps, 53 convolutions each
    for i in range(6):
        assert sorted(fwd[i * 53:(i + 1) * 53]) == pytest.approx(sorted(hand), rel=1e-12)  # kernel shares summed
    # backward: dX and dW per layer, but no dX for the first (its input, the images, needs none: no
    # cudnn_convolution_backward_input ran inside its backward op)
    assert len(bwd) == 6 * 53
    assert sum(bwd) == pytest.approx(6 * (2 * sum(hand) - hand[0]), rel=1e-12)


def _conv_step(vintage: str, tmp_path, children: tuple[str, ...] = ()):
    """A conv2d forward (x [2,3,32,32], w [16,3,3,3], padding 1: y [2,16,32,32]) and its backward, as each
    exporter writes them without concrete scalar arguments."""
    from tests.test_kineto_link import BWD, MAIN, T, _Trace

    x, w, y = [2, 3, 32, 32], [16, 3, 3, 3], [2, 16, 32, 32]
    t = _Trace(vintage)
    t.x("user_annotation", "ProfilerStep#1", MAIN, T, 100_000)
    t.x("cpu_op", "aten::conv2d", MAIN, T + 100, 500, dims=[x, w, [], [], [], [], []],
        types=["float", "float", "", "GenericList", "GenericList", "GenericList", "Scalar"], seq=5)
    t.x("cpu_op", "aten::cudnn_convolution", MAIN, T + 110, 400, dims=[x, w, *[[]] * 7],
        types=["float", "float", *["GenericList"] * 3, *["Scalar"] * 4])
    t.launch("cudaLaunchKernel", MAIN, T + 120, [("implicit_convolve_sgemm", 50)])
    node = "CudnnConvolutionBackward" if vintage == "1.8" else "ConvolutionBackward0"
    t.x("cpu_op", "autograd::engine::evaluate_function: " + node, BWD, T + 10_000, 500)
    t.x("cpu_op", node, BWD, T + 10_010, 450, seq=5)
    if vintage == "1.8":  # the old overload: self, grad_output, weight, 8 more
        t.x("cpu_op", "aten::cudnn_convolution_backward", BWD, T + 10_020, 400, dims=[x, y, w, *[[]] * 8])
        for i, child in enumerate(children):  # the gradients it ran, as child ops
            t.x("cpu_op", f"aten::cudnn_convolution_backward_{child}", BWD, T + 10_025 + 100 * i, 90,
                dims=[[], y, w if child == "input" else x, *[[]] * 7])
    else:
        t.x("cpu_op", "aten::convolution_backward", BWD, T + 10_020, 400, dims=[y, x, w, *[[]] * 8],
            types=["float"] * 3 + ["GenericList"] * 6 + ["Scalar", "GenericList"])
    t.launch("cudaLaunchKernel", BWD, T + 10_030, [("dgrad_engine", 30), ("wgrad_sgemm", 30)])
    return t.write(tmp_path / f"conv_{vintage}.json")


@pytest.mark.parametrize("vintage", ("1.8", "2.0", "current"))
def test_conv_without_scalar_arguments_in_each_vintage(vintage, tmp_path):
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.table import build

    recs = [r for r in KinetoSource(_conv_step(vintage, tmp_path)).records() if r["kind"] == "kernel"]
    df = build(recs, peak_flops=1e15, peak_bw=3e12)
    fl = dict(zip((r["kShortName"] for r in recs), df["flops"], strict=True))
    if vintage == "1.8":  # the backward is an op of its own: priced from its shapes, and prices the forward
        assert fl["implicit_convolve_sgemm"] == FWD
        assert fl["dgrad_engine"] + fl["wgrad_sgemm"] == 2 * FWD
        assert df["note"][0].startswith("output shape from its backward")
    else:  # the backward is the forward op's (linked by sequence number): no shape to take, n/a, counted
        assert all(f != f for f in fl.values())
        assert any("cannot price" in w and "conv2d 100.0%" in w for w in df.attrs["warnings"])


@pytest.mark.parametrize(("children", "grads"), [((), 2), (("input", "weight"), 2), (("weight",), 1)])
def test_old_backward_counts_the_gradients_its_child_ops_ran(children, grads, tmp_path):
    """PyTorch 1.8 recorded no output_mask; the backward's child ops say which gradients it computed
    (a first layer's input needs none); with no child seen, both are counted."""
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.table import build

    recs = [r for r in KinetoSource(_conv_step("1.8", tmp_path, children)).records() if r["kind"] == "kernel"]
    df = build(recs, peak_flops=1e15, peak_bw=3e12)
    assert sum(f for r, f in zip(recs, df["flops"], strict=True) if r["dir"] == "bprop") == grads * FWD
