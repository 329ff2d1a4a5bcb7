"""Fast bulk reads: integer columns straight into numpy, split over worker processes on big exports.

Python's sqlite3 builds a tuple per row, which dominates parse time on million-row tables. Two things
help: integer-only selects (``IFNULL(col, -1)``: -1 stands for NULL in columns that are never
negative) converted with one ``np.array`` call, and reading several rowid slices of the big tables
at once in forked worker processes (each opens its own read-only connection through
:class:`pyprof.parse.db.Database`). Small exports are read in-process: forking costs more than it saves.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from pyprof.parse.db import Database

#: below this many rows in total, read in-process
PARALLEL_MIN_ROWS = 400_000


def _run(path: str, kind: str, sql: str, ncols: int):
    with Database(path) as db:
        rows = db.execute(sql)
    if kind == "ints":
        return np.array(rows, dtype=np.int64).reshape(len(rows), ncols)
    return rows


class Task:
    """One query: ``kind`` "ints" (-> int64 array of shape (n, ncols)) or "rows" (-> list of tuples)."""

    def __init__(self, kind: str, sql: str, ncols: int = 0):
        self.kind, self.sql, self.ncols = kind, sql, ncols


def slices(db: Database, table: str, n: int) -> list[str]:
    """``n`` rowid-range conditions covering ``table`` (for splitting a scan over workers)."""
    lo, hi = db.execute(f'SELECT MIN(rowid), MAX(rowid) FROM "{table}"')[0]
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
            rows = db.execute(t.sql)
            out.append(np.array(rows, dtype=np.int64).reshape(len(rows), t.ncols) if t.kind == "ints" else rows)
        return out
    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = [pool.submit(_run, db.path, t.kind, t.sql, t.ncols) for t in tasks]
        return [f.result() for f in futs]
