"""Kineto records as JSON lines (:mod:`pyprof.parse.kineto.lines`), self times, and the collector's
state while records are planned."""

from __future__ import annotations

import gc
import io
import os
from array import array

import orjson
import pytest

from pyprof import process
from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto import load as kineto_load
from pyprof.parse.kineto.index import ROLE_ANN, ROLE_OP, ROLE_PY, Index, cpu_nodes, self_times
from pyprof.records import write_records
from tests.conftest import REPO, record_body

FIXTURES = REPO / "tests" / "fixtures" / "kineto"
TRACES = [FIXTURES / "gpu_synthetic.json", FIXTURES / "cpu_unescaped_markers.json.gz"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_a_record_file_holds_the_records_dumped(path):
    want = b"".join(orjson.dumps(r) + b"\n" for r in KinetoSource(path).records())
    out = io.BytesIO()
    assert write_records(KinetoSource(path).records(), out) == want.count(b"\n")
    assert record_body(out.getvalue()) == want
    assert orjson.loads(out.getvalue().split(b"\n", 1)[0])["source"] == "kineto"


CPU = FIXTURES / "cpu_unescaped_markers.json.gz"


def test_a_library_call_neither_forks_nor_pauses_the_collector(monkeypatch):
    """Outside a process pyprof owns (:mod:`pyprof.process`) the cyclic collector stays on; the records
    are the same. Under :func:`pyprof.process.owning`, the control, the collector is paused while the
    records are planned."""
    assert gc.isenabled() and not process.owned()
    want = b"".join(orjson.dumps(r) + b"\n" for r in KinetoSource(CPU).records())
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 4096)
    real_fork, real_plan = os.fork, KinetoSource._plan
    collector_on: list[bool] = []

    def plan(self, *a, **kw):
        collector_on.append(gc.isenabled())
        return real_plan(self, *a, **kw)

    def refuse():
        raise AssertionError("os.fork called in a process pyprof does not own")

    monkeypatch.setattr(KinetoSource, "_plan", plan)
    monkeypatch.setattr(os, "fork", refuse)
    prep = KinetoSource(CPU).prepared()
    assert b"".join(prep.lines()) == want
    assert collector_on == [True]
    monkeypatch.setattr(os, "fork", real_fork)
    with process.owning():
        prep = KinetoSource(CPU).prepared()
        assert b"".join(prep.lines()) == want
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
