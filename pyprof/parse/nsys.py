"""Nsight Systems SQLite exports (every layout from <= 2021.1 to 2026.2) -> kernel records.

Reads KERNEL, MEMCPY, MEMSET, RUNTIME (runtime + driver calls, CUDA-backtrace duplicates dropped,
only the rows some activity correlates to) and NVTX_EVENTS (push/pop and start/end ranges, text or
registered string, any domain) by column name, integer columns straight into numpy
(:mod:`pyprof.parse.fetch`), and hands them to :mod:`pyprof.parse.assemble`: the kernels whole, the
ranges window by window as :class:`_Nvtx` reads them (docs/design.md, "The Nsight reader"). Layout
facts live in :mod:`pyprof.parse.schema`, GPU names in :mod:`pyprof.parse.gpus`. An absent optional
column reads as nulls (one warning names those that every nsys version writes), an absent kernel or
copy ``start``/``end`` is a one-line error, and NVTX_EVENTS without its times or thread gives no ranges
(a warning).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import pickle
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from typing import IO, Any, cast

import numpy as np

from pyprof import process
from pyprof.errors import NoKernelsError
from pyprof.parse import decode as dec
from pyprof.parse import fetch, schema
from pyprof.parse.assemble import (
    ESCAPED,
    NEVER_POPPED,
    Activities,
    PreparedSource,
    RangeWindow,
    Streamed,
    count,
    group_codes,
    join_first,
    take,
)
from pyprof.parse.db import (
    Database,
    LayoutError,
    as_text,
    check_columns,
    damaged,
    escaped,
    sqlite_uri,
    translate_errors,
)
from pyprof.parse.db import text as db_text
from pyprof.parse.demangle import demangle
from pyprof.parse.gpus import nsys_gpu_names, nsys_gpu_props

PID_SHIFT = 24
ID_MASK = 0xFFFFFF


def nsys_version(db: Database) -> str:
    """Exporter version: the metadata table (2022.1+), else install path heuristics (see schema doc §1)."""
    for table in schema.NSYS_META_TABLES:
        if {"name", "value"} <= set(db.columns(table)):
            meta = {as_text(k): as_text(v) for k, v in db.execute(f'SELECT name, value FROM "{table}"')}
            ver = meta.get("EXPORT_PRODUCT_VERSION")
            if ver:
                schema_ver, platform = meta.get("EXPORT_SCHEMA_VERSION"), meta.get("EXPORT_PLATFORM")
                extra = [x for x in (schema_ver and f"schema {schema_ver}", platform) if x]
                return f"{ver} ({', '.join(extra)})" if extra else str(ver)
    pattern = re.compile(r"nsight-systems/(\d{4}\.\d+(?:\.\d+)*)")
    queries = []
    if {"name", "value"} <= set(db.columns("TARGET_INFO_SYSTEM_ENV")):
        queries.append("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'TargetInstallDir'")
    if "value" in db.columns("StringIds"):
        queries.append("SELECT value FROM StringIds WHERE value LIKE '%nsight-systems/%' LIMIT 20")
    for sql in queries:
        for (value,) in db.execute(sql):
            m = pattern.search(str(value or ""))
            if m:
                return f"{m.group(1)} (from install path)"
    if db.has("TARGET_INFO_CUDA_GPU") and not db.has("PROCESSES") and not db.has("TARGET_INFO_SESSION_START_TIME"):
        return "<=2021.1 (no metadata table)"
    return "unknown (no metadata table)"


def _expr(present: set, col: str) -> str:
    return f'IFNULL("{col}", -1)' if col in present else "-1"


def _task(db: Database, table: str, names: list[str], rows: int = 0, where: str = "1") -> fetch.Task:
    """A read of the columns ``names`` of ``table``'s rows ``where``: present columns as IFNULL(col, -1),
    absent ones as -1; for the Arrow reader, present columns as they are (it reads nulls as -1)."""
    present = set(db.columns(table))
    ints = ", ".join(_expr(present, c) for c in names)
    bare = ", ".join(f'"{c}"' if c in present else "-1" for c in names)
    return fetch.Task(f'SELECT {ints} FROM "{table}" WHERE {where}', len(names), rows,
                      f'SELECT {bare} FROM "{table}" WHERE {where}')


def _pack(exprs: list[str], bits: int) -> str:
    """SQL: ``expr + 1`` of each expression (ints, -1 for null) in ``bits`` bits, the first highest; -1
    where one does not fit (the reader then reads the columns one by one)."""
    n = len(exprs)
    fits = " AND ".join(f"({e}) BETWEEN -1 AND {(1 << bits) - 2}" for e in exprs)
    # each term parenthesised: SQLite gives << and | the same precedence
    parts = " | ".join(f"((({e}) + 1) << {bits * (n - 1 - i)})" for i, e in enumerate(exprs))
    return f"CASE WHEN {fits} THEN {parts} ELSE -1 END"


def _unpack(col: np.ndarray, n: int, bits: int) -> list[np.ndarray]:
    mask = (1 << bits) - 1
    return [((col >> (bits * (n - 1 - i))) & mask) - 1 for i in range(n)]


#: Python's sqlite3 builds one int object per value read, so kernel rows are read with small columns
#: packed several to a 64-bit integer (each checked in SQL to fit; -1 where not, and then read again
#: unpacked)
GRID_BITS = 17

#: the kernel columns read (the packed read, :func:`_kernel_select`, keeps the first seven as they are)
KERNEL_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName", "demangledName",
               "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
COPY_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"]
API_COLS = ["start", "end", "globalTid", "correlationId", "nameId"]


def _optional_columns() -> dict[str, list[str]]:
    """Per table, the columns read that every nsys version writes but an export may still lack (they
    read as null, with a warning); ``mangledName`` (absent before 2022.1, where ``demangledName``
    serves) and NVTX_EVENTS' columns (which differ by version, and are each handled) are not listed."""
    essential = schema.NSYS_ESSENTIAL
    return {
        schema.NSYS_KERNEL: [c for c in KERNEL_COLS if c not in essential[schema.NSYS_KERNEL] and c != "mangledName"],
        schema.NSYS_MEMCPY: [c for c in COPY_COLS if c not in essential[schema.NSYS_MEMCPY]],
        schema.NSYS_MEMSET: [c for c in COPY_COLS if c not in essential[schema.NSYS_MEMSET] and c != "copyKind"],
        schema.NSYS_RUNTIME: list(API_COLS),
    }


def _kernel_select(db: Database) -> str:
    """KERNEL columns packed: start, end, deviceId, streamId, correlationId, globalPid, shortName, the long
    name id (demangled, else mangled), gridX, (gridY, gridZ, blockZ), (blockX, blockY)."""
    present = set(db.columns(schema.NSYS_KERNEL))
    e = {c: _expr(present, c) for c in KERNEL_COLS}
    long_id = f'CASE WHEN {e["demangledName"]} >= 0 THEN {e["demangledName"]} ELSE {e["mangledName"]} END'
    return ", ".join([*(e[c] for c in KERNEL_COLS[:7]), long_id, e["gridX"],
                      _pack([e["gridY"], e["gridZ"], e["blockZ"]], GRID_BITS),
                      _pack([e["blockX"], e["blockY"]], GRID_BITS)])


KERNEL_PACKED = 11
#: kernel rows read at a time (the rest of the reader holds 41 bytes a kernel, not 15 columns)
KERNEL_CHUNK = 1 << 20


def _kernel_unpack(k: np.ndarray) -> dict[str, np.ndarray] | None:
    """:func:`_kernel_select` rows -> columns by :data:`KERNEL_COLS` name (None if a pack did not fit)."""
    if (k[:, 9] < 0).any() or (k[:, 10] < 0).any():
        return None
    kc = {c: np.ascontiguousarray(k[:, i]) for i, c in enumerate((*KERNEL_COLS[:7], "demangledName", "gridX"))}
    kc["mangledName"] = kc["demangledName"]
    kc["gridY"], kc["gridZ"], kc["blockZ"] = _unpack(k[:, 9], 3, GRID_BITS)
    kc["blockX"], kc["blockY"] = _unpack(k[:, 10], 2, GRID_BITS)
    return kc



#: NVTX range rows per window: the ranges held at a time (with those still open from before), whatever
#: the size of the export (see :class:`pyprof.parse.assemble.Streamed`)
WINDOW_ROWS = 1 << 17
#: NVTX_EVENTS is read in rowid slices of this many rows (at least), one query each. Small enough that
#: the two readers' shares come out even (slices are the unit they split the pass by) and that each one's
#: first slice, where every message is still new and comes back as bytes, is short: at 2**19 rows the
#: real-ratio mmagic tile (2M ranges, 4 slices) took 6% more CPU and 1.6x the memory
SLICE_ROWS = 1 << 17
#: windows kept in memory up to this many bytes between the scan and the records; the rest wait in a
#: temporary file
SPILL_BYTES = 128 << 20
#: (thread, end) of a range row as one int64 while it is read: its end less the first end this process
#: read, shifted past a thread code of this many bits (a chunk where that does not fit keeps both)
_KEY_SHIFT = 8
_KEY_SPAN = 1 << (62 - _KEY_SHIFT)
_KEY_CHUNK = 1 << 20  # keys sent (and made anew) at a time
_NULL = np.iinfo(np.int64).min  # a null domainId (a domain row's -1 is an id)


#: what :meth:`_Nvtx.merge` reads of the other process's summary where there is none
_NO_OTHER: dict = {"n": 0, "ends": None, "meta": {}, "domains": []}


def _mid_rows(kmid_rows: list, rows, props: dict, strings: dict) -> list[tuple]:
    """The middle of a record per ``(kmid code, pid, tid, API name id, GPU name)`` of ``rows``: (pid, tid,
    device, GPU, its properties, stream, grid, block, bytes, copy kind, API name), -1s as None."""
    mids = []
    for k, p, t, api_id, gpu in rows:
        dev, stream, gx, gy, gz, bx, by, bz, nbytes, ck = (v if v >= 0 else None for v in kmid_rows[k])
        copy = None if kmid_rows[k][9] == -3 else "memset" if kmid_rows[k][9] == -2 else schema.copy_kind_name(ck)
        mids.append((p if p >= 0 else None, t if t >= 0 else None, dev, gpu, props.get(gpu), stream,
                     [gx, gy, gz] if gx is not None else None, [bx, by, bz] if bx is not None else None, nbytes,
                     copy, strings.get(api_id) if api_id != -1 else None))
    return mids


def _receive_keys(keys: np.ndarray, mine: int, theirs: int, other: dict, fill, put, codes: np.ndarray) -> None:
    """The other process's keys (see :meth:`_Nvtx.merge`), received into ``keys[mine:mine + theirs]`` chunk
    by chunk by ``fill``, and made anew there by ``put`` (``codes``: its thread codes -> ours)."""
    mask = (1 << _KEY_SHIFT) - 1
    for at in range(mine, mine + theirs, _KEY_CHUNK):
        part = keys[at:min(mine + theirs, at + _KEY_CHUNK)]
        fill(part)
        if not other["wide"]:
            put(at, (part >> _KEY_SHIFT) + other["base"], codes[part & mask])
    if other["wide"]:
        for at in range(mine, mine + theirs, _KEY_CHUNK):
            part = keys[at:min(mine + theirs, at + _KEY_CHUNK)]
            t = np.empty(len(part), dtype=np.int32)
            fill(t)
            put(at, part.copy(), codes[t])


def _repeats(keys: np.ndarray, codes: np.ndarray | None, back: np.ndarray, bits: int, lo: int) -> tuple:
    """(threads, ends) of the (thread, end) pairs that repeat, each once, where the end is its thread's last
    (see :meth:`_Nvtx.merge`): ``keys`` end-major keys (sorted here, in place), or with ``codes`` (ends
    spanning years) the ends and thread codes as pairs; ``back``: thread code -> thread."""
    if codes is not None:
        order = np.lexsort((codes, keys))
        keys, codes = keys[order], codes[order]
        eq = (keys[1:] == keys[:-1]) & (codes[1:] == codes[:-1])
        eq[1:] &= ~eq[:-1]  # (the first of each run of equal pairs)
        last = np.full(len(back), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(last, codes, keys)
        at_last = keys[1:][eq] == last[codes[1:][eq]]
        return back[codes[1:][eq][at_last]], keys[1:][eq][at_last]
    keys.sort()
    eq = keys[1:] == keys[:-1]
    eq[1:] &= ~eq[:-1]  # (the first of each run of equal keys: each repeated key once)
    dup = keys[1:][eq]
    last = np.full(len(back), -1, dtype=np.int64)  # each thread's last end (keys are end-major)
    np.maximum.at(last, keys & ((1 << bits) - 1), keys >> bits)
    dup = dup[(dup >> bits) == last[dup & ((1 << bits) - 1)]]
    return back[dup & ((1 << bits) - 1)], (dup >> bits) + lo


class _Nvtx:
    """NVTX_EVENTS read in one pass, the ranges then handed out window by window, without the
    never-popped push ranges (known once the pass is done: :meth:`merge`), in table order. The slices,
    the two processes sharing them (:meth:`share`), the windows and their spill file, and the messages
    decoded once: docs/design.md, "The Nsight reader". Messages are text (``text``, one copy per range:
    a plain ``nvtxRangePushA`` message, decoded as :func:`pyprof.parse.db.as_text` decodes it) or
    registered strings (``textId`` into StringIds)."""

    #: messages kept in ``temp.pyprof_text`` at most (where they do not repeat, the table stops growing)
    KNOWN_MAX = 1 << 16

    def __init__(self, path: str, cols: list[str], strings: dict[int, str | None], arrow: bool,
                 capture_end: int | None = None):
        self.path, self.strings, self.arrow = path, strings, arrow
        self.capture_end = capture_end
        c = set(cols)
        self.has_type, self.has_text = "eventType" in c, "text" in c
        self.has_text_id, self.has_domain = "textId" in c, "domainId" in c
        self.has_domains = self.has_type and self.has_domain
        self.slices = self._slices()
        self._next: Any = [0, len(self.slices) - 1]  # the next slice from the front, from the back
        self.threads: dict[tuple, int] = {}  # (thread id,) -> code
        # the (thread, end) pairs that repeat (see _dropped): their ends, sorted and distinct, and the pairs
        # as (index into those ends) * 2**32 + thread code, sorted
        self._dup_ends = np.zeros(0, dtype=np.int64)
        self._dup_keys = np.zeros(0, dtype=np.int64)
        self.dnames: dict[int, str] = {}
        self.ordered = True
        self.dropped = 0
        self.escaped = 0  # texts the forked reader escaped (this process counts its own in pyprof.parse.db)
        self.known: list[bytes] = []  # the messages in temp.pyprof_text, by number
        self.known_str: list[str] = []
        self._known_set: dict[bytes, None] = {}
        self._reader: fetch.ArrowReader | None = None
        self._sqlite = None
        self._synced: dict[str, int] = {}  # per connection: how many of `known` its table holds
        self._mine: list[int] = []  # the slices this process read
        self._spill: IO[bytes] | None = None
        self._reset()

    def _reset(self) -> None:
        """Forget what this process read (before it reads its slices again through sqlite3)."""
        self._store: dict[int, list] = {}  # per slice: its windows (payloads, or offsets in the spill file)
        self._meta: dict[int, list] = {}  # per slice, per window: (first start, last start, in order)
        if self._spill is not None:
            self._spill.close()
        self._spill = None
        self._held = 0
        # the (thread, end) keys of the range rows this process read, in one array as big as the table (its
        # pages exist once written): packed (see _key), or ends with their thread codes beside them
        self._kbuf: np.ndarray | None = None
        self._kcodes: np.ndarray | None = None
        self._kn = 0
        self._base: int | None = None  # the first end this process read (packed keys are offsets from it)
        self._domain_rows: list[int] = []

    def rng(self, t: str = "") -> str:
        """SQL: a range row (``t``: the table's alias and a dot)."""
        types = ",".join(str(x) for x in schema.NVTX_RANGE_TYPES)
        return (f"{t}eventType IN ({types}) AND " if self.has_type else "") + \
            f'{t}"end" IS NOT NULL AND {t}start IS NOT NULL AND {t}globalTid IS NOT NULL'

    def _slices(self) -> list[str]:
        with Database(self.path) as db:
            lo, hi = fetch.rowids(db, schema.NSYS_NVTX)
        self.capacity = 0 if lo is None else int(hi) - int(lo) + 1  # range rows, at most
        if lo is None:
            return []
        step = max(SLICE_ROWS, WINDOW_ROWS)
        return [f"n.rowid >= {a} AND n.rowid < {a + step}" for a in range(int(lo), int(hi) + 1, step)]

    def share(self, ctx) -> None:
        """Before forking: the slice counters in shared memory, for two processes to take slices from."""
        self._next = ctx.Array("q", list(self._next))

    def _take_slice(self, front: bool) -> int | None:
        n = self._next
        with n.get_lock() if hasattr(n, "get_lock") else contextlib.nullcontext():
            if n[0] > n[1]:
                return None
            i = 0 if front else 1
            s = n[i]
            n[i] = s + 1 if front else s - 1
            return s

    # -- connections --------------------------------------------------------------------------------
    def _arrow(self) -> fetch.ArrowReader | None:
        if self.arrow and self._reader is None:
            try:
                self._reader = fetch.ArrowReader(self.path)
            except Exception:  # noqa: BLE001 - the extra absent or failing: sqlite3 reads instead
                self.arrow = False
        return self._reader if self.arrow else None

    def _sqlite3(self):
        if self._sqlite is None:
            with translate_errors(self.path):
                self._sqlite = sqlite3.connect(sqlite_uri(self.path), uri=True, check_same_thread=False)
            self._sqlite.text_factory = bytes
        return self._sqlite

    def _close_arrow(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
            self._reader = None

    def close(self) -> None:
        self._close_arrow()
        if self._sqlite is not None:
            self._sqlite.close()
            self._sqlite = None
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _known_table(self, run, tag: str) -> None:
        """``temp.pyprof_text`` on a connection (``run``: runs a statement there), up to date."""
        have = self._synced.get(tag)
        if have is None:
            run("CREATE TEMP TABLE IF NOT EXISTS pyprof_text (id INTEGER PRIMARY KEY, t TEXT UNIQUE)")
            have = 0
        for i in range(have, len(self.known), 500):
            run("INSERT INTO temp.pyprof_text (id, t) VALUES " + ", ".join(
                f"({j}, CAST(X'{self.known[j].hex()}' AS TEXT))" for j in range(i, min(i + 500, len(self.known)))))
        self._synced[tag] = len(self.known)

    # -- the pass -----------------------------------------------------------------------------------
    def _slice_sql(self, cond: str, arrow: bool) -> str:
        # a domain row's rowid stands in its start (its domain and message are read after, by rowid)
        start = f"iif(n.eventType = {schema.NVTX_DOMAIN_CREATE}, n.rowid, n.start)" if self.has_domains else "n.start"
        cols = ["n.globalTid", start, 'n."end"', "n.textId" if self.has_text_id else "NULL",
                "n.domainId" if self.has_domain else "NULL", "n.eventType" if self.has_type else "NULL"]
        join = ""
        if self.has_text:
            # a known message as its number; a new one as bytes (a REAL as X'00': the slice is then read
            # by sqlite3, which gives the value as Python has it)
            cols += ["k.id", "CASE WHEN k.id IS NULL THEN iif(typeof(n.text) = 'real', X'00', n.text) END" if arrow
                     else "CASE WHEN k.id IS NULL THEN n.text END"]
            join = " LEFT JOIN temp.pyprof_text k ON k.t = n.text"
        extra = f" OR n.eventType = {schema.NVTX_DOMAIN_CREATE}" if self.has_domains else ""
        sql = (f'SELECT {", ".join(cols)} FROM "{schema.NSYS_NVTX}" n{join} WHERE {cond} AND '
               f'(({self.rng("n.")}){extra})')
        if arrow:  # a first row that types every column (the driver types a column by its first values)
            first = ["0"] * 6 + (["0", "X''"] if self.has_text else [])
            sql = f"SELECT {', '.join(first)} UNION ALL {sql}"
        return sql

    def _read_arrow(self, cond: str):
        """A slice's batches through ADBC (see :meth:`_read_sqlite`); raises where that reader fails or
        a message is a REAL."""
        reader = cast(fetch.ArrowReader, self._arrow())  # (only called where the Arrow reader opened)
        self._known_table(reader.run, "arrow")
        out = []
        vals: list
        s = 1  # (the first row only types the columns)
        for view in reader.batches(self._slice_sql(cond, True)):
            ints = [fetch.arrow_ints(view, j, _NULL if j == 4 else -1)[s:] for j in range(6)]
            kid, rows, vals = None, np.zeros(0, np.int64), []
            if self.has_text:
                kid = fetch.arrow_ints(view, 6, -1)[s:]
                rows, vals = fetch.arrow_bytes(view, 7)
                if s:
                    rows, vals = rows[1:] - 1, vals[1:]
                if any(v == b"\x00" for v in vals):  # (Arrow gives it as SQLite formats it; Python's differs)
                    raise ValueError("a message stored as a REAL: sqlite3 reads the slice")
            s = 0
            out.append((ints, kid, rows, vals))
        return out

    def _read_sqlite(self, cond: str):
        """A slice's batches: the int columns (thread, start, end, textId, domainId, eventType; -1 for
        null, a null domainId :data:`_NULL`) and, with text, the number of each row's known message (-1:
        none) and the rows and bytes of the new ones."""
        con = self._sqlite3()
        out = []
        with translate_errors(self.path):
            if self.has_text:
                self._known_table(con.execute, "sqlite3")
            cur = con.execute(self._slice_sql(cond, False))
            while rows := cur.fetchmany(fetch.BATCH):
                cols = list(zip(*rows, strict=True))
                try:
                    ints = [np.array([(_NULL if j == 4 else -1) if v is None else v for v in c], dtype=np.int64)
                            for j, c in enumerate(cols[:6])]
                    kid = np.array([-1 if v is None else v for v in cols[6]], dtype=np.int64) if self.has_text \
                        else None
                except (TypeError, ValueError, OverflowError):
                    raise damaged(self.path, "an integer column holds text or a blob") from None
                at, vals = [], []
                if self.has_text:
                    at = [i for i, v in enumerate(cols[7]) if v is not None]
                    vals = [v if type(v) is bytes else cast(str, as_text(v)).encode("utf-8", "surrogatepass")
                            for v in (cols[7][i] for i in at)]
                out.append((ints, kid, np.array(at, dtype=np.int64), vals))
        return out

    def read(self, front: bool = True) -> None:
        """Read slices, taken from the front (or the back), until none is left."""
        while (s := self._take_slice(front)) is not None:
            self._mine.append(s)
            self._read_slice(s)

    def _read_slice(self, s: int) -> None:
        cond = self.slices[s]
        batches = None
        if self._arrow() is not None:
            try:
                batches = self._read_arrow(cond)
            except Exception:  # noqa: BLE001 - any failure of the Arrow path (or a REAL message): sqlite3
                self.arrow = False
                self._close_arrow()
                if len(self._mine) > 1:  # what it read before is read again, through sqlite3 too
                    self._reset()
                    for done in self._mine[:-1]:
                        self._slice(done, self._read_sqlite(self.slices[done]))
        if batches is None:
            batches = self._read_sqlite(cond)
        self._slice(s, batches)

    def _slice(self, s: int, batches: list) -> None:
        self._store[s], self._meta[s] = [], []
        self._open()
        for batch in batches:
            self._take(s, *batch)
        self._close(s)

    def _open(self) -> None:
        self._cur: dict[str, list] = {c: [] for c in ("thread", "start", "end", "etype", "kind", "value", "domain")}
        self._cur_n = 0
        self._cur_texts: dict[bytes, int] = {}

    def _take(self, s: int, ints: list, kid, new_rows: np.ndarray, new_vals: list) -> None:
        """One batch of slice ``s``: domain rows aside, range rows into the windows."""
        thread, start, end, text_id, domain, etype = ints
        kind = np.where(text_id >= 0, 3, 0)
        value = text_id
        if kid is not None:
            kind = np.where(kid >= 0, 1, kind)
            value = np.where(kid >= 0, kid, value)
            kind[new_rows] = 2
        if self.has_domains:
            dom = etype == schema.NVTX_DOMAIN_CREATE
            if dom.any():
                self._domain_rows += start[dom].tolist()
                keep = np.flatnonzero(~dom)
                new_at = np.where(dom, -1, np.cumsum(~dom) - 1)[new_rows]  # (new messages' rows, once kept)
                new_vals = [v for v, p in zip(new_vals, new_at.tolist(), strict=True) if p >= 0]
                new_rows = new_at[new_at >= 0]
                thread, start, end, domain, etype, kind, value = (
                    x[keep] for x in (thread, start, end, domain, etype, kind, value))
        n = len(thread)
        if not n:
            return
        self._key(thread, end)
        value = value.copy()
        etype, kind = etype.astype(np.int8), kind.astype(np.int8)  # (59, 60 or -1; 0 to 3)
        lo = 0
        while lo < n:  # cut into windows of WINDOW_ROWS ranges
            hi = min(n, lo + WINDOW_ROWS - self._cur_n)
            at = (new_rows >= lo) & (new_rows < hi)
            if at.any():  # (each new message numbered in the window's own table)
                texts, new = self._cur_texts, [v for v, a in zip(new_vals, at.tolist(), strict=True) if a]
                value[new_rows[at]] = [texts.setdefault(v, len(texts)) for v in new]
            for c, x in (("thread", thread), ("start", start), ("end", end), ("etype", etype), ("kind", kind),
                         ("value", value), ("domain", domain)):
                self._cur[c].append(x[lo:hi])
            self._cur_n += hi - lo
            lo = hi
            if self._cur_n >= WINDOW_ROWS:
                self._close(s)

    def _key(self, thread: np.ndarray, end: np.ndarray) -> None:
        """Keep (thread, end) of each range row, for :meth:`merge` to find those that repeat: 8 bytes a
        row, the end less the first end read shifted past a thread code of :data:`_KEY_SHIFT` bits, or
        12 (the end and the code) from the row on where that does not fit."""
        tc = self._codes(thread)
        n = len(end)
        if self._kbuf is None:
            self._kbuf = np.empty(max(self.capacity, n), dtype=np.int64)
            self._base = int(end[0])
        if self._kn + n > len(self._kbuf):  # (more range rows than the rowids counted: not in a sound file)
            self._kbuf = np.concatenate([self._kbuf, np.empty(self._kn + n, dtype=np.int64)])
            if self._kcodes is not None:
                self._kcodes = np.concatenate([self._kcodes, np.empty(self._kn + n, dtype=np.int32)])
        at = slice(self._kn, self._kn + n)
        self._kn += n
        if self._kcodes is None:
            off = end - self._base
            if len(self.threads) <= 1 << _KEY_SHIFT and off.min() > -_KEY_SPAN and off.max() < _KEY_SPAN:
                self._kbuf[at] = (off << _KEY_SHIFT) | tc
                return
            self._widen(at.start)
        self._kbuf[at] = end
        cast(np.ndarray, self._kcodes)[at] = tc  # (_widen made it)

    def _widen(self, n: int) -> None:
        """The first ``n`` packed keys as ends, with their thread codes beside them."""
        mask = (1 << _KEY_SHIFT) - 1
        kbuf, base = cast(np.ndarray, self._kbuf), cast(int, self._base)  # (_key set both)
        self._kcodes = np.empty(len(kbuf), dtype=np.int32)
        for lo in range(0, n, 1 << 20):
            part = kbuf[lo:min(n, lo + (1 << 20))]
            self._kcodes[lo:lo + len(part)] = part & mask
            part[:] = (part >> _KEY_SHIFT) + base

    def _ends_codes(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Ends and thread codes of keys lo..hi-1 of this process's."""
        part = cast(np.ndarray, self._kbuf)[lo:hi]
        if self._kcodes is not None:
            return part.copy(), self._kcodes[lo:hi].astype(np.int64)
        return (part >> _KEY_SHIFT) + cast(int, self._base), part & ((1 << _KEY_SHIFT) - 1)

    def _learn(self, texts: list[str]) -> None:
        """The open window's new messages (``texts``: decoded) join the known ones (up to
        :data:`KNOWN_MAX`): the slices after find them in ``temp.pyprof_text``."""
        for raw, text in zip(self._cur_texts, texts, strict=True):
            if len(self.known) >= self.KNOWN_MAX:
                break
            if raw not in self._known_set:
                self._known_set[raw] = None
                self.known.append(raw)
                self.known_str.append(text)

    def _close(self, s: int) -> None:
        """The open window is full (or its slice done): keep it, in memory or in the spill file."""
        texts = [db_text(raw) for raw in self._cur_texts]  # (each decoded once: see pyprof.parse.db.text)
        self._learn(texts)
        if self._cur_n:
            cols = {c: np.concatenate(v) for c, v in self._cur.items()}
            st = cols["start"]
            self._meta[s].append((int(st[0]), int(st[-1]), not (np.diff(st) < 0).any()))
            payload = (cols, texts)
            size = sum(x.nbytes for x in cols.values()) + sum(len(t) for t in payload[1])
            if self._held + size <= SPILL_BYTES:
                self._store[s].append(payload)
                self._held += size
            else:
                if self._spill is None:
                    self._spill = tempfile.TemporaryFile(prefix="pyprof-nvtx-")
                self._store[s].append(self._spill.tell())
                pickle.dump(payload, self._spill, protocol=pickle.HIGHEST_PROTOCOL)
        self._open()

    def _codes(self, thread: np.ndarray) -> np.ndarray:
        """Small codes for thread ids (numbered as first seen)."""
        return _intern_rows([thread], self.threads)

    # -- after the pass -----------------------------------------------------------------------------
    def summary(self) -> dict:
        """What this process read that :meth:`merge` needs, but the keys themselves (:meth:`key_chunks`):
        how many, packed or not (and the base of packed ones), their smallest and largest end, the thread
        table, window order, domain rows."""
        ends = None
        if self._kn:
            k = cast(np.ndarray, self._kbuf)[:self._kn]  # (_key made it)
            a, b = (k.min(), k.max()) if self._kcodes is not None else \
                ((k.min() >> _KEY_SHIFT) + self._base, (k.max() >> _KEY_SHIFT) + self._base)
            ends = (int(a), int(b))
        return {"n": self._kn, "wide": self._kcodes is not None, "base": self._base, "ends": ends,
                "threads": self._thread_table(), "meta": self._meta, "domains": self._domain_rows}

    def key_chunks(self) -> Iterator[np.ndarray]:
        """This process's keys, a million at a time (then, if not packed, their thread codes as int32)."""
        for arr in (self._kbuf, self._kcodes):
            if arr is not None:
                yield from (arr[lo:min(self._kn, lo + _KEY_CHUNK)] for lo in range(0, self._kn, _KEY_CHUNK))

    def drop_keys(self) -> None:
        """Forget the keys (sent to the process that merges them)."""
        self._kbuf = self._kcodes = None
        self._kn = 0

    def _thread_table(self) -> np.ndarray:
        back = np.empty(len(self.threads), dtype=np.int64)
        back[list(self.threads.values())] = [t for t, in self.threads]
        return back

    def merge(self, other: dict | None = None, fill=None) -> dict:
        """Once every slice is read: the (thread, end) pairs that repeat (every key made (end - the smallest
        end) * 2**b + thread code in one int64 array, sorted), whether the windows are in start order, the
        domain names. ``other``: the :meth:`summary` of the process that read the rest, whose keys
        ``fill(array)`` writes into the arrays it is given, chunk by chunk (never copied whole). Returns
        what that process needs of it (see :meth:`accept`)."""
        mine, got = self._kn, other or _NO_OTHER
        theirs = got["n"]
        ranges = [r for r in (self.summary()["ends"], got["ends"]) if r]
        lo, hi = min((r[0] for r in ranges), default=0), max((r[1] for r in ranges), default=0)
        codes = self._codes(other["threads"]) if other is not None else None  # its thread codes -> ours
        bits = max(1, (len(self.threads) - 1).bit_length())
        wide = (hi - lo) >= 1 << (62 - bits)  # (ends spanning years: pairs, sorted as pairs)
        keys = self._kbuf if self._kbuf is not None and len(self._kbuf) >= mine + theirs else \
            np.concatenate([self._kbuf[:mine] if self._kbuf is not None else np.zeros(0, np.int64),
                            np.empty(theirs, dtype=np.int64)])
        self._kbuf = keys  # (read by _ends_codes below: this process's keys)
        codes_of = np.empty(mine + theirs if wide else 0, dtype=np.int64)

        def put(at: int, end: np.ndarray, code: np.ndarray) -> None:
            if wide:
                keys[at:at + len(end)], codes_of[at:at + len(end)] = end, code
            else:
                keys[at:at + len(end)] = ((end - lo) << bits) | code

        for at in range(0, mine, _KEY_CHUNK):  # this process's keys, made anew in place
            put(at, *self._ends_codes(at, min(mine, at + _KEY_CHUNK)))
        self._kbuf, self._kcodes, self._kn = None, None, 0
        if other is not None:
            _receive_keys(keys, mine, theirs, other, fill, put, cast(np.ndarray, codes))
        raw = _repeats(keys[:mine + theirs], codes_of if wide else None, self._thread_table(), bits, lo)
        keys = codes_of = None  # type: ignore[assignment]  # (freed before the domains are read)
        self._accept_dups(*raw)
        meta = {**got["meta"], **self._meta}
        flat = [m for s in sorted(meta) for m in meta[s]]
        self.ordered = all(m[2] for m in flat) and all(a[1] <= b[0] for a, b in zip(flat, flat[1:], strict=False))
        domains = sorted(self._domain_rows + got["domains"])
        if domains:
            self._domains(domains)
        return {"dups": raw, "dnames": self.dnames, "ordered": self.ordered}

    def accept(self, verdict: dict) -> None:
        """In the process that read the rest: what :meth:`merge` found."""
        self.dnames, self.ordered = verdict["dnames"], verdict["ordered"]
        self.drop_keys()
        self._accept_dups(*verdict["dups"])

    def _accept_dups(self, thread: np.ndarray, end: np.ndarray) -> None:
        self._dup_ends = np.unique(end)
        self._dup_keys = np.sort(np.searchsorted(self._dup_ends, end) * (1 << 32) + self._codes(thread))

    def _domains(self, rowids: list[int]) -> None:
        """eventType 75 rows name a domain id (the first one of an id wins)."""
        text = "text" if self.has_text else "NULL"
        tid = '"textId"' if self.has_text_id else "NULL"
        with Database(self.path) as db:
            for i in range(0, len(rowids), 10_000):
                ids = ",".join(str(r) for r in rowids[i:i + 10_000])
                for _gt, did, text_v, tid_v in db.execute(f'SELECT globalTid, domainId, {text}, {tid} FROM '
                                                          f'"{schema.NSYS_NVTX}" WHERE rowid IN ({ids}) ORDER BY rowid'):
                    name = as_text(text_v) if text_v is not None else self.strings.get(tid_v)
                    if type(did) is int and name is not None:  # (a damaged row may hold no integer)
                        self.dnames.setdefault(int(did), name)

    def _dropped(self, thread: np.ndarray, end: np.ndarray, etype: np.ndarray) -> np.ndarray:
        """True for push ranges the program never popped, which nsys ends at the capture's end or at their
        thread's (the rule: docs/design.md, "Never-popped ranges"). Kept, they would be "open" around every
        later kernel (mmagic net.sqlite has 1,404, left by PyProf's ``__getattr__`` wrapper when it raised)."""
        out = np.zeros(len(end), dtype=bool)
        if self.capture_end is not None:
            out |= (end == self.capture_end) & (etype == schema.NVTX_PUSH_POP)
        de = self._dup_ends
        if not len(de):
            return out
        pos = np.minimum(np.searchsorted(de, end), len(de) - 1)
        cand = np.flatnonzero((de[pos] == end) & (etype == schema.NVTX_PUSH_POP))
        if len(cand):
            k = pos[cand] * (1 << 32) + self._codes(thread[cand])
            at = np.minimum(np.searchsorted(self._dup_keys, k), len(self._dup_keys) - 1)
            out[cand] |= self._dup_keys[at] == k
        return out

    # -- the windows --------------------------------------------------------------------------------
    def _payloads(self):
        for s in sorted(self._store):
            for w in self._store[s]:
                if isinstance(w, int):
                    self._spill.seek(w)
                    yield pickle.load(self._spill)  # noqa: S301 - this process's own temporary file
                else:
                    yield w

    def windows(self) -> Iterator[RangeWindow]:
        """This process's windows, in table order, without the never-popped ranges (after :meth:`merge`
        or :meth:`accept`); ``gidx`` and ``t_hi`` are :func:`_in_order`'s to fill in."""
        for cols, texts in self._payloads():
            yield self._window(cols, texts)

    def _window(self, cols: dict, texts: list) -> RangeWindow:
        drop = self._dropped(cols["thread"], cols["end"], cols["etype"])
        if drop.any():
            self.dropped += int(drop.sum())
            cols = {c: x[~drop] for c, x in cols.items()}
        kind, value = cols["kind"], cols["value"]
        dom = np.maximum(cols["domain"], 0)
        label, first = group_codes([kind, value, dom])
        labels = []
        for k, v, d in zip(kind[first].tolist(), value[first].tolist(), dom[first].tolist(), strict=True):
            s = self.known_str[v] if k == 1 else texts[v] if k == 2 else self.strings.get(v) if k == 3 else None
            labels.append((s, None if d == 0 else self.dnames.get(d, f"domain {d}")))
        return RangeWindow(cols["thread"], cols["start"], cols["end"], None, label, labels, None)

    # -- PyTorch <= 1.x emit_nvtx anywhere? ----------------------------------------------------------
    def legacy_texts(self) -> bool:
        """Whether a kept range's message shows PyTorch <= 1.x emit_nvtx
        (:func:`pyprof.parse.decode.looks_like_legacy_emit_nvtx`): the rows whose message could (SQL on
        the whole table), each then checked."""
        ids = [k for k, v in self.strings.items() if v and dec.looks_like_legacy_emit_nvtx([v])]
        conds = []
        if self.has_text:
            conds.append("(text IS NOT NULL AND (instr(text, 'Backward') > 0 OR text GLOB 'N5torch8autograd*' OR "
                         "text = 'CudaTransfer'))")
        if ids and self.has_text_id:
            no_text = "text IS NULL AND " if self.has_text else ""
            conds.append(f'({no_text}"textId" IN ({",".join(str(i) for i in ids)}))')
        if not conds:
            return False
        text = "text" if self.has_text else "NULL"
        tid = '"textId"' if self.has_text_id else "NULL"
        etype = "IFNULL(eventType, -1)" if self.has_type else "-1"
        with Database(self.path) as db:
            rows = db.execute(f'SELECT IFNULL(globalTid, -1), IFNULL("end", -1), {etype}, {text}, {tid} '
                              f'FROM "{schema.NSYS_NVTX}" WHERE {self.rng()} AND ({" OR ".join(conds)})')
        if not rows:
            return False
        gt, end, et, text_v, tid_v = zip(*rows, strict=True)
        kept = ~self._dropped(np.array(gt, np.int64), np.array(end, np.int64), np.array(et, np.int64))
        return dec.looks_like_legacy_emit_nvtx(as_text(t) if t is not None else self.strings.get(i)
                                               for t, i, k in zip(text_v, tid_v, kept.tolist(), strict=True) if k)


def _intern_rows(columns: list[np.ndarray], table: dict) -> np.ndarray:
    """Codes (int32) of the rows of ``columns`` in ``table`` ((values...) -> code, grown as new ones
    come): grouped by integers first, so that only the distinct rows meet Python code."""
    codes, first = group_codes(columns)
    firsts = list(zip(*(c[first].tolist() for c in columns), strict=True))
    m = np.array([table.setdefault(r, len(table)) for r in firsts], dtype=np.int32)
    return m[codes] if len(m) else np.zeros(len(codes), dtype=np.int32)


def _no_ranges() -> RangeWindow:
    """A window of no ranges (an export without NVTX ranges, or whose ranges were all dropped)."""
    z = np.zeros(0, np.int64)
    return RangeWindow(z, z, z, z, z, [], None)


def _concat(wins: list[RangeWindow]) -> RangeWindow:
    """Windows as one (labels renumbered)."""
    labels: list = []
    codes = []
    for w in wins:
        codes.append(w.label + len(labels))
        labels += w.labels
    cat = [np.concatenate([getattr(w, c) for w in wins]) for c in ("thread", "start", "end")]
    return RangeWindow(cat[0], cat[1], cat[2], None, np.concatenate(codes), labels, None)


def _in_order(windows: Iterator[RangeWindow], ordered) -> Iterator[RangeWindow]:
    """The windows as :class:`~pyprof.parse.assemble.Streamed` takes them: empty ones left out (their
    time goes to the next), ``gidx`` numbering the ranges on, ``t_hi`` where the next window's ranges
    start (one window, the last, where ``ordered()`` -- asked once the first window is there -- says
    the ranges are not in start order); at least one."""
    kept = 0
    first = next(windows, None)
    windows = itertools.chain([first] if first is not None else [], windows)
    if not ordered():
        wins = list(windows)
        windows = iter([_concat(wins)] if wins else [])
    prev = None
    for win in windows:
        if not len(win.start):
            continue
        win.gidx = np.arange(kept, kept + len(win.start), dtype=np.int64)
        kept += len(win.start)
        if prev is not None:
            prev.t_hi = int(win.start[0])
            yield prev
        prev = win
    yield prev if prev is not None else _no_ranges()


def _reader_child(nvtx: _Nvtx, conn) -> None:
    """The forked reader: reads slices from the back; then, with the summary and keys of the slices this
    process read, finds the never-popped ranges (:meth:`_Nvtx.merge`: here, where memory is not held by
    the kernels) and sends the verdict; then its windows and the count of ranges it left out."""
    escaped0 = escaped()
    try:
        nvtx.read(front=False)
        other = _recv(conn, "summary")
        conn.send(("verdict", nvtx.merge(other, conn.recv_bytes_into)))
        for win in nvtx.windows():
            conn.send(("window", win))
        conn.send(("end", (nvtx.dropped, escaped() - escaped0)))
        nvtx.close()
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
        try:
            conn.send(("error", exc))
        except OSError:  # the parent closed the pipe (its write failed): nobody to tell
            pass
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            with contextlib.suppress(OSError):
                conn.send(("error", RuntimeError(f"the NVTX reader failed: {exc!r}")))
    finally:
        conn.close()


def _recv(conn, want: str | None = None):
    """A message from the forked reader: its error raised here, its death an error."""
    try:
        what, value = conn.recv()
    except EOFError:
        raise RuntimeError("the NVTX reader process ended without its results") from None
    if what == "error":
        raise value
    if want is not None and what != want:
        raise RuntimeError(f"the NVTX reader sent {what!r}, not {want!r}")
    return (what, value) if want is None else value


class NsysSource(PreparedSource):
    """An Nsight Systems export. ``records()``/``lines()`` read the kernels, then stream records while
    the NVTX ranges are read window by window."""

    kind = "nsys"

    def __init__(self, path: str, db: Database | None = None):
        super().__init__(path, db)
        self.version = nsys_version(self.db)
        self._nvtx: _Nvtx | None = None
        self._forked: tuple | None = None

    # -- reading ---------------------------------------------------------------------------------
    def _check_layout(self, has_nvtx_rows: bool) -> None:
        """Fail on an absent essential column (one line naming it); warn once about absent optional
        ones, and when NVTX_EVENTS lacks what every range needs."""
        db = self.db
        absent = check_columns(db, schema.NSYS_ESSENTIAL, _optional_columns())
        if absent:
            self.warnings.append(absent)
        lacking = [c for c in schema.NSYS_NVTX_NEEDS if c not in db.columns(schema.NSYS_NVTX)]
        if has_nvtx_rows and lacking:
            self.warnings.append(f"table {schema.NSYS_NVTX} has no column {lacking[0]!r}: its NVTX ranges cannot "
                                 "be rebuilt")

    def _counts(self) -> dict[str, int]:
        db = self.db
        # the tables' sizes from their rowid ranges (at least their counts: reads are bounded by them, and
        # they are compared with 0 and the thresholds; nsys deletes no rows)
        counts = {t: fetch.span(db, t) for t in (schema.NSYS_KERNEL, schema.NSYS_RUNTIME, schema.NSYS_NVTX,
                                                  schema.NSYS_MEMCPY, schema.NSYS_MEMSET)}
        if not counts[schema.NSYS_KERNEL]:
            db.view_problem([schema.NSYS_KERNEL])
            raise NoKernelsError(
                f"{self.path}: this Nsight Systems export holds no CUDA kernels (no CUDA trace in the capture)",
                "profile with `nsys profile --trace=cuda,nvtx` and run some GPU work",
            )
        self._check_layout(bool(counts[schema.NSYS_NVTX]))
        return counts

    def _kernels(self, counts: dict[str, int], columnar: bool) -> Iterator[dict[str, np.ndarray]]:
        """The kernels' columns by :data:`KERNEL_COLS` name, a rowid slice of about :data:`KERNEL_CHUNK`
        rows at a time (each made compact before the next is read: the table's 15 columns are never all
        in memory at once)."""
        db, table = self.db, schema.NSYS_KERNEL
        n = max(1, -(-counts[table] // KERNEL_CHUNK))
        rows = fetch.slice_rows(counts[table], n)
        for cond in fetch.slices(db, table, n):
            kc = None
            if not columnar:  # (packed: fewer Python ints)
                packed = fetch.Task(f'SELECT {_kernel_select(db)} FROM "{table}" WHERE {cond}', KERNEL_PACKED)
                kc = _kernel_unpack(fetch.run_task(db, packed))
            if kc is None:  # columnar, or a grid/block value too big to pack: the columns one by one
                kc = dict(zip(KERNEL_COLS, fetch.run_task(db, _task(db, table, KERNEL_COLS, rows, cond)).T,
                              strict=True))
            yield kc
            del kc  # (before the next slice is read)

    def _api_task(self, counts: dict[str, int]) -> fetch.Task | None:
        """The API calls some activity correlates to (none where either side lacks correlationId)."""
        db = self.db
        rcols = db.columns(schema.NSYS_RUNTIME)
        sources = [f'SELECT correlationId FROM "{t}"' for t in (schema.NSYS_KERNEL, schema.NSYS_MEMCPY,
                                                                 schema.NSYS_MEMSET)
                   if counts[t] and "correlationId" in db.columns(t)]
        if not (counts[schema.NSYS_RUNTIME] and "correlationId" in rcols and sources):
            return None
        conds = []
        if "eventClass" in rcols:
            conds.append(f"(eventClass IN {schema.API_EVENT_CLASSES} OR eventClass IS NULL)")
        conds.append(f"correlationId IN ({' UNION ALL '.join(sources)})")
        return _task(db, schema.NSYS_RUNTIME, API_COLS, counts[schema.NSYS_RUNTIME], " AND ".join(conds))

    def prepared(self) -> Streamed:
        db = self.db
        strings = db.strings(schema.NSYS_STRINGS)
        counts = self._counts()
        parallel = sum(counts.values()) >= fetch.PARALLEL_MIN_ROWS and process.can_fork()
        columnar = fetch.arrow_available() and sum(counts.values()) >= fetch.ARROW_MIN_ROWS
        windows = self._ranges(strings, counts, parallel, columnar)
        try:
            # the kernels are read here while a forked reader (if any) reads the ranges; without one,
            # the API calls in a forked worker meanwhile, where it pays
            task = self._api_task(counts)
            api = fetch.start(db, task, parallel and self._forked is None) if task is not None else None
            try:
                acts = self._activities(counts, api, strings, columnar)
            finally:
                if api is not None:
                    api.close()
        except BaseException:
            self._stop()
            raise
        return Streamed(acts, windows, self.kind, self.stats, close=self._stop,
                        resolve_bare=lambda: self._nvtx is not None and self._nvtx.legacy_texts())

    def _ranges(self, strings: dict[int, str | None], counts: dict[str, int], parallel: bool,
                columnar: bool) -> Iterator[RangeWindow]:
        """The NVTX range windows (:class:`_Nvtx`), read in a forked process where ``parallel``; a
        generator that ends with the warnings about them."""
        db = self.db
        ncols = db.columns(schema.NSYS_NVTX)
        if counts[schema.NSYS_NVTX] and set(schema.NSYS_NVTX_NEEDS) <= set(ncols):
            # the Arrow reader takes the text as bytes only where SQLite stores UTF-8 (nsys always does)
            utf8 = str(db.execute("PRAGMA encoding")[0][0]).upper() == "UTF-8"
            self._nvtx = _Nvtx(self.path, ncols, strings, columnar and utf8, self._capture_end())
            if parallel and len(self._nvtx.slices) > 1:
                self._forked = self._fork(self._nvtx)
        return self._window_stream(self._nvtx, self._forked)

    def _capture_end(self) -> int | None:
        """When the capture ended (ns, the events' clock): ``ANALYSIS_DETAILS.duration``, where nsys ends
        the push ranges still open; None where the export does not say."""
        if "duration" not in self.db.columns(schema.NSYS_ANALYSIS):  # (none of an absent table)
            return None
        end = self.db.execute(f'SELECT MAX("duration") FROM "{schema.NSYS_ANALYSIS}"')[0][0]  # (an aggregate: one row)
        return end if type(end) is int and end > 0 else None

    def _stop(self) -> None:
        """The reader process (if any) ended, the connections closed."""
        if self._forked is not None:
            # the forked reader ends as its pipe closes (terminated if it does not). Run by the garbage
            # collector at exit (a failed parse not closed), the pipe's own finaliser may have closed it
            # first: EBADF, nothing to report
            pid, conn = self._forked
            with contextlib.suppress(OSError):
                conn.close()
            process.reap(pid, timeout=5)
            self._forked = None
        if self._nvtx is not None:
            self._nvtx.close()
        self.db.close()

    def _window_stream(self, nvtx: _Nvtx | None, forked) -> Iterator[RangeWindow]:
        dropped = kept = 0
        try:
            if nvtx is None:
                yield _no_ranges()
            else:
                for win in _in_order(self._nvtx_windows(nvtx, forked), lambda: nvtx.ordered):
                    kept += len(win.start)
                    yield win
                dropped = nvtx.dropped
                count(self.stats.dropped, ESCAPED, nvtx.escaped)
        finally:
            self._stop()
        if dropped:
            count(self.stats.dropped, NEVER_POPPED, dropped)
            self.warnings.append(
                f"{dropped} NVTX push range(s) were never popped by the program (nsys closed them at the end of "
                "the capture); they are left out of `ranges`")
        if not kept:
            self.warnings.append("the export has no NVTX ranges: records carry no ranges, layer or op "
                                 "(profile with --trace=cuda,nvtx and annotate with pyprof.init())")

    @staticmethod
    def _nvtx_windows(nvtx: _Nvtx, forked) -> Iterator[RangeWindow]:
        """Every window: the slices this process reads (from the front, after the kernels), then those the
        forked reader read (from the back), once the never-popped ranges are known from both."""
        nvtx.read(front=True)
        if forked is None:
            nvtx.merge()
            yield from nvtx.windows()
            return
        _child, conn = forked
        conn.send(("summary", nvtx.summary()))
        for chunk in nvtx.key_chunks():
            conn.send_bytes(chunk)
        nvtx.drop_keys()
        nvtx.accept(_recv(conn, "verdict"))
        yield from nvtx.windows()
        while True:
            what, value = _recv(conn)
            if what == "end":
                nvtx.dropped += value[0]
                nvtx.escaped += value[1]  # (the texts it escaped: see pyprof.parse.db.text)
                return
            yield value

    @staticmethod
    def _fork(nvtx: _Nvtx) -> tuple:
        """A forked process reading NVTX_EVENTS from the back (:func:`_reader_child`), forked first thing,
        before this one reads anything big (so it copies little), to read while this one reads the kernels."""
        ctx = multiprocessing.get_context("fork")
        nvtx.share(ctx)
        conn, theirs = ctx.Pipe(duplex=True)

        def child() -> None:
            conn.close()  # (this end is the parent's: the child sees the pipe end when the parent's closes)
            _reader_child(nvtx, theirs)

        pid = process.fork(child)
        theirs.close()
        return pid, conn

    def _activities(self, counts: dict[str, int], api: fetch.Pending | None, strings: dict[int, str | None],
                    columnar: bool) -> Activities:
        """Kernels, copies and their API calls -> :class:`Activities` (in output order). Each slice of
        kernels is made compact as it is read: what repeats (kind and names; device, stream, grid, block,
        bytes and copy kind) becomes a code into a table of its distinct values."""
        db = self.db
        heads: dict[tuple, int] = {}  # (kind, short name id, long name id) -> code
        kmids: dict[tuple, int] = {}  # (device, stream, grid, block, bytes, copy kind) -> code
        cols: dict[str, list] = {c: [] for c in ("start", "end", "corr", "pid", "kind", "head", "kmid")}

        def add(kind: int, c: dict, short, long_, nbytes, copyk) -> None:
            n = len(c["start"])
            kinds = np.full(n, kind, dtype=np.int64)
            gp = c["globalPid"]
            # (copies: a column of a slice's read is a view that would keep all 15 columns alive)
            cols["start"].append(c["start"].copy())
            cols["end"].append(c["end"].copy())
            cols["corr"].append(c["correlationId"].copy())
            cols["pid"].append(np.where(gp >= 0, (gp >> PID_SHIFT) & ID_MASK, -1))
            cols["kind"].append(kinds.astype(np.int8))
            cols["head"].append(_intern_rows([kinds, short, long_], heads))
            grid = [c.get(g, np.full(n, -1, dtype=np.int64)) for g in ("gridX", "gridY", "gridZ", "blockX",
                                                                        "blockY", "blockZ")]
            cols["kmid"].append(_intern_rows([c["deviceId"], c["streamId"], *grid, nbytes, copyk], kmids))

        for kc in self._kernels(counts, columnar):
            n = len(kc["start"])
            long_ids = np.where(kc["demangledName"] >= 0, kc["demangledName"], kc["mangledName"])
            # integer stand-ins for what the record says as text: kind (0 kernel, 1 memcpy, 2 memset),
            # the name ids, the copy kind (memcpy: its copyKind or -1; memset: -2; kernel: -3)
            add(0, kc, kc["shortName"], long_ids, np.full(n, -1, dtype=np.int64), np.full(n, -3, dtype=np.int64))
            del kc
        for table, kind in ((schema.NSYS_MEMCPY, 1), (schema.NSYS_MEMSET, 2)):
            if not counts[table]:
                continue
            mc = dict(zip(COPY_COLS, fetch.run_task(db, _task(db, table, COPY_COLS, counts[table])).T, strict=True))
            code = mc["copyKind"] if kind == 1 else np.full(len(mc["start"]), -2, dtype=np.int64)
            add(kind, mc, code, code, mc["bytes"], code)
        a = {}
        for c in list(cols):  # (one column at a time: its chunks are freed as it is made)
            v = cols.pop(c)
            a[c] = np.concatenate(v) if len(v) != 1 else v[0]
            del v
        pid, corr = a.pop("pid"), a["corr"]
        # the API call: same correlationId and pid; first row wins (backtrace duplicates are filtered)
        rows = api.result() if api is not None else np.zeros((0, len(API_COLS)), np.int64)
        ac = {c: rows[:, j] for j, c in enumerate(API_COLS)}  # (views: a read's columns are contiguous)
        del rows
        a_pid = (ac["globalTid"] >> PID_SHIFT) & ID_MASK
        a_corr = ac.pop("correlationId")
        idx = join_first((corr << 24) | pid, (a_corr << 24) | a_pid)  # (all -1 where no API row was read)
        idx[corr < 0] = -1
        self._join_without_pid(idx, corr, pid, a_corr)
        del a_pid, a_corr
        gt = take(ac.pop("globalTid"), idx)
        a["api_start"] = take(ac.pop("start"), idx)
        a["api_end"] = take(ac.pop("end"), idx)
        api_name = take(ac.pop("nameId"), idx)
        del idx
        tid = np.where(gt >= 0, gt & ID_MASK, -1)
        pid = np.where(pid >= 0, pid, np.where(gt >= 0, (gt >> PID_SHIFT) & ID_MASK, -1)).astype(np.int32)
        # the middle of a record: device ... copy kind (kmid), pid, tid, API name
        mcode, mfirst = group_codes([a["kmid"], pid, tid, api_name])
        kmid_rows = list(kmids)
        pids, devices = pid[mfirst].tolist(), [kmid_rows[k][0] for k in a["kmid"][mfirst].tolist()]
        gpus = self._optional("GPU names", lambda: nsys_gpu_names(self.db, pids, devices), [None] * len(pids))
        props = self._optional("GPU properties", lambda: nsys_gpu_props(self.db), {})
        mids = _mid_rows(kmid_rows, zip(a["kmid"][mfirst].tolist(), pids, tid[mfirst].tolist(),
                                        api_name[mfirst].tolist(), gpus, strict=True), props, strings)
        del tid, api_name, mfirst
        a.pop("kmid")
        a["gt"], a["pid"], a["mcode"] = gt, pid, mcode.astype(np.int32)
        del gt, pid, mcode
        head_rows = [self._head(k, sh, lg, strings) for k, sh, lg in heads]
        order = np.lexsort((corr, a["start"]))
        del corr
        for c in list(a):  # (one column at a time: in output order, the old one freed)
            a[c] = a[c][order]
        return Activities(a["start"], a["end"], a["corr"], a["api_start"], a["api_end"], a["gt"], a["pid"],
                          a["kind"] == 0, a["head"], a["mcode"], head_rows, mids)

    def _join_without_pid(self, idx: np.ndarray, corr: np.ndarray, pid: np.ndarray, a_corr: np.ndarray) -> None:
        """Activities whose row has no process (a null ``globalPid``) join their API call on the correlation
        id alone, where exactly one API row has it (ids are unique per process, not across processes);
        the rest stay unlinked and are counted in a warning. ``idx`` is filled in place."""
        lost = np.flatnonzero((pid < 0) & (corr >= 0))
        if not len(lost):
            return
        uniq, first, count = np.unique(a_corr, return_index=True, return_counts=True)
        found = join_first(corr[lost], uniq)
        ok = found >= 0
        ok[ok] = count[found[ok]] == 1
        idx[lost[ok]] = first[found[ok]]
        self.warnings.append(
            f"{len(lost)} kernel/copy row(s) have no process id (a null globalPid): "
            f"{int(ok.sum())} were joined to their launch by correlation id alone"
            + (f", {int((~ok).sum())} could not be (no API call, or one per process) and carry no ranges"
               if not ok.all() else ""))

    @staticmethod
    def _head(kind: int, short: int, long_: int, strings: dict[int, str | None]) -> tuple:
        if kind == 0:
            lg = strings.get(long_)
            return ("kernel", strings.get(short), demangle(lg) if isinstance(lg, str) and lg.startswith("_Z") else lg)
        if kind == 1:
            label = "memcpy " + schema.copy_kind_name(short)
            return ("memcpy", label, label)
        return ("memset", "memset", "memset")

    def _optional(self, what: str, read, default):
        """``read()`` (GPU names or properties: :func:`nsys_gpu_names`, :func:`nsys_gpu_props`), or
        ``default``, with a warning, where the device tables lack a column it reads: ``what`` is
        optional, the records are not."""
        try:
            return read()
        except LayoutError as exc:
            self.warnings.append(f"{what} left out: {exc.problem.split(': ', 1)[-1]}")
            return default
