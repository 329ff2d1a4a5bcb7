"""Fast bulk reads: integer columns straight into numpy, split over worker processes on big exports.

Python's sqlite3 builds a tuple per row, which dominates parse time on million-row tables. Three
things help:

* integer-only selects (``IFNULL(col, -1)``: -1 stands for NULL in columns that are never negative);
* on big queries, the Apache Arrow ADBC SQLite driver (``adbc-driver-sqlite``, in the ``fast`` extra:
  ``pip install pyprof-torch[fast]``), which steps SQLite in C and fills Arrow column buffers that
  nanoarrow hands to numpy without a Python object per value: about 3x fewer CPU seconds than sqlite3's
  row tuples on NVTX_EVENTS (:func:`read_ints_arrow`). Where it is not installed (or fails to import),
  cannot open the file, fails in any other way, or gives anything but int64 columns (SQLite columns are
  untyped: a REAL or TEXT value in an integer column makes it promote the whole column), the same query
  is read again through sqlite3, so results never depend on which reader ran;
* reading several rowid slices of the big tables at once in forked worker processes (each opens its
  own read-only connections), only where :func:`pyprof.process.can_fork` allows it (``pyprof parse``;
  not a library call in someone else's process). Small exports are read in-process: forking costs
  more than it saves.
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from pyprof import process
from pyprof.parse.db import Database, damaged, sqlite_uri, translate_errors

#: below this many rows in total, read in-process
PARALLEL_MIN_ROWS = 400_000


class NotIntegers(ValueError):
    """An integer column held a value that is no number (text or a blob): no exporter writes that, a
    damaged record does."""


def to_ints(rows: list[tuple], ncols: int) -> np.ndarray:
    """Rows of ints -> an int64 array of shape (len(rows), ncols) (``np.fromiter`` over the flattened
    rows: faster than ``np.array`` on a list of tuples; the latter where a value is not a plain int,
    e.g. a REAL). Raises :class:`NotIntegers` where a value converts to no integer."""
    try:
        out = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
    except (TypeError, ValueError, OverflowError):
        try:
            out = np.array(rows, dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise NotIntegers(str(exc)) from None
    return out.reshape(len(rows), ncols)


#: queries expected to return at least this many rows go through the ADBC (Arrow) reader
ARROW_MIN_ROWS = 20_000
#: rows per Arrow batch (the driver's default, 1024, makes many small buffers to join)
ARROW_BATCH = 1 << 16


def arrow_available() -> bool:
    """True when the ADBC SQLite driver and nanoarrow (the ``fast`` extra) can be imported."""
    try:
        import adbc_driver_manager  # noqa: F401
        import adbc_driver_sqlite  # noqa: F401
        import nanoarrow  # noqa: F401
    except Exception:  # noqa: BLE001 - absent (ImportError) or a broken install: sqlite3 reads instead
        return False
    return True


def read_ints_arrow(path: str, sql: str, ncols: int, alloc=None) -> np.ndarray | None:
    """An integer query's rows as an int64 (n, ncols) Fortran array through ADBC, or None when that
    reader is unavailable or unsuitable (the caller then reads through sqlite3). ``alloc(shape)``, if
    given, supplies the array to fill (see :func:`run`). Any failure on this path (the extra absent or
    broken, the driver refusing the file or the query) is a None: sqlite3 then reads the query and
    reports what is really wrong with the file."""
    try:
        import adbc_driver_manager
        import adbc_driver_sqlite
        import nanoarrow

        with adbc_driver_sqlite.connect(sqlite_uri(path)) as adb, adbc_driver_manager.AdbcConnection(adb) as conn, \
                adbc_driver_manager.AdbcStatement(conn) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(ARROW_BATCH)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            _, cols = nanoarrow.ArrayStream(handle).to_columns_pysequence(handle_nulls=nanoarrow.nulls_forbid())
        arrays = [c if isinstance(c, list) else np.asarray(c) for c in cols]
    except Exception:  # noqa: BLE001 - ImportError or any driver failure: the sqlite3 reader takes over
        return None
    if len(arrays) != ncols or any(isinstance(a, list) or a.dtype != np.int64 for a in arrays):
        return None
    shape = (len(arrays[0]) if arrays else 0, ncols)
    out = alloc(shape) if alloc is not None else np.empty(shape, dtype=np.int64, order="F")
    for j, a in enumerate(arrays):
        out[:, j] = a
    return out


#: rows converted to numpy at a time: the row tuples of one batch are freed before the next is read, so
#: memory is reused instead of a whole table's Python objects being built (and page-faulted in) at once
BATCH = 1 << 16


def read_ints(db: Database, sql: str, ncols: int) -> np.ndarray:
    """An integer query's rows as an int64 array of shape (n, ncols), read in batches."""
    parts = []
    with translate_errors(db.path):
        cur = db.conn.execute(sql)
        while True:
            rows = cur.fetchmany(BATCH)
            if not rows:
                break
            try:
                parts.append(to_ints(rows, ncols))
            except NotIntegers:
                raise damaged(db.path, "an integer column holds text or a blob") from None
    if not parts:
        return np.zeros((0, ncols), dtype=np.int64)
    # column-major: the reader takes whole columns (contiguous then), and this runs in the workers
    return np.asfortranarray(parts[0] if len(parts) == 1 else np.concatenate(parts))


class Task:
    """One query: ``kind`` "ints" (-> int64 array of shape (n, ncols)) or "rows" (-> list of tuples);
    ``rows``, at most how many rows it returns (0: unknown), picks the reader (see :func:`run_task`) and
    sizes the buffer a worker returns it in (see :func:`run`)."""

    def __init__(self, kind: str, sql: str, ncols: int = 0, rows: int = 0):
        self.kind, self.sql, self.ncols, self.rows = kind, sql, ncols, rows


def run_task(db: Database, task: Task, alloc=None) -> np.ndarray | list:
    """One task's result: big integer queries through ADBC where it can, the rest through sqlite3."""
    if task.kind != "ints":
        return db.execute(task.sql)
    if task.rows >= ARROW_MIN_ROWS:
        out = read_ints_arrow(db.path, task.sql, task.ncols, alloc)
        if out is not None:
            return out
    return read_ints(db, task.sql, task.ncols)


#: per task of the running :func:`run`: an anonymous shared mapping the forked worker fills (or None)
_SHARED: list = []


def _shared_view(buf, shape: tuple) -> np.ndarray:
    return np.ndarray(shape, dtype=np.int64, buffer=buf, order="F")


def _run(path: str, task: Task, slot: int):
    """Worker side: the result, or ("shared", shape) once it sits in this task's shared mapping."""
    buf = _SHARED[slot] if slot < len(_SHARED) else None

    def alloc(shape):
        if buf is not None and shape[0] * shape[1] * 8 <= len(buf):
            return _shared_view(buf, shape)
        return np.empty(shape, dtype=np.int64, order="F")

    with Database(path) as db:
        out = run_task(db, task, alloc)
    if isinstance(out, np.ndarray) and buf is not None and out.nbytes <= len(buf):
        if not np.shares_memory(out, np.frombuffer(buf, dtype=np.uint8)):
            _shared_view(buf, out.shape)[...] = out
        return ("shared", out.shape)
    return ("value", out)


def rowids(db: Database, table: str) -> tuple:
    """(MIN(rowid), MAX(rowid)) of ``table`` ((None, None) when empty): two b-tree lookups (SQLite
    answers a lone MIN or MAX of the rowid from the tree's edge, both at once by a scan)."""
    lo = db.execute(f'SELECT MIN(rowid) FROM "{table}"')[0][0]
    hi = db.execute(f'SELECT MAX(rowid) FROM "{table}"')[0][0]
    return lo, hi


def span(db: Database, table: str) -> int:
    """Rows in ``table``, estimated from the rowid range (at least the count; two b-tree lookups
    instead of a COUNT(*) walk over every page); 0 for an absent or empty table."""
    if not db.has(table):
        return 0
    lo, hi = rowids(db, table)
    return 0 if lo is None else int(hi) - int(lo) + 1


def slice_rows(count: int, n: int) -> int:
    """At most how many of ``count`` rowids fall in each of :func:`slices`' ``n`` ranges."""
    return -(-count // max(n, 1))


def slices(db: Database, table: str, n: int) -> list[str]:
    """``n`` rowid-range conditions covering ``table`` (for splitting a scan over workers)."""
    lo, hi = rowids(db, table)
    if lo is None or n <= 1:
        return ["1"]
    step = (hi - lo) // n + 1
    return [f"rowid >= {lo + i * step} AND rowid < {lo + (i + 1) * step}" for i in range(n)]


def run(db: Database, tasks: list[Task], parallel: bool) -> list:
    """Results of ``tasks`` in order; in forked worker processes when ``parallel`` and the process is
    pyprof's to fork (:func:`pyprof.process.can_fork`), else in this one: the same results."""
    workers = min(len(tasks), os.cpu_count() or 1)
    if not parallel or workers < 2 or not process.can_fork():
        return [run_task(db, t) for t in tasks]
    ctx = multiprocessing.get_context("fork")
    # Results travel back through anonymous shared mappings, made before the workers are forked so they
    # inherit them: pickling ~0.5 GB of columns through a pipe cost ~1.4 s of a 1M-kernel parse. A
    # mapping reserves address space only; pages exist once the worker writes them.
    _SHARED[:] = [mmap.mmap(-1, t.rows * t.ncols * 8) if t.kind == "ints" and t.rows else None
                  for t in tasks]
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = [pool.submit(_run, db.path, t, i) for i, t in enumerate(tasks)]
            out = []
            for i, f in enumerate(futs):
                how, val = f.result()
                out.append(_shared_view(_SHARED[i], val) if how == "shared" else val)
            return out
    finally:
        _SHARED.clear()  # the arrays keep their own mappings alive
