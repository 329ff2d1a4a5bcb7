"""``pyprof prof --summary comm``: collectives with nccl-tests bandwidths, exposed time and skew across ranks.

Checked three ways: a hand-built trace in torch 2.x's ``record_param_comms`` layout (new NCCL kernel names,
``Group size`` recorded) against the nccl-tests formulas worked by hand; the corpus' HTA NCCL traces (the
older layout: no ``Collective name``, sizes only on the ``nccl:NAME`` range; old kernel names, SendRecv)
against sizes, times and overlaps read from the raw trace here; and a real 2-process gloo job recorded on
this machine (``scripts/record_gloo.py``) against its own model's gradient size and its raw trace.
"""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, REPO, hand_union, run_main

from pyprof.parse.kineto import KinetoSource
from pyprof.prof.comm import bus_factor, collectives, kind_of, skew

ELEM = {"float": 4, "int": 4, "long": 8, "c10::Half": 2, "c10::BFloat16": 2}


def kineto_corpus(name: str) -> Path:
    """A corpus torch.profiler trace by (a unique part of) its name; skips where the corpus lacks it."""
    found = sorted((CORPUS / "kineto").glob(f"*{name}*")) if (CORPUS / "kineto").is_dir() else []
    if len(found) != 1:
        pytest.skip(f"corpus trace {name!r} not found under {CORPUS}/kineto")
    return found[0]


def test_kinds_and_factors_follow_nccl_tests():
    assert [kind_of(o) for o in ("allreduce_", "_allgather_base_", "reduce_scatter_tensor", "all_to_all",
                                 "alltoall_base_", "broadcast_", "send_recv", "_reduce_scatter_base", "reduce",
                                 "barrier", "aten::mm")] == [
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all", "broadcast", "send_recv",
        "reduce_scatter", "reduce", "barrier", None]
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    assert bus_factor("all_gather", 4) == bus_factor("reduce_scatter", 4) == bus_factor("all_to_all", 4) == 3 / 4
    assert bus_factor("broadcast", None) == bus_factor("send_recv", 2) == 1.0
    assert bus_factor("all_reduce", None) is None  # no group, no factor (it is not 1 in general)


def _new_layout_trace(path: Path) -> Path:
    """torch 2.x: record_param_comms with Collective name, sizes, dtype and Group size; new kernel names.
    An all-gather (1024 -> 4096 bf16, 4 ranks, 300 us) and an all-reduce (2M float, 4 ranks, 900 us) on
    stream 20, and a GEMM on stream 7 running over the last 400 us of the all-reduce."""
    ev = []
    pid, tid, t0 = 7, 7, 1_700_000_000_000

    def x(cat, name, ts, dur, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    def kernel(name, ts, corr, dur, stream):
        x("cuda_runtime", "cudaLaunchKernel", ts - 10, 5, correlation=corr)
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                   "args": {"device": 0, "stream": stream, "correlation": corr}})

    x("user_annotation", "ProfilerStep#1", t0, 3000)
    x("cpu_op", "record_param_comms", t0 + 100, 50, **{"External id": 11, "Collective name": "_allgather_base",
      "dtype": "BFloat16", "In msg nelems": 1024, "Out msg nelems": 4096, "Group size": 4})
    kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 120, 1, 300, 20)
    x("cpu_op", "record_param_comms", t0 + 1000, 50, **{"External id": 21, "Collective name": "allreduce",
      "dtype": "Float", "In msg nelems": 2_000_000, "Out msg nelems": 2_000_000, "Group size": 4})
    kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t0 + 1020, 2, 900, 20)
    x("cpu_op", "aten::mm", t0 + 1400, 20, **{"External id": 31, "Input Dims": [[64, 64], [64, 64]],
      "Input type": ["float", "float"]})
    kernel("ampere_sgemm_64x64_nn", t0 + 1520, 3, 600, 7)  # 1520..2120: 400 us inside 1020..1920
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def test_new_layout_bandwidths_by_hand(tmp_path):
    df = collectives(KinetoSource(_new_layout_trace(tmp_path / "t.json")).records())
    assert df["kind"].tolist() == ["all_gather", "all_reduce"]
    gather, reduce = df.to_dict("records")
    # all-gather: nccl-tests' size is the whole output, 4096 x 2 B, in 300 us; busbw x (4 - 1) / 4
    assert (gather["size"], gather["time"], gather["group"]) == (8192, 300_000, 4)
    assert gather["algbw"] == pytest.approx(8192 / 300_000)
    assert gather["busbw"] == pytest.approx(8192 / 300_000 * 3 / 4)
    # all-reduce: 2M x 4 B in 900 us; busbw x 2 (4 - 1) / 4
    assert reduce["size"] == 8_000_000 and reduce["time"] == 900_000
    assert reduce["busbw"] == pytest.approx(8_000_000 / 900_000 * 1.5)
    # the GEMM on stream 7 hides 400 us of the all-reduce and none of the all-gather
    assert (reduce["overlap"], reduce["exposed"]) == (400_000, 500_000)
    assert (gather["overlap"], gather["exposed"]) == (0, 300_000)


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        return json.load(fh)["traceEvents"]


def _hand_collectives(events: list[dict]) -> list[dict]:
    """Each NCCL kernel of a trace, read here: its start and duration (ns), stream, and the message of the
    ``nccl:NAME`` range open on the launching thread at its launch (numel x element size)."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ranges = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("nccl:")]
    out = []
    for k in events:
        if k.get("cat") != "kernel" or not k["name"].startswith("nccl"):
            continue
        launch = launches.get(k["args"]["correlation"])  # (missing: launched before the window)
        rng = [r for r in ranges if launch is not None and r["tid"] == launch["tid"]
               and r["ts"] <= launch["ts"] <= r["ts"] + r["dur"]]
        size = None
        if rng and "gather" not in rng[-1]["name"]:
            # (an all-gather's size is its whole output: the input times the group, which these traces lack)
            a = rng[-1]["args"]
            size = math.prod(a["Input Dims"][0]) * ELEM[a["Input type"][0]]
        out.append({"start": round(k["ts"] * 1000), "time": round(k["dur"] * 1000),
                    "stream": k["args"]["stream"], "size": size, "kind": rng[-1]["name"][5:] if rng else None})
    return sorted(out, key=lambda r: r["start"])


def _hand_overlap(events: list[dict], coll: dict) -> int:
    """ns of ``coll`` covered by the union of the other streams' non-NCCL kernels, read from the trace."""
    s0, e0 = coll["start"], coll["start"] + coll["time"]
    ns = [(round(k["ts"] * 1000), round(k["ts"] * 1000) + round(k["dur"] * 1000)) for k in events
          if k.get("cat") == "kernel" and not k["name"].startswith("nccl") and k["args"]["stream"] != coll["stream"]]
    spans = sorted((max(s, s0), min(e, e0)) for s, e in ns if s < e0 and e > s0)
    covered, cur = 0, None
    for s, e in spans:
        if cur is None or s > cur[1]:
            covered += 0 if cur is None else cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return covered + (0 if cur is None else cur[1] - cur[0])


@pytest.mark.parametrize("name", ["trace_diff__control__control"])
def test_corpus_nccl_traces_match_the_raw_trace(name):
    path = kineto_corpus(f"HolisticTraceAnalysis__{name}")
    events = _raw(path)
    hand = _hand_collectives(events)
    df = collectives(KinetoSource(path).records())
    assert len(df) == len(hand) > 0
    assert df["start"].tolist() == [h["start"] for h in hand]
    assert df["time"].tolist() == [h["time"] for h in hand]
    assert df["size"].fillna(-1).tolist() == [float(h["size"] or -1) for h in hand]
    # older layout: no group recorded, so algbw only; it is size / time
    known = df["size"].notna()
    assert known.any() and (df["algbw"][known] == (df["size"] / df["time"])[known]).all()
    assert df["algbw"][~known].isna().all()
    assert df["busbw"][df["kind"] != "send_recv"].isna().all()
    assert df["kernel"].str.startswith("ncclKernel_").all()  # the old kernel names
    for i in range(0, len(hand), max(1, len(hand) // 6)):  # a spread of them, by hand
        assert df["overlap"][i] == _hand_overlap(events, hand[i]), i
    assert (df["exposed"] + df["overlap"] == df["time"]).all()


# -- a real 2-process gloo job, recorded here ---------------------------------------------------------

@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("gloo")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "record_gloo.py"), str(out)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


# DDP's gradient bucket: every parameter of the script's model, Linear(64, 256) and Linear(256, 16)
GRADS = 64 * 256 + 256 + 256 * 16 + 16


@pytest.mark.torch
def test_gloo_collectives_from_a_real_job(gloo):
    events = _raw(Path(gloo[0]))
    ranges = sorted((e for e in events if str(e.get("name", "")).startswith("gloo:")), key=lambda e: e["ts"])
    df = collectives(KinetoSource(gloo[0]).records())
    # one row per gloo range, at its start, for its whole duration
    assert df["kernel"].tolist() == [e["name"] for e in ranges]
    assert df["start"].tolist() == [round(e["ts"] * 1000) for e in ranges]
    assert df["time"].tolist() == [round(e["dur"] * 1000) for e in ranges]  # (ns: start and duration rounded)
    assert (df["device"] == "cpu").all() and df["group"].dropna().eq(2).all()
    reduce = df[df["kind"] == "all_reduce"]
    # 3 steps of DDP's one gradient bucket, then the script's all_reduce of 1000 floats
    assert reduce["size"].tolist() == [GRADS * 4] * 3 + [4000]
    assert (reduce["busbw"] == reduce["algbw"]).all()  # 2 (n - 1) / n = 1 for n = 2
    (gather,) = df[df["kind"] == "all_gather"].to_dict("records")
    assert gather["size"] == 2 * 1000 * 4  # the whole output, 2 ranks x 1000 floats
    assert gather["busbw"] == pytest.approx(gather["algbw"] / 2)
    barrier = df[df["kind"] == "barrier"]
    assert len(barrier) == 1 and barrier["size"].isna().all() and barrier["algbw"].isna().all()
    # the c10d:: ops that queued them are no collective run
    assert not df["kernel"].str.startswith("c10d::").any()


@pytest.mark.torch
def test_gloo_skew_across_ranks(gloo, tmp_path, capsys):
    sets = [collectives(KinetoSource(p).records(), rank=f"rank{r}") for r, p in enumerate(gloo)]
    per, ranks = skew(sets)
    starts = [[round(e["ts"] * 1000) for e in sorted(_raw(Path(p)), key=lambda e: e.get("ts", 0))
               if e.get("name") == "gloo:all_reduce"] for p in gloo]
    rows = per[per["kind"] == "all_reduce"].sort_values("nth")
    assert rows["skew"].tolist() == [abs(a - b) for a, b in zip(*starts, strict=True)]
    assert rows["last"].tolist() == [f"rank{int(b > a)}" for a, b in zip(*starts, strict=True)]
    assert ranks["last"].sum() == len(per)
    # the dataset's CLI prints the same
    pytest.importorskip("pyarrow")
    pytest.importorskip("duckdb")
    ds = tmp_path / "ds"
    code, _, err = run_main(capsys, ["parse", *gloo, "--format", "parquet", "-o", ds])
    assert code == 0, err
    code, out, err = run_main(capsys, ["prof", "--summary", "comm", ds, "-w", "0"])
    assert code == 0, err
    assert "# arrival skew across 2 ranks" in out
    first = next(line.split() for line in out.splitlines() if line.startswith("all_reduce 1 "))
    assert int(first[3]) == abs(starts[0][0] - starts[1][0])
    # CSV: one table, every collective of every rank with its skew
    code, out, err = run_main(capsys, ["prof", "--summary", "comm", ds, "--csv"])
    assert code == 0, err
    rows = [line.split(",") for line in out.splitlines()]
    head = rows[0]
    reduce = [r for r in rows[1:] if r[head.index("Kind")] == "all_reduce"]
    assert len(reduce) == 2 * len(starts[0])
    assert {int(r[head.index("Skew(ns)")]) for r in reduce} == {abs(a - b) for a, b in zip(*starts, strict=True)}


@pytest.mark.torch
def test_cli_comm_on_a_trace_and_bad_input(gloo, tmp_path, capsys):
    code, out, err = run_main(capsys, ["prof", "--summary", "comm", "--csv", gloo[0]])
    assert code == 0, err
    assert out.splitlines()[0].startswith("Idx,Rank,Device,Lane,Op,Kind,Kernel,Dtype,Size(B),Group,")
    assert len(out.splitlines()) == 1 + sum(1 for e in _raw(Path(gloo[0])) if str(e.get("name", "")).startswith("gloo:"))
    # a one-process trace (no collective): nothing to compare, which is said in one line; exit 0, no table
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                                                  "ts": 10, "dur": 5, "args": {"External id": 1}}]}))
    code, out, err = run_main(capsys, ["prof", "--summary", "comm", plain, "-o", tmp_path / "out.txt"])
    assert code == 0 and out == "" and "Traceback" not in err
    assert "no collective" in err.splitlines()[-1] and "nothing to compare" in err.splitlines()[-1]
    assert not (tmp_path / "out.txt").exists()
    # a record file that is not one still fails in one line, exit 2
    (tmp_path / "bad.dict").write_text("not json\n")
    code, out, err = run_main(capsys, ["prof", "--summary", "comm", tmp_path / "bad.dict"])
    assert code == 2 and out == "" and err.startswith("pyprof: error: ")


@pytest.mark.torch
def test_report_has_the_collectives(gloo, tmp_path, capsys):
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    code, _, err = run_main(capsys, ["report", gloo[0], "-o", out])
    assert code == 0, err
    text = out.read_text()
    n = sum(1 for e in _raw(Path(gloo[0])) if str(e.get("name", "")).startswith("gloo:"))
    assert '<section id="collectives">' in text and f'<span class="count" id="t-comm-count">{n} rows</span>' in text


@pytest.mark.torch
def test_cpu_idle_of_the_gloo_trace(gloo, capsys):
    """--summary idle on a CPU trace: each thread's time inside ops (the union of its cpu_op events, read from
    the raw trace here) and outside them (its first op's start to its last op's end, less that)."""
    from pyprof.prof.idle import cpu_idle

    events = _raw(Path(gloo[0]))
    df = cpu_idle(KinetoSource(gloo[0]).records())
    assert len(df) and (df["step"] == "all").all()  # (the script marks no steps)
    for row in df.to_dict("records"):
        tid = int(row["thread"].split(":")[1])
        busy, span = hand_union(events, lambda e, tid=tid: e.get("cat") == "cpu_op" and e.get("tid") == tid)
        assert row["busy"] == busy, row
        assert row["idle"] == span - busy
    code, out, err = run_main(capsys, ["prof", "--summary", "idle", "--csv", gloo[0]])
    assert code == 0, err
    assert out.splitlines()[0].startswith("Thread,Step,InOps(ns),Outside(ns)")
