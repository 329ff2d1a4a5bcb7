"""The Nsight Systems reader gives the same bytes whichever way it reads the export.

Four ways exist (see pyprof/parse/fetch.py): sqlite3 row tuples with packed columns, in-process or in
forked workers, and the ADBC (Arrow) reader with plain columns, in-process or in forked workers that hand
results back through shared mappings. Each corpus export with NVTX is parsed all four ways, and its
spliced lines are compared with its records dumped one by one.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from pyprof import process
from pyprof.parse import fetch
from pyprof.parse.run import parse_file
from tests.conftest import corpus_file

pytestmark = pytest.mark.corpus

FILES = ["yyhtbs-yye__mmagic", "MohanadOdema__DLProf", "zx3xyy__assignment2-systems", "josiahdavis__profiling-lm",
         "hpcgroup__pipit"]


def _parse(path, out, monkeypatch, *, arrow: bool, parallel: bool) -> bytes:
    with monkeypatch.context() as m:
        if not arrow:
            m.setattr(fetch, "arrow_available", lambda: False)
            m.setattr(fetch, "read_ints_arrow", lambda *a, **k: None)
        else:
            m.setattr(fetch, "ARROW_MIN_ROWS", 0)
        m.setattr(fetch, "PARALLEL_MIN_ROWS", 0 if parallel else 10**12)
        with process.owning():  # workers are forked only where pyprof owns the process (`pyprof parse`)
            parse_file(str(path), str(out))
    return out.read_bytes()


@pytest.mark.parametrize("name", FILES)
def test_every_reader_gives_the_same_records(tmp_path, monkeypatch, name):
    if not fetch.arrow_available():
        pytest.skip("adbc-driver-sqlite/nanoarrow not installed")
    path = corpus_file(name)
    ref = _parse(path, tmp_path / "a.dict", monkeypatch, arrow=False, parallel=False)
    assert ref
    for i, (arrow, parallel) in enumerate([(False, True), (True, False), (True, True)]):
        got = _parse(path, tmp_path / f"b{i}.dict", monkeypatch, arrow=arrow, parallel=parallel)
        assert got == ref, (arrow, parallel)


def test_arrow_reader_declines_what_is_not_int64(tmp_path):
    """SQLite columns are untyped: a REAL or TEXT value makes the driver promote the whole column, and the
    Arrow reader then hands the query back to sqlite3 instead of returning converted values."""
    if not fetch.arrow_available():
        pytest.skip("adbc-driver-sqlite/nanoarrow not installed")
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a, b)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, 10 * i) for i in range(5)])
    con.commit()
    ints = fetch.read_ints_arrow(str(db), "SELECT a, b FROM t", 2)
    assert ints is not None and ints.dtype == np.int64 and ints.flags.f_contiguous
    assert ints.tolist() == [[i, 10 * i] for i in range(5)]
    con.execute("INSERT INTO t VALUES (2.5, 'x')")
    con.commit()
    con.close()
    assert fetch.read_ints_arrow(str(db), "SELECT a, b FROM t", 2) is None
    assert fetch.read_ints_arrow(str(db), "SELECT a FROM t WHERE b IS NULL", 1).shape == (0, 1)
    assert fetch.read_ints_arrow(str(tmp_path / "absent.sqlite"), "SELECT 1", 1) is None


def test_workers_hand_back_results_in_shared_memory(tmp_path):
    """A forked worker fills the mapping made for it; results equal in-process reads, and a result
    larger than its task's announced bound still arrives (pickled)."""
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, -i) for i in range(50_000)])
    con.commit()
    con.close()
    from pyprof.parse.db import Database

    with Database(db) as d:
        tasks = [fetch.Task("SELECT a, b FROM t WHERE a < 30000", 2, 30_000),
                 fetch.Task("SELECT a, b FROM t", 2, 10),  # bound too small: pickled instead
                 fetch.Task("SELECT COUNT(*) FROM t", 1)]  # bound unknown: pickled
        with process.owning():
            par = [fetch.start(d, t, parallel=True).result() for t in tasks]
        seq = [fetch.start(d, t, parallel=False).result() for t in tasks]
    assert np.array_equal(par[0], seq[0]) and par[0].shape == (30_000, 2)
    assert np.array_equal(par[1], seq[1]) and par[1].shape == (50_000, 2)
    assert par[2].tolist() == seq[2].tolist() == [[50_000]]
    assert fetch._SHARED == [None]


@pytest.mark.parametrize("name", FILES)
def test_spliced_lines_are_the_records_dumped(name):
    """``Streamed.lines`` (the fast path: fragments spliced by f-strings) writes the bytes of ``records()``
    dumped one by one (its twin), nulled values and all; nvprof (josiahdavis) takes the same path."""
    from pyprof.parse.source import open_source
    from pyprof.records import dumps

    path = str(corpus_file(name))
    want = b"".join(dumps(r) for r in open_source(path).records())
    assert want and b"".join(open_source(path).prepared().lines()) == want
