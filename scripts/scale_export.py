#!/usr/bin/env python3
"""Build a large export by tiling a real one: ``scale_export.py IN OUT --factor N``.

The copy holds N back-to-back repetitions of the capture: every tile's timestamps are shifted past
the previous tile's end, and correlation ids (and nvprof marker ids) past the previous tile's largest,
so the result is a valid, bigger export of the same process(es) and thread(s) -- kernels still join
their API call on (correlationId, pid) and lie inside the same NVTX ranges as in the original.

NVTX messages stay where the source has them: a plain ``nvtxRangePushA`` message (what pyprof's own
ranges, and most users' exports, hold) is stored inline in ``NVTX_EVENTS.text``, one copy per range, and
so it is in every tile -- the copy is shaped like a real export of that many ranges. ``--intern-text``
moves nsys messages into StringIds instead (``textId``, as registered strings are stored: each distinct
message once), the registered-string case, which also keeps the file small however many ranges it
holds. Used by ``scripts/bench_parse.py``.

By default an nsys tile repeats the tables pyprof reads (kernels, memcpy, memset, runtime API calls and
NVTX push/pop ranges). ``--every-table`` repeats every event table of the export instead -- each row of
every table that has a time or a correlation id (synchronisation, CUDA events, OS runtime calls and
their call chains, profiler overhead, NVTX events of every type, ...) -- so that each keeps its real
ratio to the kernels, as a longer capture of the same program would hold them. Tables that describe
the capture rather than count its events (strings, threads, processes, devices, enums, metadata,
diagnostics) are kept once, as a longer capture holds them once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time

NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
NVPROF_TABLES = ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                 "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER",
                 "CUPTI_ACTIVITY_KIND_MARKER")
TIME_COLS = ("start", "end", "timestamp", "completed", "queued", "submitted")
ID_COLS = ("correlationId",)
# kept once by --every-table: they describe the capture (names, devices, enums), not its events
ONCE_PREFIXES = ("ENUM_", "TARGET_INFO_", "META_DATA_", "ANALYSIS_", "DIAGNOSTIC_", "StringIds", "ThreadNames",
                 "PROCESSES", "ProcessStreams")


def _cols(conn, table):
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _tables(conn):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _event_tables(conn, tables) -> list[str]:
    """nsys tables that hold events (a time or a correlation id column, or call chains): NSYS_TABLES first."""
    out = [t for t in NSYS_TABLES if t in tables]
    for t in sorted(tables - set(out)):
        if t.startswith(ONCE_PREFIXES) or t.startswith("sqlite_"):
            continue
        cols = set(_cols(conn, t))
        if cols & set(TIME_COLS) or "correlationId" in cols or t.endswith("CALLCHAINS"):
            out.append(t)
    return out


def _intern_messages(conn) -> None:
    """Inline NVTX messages -> registered strings (StringIds), each stored once."""
    conn.execute("CREATE TEMP TABLE newtext AS SELECT DISTINCT text FROM NVTX_EVENTS WHERE text IS NOT NULL "
                 "AND eventType IN (59, 60)")
    base = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()[0]
    conn.execute(f"INSERT INTO StringIds (id, value) SELECT {base} + rowid, text FROM newtext")
    conn.execute("UPDATE NVTX_EVENTS SET textId = (SELECT s.id FROM StringIds s WHERE s.id >= ? AND "
                 "s.value = NVTX_EVENTS.text), text = NULL WHERE text IS NOT NULL AND eventType IN (59, 60)",
                 (base,))


def _extent(conn, todo: list[str]) -> tuple:
    """(first time, last time, steps): the capture's span over the tables to tile, and how far each tile
    shifts the ids that must not repeat (correlation ids, marker ids, call chain ids)."""
    lo, hi, max_corr, max_mid, max_chain = None, None, 0, 0, 0
    for t in todo:
        cols = _cols(conn, t)
        for c in ("start", "timestamp"):
            if c in cols:
                v = conn.execute(f'SELECT MIN("{c}") FROM "{t}" WHERE "{c}" > 0').fetchone()[0]
                lo = v if lo is None or (v is not None and v < lo) else lo
        for c in ("end", "timestamp", "start"):
            if c in cols:
                v = conn.execute(f'SELECT MAX("{c}") FROM "{t}"').fetchone()[0]
                hi = v if hi is None or (v is not None and v > hi) else hi
        if "correlationId" in cols:
            max_corr = max(max_corr, conn.execute(f'SELECT MAX(correlationId) FROM "{t}"').fetchone()[0] or 0)
        if t.endswith("CALLCHAINS") and "id" in cols:
            max_chain = max(max_chain, conn.execute(f'SELECT MAX(id) FROM "{t}"').fetchone()[0] or 0)
        if t.endswith("MARKER"):
            max_mid = conn.execute("SELECT MAX(id) FROM CUPTI_ACTIVITY_KIND_MARKER").fetchone()[0] or 0
    return lo, hi, {"corr": max_corr + 1, "marker": max_mid + 1, "chain": max_chain + 1}


def _shifted(table: str, c: str, k: int, span: int, steps: dict) -> str:
    """SQL: column ``c`` of ``table`` in tile ``k``: times ``k`` spans later, ids ``k`` steps on."""
    if c in TIME_COLS:
        return f'CASE WHEN "{c}" > 0 THEN "{c}" + {k * span} ELSE "{c}" END'
    if c in ID_COLS:
        return f'CASE WHEN "{c}" > 0 THEN "{c}" + {k * steps["corr"]} ELSE "{c}" END'
    if table.endswith("MARKER") and c == "id":
        return f'"{c}" + {k * steps["marker"]}'
    if c == "callchainId" or (table.endswith("CALLCHAINS") and c == "id"):
        # call chains are keyed (id, stackDepth): each tile's get ids of their own
        return f'CASE WHEN "{c}" > 0 THEN "{c}" + {k * steps["chain"]} ELSE "{c}" END'
    return f'"{c}"'


def tile(src: str, dst: str, factor: int, intern_text: bool = False, every_table: bool = False) -> dict:
    if factor < 1:
        raise SystemExit("--factor must be >= 1")
    tmp = dst + ".part"
    shutil.copyfile(src, tmp)
    conn = sqlite3.connect(tmp)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    tables = _tables(conn)
    nvprof = "StringTable" in tables and "Version" in tables
    if every_table and not nvprof:
        todo = _event_tables(conn, tables)
    else:
        todo = [t for t in (NVPROF_TABLES if nvprof else NSYS_TABLES) if t in tables]
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    if (intern_text and not nvprof and "NVTX_EVENTS" in tables and "StringIds" in tables
            and "textId" in _cols(conn, "NVTX_EVENTS")):
        _intern_messages(conn)
    lo, hi, steps = _extent(conn, todo)
    if lo is None:
        raise SystemExit(f"{src}: nothing to tile")
    span = (hi - lo) + 1_000_000  # 1 ms gap between tiles
    for t in todo:
        cols = [c for c in _cols(conn, t) if c != "_id_"]
        conn.execute(f'CREATE TEMP TABLE "orig_{t}" AS SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{t}"'
                     + (" WHERE eventType IN (59, 60)" if t == "NVTX_EVENTS" and not every_table else ""))
        collist = ", ".join(f'"{c}"' for c in cols)
        for k in range(1, factor):
            exprs = ", ".join(_shifted(t, c, k, span, steps) for c in cols)
            conn.execute(f'INSERT INTO "{t}" ({collist}) SELECT {exprs} FROM "orig_{t}"')
    if factor > 1 and "ANALYSIS_DETAILS" in tables and "duration" in _cols(conn, "ANALYSIS_DETAILS"):
        # the capture now ends where the last tile's does, and nsys ends every range never popped there:
        # each tile's copies of the source's (ending at its capture's end) end at the tiled capture's
        end = conn.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
        if isinstance(end, int) and end > 0:
            new_end = end + (factor - 1) * span
            conn.execute(f'UPDATE ANALYSIS_DETAILS SET duration = duration + {(factor - 1) * span}')
            if "NVTX_EVENTS" in todo:
                ends = ", ".join(str(end + k * span) for k in range(factor))
                conn.execute(f'UPDATE NVTX_EVENTS SET "end" = {new_end} WHERE eventType IN (59, 60) '
                             f'AND "end" IN ({ends})')
    conn.commit()
    counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in todo}
    conn.close()
    os.replace(tmp, dst)
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--factor", type=int, required=True, help="number of tiles (1 = a plain copy)")
    ap.add_argument("--intern-text", action="store_true",
                    help="nsys: move inline NVTX messages into StringIds (registered strings, stored once); "
                         "default: keep them inline, one copy per range, as the source has them")
    ap.add_argument("--every-table", action="store_true",
                    help="nsys: repeat every event table (sync, CUDA events, OS runtime, NVTX events of every "
                         "type, ...), each at its real ratio to the kernels; default: the tables pyprof reads")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    counts = tile(a.input, a.output, a.factor, a.intern_text, a.every_table)
    print(f"{a.output}: " + ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')}={n}" for t, n in counts.items())
          + f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
