"""The fast Kineto paths give exactly what the plain ones give: JSON lines spliced from fragments
(:mod:`pyprof.parse.kineto.lines`), a trace read by two processes (:mod:`pyprof.parse.kineto.split_scan`)
and its records planned and written by two (:mod:`pyprof.parse.kineto.split_lines`)."""

from __future__ import annotations

import gc
import io
import os
import tempfile
from array import array
from types import SimpleNamespace

import orjson
import pytest

from pyprof import process
from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto import load as kineto_load
from pyprof.parse.kineto import split_lines as kineto_split_lines
from pyprof.parse.kineto.index import ROLE_ANN, ROLE_OP, ROLE_PY, Index, cpu_nodes, self_times
from pyprof.parse.kineto.lines import KinetoPrepared
from pyprof.parse.run import parse_file
from pyprof.records import write_records
from tests.conftest import REPO, record_body

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
    assert record_body(out.getvalue()) == want
    assert orjson.loads(out.getvalue().split(b"\n", 1)[0])["source"] == "kineto"


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_two_process_parse_gives_the_same_index_records_and_warnings(path, monkeypatch):
    one = KinetoSource(path)
    want = list(one.records())
    monkeypatch.setattr(kineto_load, "SPLIT_BYTES", 1)
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 2048)
    assert kineto_load.load_trace(path).halves is not None
    with process.owning():  # (a library call forks only in a process pyprof owns)
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
    with process.owning():
        assert list(KinetoSource(p).records()) == want


# -- a big CPU trace's records planned and written by two processes (kineto.split_lines) ---------------

CPU = FIXTURES / "cpu_unescaped_markers.json.gz"


def _own_temp(tmp_path, monkeypatch):
    """A temporary folder of the test's own for forked children's files (other tests fork meanwhile)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def _parse_pair(tmp_path, monkeypatch):
    """(one-process result and bytes, two-process result and bytes) of ``pyprof parse`` on CPU."""
    one = parse_file(str(CPU), str(tmp_path / "one.dict"))
    monkeypatch.setattr(kineto_split_lines, "FORK_MIN", 1)
    with process.owning():
        two = parse_file(str(CPU), str(tmp_path / "two.dict"))
    return one, (tmp_path / "one.dict").read_bytes(), two, (tmp_path / "two.dict").read_bytes()


def _summary(res):
    return res.kernels, res.copies, res.attributed, res.warnings


def test_split_lines_give_the_same_bytes_counts_and_warnings(tmp_path, monkeypatch):
    temp = _own_temp(tmp_path, monkeypatch)
    want = b"".join(orjson.dumps(r) + b"\n" for r in KinetoSource(CPU).records())
    one, one_bytes, two, two_bytes = _parse_pair(tmp_path, monkeypatch)
    assert record_body(one_bytes) == want and record_body(two_bytes) == want
    assert _summary(two) == _summary(one) and one.warnings  # (the repaired names)
    with process.owning():
        prep = KinetoSource(CPU).prepared(split=True)
        assert prep.tail is not None and 0 < len(prep.entries) < prep.n == want.count(b"\n")
        assert b"".join(prep.lines()) == want
    with pytest.raises(RuntimeError):
        next(prep.records())
    assert not list(temp.iterdir())  # the child's file is removed, the child reaped


def test_split_point_leaves_no_range_open_across_the_cut():
    src = KinetoSource(CPU)
    ix = src._ix
    self_t = self_times(ix)
    nodes = sorted((r for r in range(len(ix.role)) if ix.role[r] == ROLE_OP and self_t[r] > 0), key=ix.start.__getitem__)
    i = kineto_split_lines.split_point(ix, nodes)
    assert i is not None and len(nodes) // 4 <= i < 3 * len(nodes) // 4
    assert max(ix.end[r] for n in nodes[:i] for r in ix.chain[n]) <= ix.start[nodes[i]]
    # one range open over every op (a long annotation on the only thread): no cut
    fake = SimpleNamespace(chain=[(0, k) for k in range(9)], start=list(range(9)), end=[100] + [k + 1 for k in range(1, 9)])
    assert kineto_split_lines.split_point(fake, list(range(1, 9))) is None


def test_a_child_that_fails_before_its_counts_is_replaced(tmp_path, monkeypatch):
    def fail(*_a):
        raise RuntimeError("child failed")

    monkeypatch.setattr(kineto_split_lines, "_child", fail)
    one, one_bytes, two, two_bytes = _parse_pair(tmp_path, monkeypatch)
    assert two_bytes == one_bytes and _summary(two) == _summary(one)


def test_a_child_that_fails_while_writing_is_replaced(tmp_path, monkeypatch):
    parent = os.getpid()
    real_lines = KinetoPrepared.lines

    def lines(self, *a):
        if os.getpid() != parent:  # the child: its counts are sent, its lines fail half way
            yield b"{partial"
            raise OSError("disk full")
        yield from real_lines(self, *a)

    monkeypatch.setattr(KinetoPrepared, "lines", lines)
    temp = _own_temp(tmp_path, monkeypatch)
    one, one_bytes, two, two_bytes = _parse_pair(tmp_path, monkeypatch)
    assert two_bytes == one_bytes and _summary(two) == _summary(one)
    assert not list(temp.iterdir())


def test_a_library_call_neither_forks_nor_pauses_the_collector(monkeypatch):
    """Outside a process pyprof owns (:mod:`pyprof.process`) the big-trace paths stay in this process
    and the cyclic collector stays on; the records are the same. Under :func:`pyprof.process.owning`,
    the control, the collector is paused while the records are planned."""
    assert gc.isenabled() and not process.owned()
    want = b"".join(orjson.dumps(r) + b"\n" for r in KinetoSource(CPU).records())
    monkeypatch.setattr(kineto_load, "SPLIT_BYTES", 1)
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(kineto_split_lines, "FORK_MIN", 1)
    real_fork, real_plan = os.fork, KinetoSource._plan
    collector_on: list[bool] = []

    def plan(self, *a, **kw):
        collector_on.append(gc.isenabled())
        return real_plan(self, *a, **kw)

    def refuse():
        raise AssertionError("os.fork called in a process pyprof does not own")

    monkeypatch.setattr(KinetoSource, "_plan", plan)
    monkeypatch.setattr(os, "fork", refuse)
    prep = KinetoSource(CPU).prepared(split=True)
    assert prep.tail is None and b"".join(prep.lines()) == want
    assert collector_on == [True]
    monkeypatch.setattr(os, "fork", real_fork)
    with process.owning():
        prep = KinetoSource(CPU).prepared(split=True)
        assert prep.tail is not None and b"".join(prep.lines()) == want
    assert collector_on == [True, False] and gc.isenabled()


def test_self_times_subtract_the_nearest_op_below_through_annotations_and_frames():
    # A op [0,100] > B annotation [10,60] > C op [20,50] > F op [30,40]; B > D python frame [55,58];
    # A > E op [70,90]; G op [200,210] alone; H op [300,301] under G2 op [300,300] (rounding: clamped)
    roles = [ROLE_OP, ROLE_ANN, ROLE_OP, ROLE_PY, ROLE_OP, ROLE_OP, ROLE_OP, ROLE_OP, ROLE_OP]
    spans = [(0, 100), (10, 60), (20, 50), (55, 58), (70, 90), (30, 40), (200, 210), (300, 300), (300, 301)]
    parents = [-1, 0, 1, 1, 0, 2, -1, -1, 7]
    ix = Index(role=roles, start=array("q", [s for s, _ in spans]), end=array("q", [e for _, e in spans]),
               parent=parents)
    assert self_times(ix) == [100 - 30 - 20, 50, 30 - 10, 3, 20, 10, 10, 0, 1]
    assert cpu_nodes(ix, self_times(ix)) == [0, 2, 5, 4, 6, 8]
