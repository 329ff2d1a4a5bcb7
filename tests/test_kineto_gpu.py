"""A GPU-style torch.profiler trace: kernels tied through their launch to ops, markers and backward.

No GPU machine was available, so the fixture is synthetic (built by
``tests/fixtures/kineto/make_gpu_synthetic.py``) but follows the structure of real Kineto GPU traces
(HTA's test data, PyTorch's exporter). The expectations below are read off the fixture's construction.
"""

from __future__ import annotations

import pytest

from pyprof.parse.kineto import KinetoSource
from pyprof.records import FIELD_NAMES
from tests.conftest import REPO, read_record_file

GPU = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"


@pytest.fixture(scope="module")
def src():
    return KinetoSource(GPU)


@pytest.fixture(scope="module")
def recs(src):
    return {r["kLongName"].split("<")[0].split("(")[0]: r for r in src.records()}


def test_every_gpu_activity_is_one_record_with_documented_fields_only(src, recs):
    assert src.gpu_mode
    assert len(recs) == 6
    for r in recs.values():
        assert set(r) <= set(FIELD_NAMES)
        assert r["source"] == "kineto"


def test_forward_gemm_is_attributed_to_marker_op_layer_and_call_site(recs):
    r = recs["void cutlass::Kernel2"]
    assert r["kind"] == "kernel"
    assert (r["start"], r["end"], r["kDuration"]) == (1_700_000_000_300_000, 1_700_000_000_345_000, 45_000)
    assert (r["pid"], r["tid"], r["apiName"], r["correlationId"]) == (4242, 4242, "cudaLaunchKernel", 1001)
    assert r["apiStart"] == 1_700_000_000_100_000
    assert (r["device"], r["stream"], r["grid"], r["block"]) == (0, 7, [32, 1, 2], [128, 1, 1])
    assert r["gpu"] == "NVIDIA A100-SXM4-40GB"
    assert (r["mod"], r["op"], r["dir"], r["layer"]) == ("torch.nn.functional", "linear", "fprop", ["fc"])
    assert r["trace"] == ["train.py:12:forward"]
    assert [a["shape"] for a in r["args"]] == [[32, 64], [128, 64], [128]]
    assert r["aten"] == "aten::addmm" and r["atenSizes"][1] == [32, 64]
    assert 5 in r["seqId"] and 6 in r["seqId"]
    texts = [x["text"] for x in r["ranges"]]
    assert texts[0] == "ProfilerStep#1" and texts[-1] == "aten::addmm"
    assert texts[1].startswith('{"pyprof":1,"k":"mod"')  # percent-encoding undone


def test_backward_kernels_on_the_autograd_thread_link_to_the_forward_op(recs):
    a, b = recs["ampere_sgemm_64x64_nn"], recs["ampere_sgemm_32x32_sliced1x4_tn"]
    for r in (a, b):
        assert r["tid"] == 4300 and r["dir"] == "bprop"
        assert r["bwdNode"] == "AddmmBackward0" and r["altSeqId"] == [6]
        assert (r["op"], r["mod"], r["layer"]) == ("linear", "torch.nn.functional", ["fc"])
        assert r["trace"] == ["train.py:12:forward"]
    # one backward instance per forward op instance: it shares the forward op's id, in another direction
    fwd = recs["void cutlass::Kernel2"]
    assert a["opId"] == b["opId"] == fwd["opId"] and fwd["dir"] == "fprop"
    assert (a["subSeqId"], b["subSeqId"]) == (0, 1)
    assert a["atenSizes"] == [[32, 128], [128, 64]]


def test_memcpy_record(recs):
    r = recs["Memcpy HtoD "]
    assert (r["kind"], r["kShortName"], r["bytes"], r["copyKind"]) == ("memcpy", "memcpy HtoD", 4096, "HtoD")
    assert (r["op"], r["mod"], r["apiName"]) == ("copy_", "aten", "cudaMemcpyAsync")


def test_driver_api_launch_of_an_aten_only_op(recs):
    r = recs["triton_poi_fused_add_0"]
    assert (r["apiName"], r["op"], r["mod"], r["dir"]) == ("cuLaunchKernel", "add", "aten", "fprop")
    assert [a.get("shape") for a in r["args"][:2]] == [[32, 128], [32, 128]]
    assert r["args"][2] == {"name": None, "type": "int", "value": 1}


def test_kernel_without_launch_is_kept_unattributed_with_a_warning(src, recs):
    r = recs["void at::native::vectorized_elementwise_kernel"]
    assert r["tid"] is None and r["op"] is None and r["ranges"] == []
    assert any("no CUDA launch" in w for w in src.warnings)


def test_records_come_in_kernel_start_order(src):
    starts = [r["start"] for r in src.records()]
    assert starts == sorted(starts)


LEGACY_CATS = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy"}
LEGACY_KEYS = {"External id": "external id", "Input Dims": "Input dims", "Ev Idx": "Profiler Event Index"}


def test_pytorch_1_8_spellings_give_the_same_attribution(tmp_path, recs):
    """Old exporters: Operator/Runtime/Kernel/Memcpy categories, 'external id', 'Input dims', float
    ns-resolution times (us with decimals)."""
    import orjson

    doc = orjson.loads(GPU.read_bytes())
    for ev in doc["traceEvents"]:
        if ev.get("cat") in LEGACY_CATS:
            ev["cat"] = LEGACY_CATS[ev["cat"]]
        if isinstance(ev.get("args"), dict):
            ev["args"] = {LEGACY_KEYS.get(k, k): v for k, v in ev["args"].items()}
        if isinstance(ev.get("ts"), int):
            ev["ts"] = ev["ts"] + 0.25  # +250 ns everywhere
    p = tmp_path / "legacy.json"
    p.write_bytes(orjson.dumps(doc))
    old = {r["kLongName"].split("<")[0].split("(")[0]: r for r in KinetoSource(p).records()}
    assert set(old) == set(recs)
    for key, r in recs.items():
        o = old[key]
        for field in ("op", "mod", "layer", "dir", "opId", "subSeqId", "bwdNode", "altSeqId", "args", "kDuration",
                      "tid", "apiName"):
            assert o[field] == r[field], (key, field)
        assert o["start"] == r["start"] + 250


def test_stats_for_the_parse_summary_line():
    src = KinetoSource(GPU)
    list(src.records())
    assert (src.stats.kernels, src.stats.copies, src.stats.attributed) == (5, 1, 4)  # the launch-less one is not


def test_launch_under_only_a_python_frame_has_no_ranges(tmp_path):
    """A kernel launched with nothing open but a top-level ``python_function`` event (with_stack=True
    traces of code outside any op or annotation) is written with empty ranges, not a crash."""
    import orjson

    from pyprof.parse.run import parse_file

    events = [
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1, "tid": 1, "ts": 100,
         "dur": 50, "args": {"Python id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110, "dur": 5,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "my_kernel", "pid": 0, "tid": 7, "ts": 120, "dur": 9,
         "args": {"device": 0, "stream": 7, "correlation": 7, "grid": [1, 1, 1], "block": [32, 1, 1]}},
    ]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    recs = list(KinetoSource(path).records())
    assert len(recs) == 1 and recs[0]["kShortName"] == "my_kernel"
    assert recs[0]["ranges"] == [] and recs[0]["op"] is None and recs[0]["kDuration"] == 9000
    out = tmp_path / "t.dict"
    parse_file(str(path), str(out))
    assert read_record_file(out) == recs
