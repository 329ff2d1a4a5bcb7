"""The linking rule (docs/records.md, "How a kernel finds its op") on torch.profiler GPU traces.

Each case of the rule, and its ``link`` field, on a small trace built by hand in each PyTorch trace
vintage (1.8: ``Operator``/``Runtime``/``Kernel`` categories, ``Input dims`` without types or sequence
numbers; 2.0-era: ``cpu_op``/``cuda_runtime``/``kernel``, types and sequence numbers, integer
microseconds; current: float microseconds, ``Concrete Inputs``, ``Ev Idx``), then on the corpus traces
of the kinds the rule was written for (HTA's DLRM-style training traces with fbgemm, NCCL all-to-all and
CUDA graphs; an MI250 ROCm trace).
"""

from __future__ import annotations

import functools
import json

import pytest

from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto.schema import collective_of_kernel
from pyprof.prof import build
from pyprof.prof.tensorcores import kernel_class
from tests.conftest import CORPUS, corpus_params

PID, MAIN, BWD, T = 7, 7, 9, 1_700_000_000
VINTAGES = ("1.8", "2.0", "current")
CATS_18 = {"cpu_op": "Operator", "user_annotation": "User annotation", "cuda_runtime": "Runtime", "kernel": "Kernel"}


class _Trace:
    """A trace of one vintage, written as that PyTorch version's exporter writes it."""

    def __init__(self, vintage: str):
        self.v = vintage
        self.ev: list[dict] = []
        self.ext = 100
        self.corr = 500

    def _ts(self, us: int):
        return us + 0.125 if self.v == "current" else us

    def x(self, cat, name, tid, ts, dur, dims=None, types=None, seq=None, **extra):
        self.ext += 1
        args = {"External id" if self.v != "1.8" else "external id": self.ext, **extra}
        if dims is not None:
            args["Input Dims" if self.v != "1.8" else "Input dims"] = dims
            if self.v != "1.8":
                args["Input type"] = types or [""] * len(dims)
            if self.v == "current":
                args["Concrete Inputs"] = [""] * len(dims)
                args["Ev Idx"] = self.ext
        if seq is not None and self.v != "1.8":  # (1.8 recorded no sequence numbers)
            args["Sequence number"] = seq
        cat = CATS_18.get(cat, cat) if self.v == "1.8" else cat
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": self._ts(ts),
                        "dur": dur, "args": args})

    def launch(self, api, tid, ts, kernels, corr=None):
        """``api`` at ``ts`` on ``tid``; each of ``kernels`` (name, duration) runs with its correlation id."""
        self.corr += 1
        corr = self.corr if corr is None else corr
        self.x("cuda_runtime", api, tid, ts, 4, correlation=corr)
        t = ts + 20
        for name, dur in kernels:
            self.kernel(name, t, dur, corr)
            t += dur + 2
        return corr

    def kernel(self, name, ts, dur, corr):
        cat = "Kernel" if self.v == "1.8" else "kernel"
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": self._ts(ts), "dur": dur,
                        "args": {"device": 0, "stream": 7, "correlation": corr, "grid": [4, 1, 1],
                                 "block": [128, 1, 1]}})

    def write(self, path):
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
                                    "traceEvents": self.ev}))
        return path


F32 = "float"


def _scenario(vintage: str, tmp_path):
    """One training step's worth of the rule's cases; returns the trace's path."""
    t = _Trace(vintage)
    t.x("user_annotation", "ProfilerStep#4", MAIN, T, 100_000)
    # op: an fbgemm op with an aten op inside it (one instance, the outermost op)
    t.x("user_annotation", "## sparse ##", MAIN, T + 100, 900)
    t.x("cpu_op", "fbgemm::bounds_check_indices", MAIN, T + 200, 500, dims=[[8], [4096]], types=["long int"] * 2)
    t.launch("cudaLaunchKernel", MAIN, T + 210, [("bounds_check_indices_kernel", 30)])
    t.x("cpu_op", "aten::zero_", MAIN, T + 300, 100, dims=[[8]], types=["long int"])
    t.x("cpu_op", "aten::fill_", MAIN, T + 310, 80, dims=[[8], []], types=["long int", "Scalar"])
    t.launch("cudaLaunchKernel", MAIN, T + 320, [("vectorized_elementwise_kernel", 3)])
    # forward of a C++ autograd Function (fbgemm's lookup), seq 40
    t.x("cpu_op", "fbgemm::split_embedding_codegen_lookup_sgd_function", MAIN, T + 1_000, 300,
        dims=[[1000, 64], [4096]], types=[F32, "long int"], seq=40)
    t.launch("cudaLaunchKernel", MAIN, T + 1_010, [("split_embedding_codegen_forward_kernel", 50)])
    # a CUDA graph replayed inside a compiled region: three kernels, one launch
    t.x("user_annotation", "## forward ##", MAIN, T + 2_000, 1_000)
    t.x("cpu_op", "CompiledFunction", MAIN, T + 2_100, 500, dims=[[64, 64]], types=[F32], seq=41)
    t.launch("cudaGraphLaunch", MAIN, T + 2_110, [("triton_poi_fused_0", 10), ("sm90_xmma_gemm_f32f32", 40),
                                                   ("triton_red_fused_1", 8)])
    # collectives recorded without their arguments (older PyTorch): from the nccl: range, else the kernel
    t.x("user_annotation", "## all2all ##", MAIN, T + 4_000, 2_000)
    t.x("cpu_op", "record_param_comms", MAIN, T + 4_100, 400)
    t.x("user_annotation", "nccl:all_to_all", MAIN, T + 4_110, 300)
    t.launch("cudaLaunchKernel", MAIN, T + 4_120, [("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 200)])
    t.x("cpu_op", "record_param_comms", MAIN, T + 5_000, 400)
    t.launch("cudaLaunchKernel", MAIN, T + 5_010, [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300)])
    # user annotation only: the optimizer step's fused kernel
    t.x("user_annotation", "Optimizer.step#FusedAdam.step", MAIN, T + 7_000, 500)
    t.launch("cudaLaunchKernel", MAIN, T + 7_010, [("multi_tensor_apply_kernel", 90)])
    # launched outside any CPU event, and a kernel whose launch is not in the trace
    t.launch("cudaLaunchKernel", MAIN, T + 200_000, [("lonely_kernel", 5)])
    t.kernel("orphan_kernel", T + 8_000, 7, corr=99_999)
    # backward (autograd thread): the C++ node of the lookup above (linked where seq numbers exist),
    # a node whose forward ran before the window, a c10d op under AccumulateGrad
    ev = "autograd::engine::evaluate_function: "
    t.x("cpu_op", ev + "torch::autograd::CppNode<SplitLookupFunction_sgd_Op>", BWD, T + 10_000, 500)
    t.x("cpu_op", "torch::autograd::CppNode<SplitLookupFunction_sgd_Op>", BWD, T + 10_010, 450, seq=40)
    t.launch("cudaLaunchKernel", BWD, T + 10_020, [("split_embedding_backward_kernel", 120)])
    t.x("cpu_op", ev + "AddmmBackward0", BWD, T + 11_000, 500)
    t.x("cpu_op", "AddmmBackward0", BWD, T + 11_010, 450, seq=7)  # no forward op with seq 7
    t.x("cpu_op", "aten::mm", BWD, T + 11_020, 300, dims=[[32, 128], [128, 64]], types=[F32, F32])
    t.launch("cudaLaunchKernel", BWD, T + 11_030, [("sm90_xmma_gemm_f32f32_tn", 60)])
    t.x("cpu_op", ev + "torch::autograd::AccumulateGrad", BWD, T + 12_000, 500)
    t.x("cpu_op", "c10d::allreduce_", BWD, T + 12_010, 300, dims=[[[4096]], []], types=["TensorList", ""])
    t.launch("cudaLaunchKernel", BWD, T + 12_020, [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 400)])
    return t.write(tmp_path / f"link_{vintage}.json")


def _records(path):
    return [r for r in KinetoSource(path).records() if r["kind"] == "kernel"]


def _by_kernel(recs):
    out = {}
    for r in recs:
        out.setdefault(r["kShortName"], []).append(r)
    return out


@pytest.mark.parametrize("vintage", VINTAGES)
def test_every_case_of_the_rule_in_each_vintage(vintage, tmp_path):
    recs = _records(_scenario(vintage, tmp_path))
    k = _by_kernel(recs)

    def one(name):
        (r,) = k[name]
        return r

    # an op in any namespace; the aten op inside it is the same instance
    r = one("bounds_check_indices_kernel")
    assert (r["link"], r["mod"], r["op"], r["dir"]) == ("op", "fbgemm", "bounds_check_indices", "fprop")
    assert [a.get("shape") for a in r["args"]] == [[8], [4096]]
    inner = one("vectorized_elementwise_kernel")
    assert (inner["op"], inner["opId"], inner["subSeqId"]) == ("bounds_check_indices", r["opId"], 1)
    assert inner["aten"] == "aten::fill_"
    # a compiled region; the graph replay's kernels are one instance, each with its own name and time;
    # Inductor's kernels name their origin ops (none here), with no module known (no Inductor metadata)
    graph = [x for x in recs if x["apiName"] == "cudaGraphLaunch"]
    assert [g["kShortName"] for g in graph] == ["triton_poi_fused_0", "sm90_xmma_gemm_f32f32", "triton_red_fused_1"]
    assert len({g["opId"] for g in graph}) == 1 and graph[0]["opId"] is not None
    assert [(g["link"], g["op"]) for g in graph] == [
        ("kernel-name", "fused:triton_poi_fused_0"), ("region", "CompiledFunction"),
        ("kernel-name", "fused:triton_red_fused_1")]
    assert [g["subSeqId"] for g in graph] == [0, 1, 2]
    assert [g["kDuration"] for g in graph] == [10_000, 40_000, 8_000]
    # collectives without their arguments: the nccl: range inside, else the kernel name
    r = one("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    assert (r["link"], r["mod"], r["op"], r["dir"]) == ("collective", "c10d", "all_to_all", "fprop")
    fwd_ar, bwd_ar = k["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert (fwd_ar["link"], fwd_ar["op"]) == ("collective", "all_reduce")
    # a c10d op under AccumulateGrad: the collective, run as itself in the backward pass
    assert (bwd_ar["link"], bwd_ar["op"], bwd_ar["dir"], bwd_ar["opDir"]) == ("collective", "allreduce_", "bprop",
                                                                                "fprop")
    # a user annotation
    r = one("multi_tensor_apply_kernel")
    assert (r["link"], r["op"], r["dir"]) == ("annotation", "Optimizer.step#FusedAdam.step", "optim")
    # the C++ autograd node: linked to the forward lookup where the trace has seq numbers (not 1.8)
    r = one("split_embedding_backward_kernel")
    assert (r["link"], r["bwdNode"], r["dir"]) == ("node", "SplitLookupFunction_sgd_Op", "bprop")
    if vintage == "1.8":
        assert (r["mod"], r["op"]) == ("autograd", "SplitLookupFunction_sgd_Op")
    else:
        fwd = one("split_embedding_codegen_forward_kernel")
        assert (r["mod"], r["op"], r["opId"]) == ("fbgemm", "split_embedding_codegen_lookup_sgd_function",
                                                  fwd["opId"])
        assert r["args"] == fwd["args"]
    # a backward whose forward ran before the window: its own aten op, own shapes, bprop
    r = one("sm90_xmma_gemm_f32f32_tn")
    assert (r["link"], r["op"], r["dir"], r["opDir"]) == ("op", "mm", "bprop", "fprop")
    # outside any CPU event; no launch in the trace
    assert (one("lonely_kernel")["link"], one("lonely_kernel")["op"]) == (None, None)
    r = one("orphan_kernel")
    assert (r["link"], r["op"], r["apiName"], r["ranges"]) == ("no-launch", None, None, [])


@pytest.mark.parametrize("vintage", VINTAGES)
def test_backward_without_forward_is_priced_as_its_own_op(vintage, tmp_path):
    recs = _records(_scenario(vintage, tmp_path))
    df = build(recs, peak_flops=1e15, peak_bw=3e12)
    i = next(i for i, r in enumerate(recs) if r["kShortName"] == "sm90_xmma_gemm_f32f32_tn")
    assert df["dir"][i] == "bprop"
    assert df["flops"][i] == 2 * 32 * 128 * 64


@pytest.mark.parametrize("vintage", VINTAGES)
def test_each_kernel_is_one_record_counted_once(vintage, tmp_path):
    """Time is never counted twice: a kernel with several candidate ops (an fbgemm op around an aten op,
    an annotation around a collective) is one record, of one op instance."""
    path = _scenario(vintage, tmp_path)
    doc = json.loads(path.read_text())
    kernels = [e for e in doc["traceEvents"] if e["cat"] in ("kernel", "Kernel")]
    recs = _records(path)
    assert len(recs) == len(kernels)
    assert sum(r["kDuration"] for r in recs) == sum(round(e["dur"] * 1000) for e in kernels)
    assert len({(r["start"], r["kShortName"]) for r in recs}) == len(recs)


ROCM_APIS = ("hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel")


@pytest.mark.parametrize("vintage", ("2.0", "current"))
def test_rocm_launch_apis(vintage, tmp_path):
    t = _Trace(vintage)
    for i, api in enumerate(ROCM_APIS):
        t.x("cpu_op", "aten::addmm", MAIN, T + 1000 * i, 500, dims=[[64], [32, 128], [128, 64]], types=[F32] * 3)
        t.launch(api, MAIN, T + 1000 * i + 10, [(f"Cijk_Alik_Bljk_SB_MT64x64_{i}", 50)])
    t.x("cpu_op", "CompiledFunction", MAIN, T + 9_000, 500)
    t.launch("hipGraphLaunch", MAIN, T + 9_010, [("triton_a", 5), ("triton_b", 6)])
    recs = _records(t.write(tmp_path / "rocm.json"))
    assert [r["apiName"] for r in recs] == [*ROCM_APIS, "hipGraphLaunch", "hipGraphLaunch"]
    assert [(r["link"], r["op"]) for r in recs[:4]] == [("op", "addmm")] * 4
    assert len({r["opId"] for r in recs[:4]}) == 4
    assert {(r["link"], r["op"], r["opId"]) for r in recs[4:]} == {("region", "CompiledFunction", recs[4]["opId"])}


def test_collective_of_nccl_and_rccl_kernel_names():
    assert collective_of_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all_reduce"
    assert collective_of_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*)") == "reduce_scatter"
    assert collective_of_kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)") == "send_recv"
    assert collective_of_kernel("ncclKernel_Send_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert collective_of_kernel("ncclDevKernel_AllGather_RING_LL") == "all_gather"
    assert collective_of_kernel("void at::native::vectorized_elementwise_kernel<4>") is None


# -- the corpus -------------------------------------------------------------------------------------------

KINETO = CORPUS / "kineto"
TRACES = sorted(KINETO.glob("*.json.gz")) if KINETO.is_dir() else []
HTA = [p for p in TRACES if "HolisticTraceAnalysis" in p.name]


def _trace(part: str):
    got = [p for p in TRACES if part in p.name]
    if not got:
        pytest.skip(f"corpus trace {part!r} not found under {KINETO}")
    return got[0]


@functools.lru_cache(maxsize=2)
def _corpus(path):
    """(source, kernel records, all records)."""
    src = KinetoSource(path)
    recs = list(src.records())
    return src, [r for r in recs if r["kind"] == "kernel"], recs


def _inside(r) -> bool:
    """Launched inside a CPU event (``ProfilerStep#N`` names no work)."""
    return any(not x["text"].startswith("ProfilerStep#") for x in r["ranges"])


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(HTA), ids=lambda p: p.name[40:80])
def test_corpus_kernel_time_inside_a_cpu_event_carries_an_op(path):
    _, recs, _ = _corpus(path)
    inside = [r for r in recs if _inside(r)]
    assert inside
    with_op = [r for r in inside if r["op"] and r["dir"] and r["link"]]
    assert sum(r["kDuration"] for r in with_op) >= 0.98 * sum(r["kDuration"] for r in inside)
    assert all(r["link"] is None for r in recs if r["apiName"] is not None and not r["ranges"])


@pytest.mark.corpus
def test_corpus_fbgemm_cpp_nodes_and_argless_collectives():
    """The trace_diff control trace (DLRM-style training: fbgemm embeddings, NCCL all-to-all)."""
    _, recs, _ = _corpus(_trace("trace_diff__control"))
    # (an fbgemm op inside a Python autograd Function's backward node too: run as itself)
    fbgemm = [r for r in recs if any(x["text"].startswith("fbgemm::") for x in r["ranges"])]
    assert fbgemm and all(r["link"] == "op" and r["op"] for r in fbgemm)
    assert {r["mod"] for r in fbgemm} == {"fbgemm"}
    nodes = [r for r in recs if any("CppNode<" in x["text"] for x in r["ranges"])]
    assert nodes and all(r["link"] in ("node", "op") and r["dir"] == "bprop" for r in nodes)
    assert all(r["bwdNode"] and "CppNode" not in r["bwdNode"] for r in nodes if r["link"] == "node")
    # (an all-to-all inside a Python autograd Function's backward node too: the collective is its work)
    nccl = [r for r in recs if r["kShortName"].startswith("ncclKernel")]
    assert nccl and all((r["link"], r["mod"]) == ("collective", "c10d") for r in nccl)
    ops = {r["op"] for r in nccl}
    assert "all_to_all" in ops and ops <= {"all_to_all", "allreduce_"}  # (c10d::allreduce_: its own op)
    argless = [r for r in nccl if not any(x["text"].startswith("c10d::") for x in r["ranges"])]
    assert argless and {r["op"] for r in argless} == {"all_to_all"}  # each inside an nccl:all_to_all range


@pytest.mark.corpus
def test_corpus_cuda_graph_replays_are_one_instance_per_launch():
    src, recs, every = _corpus(_trace("negative_queue_length"))
    graph = [r for r in every if r["apiName"] == "cudaGraphLaunch"]  # (kernels and the graph's memsets)
    assert graph
    per_launch: dict[int, set] = {}
    for r in graph:
        per_launch.setdefault(r["correlationId"], set()).add((r["opId"], r["op"], r["link"]))
    assert all(len(v) == 1 for v in per_launch.values())
    # the forward's replays: the region; the backward's: the node linked to that region's op
    assert {next(iter(v))[1:] for v in per_launch.values()} == {("CompiledFunction", "region"),
                                                                ("CompiledFunction", "node")}
    # each launch's kernels numbered within its instance, in launch order
    for corr in per_launch:
        run = sorted((r["start"], r["subSeqId"]) for r in graph if r["correlationId"] == corr)
        subs = [s for _, s in run]
        assert subs == list(range(subs[0], subs[0] + len(subs)))
    # the GPU activities without a launch: counted apart, as the warning says
    no_launch = [r for r in every if r["link"] == "no-launch"]
    assert any(r["kind"] == "kernel" for r in no_launch)
    assert all(r["op"] is None and r["apiName"] is None and not r["ranges"] for r in no_launch)
    # (all of them launched before the window opened: their correlation ids precede every launch's)
    n = len(no_launch)
    assert any(w.startswith(f"{n} GPU activities have no CUDA launch with their correlation id in the trace "
                            f"({n} of them launched before the profiled window") for w in src.warnings)


@pytest.mark.corpus
def test_corpus_rocm_launches_are_linked():
    _, recs, _ = _corpus(_trace("mi250_minitoy"))
    apis = {r["apiName"] for r in recs}
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel"} <= apis
    assert all(r["op"] and r["link"] == "op" for r in recs if r["apiName"] and _inside(r))


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params([p for p in HTA if "mi250" not in p.name]), ids=lambda p: p.name[40:80])
def test_corpus_gemm_time_has_flops_where_shapes_were_recorded(path):
    """GEMM/conv/attention kernels (fbgemm_gpu's, matched by their namespace alone, are none) whose
    innermost op recorded shapes: their op instance is priced (this is what linking decides; which of
    the instance's kernels carry its FLOPs is prof's kernel-role rule)."""
    _, recs, _ = _corpus(path)
    df = build(recs, peak_flops=1e15, peak_bw=3e12)
    gemm = [i for i, r in enumerate(recs) if kernel_class(r["kLongName"].replace("fbgemm", ""))[1]
            and "::" in (r["aten"] or "") and any(s for s in r["atenSizes"] or () if isinstance(s, list))]
    assert gemm
    inst_flops: dict = {}
    for i, r in enumerate(recs):
        if r["opId"] is not None and df["flops"][i] > 0:
            inst_flops[(r["opId"], r["dir"])] = True
    priced = [i for i in gemm if inst_flops.get((recs[i]["opId"], recs[i]["dir"]))]
    assert sum(recs[i]["kDuration"] for i in priced) >= 0.95 * sum(recs[i]["kDuration"] for i in gemm)
