"""A kernel Inductor generated is priced from what it was compiled from: FLOPs the sum of its origin ops'
(each by the model an eager call of that op gets), bytes the buffers it reads and writes
(pyprof.prof.ops.fused; recorded by pyprof.annotate.inductor, carried by parse.kineto.inductor.fused_args).

The first tests build arguments by hand (no torch); the last runs a small model eagerly and compiled in
one ``pyprof run`` and compares the compiled kernels with the eager ops, op by op.
"""

from __future__ import annotations

import math
import textwrap
import types

import pytest

from pyprof.parse.kineto.inductor import fused_args
from pyprof.prof.devices import DEFAULT_FLOOR_NS
from pyprof.prof.ops.fused import fused_cost
from pyprof.prof.table import build


def _t(shape, dtype="float32", name=None):
    return {"name": name, "type": "tensor", "shape": list(shape), "dtype": dtype}


def _op(name, *items, **extra):
    return {"name": name, "type": "op", "items": list(items), **extra}


def _buffers(*tensors):
    return {"name": "buffers", "type": "tensorlist", "items": list(tensors)}


def test_flops_are_the_origin_ops_and_bytes_the_buffers():
    # relu(a) + x over [4, 8] fp32, written in place into a: a read and written, x read
    args = [_buffers(_t([4, 8], name="rw"), _t([4, 8], name="r")),
            _op("aten::relu.default", _t([4, 8])), _op("aten::add.Tensor", _t([4, 8]), _t([4, 8]))]
    c = fused_cost(args)
    assert c.flops == 32 + 32  # one FLOP per element each (the pointwise table)
    assert c.bytes == 3 * 32 * 4 and c.dtype == "float32" and not c.note
    # a node computed by two kernels counts half in each; a node an extern call came from counts there
    assert fused_cost([*args[:2], _op("aten::add.Tensor", _t([4, 8]), _t([4, 8]), share=2)]).flops == 32 + 16
    assert fused_cost([*args, _op("aten::addmm.default", _t([8]), _t([4, 8]), _t([8, 8]), extern=True)]).flops == 64
    # bf16 buffers of 2 bytes; a broadcast add prices its output's elements
    bf = fused_cost([_buffers(_t([2, 3], "bfloat16", "r"), _t([3], "bfloat16", "r"), _t([2, 3], "bfloat16", "w")),
                     _op("aten::add.Tensor", _t([2, 3], "bfloat16"), _t([3], "bfloat16"))])
    assert (bf.flops, bf.bytes, bf.dtype) == (6, (6 + 3 + 6) * 2, "bfloat16")


@pytest.mark.parametrize("bad,why", [
    (_op("aten::no_such_op.default", _t([4, 8])), "no_such_op"),  # no model
    ({"name": "aten::relu.default", "type": "op", "items": None}, "relu: sizes unknown"),  # symbolic size
    ({"name": None, "type": "op"}, "an origin node not recorded"),
])
def test_one_unpriced_origin_op_leaves_flops_unknown_never_half(bad, why):
    args = [_buffers(_t([4, 8], name="r"), _t([4, 8], name="w")), _op("aten::relu.default", _t([4, 8])), bad]
    c = fused_cost(args)
    assert c.flops is None and c.bytes == 2 * 128 and why in c.note


def test_unknown_buffers_leave_bytes_unknown_and_a_copy_of_inputs_computes_nothing():
    assert fused_cost([_op("aten::relu.default", _t([4, 8]))]).bytes is None  # no buffers recorded
    assert fused_cost([_buffers(_t([4, 8], None, "r")), _op("aten::relu.default", _t([4, 8]))]).bytes is None
    assert fused_cost([_buffers(_t([4, 8], name="x"))]).bytes is None  # an access it does not know
    copy = fused_cost([_buffers(_t([4, 8], name="r"), _t([4, 8], name="w")),
                       {"name": "inputs", "type": "int", "value": 1}])
    assert (copy.flops, copy.bytes) == (0, 256)
    assert fused_cost([_buffers(_t([4, 8], name="r"))]).flops is None  # no origins at all: unknown


def test_parse_carries_the_recorded_entry_and_damage_is_unknown():
    info = {"tensors": [[[4, 8], "float32", "rw"], [[4, 8], "float32", "r"]],
            "nodes": [_op("aten::relu.default", _t([4, 8]))]}
    args = fused_args(info)
    assert args[0] == _buffers(_t([4, 8], name="rw"), _t([4, 8], name="r")) and args[1] == info["nodes"][0]
    assert fused_args(None) is None and fused_args({}) is None
    # a node's item of the wrong type is an unknown node (FLOPs n/a), a bad shape drops the buffers (bytes n/a)
    damaged = fused_args({"tensors": [[["4"], "float32", "r"]],
                          "nodes": [{"name": "aten::relu.default", "type": "op", "items": [{"shape": "x"}]}, 3]})
    assert damaged == [{"name": None, "type": "op"}, {"name": None, "type": "op"}]
    c = fused_cost(damaged)
    assert c.flops is None and c.bytes is None


_CPP_SOURCE = """#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  Placeholder.KERNEL_NAME(float* in_out_ptr0,
                       const float* in_ptr0,
                       bool* out_ptr0,
                       const int64_t ks0)
{
    auto tmp0 = in_ptr0[0];
}
"""
_TRITON_SOURCE = """import triton
@triton_heuristics.pointwise(size_hints={'x': 256}, triton_meta={'signature': {'in_out_ptr0': '*fp32'}})
@triton.jit
def triton_poi_fused_add_relu_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
"""


@pytest.mark.torch
def test_each_buffers_access_is_read_from_its_kernels_signature():
    """Inductor names a kernel's buffer parameters in_ptrN (read), out_ptrN (written) and in_out_ptrN
    (updated in place: read and written, its bytes counted twice), in C++ and Triton alike."""
    pytest.importorskip("torch")  # (pyprof.annotate imports it)
    from pyprof.annotate.inductor import _access, _pointer_params

    graph = types.SimpleNamespace(wrapper_code=types.SimpleNamespace(src_to_kernel={
        _CPP_SOURCE: "cpp_fused_relu_threshold_backward_0", _TRITON_SOURCE: "triton_poi_fused_add_relu_0"}))
    params = _pointer_params(graph)
    assert params == {"cpp_fused_relu_threshold_backward_0": ["in_out_ptr", "in_ptr", "out_ptr"],
                      "triton_poi_fused_add_relu_0": ["in_out_ptr", "in_ptr"]}
    told = [[[4, 8], "float32", "?"], [[4, 8], "float32", "?"]]  # (a Triton call's types tell nothing)
    assert [a for _, _, a in _access(told, params["triton_poi_fused_add_relu_0"])] == ["rw", "r"]
    # no signature (or one that does not match): a C++ kernel's in-place buffers come before its inputs
    cpp = [[[4], "float32", "w"], [[4], "float32", "r"], [[4], "bool", "w"]]
    assert [a for _, _, a in _access(cpp, None)] == ["rw", "r", "w"]
    assert [a for _, _, a in _access(cpp, ["in_ptr"])] == ["rw", "r", "w"]
    assert [a for _, _, a in _access([[[4], "float32", "w"]], None)] == ["w"]  # cannot be told: stays w
    assert _pointer_params(types.SimpleNamespace()) == {}


def _record(op, args, dur=1000, mod="inductor", kname="graph_0_cpp_fused_add_relu_0"):
    return {"kind": "kernel", "source": "kineto", "kShortName": kname, "kLongName": kname, "kDuration": dur,
            "start": 0, "end": dur, "tid": 1, "device": None, "layer": ["OptimizedModule"], "trace": [],
            "mod": mod, "op": op, "args": args, "cdtype": None, "opId": None, "seqId": [], "altSeqId": [],
            "dir": "fprop", "subSeqId": None}


def test_prof_shows_a_fused_kernels_bytes_flops_and_roofline_and_warns_of_unknowns():
    args = [_buffers(_t([4, 8], name="rw"), _t([4, 8], name="r")),
            _op("aten::relu.default", _t([4, 8])), _op("aten::add.Tensor", _t([4, 8]), _t([4, 8]))]
    df = build([_record("fused:relu+add", args), _record("fused:relu", None, 3000)],
               peak_flops=1e12, peak_bw=1e11)
    known, unknown = df.iloc[0], df.iloc[1]
    assert (known["flops"], known["bytes"]) == (64, 384) and known["params"].startswith("buffers=[(4,8),(4,8)]")
    assert known["ai"] == pytest.approx(64 / 384)
    assert max(64 / 1e12, 384 / 1e11) * 1e9 < DEFAULT_FLOOR_NS  # a roof of 3.84 ns: latency-bound
    assert known["ideal"] == DEFAULT_FLOOR_NS and known["bound"] == "latency"
    assert math.isnan(unknown["flops"]) and math.isnan(unknown["bytes"]) and math.isnan(unknown["ideal"])
    warns = df.attrs["warnings"]
    assert any("1 kernel(s) Inductor generated, 75.0% of kernel time, have FLOPs n/a" in w for w in warns), warns
    assert any("1 kernel(s) Inductor generated, 75.0% of kernel time, have bytes n/a" in w for w in warns), warns


_SCRIPT = textwrap.dedent('''
    import torch
    import pyprof

    N, H = {n}, {h}
    torch.manual_seed(0)
    fc = torch.nn.Linear(H, H)
    w, b = torch.randn(H), torch.randn(H)


    def block(x):  # the GEMM an extern call; ReLU and the residual add one generated kernel
        return torch.relu(fc(x)) + x


    def norm_softmax(y):  # a layer norm and a softmax in the aten ops Inductor's graph holds of them
        var, mean = torch.var_mean(y, dim=-1, keepdim=True, correction=0)
        z = (y - mean) * torch.rsqrt(var + 1e-5) * w + b
        e = torch.exp(z - torch.amax(z, dim=-1, keepdim=True))
        return e / torch.sum(e, dim=-1, keepdim=True)


    def model(x):  # (the GEMM between them keeps the two kernels apart: one graph, two kernels)
        return norm_softmax(fc(block(x)))


    compiled = torch.compile(model)
    x = torch.randn(N, H)
    with torch.no_grad():
        for _ in range(2):
            eager = model(x)
            out = compiled(x)
            pyprof.step()
    assert torch.allclose(eager, out, atol=1e-5)
''')


@pytest.mark.torch
def test_compiled_kernels_price_as_the_same_ops_run_eagerly(tmp_path):
    torch = pytest.importorskip("torch")
    from pyprof.parse.kineto import KinetoSource
    from pyprof.runner import RunOptions, run_script

    n, h = 8, 32
    script = tmp_path / "model.py"
    script.write_text(_SCRIPT.format(n=n, h=h))
    torch._dynamo.reset()
    result = run_script(script, [], tmp_path / "out", RunOptions(wait=1, warmup=0, active=1))
    df = build(KinetoSource(result.trace).records(), peak_flops=1e12, peak_bw=1e11)
    kern = df[(df["kind"] == "kernel") & (df["dir"] == "fprop")]
    fused = kern[kern["mod"] == "inductor"]
    ops = [set(op.removeprefix("fused:").split("+")) for op in fused["op"]]
    assert ops == [{"relu", "add"}, {"var_mean", "sub", "add", "rsqrt", "mul", "amax", "exp", "sum", "div"}], ops
    first, second = fused.iloc[0], fused.iloc[1]

    # bytes, by hand from the shapes: ReLU + add reads the GEMM's output and x and writes the sum
    assert first["bytes"] == 3 * n * h * 4
    # the norm and softmax read y, w and b and write the output at least; at most also a [n, h]
    # intermediate and four [n, 1] statistics (mean, variance, max, sum), each written and read once
    assert 4 * (2 * n * h + 2 * h) <= second["bytes"] <= 4 * (2 * n * h + 2 * h + 2 * n * h + 8 * n)

    # FLOPs: the eager ops of the same step (pyprof markers), priced per op instance, summed
    eager = kern[kern["mod"].isin(["torch", "torch.Tensor"]) & ~kern["op"].isin(["linear", "addmm"])]
    per_op = eager.groupby("opid", sort=False).agg(op=("op", "first"), flops=("flops", "sum"))
    ops = list(per_op["op"])
    assert ops[:2] == ["relu", "__add__"] and ops[2] == "var_mean" and ops[-1] == "__truediv__", ops
    assert per_op["flops"].notna().all() and len(ops) == 14
    assert first["flops"] == per_op["flops"].iloc[:2].sum() == 2 * n * h
    assert second["flops"] == per_op["flops"].iloc[2:].sum()
    # the GEMMs stay extern calls, priced as their op, as eager
    gemm = kern[kern["op"] == "addmm"]
    assert gemm["opid"].nunique() == 2 and gemm["flops"].sum() == 2 * 2 * n * h * h
