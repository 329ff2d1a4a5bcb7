"""The fast Kineto paths give exactly what the plain ones give: JSON lines spliced from fragments
(:mod:`pyprof.parse.kineto_lines`) and a trace parsed by two processes (:mod:`pyprof.parse.kineto_split`)."""

from __future__ import annotations

import io

import orjson
import pytest

from pyprof.parse import kineto_load
from pyprof.parse.kineto import KinetoSource
from pyprof.records import write_records
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "kineto"
TRACES = [FIXTURES / "gpu_synthetic.json", FIXTURES / "cpu_unescaped_markers.json.gz"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_lines_are_the_records_dumped(path):
    want = b"".join(orjson.dumps(r) + b"\n" for r in KinetoSource(path).records())
    prep = KinetoSource(path).prepared()
    assert b"".join(prep.lines()) == want
    assert b"".join(prep.lines(0, 3)) + b"".join(prep.lines(3)) == want
    out = io.BytesIO()
    assert write_records(KinetoSource(path).records(), out) == want.count(b"\n")
    assert out.getvalue() == want


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_two_process_parse_gives_the_same_index_records_and_warnings(path, monkeypatch):
    one = KinetoSource(path)
    want = list(one.records())
    monkeypatch.setattr(kineto_load, "SPLIT_BYTES", 1)
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 2048)
    assert kineto_load.load_trace(path).halves is not None
    two = KinetoSource(path)
    assert two.n_events == one.n_events
    assert two._ix.name == one._ix.name and two._ix.threads == one._ix.threads
    assert list(two.records()) == want
    assert two.warnings == one.warnings  # e.g. the count of repaired names from both halves


def test_a_cut_inside_a_string_falls_back_to_one_pass(tmp_path, monkeypatch):
    doc = orjson.loads((FIXTURES / "gpu_synthetic.json").read_bytes())
    want = list(KinetoSource(FIXTURES / "gpu_synthetic.json").records())
    p = tmp_path / "t.json"
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    monkeypatch.setattr(kineto_load, "SPLIT_BYTES", 1)
    monkeypatch.setattr(kineto_load, "_cut", lambda data, start, end: (start + 7, start + 9))  # not a boundary
    assert list(KinetoSource(p).records()) == want
