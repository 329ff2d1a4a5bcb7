"""Fast bulk reads: integer columns straight into numpy, split over worker processes on big exports.

Python's sqlite3 builds a tuple per row, which dominates parse time on million-row tables. So: selects
of integers only (``IFNULL(col, -1)``: -1 stands for NULL in columns that are never negative); big
queries through the ADBC SQLite driver (the ``fast`` extra: :class:`ArrowReader`), whose Arrow buffers
are copied into numpy with no Python object per value, and where it is absent, fails, or gives a column
that is not int64 (SQLite columns are untyped: one REAL or TEXT value promotes the whole column), the
same query through sqlite3, so results never depend on the reader; and a big query read in a forked
worker (:func:`start`) while this process reads another, where :func:`pyprof.process.can_fork` allows
(``pyprof parse``, not a library call in someone else's process; small exports: forking costs more).
"""

from __future__ import annotations

import itertools
import mmap
from dataclasses import dataclass
from typing import cast

import numpy as np

from pyprof import process
from pyprof.parse.db import Database, damaged, sqlite_uri, translate_errors

#: below this many rows in total, read in-process
PARALLEL_MIN_ROWS = 400_000


def to_ints(rows: list[tuple], ncols: int) -> np.ndarray:
    """Rows of ints -> an int64 (len(rows), ncols) array: ``np.fromiter`` over the flattened rows, faster
    than ``np.array`` on tuples (which reads a REAL). Raises TypeError, ValueError or OverflowError for
    text or a blob (no exporter writes that, a damaged record does)."""
    try:
        out = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
    except (TypeError, ValueError, OverflowError):
        out = np.array(rows, dtype=np.int64)
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


def read_ints_arrow(path: str, sql: str, ncols: int, alloc=None, null: int | None = None) -> np.ndarray | None:
    """An integer query's rows as an int64 (n, ncols) Fortran array through ADBC, nulls as ``null`` (None:
    a null fails), in ``alloc(shape)`` where given (see :func:`start`). None on any failure of this path,
    so that sqlite3 reads the query and reports what is really wrong with the file."""
    try:
        with ArrowReader(path) as reader:
            parts = [[arrow_ints(view, j, null) for j in range(ncols)] for view in reader.batches(sql)]
    except Exception:  # noqa: BLE001 - ImportError or any driver failure: the sqlite3 reader takes over
        return None
    shape = (sum(len(p[0]) for p in parts), ncols)
    out = alloc(shape) if alloc is not None else np.empty(shape, dtype=np.int64, order="F")
    for j in range(ncols):
        out[:, j] = parts[0][j] if len(parts) == 1 else np.concatenate([p[j] for p in parts]) if parts else 0
    return out


class ArrowReader:
    """One ADBC connection to an export (read-only) for several queries: :meth:`batches` streams a query's
    rows as Arrow record batches, :meth:`run` runs a statement (the ``temp`` schema is writable). Raises
    where the driver is absent or fails: the caller then reads through sqlite3."""

    def __init__(self, path: str):
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._mgr = adbc_driver_manager
        self._db = adbc_driver_sqlite.connect(sqlite_uri(path))
        try:
            self._conn = adbc_driver_manager.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        try:
            self._conn.close()
        finally:
            self._db.close()

    def __enter__(self) -> ArrowReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, sql: str) -> None:
        with self._mgr.AdbcStatement(self._conn) as stmt:
            stmt.set_sql_query(sql)
            stmt.execute_update()

    def batches(self, sql: str):
        """The rows of ``sql`` as nanoarrow ``CArrayView``s, one struct per batch whose children are the
        columns. A view's buffers live only until the next batch: copy what is kept."""
        import nanoarrow

        with self._mgr.AdbcStatement(self._conn) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(ARROW_BATCH)})
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            for batch in nanoarrow.c_array_stream(handle):
                yield batch.view()


def _valid(child, n: int) -> np.ndarray | None:
    """A column's validity (True: not null), or None where it has no nulls."""
    if not child.null_count:
        return None
    bits = np.frombuffer(child.buffer(0), dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[child.offset:child.offset + n].astype(bool)


def arrow_ints(view, j: int, null: int | None = None) -> np.ndarray:
    """Column ``j`` of a batch from :meth:`ArrowReader.batches` as a new int64 array, nulls as ``null``;
    raises ValueError where the column is not int64, or holds nulls and ``null`` is None."""
    child = view.child(j)
    n = child.length
    if child.storage_type == "na" and null is not None:  # (every value null)
        return np.full(n, null, dtype=np.int64)
    if child.storage_type != "int64" or (child.null_count and null is None):
        raise ValueError(f"column {j} is {child.storage_type} with {child.null_count} nulls, not int64")
    out = np.frombuffer(child.buffer(1), dtype=np.int64, count=n, offset=child.offset * 8).copy()
    valid = _valid(child, n)
    if valid is not None:
        out[~valid] = cast(int, null)  # not None: nulls with null=None raised above
    return out


def arrow_bytes(view, j: int) -> tuple[np.ndarray, list]:
    """The non-null values of column ``j`` of a batch from :meth:`ArrowReader.batches`, binary or string:
    their rows and their values (bytes); raises ValueError for another type."""
    child = view.child(j)
    n = child.length
    if child.storage_type == "na" or child.null_count == n:
        return np.zeros(0, dtype=np.int64), []
    if child.storage_type not in ("binary", "string"):
        raise ValueError(f"column {j} is {child.storage_type}, not binary")
    valid = _valid(child, n)
    rows = np.arange(n) if valid is None else np.flatnonzero(valid)
    off = np.frombuffer(child.buffer(1), dtype=np.int32, count=n + 1, offset=child.offset * 4)
    lo, hi = off[rows].tolist(), off[rows + 1].tolist()
    data = bytes(child.buffer(2))
    return rows, [data[a:b] for a, b in zip(lo, hi, strict=True)]


#: rows converted to numpy at a time: the row tuples of one batch are freed before the next is read, so
#: memory is reused instead of a whole table's Python objects being built (and page-faulted in) at once
BATCH = 1 << 16


def read_ints(db: Database, sql: str, ncols: int) -> np.ndarray:
    """An integer query's rows as an int64 array of shape (n, ncols), read in batches."""
    parts = []
    with translate_errors(db.path):
        cur = db.conn.execute(sql)
        while rows := cur.fetchmany(BATCH):
            try:
                parts.append(to_ints(rows, ncols))
            except (TypeError, ValueError, OverflowError):
                raise damaged(db.path, "an integer column holds text or a blob") from None
    if not parts:
        return np.zeros((0, ncols), dtype=np.int64)
    # column-major: the reader takes whole columns (contiguous then), and this runs in the workers
    return np.asfortranarray(parts[0] if len(parts) == 1 else np.concatenate(parts))


@dataclass
class Task:
    """One integer query, read into an int64 array of shape (n, ``ncols``). ``rows``, at most how many
    rows it returns (0: unknown), picks the reader (:func:`run_task`) and sizes a worker's buffer
    (:func:`start`). ``arrow_sql``: the query the Arrow reader runs instead, ``col`` for ``IFNULL(col,
    -1)`` (the driver's null bitmap is cheaper than SQLite evaluating the IFNULL)."""

    sql: str
    ncols: int
    rows: int = 0
    arrow_sql: str | None = None


def run_task(db: Database, task: Task, alloc=None) -> np.ndarray:
    """One task's result: big queries through ADBC where it can, the rest through sqlite3."""
    if task.rows >= ARROW_MIN_ROWS:
        null = None if task.arrow_sql is None else -1
        out = read_ints_arrow(db.path, task.arrow_sql or task.sql, task.ncols, alloc, null)
        if out is not None:
            return out
    return read_ints(db, task.sql, task.ncols)


#: the anonymous shared mapping the worker :func:`start` forks fills (None: none)
_SHARED: list = [None]


def _shared_view(buf, shape: tuple) -> np.ndarray:
    return np.ndarray(shape, dtype=np.int64, buffer=buf, order="F")


def _run(path: str, task: Task):
    """Worker side: the result, or ("shared", shape) once it sits in the shared mapping."""
    buf = _SHARED[0]

    def alloc(shape):
        if buf is not None and shape[0] * shape[1] * 8 <= len(buf):
            return _shared_view(buf, shape)
        return np.empty(shape, dtype=np.int64, order="F")

    with Database(path) as db:
        out = run_task(db, task, alloc)
    if buf is not None and out.nbytes <= len(buf):
        if not np.shares_memory(out, np.frombuffer(buf, dtype=np.uint8)):
            _shared_view(buf, out.shape)[...] = out
        return ("shared", out.shape)
    return ("value", out)


def rowids(db: Database, table: str) -> tuple:
    """(MIN(rowid), MAX(rowid)) of ``table`` ((None, None) when empty): two b-tree lookups (SQLite
    answers a lone MIN or MAX of the rowid from the tree's edge, both at once by a scan)."""
    return tuple(db.execute(f'SELECT {f}(rowid) FROM "{table}"')[0][0] for f in ("MIN", "MAX"))


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


class Pending:
    """A task under way in a forked worker (:func:`start`), or to run here when its result is asked for."""

    def __init__(self, db: Database, task: Task, pool=None, future=None, shared=None):
        self.db, self.task, self._pool, self._future, self._shared = db, task, pool, future, shared

    def result(self) -> np.ndarray:
        if self._pool is None:
            return run_task(self.db, self.task)
        try:
            how, val = self._future.result()
            return _shared_view(self._shared, val) if how == "shared" else val
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def start(db: Database, task: Task, parallel: bool) -> Pending:
    """``task`` started in a forked worker when ``parallel`` and the process is pyprof's to fork, so
    that this process can go on meanwhile; else left to run here when its result is asked for."""
    if not parallel or not process.can_fork():
        return Pending(db, task)
    # The result travels back through an anonymous shared mapping, made before the worker is forked so
    # it inherits it: pickling ~0.5 GB of columns through a pipe cost ~1.4 s of a 1M-kernel parse. A
    # mapping reserves address space only; pages exist once the worker writes them.
    shared = _SHARED[0] = mmap.mmap(-1, task.rows * task.ncols * 8) if task.rows else None
    try:
        pool = process.pool(1)  # (forked: can_fork() holds)
        if pool is None:
            return Pending(db, task)
        future = pool.submit(_run, db.path, task)  # (the worker is forked by the submit: it has the mapping)
    finally:
        _SHARED[0] = None  # the array keeps its own mapping alive
    return Pending(db, task, pool, future, shared)
