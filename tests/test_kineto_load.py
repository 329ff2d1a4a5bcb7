"""Loading torch.profiler traces: formats, Kineto's unescaped names, and one-line errors for bad input."""

from __future__ import annotations

import gzip
import json
import shutil

import orjson
import pytest
from click.testing import CliRunner

from pyprof.cli.main import cli
from pyprof.errors import InputError
from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto import schema as ks
from pyprof.parse.kineto.load import load_trace, repair_unescaped_names
from tests.conftest import BLOCK_TORCH, REPO, read_record_file

GPU = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"


def _cpu_trace(ts_float: bool) -> dict:
    """A three-op CPU trace; times in us as int (PyTorch < 2.4) or float with ns decimals (>= 2.4)."""
    t = 1000.5 if ts_float else 1000

    def ev(name, ts, dur, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    return {"traceEvents": [
        ev("aten::linear", t, 100, **{"External id": 1, "Sequence number": 3, "Input Dims": [[4, 8], [2, 8], [2]],
                                      "Input type": ["float", "float", "float"]}),
        ev("aten::addmm", t + 10, 60, **{"External id": 2}),
        ev("aten::relu", t + 200, 5, **{"External id": 3}),
    ]}


@pytest.mark.parametrize("ts_float", [False, True])
def test_us_and_ns_resolution_timestamps(tmp_path, ts_float):
    p = tmp_path / "t.json"
    p.write_bytes(orjson.dumps(_cpu_trace(ts_float)))
    recs = {r["kShortName"]: r for r in KinetoSource(p).records()}
    base = 1_000_500 if ts_float else 1_000_000
    assert recs["aten::linear"]["start"] == base
    assert recs["aten::linear"]["kDuration"] == 40_000  # self time: 100 us - 60 us of addmm
    assert recs["aten::addmm"]["kDuration"] == 60_000
    assert recs["aten::relu"]["start"] == base + 200_000
    assert recs["aten::addmm"]["op"] == "linear" and recs["aten::addmm"]["opId"] == 1


def test_to_ns_is_exact_for_large_integer_microseconds():
    assert ks.to_ns(1_666_149_715_033_201) == 1_666_149_715_033_201_000
    assert ks.to_ns(12.345) == 12_345


def test_gzip_and_plain_give_the_same_records(tmp_path):
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(GPU.read_bytes()))
    assert list(KinetoSource(gz).records()) == list(KinetoSource(GPU).records())


def test_kineto_unescaped_quotes_are_repaired(tmp_path):
    # What Kineto writes for record_function('{"pyprof":1,...}') before pytorch/kineto#1459.
    raw = ('{\n  "traceEvents": [\n  {\n    "ph": "X", "cat": "user_annotation",\n'
           '    "name": "{"pyprof":1,"k":"mod","path":"enc.0","cls":"Linear"}",\n'
           '    "pid": 7, "tid": 7, "ts": 10, "dur": 50\n  },\n  {\n    "ph": "X", "cat": "cpu_op",\n'
           '    "name": "aten::relu",\n    "pid": 7, "tid": 7, "ts": 20, "dur": 5\n  }\n  ]\n}\n')
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    fixed, n = repair_unescaped_names(raw.encode())
    assert n == 1 and json.loads(fixed)["traceEvents"][0]["name"].startswith('{"pyprof":1')
    p = tmp_path / "broken.json"
    p.write_text(raw)
    src = KinetoSource(p)
    (rec,) = list(src.records())
    assert rec["layer"] == ["enc.0"] and rec["op"] == "relu"
    assert any("unescaped" in w for w in src.warnings)


def _bad(tmp_path, name, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(InputError) as info:
        KinetoSource(p)
    msg = str(info.value)
    assert "\n" not in msg and ";" in msg  # one line: what is wrong; what to do
    return msg


def test_not_json(tmp_path):
    assert "not JSON" in _bad(tmp_path, "x.json", b"this is not json at all")


def test_truncated_gzip(tmp_path):
    data = gzip.compress(GPU.read_bytes())
    assert "gzip" in _bad(tmp_path, "x.json.gz", data[: len(data) // 2])


def test_truncated_json(tmp_path):
    data = GPU.read_bytes()
    assert "not JSON" in _bad(tmp_path, "x.json", data[: len(data) // 2])


def test_json_that_is_not_a_chrome_trace(tmp_path):
    assert "not a chrome trace" in _bad(tmp_path, "x.json", b'{"hello": [1, 2, 3]}')


def test_trace_with_no_events(tmp_path):
    assert "no events" in _bad(tmp_path, "x.json", b'{"traceEvents": []}')


def test_trace_with_only_metadata_events(tmp_path):
    data = orjson.dumps({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "py"}}]})
    assert "neither GPU kernels nor CPU ops" in _bad(tmp_path, "x.json", data)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "nope.json")


@pytest.mark.parametrize("payload", [b"not json", b'{"traceEvents": []}', b'{"a": 1}'])
def test_cli_parse_bad_trace_exits_2_without_output(tmp_path, payload):
    src = tmp_path / "bad.json"
    src.write_bytes(payload)
    out = tmp_path / "out.dict"
    res = CliRunner().invoke(cli, ["parse", str(src), "-o", str(out)], standalone_mode=False)
    assert isinstance(res.exception, InputError)
    assert res.exception.exit_code == 2
    assert not out.exists()


def test_cli_parse_reads_a_kineto_trace(tmp_path):
    src = tmp_path / "trace.json"
    shutil.copy(GPU, src)
    out = tmp_path / "out.dict"
    res = CliRunner().invoke(cli, ["parse", str(src), "-o", str(out)], standalone_mode=False)
    assert res.exception is None, res.output
    recs = read_record_file(out)
    assert len(recs) == 6 and all(rec["source"] == "kineto" for rec in recs)


def test_chunked_parsing_gives_the_same_records(tmp_path, monkeypatch):
    from pyprof.parse.kineto import load as kineto_load

    whole = list(KinetoSource(GPU).records())
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 64)  # cut after nearly every event
    assert list(KinetoSource(GPU).records()) == whole
    # a list of objects inside an event's args puts "}, {" inside the event: the chunker must extend
    doc = orjson.loads(GPU.read_bytes())
    doc["traceEvents"][10].setdefault("args", {})["extra"] = [{"a": 1}, {"b": 2}, {"c": 3}]
    p = tmp_path / "nested.json"
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    assert [r["kShortName"] for r in KinetoSource(p).records()] == [r["kShortName"] for r in whole]


def test_kineto_parsing_and_cpu_findings_need_no_torch():
    import subprocess
    import sys

    code = BLOCK_TORCH + (
        "import pyprof.cli.run_cmd, pyprof.cli.calibrate_cmd, pyprof.runner, pyprof.calibrate\n"
        "from pyprof.parse.kineto import KinetoSource\n"
        "from pyprof.cpu_findings import findings\n"
        f"recs = list(KinetoSource({str(GPU)!r}).records())\n"
        "findings(recs, {'intra_op_threads': 1, 'physical_cores': 1})\n"
        "assert 'torch' not in sys.modules\n"
        "print(len(recs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6"


def test_real_trace_with_unescaped_marker_names():
    """A real torch 2.13 CPU export whose record_function names hold raw JSON (see the fixtures README)."""
    src = KinetoSource(REPO / "tests" / "fixtures" / "kineto" / "cpu_unescaped_markers.json.gz")
    recs = list(src.records())
    assert any("2 event names had unescaped double quotes" in w for w in src.warnings)
    conv = [r for r in recs if r["op"] == "conv2d" and r["dir"] == "fprop"]
    assert len({r["opId"] for r in conv}) == 2  # one per step
    assert all(r["layer"] == ["net"] for r in conv)
    assert [a["shape"] for a in conv[0]["args"][:2]] == [[4, 1, 28, 28], [6, 1, 5, 5]]
    assert all(r["trace"] and r["trace"][0].startswith("rec.py:") for r in conv)  # with_stack frames
    mkl = [r for r in conv if r["kShortName"] == "aten::mkldnn_convolution"]
    assert len(mkl) == 2 and all(r["kDuration"] < r["end"] - r["start"] for r in mkl)  # self time
    bwd = [r for r in recs if r["bwdNode"] == "ConvolutionBackward0"]
    assert bwd and all(r["op"] == "conv2d" and r["layer"] == ["net"] and r["altSeqId"] for r in bwd)
    assert {r["dir"] for r in recs} == {"fprop", "bprop", "optim"}
    # self times add up to the time of the outermost ops (nothing lost, nothing counted twice)
    ops = sorted((ks.to_ns(e["ts"]), ks.to_ns(e["ts"]) + ks.to_ns(e["dur"]))
                 for e in load_trace(src.path, raw=True).events if e.get("cat") == "cpu_op")
    outer, end = 0, -1
    for s, e in ops:
        if s >= end:
            outer += e - s
            end = e
    assert abs(sum(r["kDuration"] for r in recs) - outer) <= len(recs)  # 1 ns rounding per op at most
