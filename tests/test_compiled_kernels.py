"""Kernels of compiled regions tied to their modules and origin ops (pyprof.parse.kineto.inductor).

Without torch: the H200 trace of a compiled transformer (tests/fixtures/gpu, recorded without Inductor's
metadata) names every fused Triton kernel's origin ops from its name and says its module is unknown;
the same trace with metadata for some of its kernels joins those by name and direction.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import orjson
import pytest

from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto.inductor import ops_from_name

FIXTURE = Path(__file__).parent / "fixtures" / "gpu" / "h200_compiled_lm.trace.json.gz"


@pytest.mark.parametrize("name,ops", [
    ("triton_poi_fused_gelu_view_8", ("gelu", "view")),
    ("triton_red_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_view_16",
     ("_to_copy", "add", "native_layer_norm", "native_layer_norm_backward", "view")),
    ("triton_per_fused_sum_4", ("sum",)),
    ("cpp_fused_cat_transpose_view_2", ("cat", "transpose", "view")),
    ("triton_poi_fused_0", ()),
    ("sm90_xmma_gemm_f32f32", ()),
])
def test_origin_ops_are_read_from_inductor_kernel_names(name, ops):
    assert ops_from_name(name) == ops


def _kernels(path):
    return [r for r in KinetoSource(path).records() if r["kind"] == "kernel"]


def test_fixture_fused_kernels_name_their_ops_and_say_the_module_is_unknown():
    src = KinetoSource(FIXTURE)
    recs = [r for r in src.records() if r["kind"] == "kernel"]
    fused = [r for r in recs if re.match(r"triton_(poi|red|per)_fused_", r["kShortName"])]
    assert len(fused) > 50
    for r in fused:
        assert r["link"] == "kernel-name" and r["mod"] == "inductor", r["kShortName"]
        ops = r["op"].removeprefix("fused:").split("+")
        assert ops and all(op and op in r["kShortName"] for op in ops), (r["kShortName"], ops)
        assert r["layer"] == ["OptimizedModule"]  # (the compiled module's: its own module is not known)
        assert r["opId"] is None and r["dir"] in ("fprop", "bprop")
    assert {r["dir"] for r in fused} == {"fprop", "bprop"}
    assert any("kernel-name" in w for w in src.warnings)


def _with_metadata(tmp_path, graphs):
    doc = orjson.loads(gzip.decompress(FIXTURE.read_bytes()))
    doc["pyprofInductor"] = {"version": 1, "status": "on", "failures": 0, "graphs": graphs}
    out = tmp_path / "with_meta.json"
    out.write_bytes(orjson.dumps(doc))
    return out


def test_metadata_joins_fused_kernels_by_name_and_direction(tmp_path):
    """The compiled region of the fixture is ``0/0``; a forward and a backward kernel of it given origins
    (as pyprof.annotate.inductor records them) take them; a kernel of the wrong direction does not."""
    fwd_name, bwd_name = "triton_poi_fused_gelu_view_8", "triton_poi_fused_gelu_gelu_backward_view_2"
    graphs = [
        {"compileId": "0/0", "backward": False, "kernels": [
            {"name": fwd_name, "order": 1, "ops": ["gelu", "view"], "layer": ["blocks.0", "blocks.0.mlp"],
             "modules": ["blocks.0.mlp"], "stack": "lm.py:40"}]},
        {"compileId": "0/0", "backward": True, "kernels": [
            {"name": bwd_name, "order": 1, "ops": ["gelu", "gelu_backward", "view"], "layer": ["blocks.1"],
             "modules": ["blocks.1"], "stack": "lm.py:41"},
            {"name": "triton_poi_fused_gelu_view_8", "order": 2, "ops": ["gelu"], "layer": ["nowhere"],
             "modules": ["nowhere"], "stack": None}]},
    ]
    recs = _kernels(_with_metadata(tmp_path, graphs))
    fwd = [r for r in recs if r["kShortName"] == fwd_name]
    bwd = [r for r in recs if r["kShortName"] == bwd_name]
    assert fwd and bwd
    for r in fwd:
        assert (r["link"], r["op"], r["layer"], r["trace"]) == (
            "inductor", "fused:gelu+view", ["OptimizedModule", "blocks.0", "blocks.0.mlp"], ["lm.py:40"])
    for r in bwd:
        assert (r["link"], r["op"], r["layer"]) == (
            "inductor", "fused:gelu+gelu_backward+view", ["OptimizedModule", "blocks.1"])
    others = [r for r in recs if r["kShortName"].startswith("triton_") and r["kShortName"] not in (fwd_name, bwd_name)]
    assert others and all(r["link"] == "kernel-name" for r in others)


def test_damaged_metadata_falls_back_to_names(tmp_path):
    """Metadata of the wrong shape (not a list of graphs, kernels that are not objects, fields of the
    wrong type) never fails a parse: what cannot be read is left to the kernel's name."""
    graphs = [{"compileId": "0/0", "backward": False, "kernels": [
        "junk", {"name": "triton_poi_fused_gelu_view_8", "ops": 3, "layer": "blocks.0", "stack": 7}]}, 5]
    recs = _kernels(_with_metadata(tmp_path, graphs))
    (r, *_) = [r for r in recs if r["kShortName"] == "triton_poi_fused_gelu_view_8"]
    assert (r["link"], r["op"], r["layer"], r["trace"]) == ("inductor", "fused:gelu+view", ["OptimizedModule"], [])
    doc = orjson.loads(gzip.decompress(FIXTURE.read_bytes()))
    doc["pyprofInductor"] = "not json"
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(doc))
    assert all(r["link"] != "inductor" for r in _kernels(bad))


CPU_FIXTURE = Path(__file__).parent / "fixtures" / "kineto" / "cpu_compiled_mlp.trace.json.gz"


@pytest.mark.parametrize("name,generated,bare", [
    ("graph_0_cpp_fused_relu_0", True, "cpp_fused_relu_0"),
    ("graph_12_cpp_fused_sum_threshold_backward_1", True, "cpp_fused_sum_threshold_backward_1"),
    ("cpp_fused_relu_0", True, "cpp_fused_relu_0"),
    ("graph_0_something", False, "graph_0_something"),
    ("aten::relu", False, "aten::relu"),
])
def test_profiled_cpp_kernel_ranges_are_generated_kernels_that_do_work(name, generated, bare):
    """``cpp.enable_kernel_profile`` names each C++ kernel's range ``graph_<N>_<kernel>``: a kernel of its
    own on a CPU trace (its self time is not folded into the compiled region's), joined by its bare name."""
    from pyprof.kernel_roles import NO_WORK, cpu_role
    from pyprof.parse.kineto.inductor import is_generated, kernel_name

    assert is_generated(name) is generated and kernel_name(name) == bare
    if generated:
        assert cpu_role(name) != NO_WORK


def test_cpu_compiled_trace_cpp_kernels_and_extern_calls_take_their_modules():
    """A real CPU trace (``pyprof run`` of the zoo's mlp_compiled, torch 2.13, three steps:
    ``Sequential(Linear, ReLU, Linear, ReLU, Linear)`` under ``torch.compile``, see the fixtures' README):
    every C++ kernel range of the raw trace is a record of its own, named by its origin ops, in its module;
    the forward's one ``cpp_fused_relu_0`` kernel, called for both ReLUs, takes ReLU ``1`` then ``3``; the
    extern GEMMs take their Linear layers in call order."""
    doc = orjson.loads(gzip.decompress(CPU_FIXTURE.read_bytes()))
    raw = [e["name"] for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("graph_")]
    recs = _kernels(CPU_FIXTURE)
    cpp = [r for r in recs if r["kShortName"].startswith("graph_")]
    assert [r["kShortName"] for r in cpp] == raw and len(raw) == 15
    for r in cpp:
        assert (r["link"], r["mod"]) == ("inductor", "inductor")
        assert all(op in r["kShortName"] for op in r["op"].removeprefix("fused:").split("+")), r
    relus = [r["layer"] for r in cpp if r["kShortName"] == "graph_0_cpp_fused_relu_0"]
    assert relus == [["OptimizedModule", "1"], ["OptimizedModule", "3"]] * 3
    assert {r["dir"] for r in cpp if "backward" in r["kShortName"]} == {"bprop"}
    fwd = [r["layer"][-1] for r in recs if r["kShortName"] == "aten::addmm"]
    assert fwd == ["0", "2", "4"] * 3
    assert all(r["link"] == "inductor" for r in recs if r["kShortName"] in ("aten::addmm", "aten::mm"))
