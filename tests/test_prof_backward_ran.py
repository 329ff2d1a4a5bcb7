"""Backward priced on what ran (pyprof/prof/backward.py): where a trace names the aten ops under an
autograd node, they are priced, and the forward op's backward formula is not charged as well.

The torch tests compare with FlopCounterMode, which counts the GEMMs the backward dispatches: a
first layer's ``linear`` (its input needs no gradient) under plain torch.profiler, whose trace records
no ``requires_grad``, runs only the weight gradient. The figures of the record tests are worked by
hand from the shapes (a multiply-add is 2 FLOPs).
"""

from __future__ import annotations

import contextlib
import math

import pytest

from pyprof.prof import build

X = {"name": "input", "type": "tensor", "shape": [3, 2], "dtype": "float32"}
W = {"name": "weight", "type": "tensor", "shape": [4, 2], "dtype": "float32"}


def rec(i, kernel, d="bprop", aten=None, sizes=None, opid=1, dur=100):
    """A CPU record of a ``linear`` (x 3x2, weight 4x2) op instance."""
    return {"kind": "kernel", "kShortName": kernel, "kLongName": kernel, "kDuration": dur, "start": i * 1000,
            "tid": 1, "device": None, "gpu": None, "layer": ["net"], "mod": "torch.nn.functional",
            "op": "linear", "args": [X, W], "cdtype": None, "opId": opid, "seqId": [], "altSeqId": [],
            "dir": d, "subSeqId": i, "aten": aten, "atenSizes": sizes}


NODE = "autograd::engine::evaluate_function: MmBackward0"


def bprop(df):
    rows = df[df["dir"] == "bprop"]
    return float(rows["flops"].sum()), list(rows["priced"])


def test_the_backward_is_priced_by_the_ops_that_ran():
    """Only dW = dYᵀ·x (4x3 @ 3x2) ran: 2·4·3·2 = 48 FLOPs, not the formula's dX + dW (96)."""
    recs = [rec(0, "aten::mm", "fprop", "aten::mm", [[3, 2], [2, 4]]),
            rec(1, NODE), rec(2, "aten::mm", "bprop", "aten::mm", [[4, 3], [3, 2]])]
    df = build(recs, peak_flops=1e12, peak_bw=1e11)
    flops, priced = bprop(df)
    assert flops == 48.0
    assert priced == [None, "mm"]
    assert df["op"].tolist() == ["linear"] * 3 and df["module"].tolist() == ["net"] * 3  # attribution kept
    # bytes: dY (4x3 read as 3x4's transpose), x read, dW written, float32
    assert float(df[df["dir"] == "bprop"]["bytes"].sum()) == 4 * (12 + 6 + 8)


def test_two_calls_of_one_shape_are_two_calls():
    recs = [rec(0, "aten::mm", "fprop", "aten::mm", [[3, 2], [2, 4]]), rec(1, NODE),
            rec(2, "aten::mm", aten="aten::mm", sizes=[[3, 4], [4, 2]], dur=300),
            rec(3, "aten::mm", aten="aten::mm", sizes=[[3, 4], [4, 2]], dur=100)]
    df = build(recs, peak_flops=1e12, peak_bw=1e11)
    assert df[df["dir"] == "bprop"]["flops"].tolist() == [0.0, 48.0, 48.0]


def test_an_op_no_model_prices_falls_back_to_the_whole_formula():
    """An op that ran and has no model (or too few sizes for one): the forward op's formula prices the
    instance whole, never half of each."""
    recs = [rec(0, "aten::mm", "fprop", "aten::mm", [[3, 2], [2, 4]]), rec(1, NODE),
            rec(2, "aten::mm", aten="aten::mm", sizes=[[4, 3], [3, 2]]),
            rec(3, "aten::ptest_unknown_op", aten="aten::ptest_unknown_op", sizes=[[3, 4]])]
    flops, priced = bprop(build(recs, peak_flops=1e12, peak_bw=1e11))
    assert flops == 96.0 and priced == [None, None, None]  # dX + dW: the formula, every input needing one


def test_a_working_record_without_its_aten_op_keeps_the_formula():
    recs = [rec(0, "aten::mm", "fprop", "aten::mm", [[3, 2], [2, 4]]), rec(1, NODE),
            rec(2, "aten::mm", aten="aten::mm", sizes=[[4, 3], [3, 2]]), rec(3, "aten::neg")]
    flops, priced = bprop(build(recs, peak_flops=1e12, peak_bw=1e11))
    assert flops == 96.0 and not any(priced)


def test_records_without_aten_fields_are_priced_as_before():
    """Record files written before prof read ``aten``: the forward's formula, as ever."""
    recs = [rec(0, "aten::mm", "fprop"), rec(1, NODE), rec(2, "aten::mm")]
    for r in recs:
        del r["aten"], r["atenSizes"]
    flops, _ = bprop(build(recs, peak_flops=1e12, peak_bw=1e11))
    assert flops == 96.0


@pytest.mark.torch
def test_first_layer_linear_under_plain_profiler_equals_flopcountermode(tmp_path):
    """A trace records no requires_grad: the first layer's backward ran dW only (and the second's
    dX and dW); pyprof's GEMM FLOPs per direction equal FlopCounterMode's."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.ops import family

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(5, 16)
    with FlopCounterMode(display=False) as fc:
        y = net(x)
    ref_f = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        y.sum().backward()
    ref_b = fc.get_total_flops()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        net(x).sum().backward()
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    df = build(list(KinetoSource(trace).records()), peak_flops=1e12, peak_bw=1e11)
    got = {"fprop": 0.0, "bprop": 0.0}
    for d, op, mod, ran, fl in zip(df["dir"], df["op"], df["mod"], df["priced"], df["flops"], strict=True):
        fam = family(ran, "aten") if ran else (family(op, mod) if op else None)
        if d in got and fam == "gemm" and not math.isnan(fl):
            got[d] += fl
    assert got["fprop"] == ref_f > 0
    assert got["bprop"] == ref_b  # 2 GEMMs for the last layer, 1 for the first: not 4


def _flops_by_direction(step, tmp_path, families=("gemm", "rnn")) -> dict:
    """pyprof's FLOPs of ``families`` (GEMM and RNN) per direction (bprop: every backward run) of ``step``
    under ``init()`` + torch.profiler; the family of the op that priced each record."""
    from pyprof.prof.ops import family
    from scripts.validation.catalogue import profiled_table

    df = profiled_table(step, tmp_path)
    got = {"fprop": 0.0, "bprop": 0.0}
    for d, op, mod, ran, fl in zip(df["dir"], df["op"], df["mod"], df["priced"], df["flops"], strict=True):
        fam = family(ran, "aten") if ran else (family(op, mod) if op else None)
        if fam in families and not math.isnan(fl) and d in ("fprop", "bprop", "bprop2"):
            got["fprop" if d == "fprop" else "bprop"] += fl
    return got


@pytest.mark.torch
@pytest.mark.parametrize("case", ["lstm_onednn", "linear_cross_entropy"])
def test_a_backward_run_that_is_not_its_formula_is_priced_by_what_ran(case, tmp_path):
    """``autograd.grad(create_graph=True)`` of one input's gradient: oneDNN's LSTM runs its backward as the
    differentiable ops of its cell (the forward's gate GEMMs again, then the gradient's), and
    linear_cross_entropy's run computes dX alone; neither is what the forward op's backward formula
    assumes (the fused backward, every input's gradient). pyprof's backward GEMM FLOPs equal
    FlopCounterMode's count of what ran."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    if case == "lstm_onednn":
        m = torch.nn.LSTM(2, 3, num_layers=2)
        x = torch.randn(2, 1, 2, requires_grad=True)

        def loss():
            return m(x)[0].sum()
    else:
        if not hasattr(torch.nn.functional, "linear_cross_entropy"):
            pytest.skip(f"torch {torch.__version__} has no F.linear_cross_entropy")
        w = torch.randn(4, 5, requires_grad=True)
        x = torch.randn(8, 5, requires_grad=True)
        t = torch.randint(0, 4, (8,))

        def loss():
            return torch.nn.functional.linear_cross_entropy(x, w, t)
    with torch.backends.mkldnn.flags(enabled=True):
        out = loss()
        with FlopCounterMode(display=False) as fc:
            torch.autograd.grad(out, x, create_graph=True)
        got = _flops_by_direction(lambda: torch.autograd.grad(loss(), x, create_graph=True), tmp_path)
    assert got["bprop"] == fc.get_total_flops() > 0


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(4, 7), (2, 4, 7)], ids=["unbatched", "batched"])
def test_a_gradient_penalty_conv_is_priced_by_the_gradients_its_backward_ran(shape, tmp_path):
    """A gradient penalty through a Conv1d: ``autograd.grad(create_graph=True)`` of the input's gradient
    runs the convolution's backward for dX alone (``output_mask`` [True, False, False]), then a backward
    through that gradient runs its double backward. On an unbatched input the forward op's backward runs
    ``SqueezeBackward1`` before ``ConvolutionBackward0``: the mask holds for the op's whole backward run,
    whichever node comes first. pyprof's convolution FLOPs per direction equal FlopCounterMode's."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    w, b = torch.randn(5, 4, 3, requires_grad=True), torch.randn(5, requires_grad=True)
    x = torch.randn(*shape, requires_grad=True)

    def step(fwd=contextlib.nullcontext(), bwd=contextlib.nullcontext()):
        with fwd:  # (functional: FlopCounterMode's module hooks on torch 2.4 refuse autograd.grad of a leaf)
            out = torch.nn.functional.conv1d(x, w, b)
        with bwd:
            g, = torch.autograd.grad(out, x, torch.ones_like(out), create_graph=True)
            g.square().sum().backward()

    fc_fwd, fc_bwd = FlopCounterMode(display=False), FlopCounterMode(display=False)
    step(fc_fwd, fc_bwd)
    got = _flops_by_direction(step, tmp_path, ("conv",))
    assert got == pytest.approx({"fprop": fc_fwd.get_total_flops(), "bprop": fc_bwd.get_total_flops()}, rel=1e-9)
    # dX (one forward's worth), then the double backward's two
    assert got["fprop"] > 0 and got["bprop"] == pytest.approx(3 * got["fprop"])
