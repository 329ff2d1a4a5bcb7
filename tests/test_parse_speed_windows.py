"""The Nsight reader streams NVTX ranges window by window, read in one pass that two processes share
(see pyprof/parse/nsys.py, ``_Nvtx``, and pyprof/parse/assemble.py, ``Streamed``): whatever the window
and slice sizes, the reader (Arrow or sqlite3), the spill file and the forked reader, the records are
the bytes of one window read in one process -- on corpus exports and on synthetic ones built to hit the
edge cases: rows not in start order, never-popped ranges far apart, timestamps too big for packed keys,
a message stored as a REAL.

No timing here: ``scripts/bench_parse.py`` shows the speed.
"""

from __future__ import annotations

import sqlite3

import pytest

from pyprof import process
from pyprof.markers import encode, make
from pyprof.parse import fetch, nsys
from pyprof.parse.run import parse_file
from pyprof.parse.source import open_source
from tests.conftest import corpus_file, record_body
from tests.nsys_synth import Export

CORPUS = ["yyhtbs-yye__mmagic", "MohanadOdema__DLProf", "zx3xyy__assignment2-systems", "Athrun0109__CS336",
          "NVIDIA__Fuser__report1", "hpcgroup__pipit", "LeiWang1999__memfusion"]

#: (window rows, slice rows, spill bytes, forked, Arrow, kernel rows read at a time)
WAYS = [(5, 1, 0, True, True, 7), (3, 1, 1000, False, False, 5), (64, 16, 0, True, False, 1 << 20)]


def _parse(path, out, monkeypatch, *, window=1 << 19, slice_rows=1 << 19, spill=256 << 20, forked=False,
           arrow=True, kernel_chunk=1 << 20) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(nsys, "KERNEL_CHUNK", kernel_chunk)
        m.setattr(nsys, "WINDOW_ROWS", window)
        m.setattr(nsys, "SLICE_ROWS", slice_rows)
        m.setattr(nsys, "SPILL_BYTES", spill)
        m.setattr(fetch, "PARALLEL_MIN_ROWS", 0 if forked else 10**12)
        if arrow:
            m.setattr(fetch, "ARROW_MIN_ROWS", 0)
        else:
            m.setattr(fetch, "arrow_available", lambda: False)
            m.setattr(fetch, "read_ints_arrow", lambda *a, **k: None)
        with process.owning() if forked else _nothing():
            res = parse_file(str(path), str(out))
    return out.read_bytes() + "\n".join(res.warnings).encode()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _same_every_way(path, tmp_path, monkeypatch) -> bytes:
    whole = _parse(path, tmp_path / "whole.dict", monkeypatch)
    for i, (window, slice_rows, spill, forked, arrow, chunk) in enumerate(WAYS):
        got = _parse(path, tmp_path / f"w{i}.dict", monkeypatch, window=window, slice_rows=slice_rows, spill=spill,
                     forked=forked, arrow=arrow and fetch.arrow_available(), kernel_chunk=chunk)
        assert got == whole, (window, slice_rows, spill, forked, arrow, chunk)
    return whole


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_records_do_not_depend_on_the_windows(tmp_path, monkeypatch, name):
    _same_every_way(corpus_file(name), tmp_path, monkeypatch)


def _export(tmp_path, steps: int = 6) -> str:
    """Two threads of pyprof markers, plain and registered messages, a domain, a backward op linked to
    its forward op: enough ranges for many windows."""
    ex = Export()
    main = ex.track(name="python3")
    side = ex.track(tid=ex.pid + 7, name="worker")
    for step in range(steps):
        with main.range(f"step {step}"):
            for layer in ("conv1", "fc"):
                with main.range(encode(make("mod", path=f"net.{layer}", mod="Linear")), domain="pyprof"):
                    with main.range(encode(make("op", op="linear", id=10 * step + len(layer), seq=[step])),
                                    domain="pyprof"):
                        main.launch("ampere_sgemm_32x128_tn", duration=4_000 + step)
                        main.launch("vectorized_elementwise_kernel", duration=1_000)
            with main.range("aten::addmm, seq = 3", registered=True):
                main.launch("gemm", duration=900)
            with main.range(encode(make("bwd", node="AddmmBackward0", seq=step, id=10 * step + 2)),
                            domain="pyprof"):
                main.launch("gemm_backward", duration=700)
        with side.range("layer:side"):
            side.launch("reduce_kernel", duration=700)
    return ex.write(tmp_path / "x.sqlite")


def _rewrite(path, sql_rows) -> None:
    """NVTX_EVENTS rebuilt from the rows ``sql_rows`` selects (in that order: their rowids follow it)."""
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE n2 AS {sql_rows}")
    con.execute("DELETE FROM NVTX_EVENTS")
    con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM n2")
    con.execute("DROP TABLE n2")
    con.commit()
    con.close()


def test_synthetic_records_do_not_depend_on_the_windows(tmp_path, monkeypatch):
    out = _same_every_way(_export(tmp_path), tmp_path, monkeypatch)
    assert out.count(b"\n") >= 6 * 7


def test_rows_out_of_start_order_are_one_window(tmp_path, monkeypatch):
    path = _export(tmp_path)
    _rewrite(path, "SELECT * FROM NVTX_EVENTS ORDER BY (rowid * 7919) % 101, rowid")
    _same_every_way(path, tmp_path, monkeypatch)


@pytest.mark.parametrize("huge", [0, 1 << 55, 1 << 61])
def test_never_popped_ranges_far_apart_are_left_out(tmp_path, monkeypatch, huge):
    """Push ranges that share their (thread, end) -- nsys's mark of ranges never popped -- found across
    windows and across the two processes that read them; one on another thread at that end is kept.
    ``huge``: that end, far past the others: too far for the packed keys of the rows as they are read
    (1 << 55), or even for those of the whole table (1 << 61: the pairs are sorted as pairs)."""
    path = _export(tmp_path, steps=8)
    con = sqlite3.connect(path)
    end, tid = con.execute('SELECT MAX("end") + 10, globalTid FROM NVTX_EVENTS WHERE eventType = 59').fetchone()
    end = huge or end
    starts = [r[0] for r in con.execute("SELECT start FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")]
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                    "VALUES (?, ?, 59, 'leaked', ?, 0)", [(starts[i] - 1, end, tid) for i in (1, len(starts) // 2, -3)])
    con.execute('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                "VALUES (?, ?, 59, 'kept', ?, 0)", (starts[2] - 1, end, tid + 1))
    con.commit()
    con.close()
    _rewrite(path, "SELECT * FROM NVTX_EVENTS ORDER BY start, rowid")
    out = _same_every_way(path, tmp_path, monkeypatch)
    assert b"3 NVTX push range(s) were never popped" in out
    assert b'"text":"leaked"' not in out


def test_timestamps_too_big_for_packed_keys(tmp_path, monkeypatch):
    """Ends past 2**46 ns do not fit the (end, thread) int64 keys: the pairs themselves are compared."""
    path = _export(tmp_path)
    con = sqlite3.connect(path)
    shift = 1 << 50
    con.execute('UPDATE NVTX_EVENTS SET start = start + ?, "end" = "end" + ?', (shift, shift))
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        con.execute(f'UPDATE {t} SET start = start + ?, "end" = "end" + ?', (shift, shift))
    con.commit()
    con.close()
    out = _same_every_way(path, tmp_path, monkeypatch)
    assert b'"layer:side"' in out


def test_a_message_stored_as_a_real_reads_as_python_writes_it(tmp_path, monkeypatch):
    """SQLite formats a REAL with 15 digits, Python with as many as it takes: the value is read as
    :func:`pyprof.parse.db.as_text` gives it, by every reader."""
    path = _export(tmp_path)
    con = sqlite3.connect(path)
    # (a TEXT column turns a REAL into text: only a column of no type keeps it, as a damaged file may)
    cols = [(r[1], r[2]) for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    con.execute("ALTER TABLE NVTX_EVENTS RENAME TO old")
    con.execute(f"CREATE TABLE NVTX_EVENTS ({', '.join(f'{c} {t}' if c != 'text' else c for c, t in cols)})")
    con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM old")
    con.execute("DROP TABLE old")
    con.execute("UPDATE NVTX_EVENTS SET text = 0.30000000000000004 WHERE text = 'layer:side'")
    assert con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE typeof(text) = 'real'").fetchone()[0]
    con.commit()
    con.close()
    out = _same_every_way(path, tmp_path, monkeypatch)
    assert b'"text":"0.30000000000000004"' in out


def test_a_grid_too_big_to_pack(tmp_path, monkeypatch):
    """sqlite3 reads kernels with grid and block packed in few integers; a slice where one does not fit
    is read again unpacked."""
    path = _export(tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridY = 200000 WHERE rowid = 9")
    con.commit()
    con.close()
    out = _same_every_way(path, tmp_path, monkeypatch)
    assert b"200000" in out


def test_records_equal_the_lines(tmp_path, monkeypatch):
    """records() streams the same windows as lines(): equal after a JSON round trip."""
    import orjson

    path = _export(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(nsys, "WINDOW_ROWS", 4)
        m.setattr(nsys, "SLICE_ROWS", 1)
        records = list(open_source(path).records())
    lines = record_body(_parse(path, tmp_path / "l.dict", monkeypatch)).split(b"\n")[:len(records)]
    assert [orjson.loads(orjson.dumps(r)) for r in records] == [orjson.loads(x) for x in lines]
