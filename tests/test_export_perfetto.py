"""``pyprof export --perfetto``: a trace that trace viewers' parsers load, with pyprof's columns on every kernel.

Checked three ways: against the Trace Event Format's rules (the JSON ``traceEvents`` schema Perfetto's and
chrome://tracing's importers read: event kinds and their fields, slices on one track nesting), read back
through a chrome-trace parser (pyprof's own Kineto reader, which parses real torch.profiler traces: every
kernel comes back with its name, device, stream and times), and by Perfetto's trace processor where its
binary is on this machine (``trace_processor_shell`` on PATH, or ``PERFETTO_TRACE_PROCESSOR``; the
``perfetto`` package downloads it at run time, which fails offline)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import CORPUS, run_main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LENET = FIXTURES / "gpu" / "h200_lenet.trace.json.gz"


def _strict(path) -> dict:
    """The file as strict JSON (NaN or Infinity, which JSON has not, fail)."""
    def no_constant(name):
        raise AssertionError(f"{name} in the trace")

    return json.loads(Path(path).read_text(), parse_constant=no_constant)


def check_schema(trace: dict) -> dict[str, list[dict]]:
    """The Trace Event Format's rules for the event kinds written (X, C, M); events by kind."""
    assert set(trace) >= {"traceEvents"} and isinstance(trace["traceEvents"], list)
    kinds: dict[str, list[dict]] = {"X": [], "C": [], "M": []}
    for e in trace["traceEvents"]:
        assert e["ph"] in kinds, e
        assert isinstance(e["name"], str) and e["name"]
        assert type(e["pid"]) is int and type(e["tid"]) is int and 0 <= e["pid"] < 2**31 and 0 <= e["tid"] < 2**31
        assert isinstance(e["args"], dict)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"]["name"], str)
        else:
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in e["args"].values()), e
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        kinds[e["ph"]].append(e)
    return kinds


def check_nesting(slices: list[dict], eps: float = 0.0015) -> None:
    """Slices of one track either nest or follow one another (a viewer's importer drops the others)."""
    tracks: dict[tuple, list] = {}
    for e in slices:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], -e["dur"], e))
    for key, items in tracks.items():
        items.sort(key=lambda x: (x[0], x[1]))
        open_: list[float] = []
        for ts, neg, e in items:
            while open_ and open_[-1] <= ts + eps:
                open_.pop()
            end = ts - neg
            assert not open_ or end <= open_[-1] + eps, f"track {key}: {e['name']} at {ts} crosses its parent"
            open_.append(end)


def _export(tmp_path, src, capsys) -> tuple[dict, str]:
    out = tmp_path / "t.json"
    code, stdout, err = run_main(capsys, ["export", "--perfetto", out, src])
    assert code == 0, err
    assert f"pyprof: wrote {out}" in err
    return _strict(out), err


def test_kernels_carry_pyprofs_columns(tmp_path, capsys):
    from pyprof.cli import inputs

    trace, _ = _export(tmp_path, LENET, capsys)
    kinds = check_schema(trace)
    check_nesting(kinds["X"])
    p = inputs.profile(str(LENET), lambda line: None)
    df, zero = p.df, trace["otherData"]["time_zero_ns"]
    kernels = [e for e in kinds["X"] if e["cat"] == "kernel"]
    assert len(kernels) == len(df) == len(p.records)
    for e in kernels:
        row, rec = df.iloc[e["args"]["idx"] - 1], p.records[e["args"]["idx"] - 1]
        assert e["name"] == rec["kShortName"] and e["pid"] == rec["device"] and e["tid"] == rec["stream"]
        assert round(e["ts"] * 1000) + zero == rec["start"] and round(e["dur"] * 1000) == rec["end"] - rec["start"]
        assert e["args"].get("op") == row["op"] and e["args"].get("layer", "") == ":".join(row["layer"])
        assert e["args"].get("call site", "") == ":".join(row["trace"]) and e["args"]["step"] == row["step"]
        for col, arg in (("flops", "flops"), ("bytes", "bytes"), ("gap", "gap")):
            if row[col] == row[col]:  # known: the same number; unknown (NaN): left out, never 0
                assert e["args"][arg] == pytest.approx(float(row[col]))
            else:
                assert arg not in e["args"]
    assert sum(e["args"].get("flops", 0) for e in kernels) == pytest.approx(df["flops"].sum())
    assert {e["args"]["bound"] for e in kernels if "bound" in e["args"]} <= {"compute", "memory", "latency"}


def test_module_slices_span_their_kernels(tmp_path, capsys):
    trace, _ = _export(tmp_path, LENET, capsys)
    kinds = check_schema(trace)
    modules = [e for e in kinds["X"] if e["cat"] == "module"]
    kernels = [e for e in kinds["X"] if e["cat"] == "kernel"]
    assert {m["tid"] for m in modules} == {2**30} and {m["pid"] for m in modules} == {k["pid"] for k in kernels}
    # one stream here: every kernel lies inside a slice for each module of its layer path, at that depth
    for k in kernels:
        path = k["args"].get("layer", "").split(":") if "layer" in k["args"] else []
        for depth in range(len(path)):
            whole = ":".join(path[:depth + 1])
            assert any(m["args"]["layer"] == whole and m["ts"] <= k["ts"] and k["ts"] + k["dur"] <= m["ts"] + m["dur"]
                       + 0.0015 for m in modules), (k["name"], whole)
    names = {m["name"] for m in modules}
    assert {"LeNet", "conv1", "fc1"} <= names


def test_steps_and_their_counters(tmp_path, capsys):
    from pyprof.cli import inputs

    trace, _ = _export(tmp_path, LENET, capsys)
    kinds = check_schema(trace)
    p = inputs.profile(str(LENET), lambda line: None)
    steps = p.df.attrs["header"]["steps"]
    shown = [e for e in kinds["X"] if e["cat"] == "step"]
    assert [e["name"] for e in shown] == [f"ProfilerStep#{n}" for n, _, _ in steps]
    times = [e for e in kinds["C"] if e["name"] == "step kernel time (ms)"]
    assert len(times) == len(steps) + 1 and times[-1]["args"]["value"] == 0
    for (n, _, _), c in zip(steps, times, strict=False):
        assert c["args"]["value"] == pytest.approx(p.df.loc[p.df["step"] == n, "sil"].sum() / 1e6)


def test_read_back_by_a_chrome_trace_parser(tmp_path, capsys):
    """pyprof's Kineto reader (it parses torch.profiler's traces) finds every kernel, as it was."""
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.load import read_records

    trace, _ = _export(tmp_path, LENET, capsys)
    back = list(KinetoSource(str(tmp_path / "t.json")).records())
    zero = trace["otherData"]["time_zero_ns"]
    orig = sorted((r["kShortName"], r["device"], r["stream"], r["start"] - zero, r["end"] - zero)
                  for r in read_records(_parsed(tmp_path, capsys)))
    assert sorted((r["kShortName"], r["device"], r["stream"], r["start"], r["end"]) for r in back) == orig


def _parsed(tmp_path, capsys) -> str:
    out = tmp_path / "lenet.dict"
    code, _, err = run_main(capsys, ["parse", LENET, "-o", out])
    assert code == 0, err
    return str(out)


def test_bad_input_is_one_line(tmp_path, capsys):
    code, out, err = run_main(capsys, ["export", "--perfetto", tmp_path / "t.json", tmp_path / "missing.dict"])
    assert code == 2 and out == "" and err.startswith("pyprof: error: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "t.json").exists()
    code, out, err = run_main(capsys, ["export", LENET])
    assert code == 2 and "--perfetto" in err


def test_cpu_run_and_corpus_traces_nest(tmp_path, capsys):
    """A CPU trace (ops nest on their threads) and the corpus' torch.profiler traces: valid, nesting."""
    srcs = [FIXTURES / "kineto" / "cpu_compiled_mlp.trace.json.gz"]
    srcs += sorted((CORPUS / "kineto").glob("pytorch__kineto__resnet50_num_workers_0*"))  # (absent: skipped)
    for src in srcs:
        trace, _ = _export(tmp_path, src, capsys)
        kinds = check_schema(trace)
        check_nesting(kinds["X"])
        assert any(e["cat"] in ("kernel", "cpu_op") and "op" in e["args"] for e in kinds["X"])


def test_loads_in_perfettos_trace_processor(tmp_path, capsys):
    binary = os.environ.get("PERFETTO_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")
    if not binary:
        pytest.skip("Perfetto's trace_processor_shell is not on this machine (the perfetto package downloads it)")
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    _export(tmp_path, LENET, capsys)
    tp = tp_mod.TraceProcessor(trace=str(tmp_path / "t.json"), config=tp_mod.TraceProcessorConfig(bin_path=binary))
    try:
        rows = tp.query("select count(*) as n from slice where category = 'kernel'").as_pandas_dataframe()
        assert int(rows["n"][0]) == 177
        args = tp.query("select count(*) as n from args where key = 'args.op'").as_pandas_dataframe()
        assert int(args["n"][0]) > 0
    finally:
        tp.close()
