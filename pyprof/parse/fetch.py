"""Fast bulk reads: integer columns straight into numpy, split over worker processes on big exports.

Python's sqlite3 builds a tuple per row, which dominates parse time on million-row tables. Two things
help: integer-only selects (``IFNULL(col, -1)``: -1 stands for NULL in columns that are never
negative) converted with one ``np.array`` call, and reading several rowid slices of the big tables
at once in forked worker processes (each opens its own read-only connection through
:class:`pyprof.parse.db.Database`). Small exports are read in-process: forking costs more than it saves.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from pyprof.parse.db import Database, translate_errors

#: below this many rows in total, read in-process
PARALLEL_MIN_ROWS = 400_000


def to_ints(rows: list[tuple], ncols: int) -> np.ndarray:
    """Rows of ints -> an int64 array of shape (len(rows), ncols) (``np.fromiter`` over the flattened
    rows: faster than ``np.array`` on a list of tuples; the latter where a value is not a plain int)."""
    try:
        out = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
    except (TypeError, ValueError, OverflowError):
        out = np.array(rows, dtype=np.int64)
    return out.reshape(len(rows), ncols)


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
            parts.append(to_ints(rows, ncols))
    if not parts:
        return np.zeros((0, ncols), dtype=np.int64)
    # column-major: the reader takes whole columns (contiguous then), and this runs in the workers
    return np.asfortranarray(parts[0] if len(parts) == 1 else np.concatenate(parts))


def _run(path: str, kind: str, sql: str, ncols: int):
    with Database(path) as db:
        return read_ints(db, sql, ncols) if kind == "ints" else db.execute(sql)


class Task:
    """One query: ``kind`` "ints" (-> int64 array of shape (n, ncols)) or "rows" (-> list of tuples)."""

    def __init__(self, kind: str, sql: str, ncols: int = 0):
        self.kind, self.sql, self.ncols = kind, sql, ncols


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


def slices(db: Database, table: str, n: int) -> list[str]:
    """``n`` rowid-range conditions covering ``table`` (for splitting a scan over workers)."""
    lo, hi = rowids(db, table)
    if lo is None or n <= 1:
        return ["1"]
    step = (hi - lo) // n + 1
    return [f"rowid >= {lo + i * step} AND rowid < {lo + (i + 1) * step}" for i in range(n)]


def run(db: Database, tasks: list[Task], parallel: bool) -> list:
    """Results of ``tasks`` in order; in worker processes when ``parallel``."""
    workers = min(len(tasks), os.cpu_count() or 1)
    if not parallel or workers < 2:
        out = []
        for t in tasks:
            out.append(read_ints(db, t.sql, t.ncols) if t.kind == "ints" else db.execute(t.sql))
        return out
    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = [pool.submit(_run, db.path, t.kind, t.sql, t.ncols) for t in tasks]
        return [f.result() for f in futs]
