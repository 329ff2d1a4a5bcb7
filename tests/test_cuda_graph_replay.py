"""CUDA graph replays: ``init()`` marks ``torch.cuda.CUDAGraph.replay`` as an op, and every kernel of one
``cudaGraphLaunch`` takes that op, on the real H200 trace of a hand-captured graph
(``tests/fixtures/gpu/h200_cudagraph_lm.trace.json.gz``, recorded before replay was marked: the marker
is inserted around each launch as the profiler writes it)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from pyprof import markers
from pyprof.parse.kineto import KinetoSource
from tests.conftest import REPO

TRACE = REPO / "tests" / "fixtures" / "gpu" / "h200_cudagraph_lm.trace.json.gz"


def _replay_error(g) -> tuple[type, str]:
    try:
        g.replay()
    except Exception as e:  # a CPU build cannot replay: the error must be the original's
        return type(e), str(e)
    return type(None), ""


@pytest.mark.torch
def test_init_marks_graph_replay_at_the_call_site_and_deinit_restores_it():
    torch = pytest.importorskip("torch")
    import pyprof
    from pyprof.annotate.recorder import Recorder

    orig = vars(torch.cuda.CUDAGraph)["replay"]
    try:  # CPU builds cannot construct one; replay's own check runs
        g = object.__new__(torch.cuda.CUDAGraph)
    except TypeError:  # a CUDA build (torch 2.4's) wants its C base's __new__; replay then fails without a GPU
        g = torch._C._CUDAGraph.__new__(torch.cuda.CUDAGraph)
    plain = _replay_error(g)

    class Step(torch.nn.Module):
        def forward(self, graph):
            return _replay_error(graph)

    pyprof.init()
    try:
        assert vars(torch.cuda.CUDAGraph)["replay"] is not orig
        with Recorder() as rec:
            marked = Step()(g)
    finally:
        pyprof.deinit()
    assert marked == plain  # instrumentation changes nothing the call does
    assert vars(torch.cuda.CUDAGraph)["replay"] is orig
    ops = [markers.decode(r.text) for r in rec.ranges if markers.decode(r.text)["k"] == "op"]
    assert [(p["ns"], p["op"]) for p in ops] == [("torch.cuda.CUDAGraph", "replay")]
    site = ops[0]["trace"][0]  # the user's line that called replay
    assert site.split(":")[0].endswith("test_cuda_graph_replay.py") and site.endswith(":_replay_error")
    parents = [r.parents for r in rec.ranges if markers.decode(r.text)["k"] == "op"][0]
    assert markers.decode(parents[-1])["cls"] == "Step"  # the caller's module path


REPLAY = markers.encode(markers.make("op", ns="torch.cuda.CUDAGraph", op="replay",
                                     args=[{"name": "self", "type": "other", "value": "CUDAGraph"}], id=1,
                                     trace=["train.py:42:main"]))


def _kernels(path):
    return [r for r in KinetoSource(path).records() if r["kind"] == "kernel"]


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    trace = json.loads(gzip.decompress(TRACE.read_bytes()))
    launches = [e for e in trace["traceEvents"] if e.get("name") == "cudaGraphLaunch"]
    trace["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": markers.to_profiler_name(REPLAY),
                              "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] - 1, "dur": e["dur"] + 2, "args": {}}
                             for e in launches]
    out = tmp_path_factory.mktemp("graph") / "marked.json.gz"
    out.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return len(launches), _kernels(out)


def test_unmarked_replays_have_no_op():
    graph = [r for r in _kernels(TRACE) if r["apiName"] == "cudaGraphLaunch"]
    assert len(graph) == 330 and all(r["op"] is None and r["link"] is None for r in graph)
    # every range around the launches is a ProfilerStep: nothing names work
    assert {rg["text"].split("#")[0] for r in graph for rg in r["ranges"]} == {"ProfilerStep"}


def test_every_kernel_of_a_replay_takes_its_op(marked):
    n_launch, recs = marked
    plain = {(r["correlationId"], r["start"]): r for r in _kernels(TRACE)}
    graph = [r for r in recs if r["apiName"] == "cudaGraphLaunch"]
    assert n_launch == 3 and len(graph) == 330
    per_launch = defaultdict(list)
    for r in graph:
        assert (r["mod"], r["op"], r["link"], r["trace"]) == ("torch.cuda.CUDAGraph", "replay", "marker",
                                                             ["train.py:42:main"])
        before = plain[(r["correlationId"], r["start"])]  # own name and time, as without the marker
        assert (r["kLongName"], r["kDuration"], r["end"]) == (before["kLongName"], before["kDuration"], before["end"])
        per_launch[r["correlationId"]].append(r)
    assert len(per_launch) == 3
    instances = set()
    for rs in per_launch.values():
        ids = {(r["opId"], r["dir"]) for r in rs}
        assert len(ids) == 1  # one launch, one op instance
        instances |= ids
        subs = [r["subSeqId"] for r in rs]
        assert len(set(subs)) == len(subs) == 110
    assert len(instances) == 3  # each replay its own instance: no kernel counted twice
    # the launch-less activities stay apart: the previous step's work, launched before the window
    assert all(r["link"] == "no-launch" for r in recs if r["apiName"] is None)


def test_prof_counts_each_replayed_kernel_once(marked):
    from pyprof.prof.table import build

    _, recs = marked
    df = build(recs)
    rows = df[df["op"] == "replay"]
    assert len(rows) == 330
    assert rows["sil"].sum() == sum(r["kDuration"] for r in recs if r["apiName"] == "cudaGraphLaunch")
    assert any("replay" in w and "no FLOP/byte model" in w for w in df.attrs["warnings"])  # n/a, counted


@pytest.mark.parametrize("vintage", ("1.8", "2.0", "current"))
@pytest.mark.parametrize("marked_replay", (False, True))
def test_hand_replayed_graph_in_each_vintage(vintage, marked_replay, tmp_path):
    """Two replays of one graph under ``ProfilerStep#N`` alone, as each exporter writes them: without the
    marker no op; with it, each replay's kernels are one instance of ``replay`` at the user's line."""
    from tests.test_kineto_link import MAIN, T, _Trace

    t = _Trace(vintage)
    t.x("user_annotation", "ProfilerStep#3", MAIN, T, 100_000)
    for start in (T + 1_000, T + 5_000):
        if marked_replay:
            t.x("user_annotation", markers.to_profiler_name(REPLAY), MAIN, start, 500)
        t.launch("cudaGraphLaunch", MAIN, start + 10, [("triton_poi_fused_0", 10), ("sm90_xmma_gemm_f32f32", 40),
                                                      ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30)])
    recs = _kernels(t.write(tmp_path / f"graph_{vintage}.json"))
    assert [r["kDuration"] for r in recs] == [10_000, 40_000, 30_000] * 2  # own names and times
    if not marked_replay:
        assert all(r["op"] is None and r["link"] is None for r in recs)
        return
    assert {(r["mod"], r["op"], r["link"], tuple(r["trace"])) for r in recs} == {
        ("torch.cuda.CUDAGraph", "replay", "marker", ("train.py:42:main",))}
    first, second = recs[:3], recs[3:]
    assert len({r["opId"] for r in first}) == len({r["opId"] for r in second}) == 1
    assert first[0]["opId"] != second[0]["opId"]
    assert [r["subSeqId"] for r in first] == [r["subSeqId"] for r in second] == [0, 1, 2]
