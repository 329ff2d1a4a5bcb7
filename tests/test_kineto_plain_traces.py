"""Real torch.profiler GPU traces recorded without pyprof's markers (the traces most users have).

Every kernel launched inside a CPU op gets an op (the outermost aten op doing the work; under an
autograd node, the node's forward op where the trace links them, else the aten op run), a direction,
and, where the trace recorded shapes and arguments, FLOPs for its GEMM, convolution and attention
kernels. Checked on the corpus: four H100 inference traces with shapes (AMD TraceLens' test traces)
and two PyTorch 1.8 ResNet-50 training traces whose shapes come without types or scalar arguments.
"""

from __future__ import annotations

import pytest

from pyprof.parse.kineto import KinetoSource
from pyprof.prof import build
from tests.conftest import CORPUS, corpus_params

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

TRACES = sorted((CORPUS / "kineto").glob("*.json.gz")) if (CORPUS / "kineto").is_dir() else []
WITH_TYPES = [p for p in TRACES if "TraceLens" in p.name]
OLD_TRAINING = [p for p in TRACES if "resnet50" in p.name]


def _kernels(path):
    src = KinetoSource(path)
    recs = [r for r in src.records() if r["kind"] == "kernel"]
    return src, recs, build(recs, peak_flops=1e15, peak_bw=3e12)


def _share(recs, rows) -> float:
    return sum(recs[i]["kDuration"] for i in rows)


@pytest.mark.parametrize("path", corpus_params(TRACES), ids=lambda p: p.name[:40])
def test_every_kernel_launched_inside_a_cpu_op_has_an_op(path):
    _, recs, _ = _kernels(path)
    inside = [i for i, r in enumerate(recs) if r.get("ranges")]
    assert inside
    with_op = [i for i in inside if recs[i]["op"] and recs[i]["dir"]]
    assert _share(recs, with_op) >= 0.95 * _share(recs, inside)


@pytest.mark.parametrize("path", corpus_params(WITH_TYPES + OLD_TRAINING), ids=lambda p: p.name[:40])
def test_gemm_kernel_time_has_flops_where_shapes_were_recorded(path):
    _, recs, df = _kernels(path)
    gemm = [i for i, r in enumerate(recs) if r.get("ranges") and df["tc"][i] != "-"]
    assert gemm
    priced = [i for i in gemm if df["flops"][i] > 0]  # NaN (no model) compares False
    assert _share(recs, priced) >= 0.95 * _share(recs, gemm)


@pytest.mark.parametrize("path", corpus_params(OLD_TRAINING), ids=lambda p: p.name[:40])
def test_training_trace_without_types_gets_directions_and_says_what_is_missing(path):
    """PyTorch 1.8 traces: no sequence numbers, no input types, no scalar arguments. Backward kernels
    still get the aten op they ran and the bprop direction; convolutions (whose strides are unknown) are
    never priced from guessed defaults: their output shape comes from the backward recorded for the same
    input and weight shapes (test_ops_conv_inferred checks the figures); one warning says what is missing."""
    src, recs, df = _kernels(path)
    dirs = {r["dir"] for r in recs if r.get("ranges")}
    assert {"fprop", "bprop", "optim"} <= dirs
    bwd_mm = [i for i, r in enumerate(recs) if r["dir"] == "bprop" and r["op"] == "mm"]
    assert bwd_mm and all(recs[i]["opDir"] == "fprop" for i in bwd_mm)
    # priced as the mm it ran (2·M·N·K), on its GEMM kernel; the split-K reduction beside it gets none
    gemm = [i for i in bwd_mm if "gemm" in recs[i]["kShortName"]]
    assert gemm and all(df["flops"][i] == 2 * 32 * 1000 * 2048 for i in gemm)
    assert all(df["flops"][i] == 0 for i in bwd_mm if "splitKreduce" in recs[i]["kShortName"])
    conv = [i for i, r in enumerate(recs) if r["op"] == "conv2d"]
    assert conv and all(df["note"][i].startswith("output shape from its backward") for i in conv)
    assert sum("no input types or scalar arguments" in w for w in src.warnings) == 1


@pytest.mark.parametrize("path", corpus_params(WITH_TYPES), ids=lambda p: p.name[:40])
def test_layers_come_from_torch_profilers_module_ranges(path):
    """Without pyprof's module ranges, the ``nn.Module: Name_N`` ranges torch.profiler records name the
    layers, outermost (the model) first (collectives aside: DDP's all-reduces of gradient buckets belong
    to no module)."""
    _, recs, _ = _kernels(path)
    inside = [i for i, r in enumerate(recs) if r.get("ranges") and r.get("link") != "collective"]
    with_layer = [i for i in inside if recs[i]["layer"]]
    assert _share(recs, with_layer) >= 0.95 * _share(recs, inside)
    roots = {recs[i]["layer"][0] for i in with_layer}
    assert len(roots) == 1 and next(iter(roots)).endswith("_0")  # one model: its class, instance 0
