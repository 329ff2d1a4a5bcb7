"""Exports whose tables lack columns other exports have: absent optional columns read as nulls (one
warning names them), an absent essential one (a kernel's start or end) is one line naming the table
and the column, exit status 2. Corpus files are copied to tmp_path and rebuilt without the columns."""

from __future__ import annotations

import sqlite3

import pytest

from pyprof.parse.db import Database
from tests.conftest import corpus_copy, corpus_file, corpus_files, read_record_file, run_main

pytestmark = pytest.mark.corpus

NVPROF = "josiahdavis__profiling-lm"  # v12: kernels, memcpy, memset, runtime, NVTX markers
NSYS = "MohanadOdema__DLProf"  # 2022.1: kernels, memcpy, memset, runtime, NVTX
NV_KERNEL = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"
MEMCPY, MEMSET, RUNTIME = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME"
MARKER = "CUPTI_ACTIVITY_KIND_MARKER"
NS_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"



def _drop(path, table: str, *columns: str) -> None:
    """Rebuild ``table`` without ``columns`` (ALTER TABLE DROP COLUMN refuses indexed columns)."""
    with sqlite3.connect(path) as c:
        have = [r[1] for r in c.execute(f'PRAGMA table_info("{table}")')]
        assert set(columns) <= set(have), (table, columns)
        keep = ", ".join(f'"{x}"' for x in have if x not in columns)
        c.execute(f'CREATE TABLE tmp_rebuilt AS SELECT {keep} FROM "{table}"')
        c.execute(f'DROP TABLE "{table}"')
        c.execute(f'ALTER TABLE tmp_rebuilt RENAME TO "{table}"')


def _parse(capsys, path, tmp_path) -> tuple[int, list[dict], str]:
    out = tmp_path / "out.dict"
    code, _, err = run_main(capsys, ["parse", path, "-o", out])
    recs = read_record_file(out) if out.exists() else []
    return code, recs, err


def _reference(capsys, name: str, tmp_path) -> list[dict]:
    code, recs, err = _parse(capsys, corpus_file(name), tmp_path)
    assert code == 0, err
    return recs


def _one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])


# -- nvprof --------------------------------------------------------------------------------------------

def test_nvprof_copies_without_bytes(tmp_path, capsys):
    want = _reference(capsys, NVPROF, tmp_path)
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, MEMCPY, "bytes")
    _drop(f, MEMSET, "bytes")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"{MEMCPY}.bytes" in err and f"{MEMSET}.bytes" in err and "read as null" in err
    assert len(recs) == len(want)
    copies = [r for r in recs if r["kind"] != "kernel"]
    assert copies and all(r["bytes"] is None for r in copies)
    assert [r["copyKind"] for r in copies] == [r["copyKind"] for r in want if r["kind"] != "kernel"]


def test_nvprof_without_any_copy(tmp_path, capsys):
    """No copy rows at all: the records still have every field (this was KeyError: 'bytes')."""
    f = corpus_copy(tmp_path, NVPROF)
    with sqlite3.connect(f) as c:
        c.execute(f"DELETE FROM {MEMCPY}")
        c.execute(f"DROP TABLE {MEMSET}")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert len(recs) == 160 and all(r["kind"] == "kernel" and r["bytes"] is None and r["copyKind"] is None
                                    for r in recs)


def test_nvprof_kernels_without_grid_block_or_name(tmp_path, capsys):
    want = [r for r in _reference(capsys, NVPROF, tmp_path) if r["kind"] == "kernel"]
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, NV_KERNEL, "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "name")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"{NV_KERNEL}.(name, gridX, gridY, gridZ, blockX, blockY, blockZ)" in err
    kernels = [r for r in recs if r["kind"] == "kernel"]
    assert len(kernels) == len(want)
    assert all(r["grid"] is None and r["block"] is None and r["kShortName"] is None for r in kernels)
    assert [r["start"] for r in kernels] == [r["start"] for r in want]


@pytest.mark.parametrize("column", ["threadId", "processId", "cbid", "start"])
def test_nvprof_runtime_without_a_column(tmp_path, capsys, column):
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, RUNTIME, column)
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"{RUNTIME}.{column}" in err
    kernels = [r for r in recs if r["kind"] == "kernel"]
    assert len(kernels) == 160
    if column == "cbid":
        assert all(r["apiName"] is None and r["apiStart"] is not None for r in kernels)
    if column == "threadId":
        assert all(r["tid"] is None and r["apiName"] for r in kernels)


def test_nvprof_markers_without_name_and_domain(tmp_path, capsys):
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, MARKER, "name", "domain")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    ranges = [x for r in recs for x in r["ranges"]]
    assert ranges and all(x["text"] is None for x in ranges)


def test_nvprof_markers_that_cannot_be_paired(tmp_path, capsys):
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, MARKER, "flags")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"table {MARKER} has no column 'flags'" in err
    assert len(recs) == 189 and all(r["ranges"] == [] for r in recs)


def test_nvprof_without_its_version_table(tmp_path, capsys):
    f = corpus_copy(tmp_path, NVPROF)
    with sqlite3.connect(f) as c:
        c.execute("DROP TABLE Version")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert "nvprof unknown" in err and len(recs) == 189


@pytest.mark.parametrize("table,column", [(NV_KERNEL, "start"), (NV_KERNEL, "end"), (MEMCPY, "end")])
def test_nvprof_without_an_essential_column(tmp_path, capsys, table, column):
    f = corpus_copy(tmp_path, NVPROF)
    _drop(f, table, column)
    code, recs, err = _parse(capsys, f, tmp_path)
    _one_line_error(code, err, f"table {table} has no column '{column}'", "re-export")
    assert not (tmp_path / "out.dict").exists() and not list(tmp_path.glob(".pyprof-*"))


# -- nsys ----------------------------------------------------------------------------------------------

def test_nsys_optional_columns_read_as_null(tmp_path, capsys):
    want = _reference(capsys, NSYS, tmp_path)
    f = corpus_copy(tmp_path, NSYS)
    _drop(f, NS_KERNEL, "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    _drop(f, MEMCPY, "bytes")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"lacks column(s) {NS_KERNEL}.(gridX, gridY, gridZ, blockX, blockY, blockZ); {MEMCPY}.bytes:" in err
    assert len(recs) == len(want)
    assert all(r["grid"] is None and r["block"] is None for r in recs if r["kind"] == "kernel")
    assert all(r["bytes"] is None for r in recs if r["kind"] == "memcpy")
    assert [r["layer"] for r in recs] == [r["layer"] for r in want]


def test_nsys_runtime_without_correlation_ids(tmp_path, capsys):
    """Was: 'cannot read the SQLite database (no such column: correlationId): truncated or corrupt'."""
    f = corpus_copy(tmp_path, NSYS)
    _drop(f, RUNTIME, "correlationId")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert f"{RUNTIME}.correlationId" in err
    assert len(recs) == 76 and all(r["apiName"] is None for r in recs)


def test_nsys_gpu_table_without_names(tmp_path, capsys):
    f = corpus_copy(tmp_path, NSYS)
    _drop(f, "TARGET_INFO_GPU", "name")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert "GPU names left out" in err and all(r["gpu"] is None for r in recs)


def test_nsys_nvtx_without_its_thread(tmp_path, capsys):
    f = corpus_copy(tmp_path, NSYS)
    _drop(f, "NVTX_EVENTS", "globalTid")
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0, err
    assert "table NVTX_EVENTS has no column 'globalTid'" in err
    assert len(recs) == 76 and all(r["ranges"] == [] for r in recs)


@pytest.mark.parametrize("table,column", [(NS_KERNEL, "start"), (NS_KERNEL, "end"), (MEMSET, "start")])
def test_nsys_without_an_essential_column(tmp_path, capsys, table, column):
    """Was: exit 0 with every kernel's start (or end) written as null."""
    f = corpus_copy(tmp_path, NSYS)
    _drop(f, table, column)
    code, recs, err = _parse(capsys, f, tmp_path)
    _one_line_error(code, err, f"table {table} has no column '{column}'", "re-export")
    assert not (tmp_path / "out.dict").exists()


def test_an_empty_table_may_lack_anything(tmp_path, capsys):
    """Only tables with rows are checked: an empty KERNEL table of a serialized layout is no error."""
    f = corpus_copy(tmp_path, NVPROF)
    with sqlite3.connect(f) as c:
        c.execute('CREATE TABLE "CUPTI_ACTIVITY_KIND_KERNEL_new" (_id_ INTEGER)')
        c.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        c.execute('ALTER TABLE "CUPTI_ACTIVITY_KIND_KERNEL_new" RENAME TO CUPTI_ACTIVITY_KIND_KERNEL')
    code, recs, err = _parse(capsys, f, tmp_path)
    assert code == 0 and "lacks" not in err, err
    assert len(recs) == 189


def test_reflected_columns_are_the_declared_ones():
    """The tables and columns Database reflects (sqlite_master, table_xinfo) are the declared ones, as
    SQLite's table_info lists them."""
    files = corpus_files()
    if not files:
        pytest.skip("corpus not found")
    for path in files[::6]:
        with Database(path) as db, sqlite3.connect(f"file:{path}?mode=ro", uri=True) as raw:
            tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                                "AND name NOT LIKE 'sqlite%'")}
            assert db.tables == tables
            for t in sorted(tables)[:40]:
                assert db.columns(t) == [r[1] for r in raw.execute(f'PRAGMA table_info("{t}")')], (path.name, t)
