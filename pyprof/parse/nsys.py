"""Nsight Systems SQLite exports (every layout from <= 2021.1 to 2026.2) -> kernel records.

Reads KERNEL, MEMCPY, MEMSET, RUNTIME (runtime + driver calls, CUDA-backtrace duplicates dropped,
only the rows some activity correlates to) and NVTX_EVENTS (push/pop and start/end ranges, text or
registered string, any domain) by column name -- integer columns straight into numpy
(:mod:`pyprof.parse.fetch`), split over worker processes on big exports -- and hands them to
:mod:`pyprof.parse.assemble`. Facts about the layouts live in :mod:`pyprof.parse.schema`; GPU names
in :mod:`pyprof.parse.gpus`.

Tables and columns are those the export has (:mod:`pyprof.parse.db` reflects them): an absent optional
column reads as nulls (one warning names those that every nsys version writes), an absent kernel or
copy ``start``/``end`` is a one-line error, and NVTX_EVENTS without its times or thread gives no ranges
(a warning).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from pyprof.errors import NoKernelsError
from pyprof.parse import fetch, schema
from pyprof.parse.assemble import Prepared, PreparedSource, Stats, join_first, take
from pyprof.parse.db import Database, LayoutError, absent_optional, absent_warning, as_text
from pyprof.parse.demangle import demangle
from pyprof.parse.gpus import nsys_gpu_names

PID_SHIFT = 24
ID_MASK = 0xFFFFFF


def nsys_version(db: Database) -> str:
    """Exporter version: the metadata table (2022.1+), else install path heuristics (see schema doc §1)."""
    for table in schema.NSYS_META_TABLES:
        if {"name", "value"} <= set(db.columns(table)):
            meta = {as_text(k): as_text(v) for k, v in db.execute(f'SELECT name, value FROM "{table}"')}
            ver = meta.get("EXPORT_PRODUCT_VERSION")
            if ver:
                extra = [f"schema {meta['EXPORT_SCHEMA_VERSION']}"] if meta.get("EXPORT_SCHEMA_VERSION") else []
                if meta.get("EXPORT_PLATFORM"):
                    extra.append(meta["EXPORT_PLATFORM"])
                return f"{ver} ({', '.join(extra)})" if extra else str(ver)
    pattern = re.compile(r"nsight-systems/(\d{4}\.\d+(?:\.\d+)*)")
    if {"name", "value"} <= set(db.columns("TARGET_INFO_SYSTEM_ENV")):
        for (value,) in db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'TargetInstallDir'"):
            m = pattern.search(str(value or ""))
            if m:
                return f"{m.group(1)} (from install path)"
    if "value" in db.columns("StringIds"):
        for (value,) in db.execute("SELECT value FROM StringIds WHERE value LIKE '%nsight-systems/%' LIMIT 20"):
            m = pattern.search(str(value or ""))
            if m:
                return f"{m.group(1)} (from install path)"
    if db.has("TARGET_INFO_CUDA_GPU") and not db.has("PROCESSES") and not db.has("TARGET_INFO_SESSION_START_TIME"):
        return "<=2021.1 (no metadata table)"
    return "unknown (no metadata table)"


def _cols(db: Database, table: str, names: list[str]) -> str:
    """Integer select list: present columns as IFNULL(col, -1), absent ones as -1."""
    present = set(db.columns(table))
    return ", ".join(f'IFNULL("{c}", -1)' if c in present else "-1" for c in names)


def _expr(present: set, col: str) -> str:
    return f'IFNULL("{col}", -1)' if col in present else "-1"


def _fits(exprs: list[str], bits: int) -> str:
    """SQL: every expression (ints, -1 for null) within [-1, 2**bits - 2], i.e. ``expr + 1`` fits in ``bits``."""
    return " AND ".join(f"({e}) BETWEEN -1 AND {(1 << bits) - 2}" for e in exprs)


def _pack(exprs: list[str], bits: int) -> str:
    """SQL: ``expr + 1`` of each expression in ``bits`` bits, the first highest; -1 where one does not fit
    (the reader then reads the columns one by one)."""
    n = len(exprs)
    # each term parenthesised: SQLite gives << and | the same precedence
    parts = " | ".join(f"((({e}) + 1) << {bits * (n - 1 - i)})" for i, e in enumerate(exprs))
    return f"CASE WHEN {_fits(exprs, bits)} THEN {parts} ELSE -1 END"


def _unpack(col: np.ndarray, n: int, bits: int) -> list[np.ndarray]:
    mask = (1 << bits) - 1
    return [((col >> (bits * (n - 1 - i))) & mask) - 1 for i in range(n)]


#: Python's sqlite3 builds one int object per value read, so kernel and NVTX rows are read with small
#: columns packed several to a 64-bit integer (each checked in SQL to fit; -1 where not, and then read
#: again unpacked)
GRID_BITS = 17
ID_BITS = 31

KERNEL_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName", "demangledName",
               "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
COPY_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"]
API_COLS = ["start", "end", "globalTid", "correlationId", "nameId"]
NVTX_COLS = ["globalTid", "start", "end", "textId", "domainId", "eventType"]


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


def _duplicated(thread: np.ndarray, end: np.ndarray) -> np.ndarray:
    """True for rows whose (thread, end) pair occurs more than once."""
    if not len(end):
        return np.zeros(0, dtype=bool)
    # one int64 key per (thread, end) where it fits (a hash on one column), else both columns
    tcodes, tuniq = pd.factorize(thread)
    nt = len(tuniq)
    if nt <= 1:
        return pd.Series(end).duplicated(keep=False).to_numpy()
    if end.min() >= 0 and end.max() < (1 << 62) // nt:
        return pd.Series(end * nt + tcodes).duplicated(keep=False).to_numpy()
    return pd.DataFrame({"t": thread, "e": end}).duplicated(keep=False).to_numpy()


def _kernel_select(db: Database) -> str:
    """KERNEL columns packed: start, end, deviceId, streamId, correlationId, globalPid, shortName, the long
    name id (demangled, else mangled), gridX, (gridY, gridZ, blockZ), (blockX, blockY)."""
    present = set(db.columns(schema.NSYS_KERNEL))
    e = {c: _expr(present, c) for c in KERNEL_COLS}
    long_id = f'CASE WHEN {e["demangledName"]} >= 0 THEN {e["demangledName"]} ELSE {e["mangledName"]} END'
    return ", ".join([*(e[c] for c in ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                      "shortName")), long_id, e["gridX"],
                      _pack([e["gridY"], e["gridZ"], e["blockZ"]], GRID_BITS),
                      _pack([e["blockX"], e["blockY"]], GRID_BITS)])


KERNEL_PACKED = 11


def _kernel_unpack(k: np.ndarray) -> dict[str, np.ndarray] | None:
    """:func:`_kernel_select` rows -> columns by :data:`KERNEL_COLS` name (None if a pack did not fit)."""
    if (k[:, 9] < 0).any() or (k[:, 10] < 0).any():
        return None
    kc = {c: np.ascontiguousarray(k[:, i]) for i, c in enumerate(("start", "end", "deviceId", "streamId",
                                                                  "correlationId", "globalPid", "shortName"))}
    kc["demangledName"] = np.ascontiguousarray(k[:, 7])
    kc["mangledName"] = kc["demangledName"]
    kc["gridX"] = np.ascontiguousarray(k[:, 8])
    kc["gridY"], kc["gridZ"], kc["blockZ"] = _unpack(k[:, 9], 3, GRID_BITS)
    kc["blockX"], kc["blockY"] = _unpack(k[:, 10], 2, GRID_BITS)
    return kc


def _nvtx_select(db: Database, packed: bool) -> tuple[str, int]:
    """NVTX select list: rowid and :data:`NVTX_COLS`; packed (rowid with eventType 59/60, textId with
    domainId) when the caller knows eventType is 59 or 60 and rowids are small and non-negative."""
    if not packed:
        return f"rowid, {_cols(db, schema.NSYS_NVTX, NVTX_COLS)}", len(NVTX_COLS) + 1
    present = set(db.columns(schema.NSYS_NVTX))
    e = {c: _expr(present, c) for c in NVTX_COLS}
    return (f'(rowid << 1) | (eventType = {schema.NVTX_START_END}), {e["globalTid"]}, {e["start"]}, {e["end"]}, '
            f'{_pack([e["textId"], e["domainId"]], ID_BITS)}', 5)


def _nvtx_columns(parts: list[np.ndarray], packed: bool) -> dict | None:
    """NVTX row blocks (read in slices) -> the columns :meth:`NsysSource._terminated` needs (globalTid,
    end, eventType) as whole arrays, the blocks kept for the rest (:func:`_nvtx_kept`: only the rows
    that stay are copied out). None if a packed value did not fit."""
    if not parts:
        parts = [np.zeros((0, 5 if packed else len(NVTX_COLS) + 1), dtype=np.int64)]

    def col(j: int) -> np.ndarray:
        return np.concatenate([p[:, j] for p in parts])

    if packed:
        if any((p[:, 4] < 0).any() for p in parts):
            return None
        etype = np.concatenate([np.where(p[:, 0] & 1, schema.NVTX_START_END, schema.NVTX_PUSH_POP) for p in parts])
    else:
        etype = col(6)
    return {"globalTid": col(1), "end": col(3), "eventType": etype, "_parts": parts, "_packed": packed}


def _nvtx_kept(cols: dict, keep: np.ndarray) -> dict[str, np.ndarray]:
    """Every column (rowid and :data:`NVTX_COLS`) of the rows ``keep`` selects."""
    parts, packed = cols["_parts"], cols["_packed"]
    every = bool(keep.all())
    bounds = np.cumsum([0, *(len(p) for p in parts)]).tolist()

    def col(j: int) -> np.ndarray:
        if every:
            return np.concatenate([p[:, j] for p in parts])
        return np.concatenate([p[:, j][keep[lo:hi]] for p, lo, hi in zip(parts, bounds, bounds[1:], strict=False)])

    out = {c: (cols[c] if every else cols[c][keep]) for c in ("globalTid", "end", "eventType")}
    out["start"] = col(2)
    if packed:
        out["rowid"] = col(0) >> 1
        out["textId"], out["domainId"] = _unpack(col(4), 2, ID_BITS)
    else:
        out["rowid"], out["textId"], out["domainId"] = col(0), col(4), col(5)
    return out


class NsysSource(PreparedSource):
    """An Nsight Systems export. ``records()``/``lines()`` read everything, then stream records."""

    kind = "nsys"

    def __init__(self, path: str, db: Database | None = None):
        self.path = path
        self.db = db or Database(path)
        self.version = nsys_version(self.db)
        self.warnings: list[str] = []
        self.stats = Stats(warnings=self.warnings)
        self._packed_nvtx = False
        self._packed_kernel = False
        self._unpacked: dict[str, list] = {}

    # -- reading ---------------------------------------------------------------------------------
    def _check_layout(self, has_nvtx_rows: bool) -> None:
        """Fail on an absent essential column (one line naming it); warn once about absent optional
        ones, and when NVTX_EVENTS lacks what every range needs."""
        db = self.db
        for table, cols in schema.NSYS_ESSENTIAL.items():
            db.require(table, cols, "every kernel and copy needs its start and end")
        absent = absent_optional(db, _optional_columns())
        if absent:
            self.warnings.append(absent_warning(absent))
        lacking = [c for c in schema.NSYS_NVTX_NEEDS if c not in db.columns(schema.NSYS_NVTX)]
        if has_nvtx_rows and lacking:
            self.warnings.append(f"table {schema.NSYS_NVTX} has no column {lacking[0]!r}: its NVTX ranges cannot "
                                 "be rebuilt")

    def _tasks(self) -> tuple[list, dict]:
        db = self.db
        # the big tables' sizes from their rowid ranges (only ever compared with 0 and with the
        # parallel threshold); the small copy tables counted
        counts = {t: fetch.span(db, t) for t in (schema.NSYS_KERNEL, schema.NSYS_RUNTIME, schema.NSYS_NVTX)}
        counts.update({t: db.count(t) for t in (schema.NSYS_MEMCPY, schema.NSYS_MEMSET)})
        if not counts[schema.NSYS_KERNEL]:
            raise NoKernelsError(
                f"{self.path}: this Nsight Systems export holds no CUDA kernels (no CUDA trace in the capture)",
                "profile with `nsys profile --trace=cuda,nvtx` and run some GPU work",
            )
        self._check_layout(bool(counts[schema.NSYS_NVTX]))
        parallel = sum(counts.values()) >= fetch.PARALLEL_MIN_ROWS
        split = 2 if parallel else 1
        columnar = fetch.arrow_available() and sum(counts.values()) >= fetch.ARROW_MIN_ROWS
        tasks, where = [], {}

        def add(name, task):
            where.setdefault(name, []).append(len(tasks))
            tasks.append(task)

        ncols = db.columns(schema.NSYS_NVTX)
        has_nvtx = counts[schema.NSYS_NVTX] and set(schema.NSYS_NVTX_NEEDS) <= set(ncols)
        if has_nvtx:
            types = ",".join(str(t) for t in schema.NVTX_RANGE_TYPES)
            rng = (f"eventType IN ({types}) AND " if "eventType" in ncols else "") + \
                '"end" IS NOT NULL AND start IS NOT NULL AND globalTid IS NOT NULL'
            lo, hi = fetch.rowids(db, schema.NSYS_NVTX)
            # packing only pays where sqlite3 builds the Python ints; the Arrow reader takes plain columns
            packed = not columnar and "eventType" in ncols and lo is not None and lo >= 0 and hi < (1 << 61)
            self._unpacked["nvtx"] = []
            rows = fetch.slice_rows(counts[schema.NSYS_NVTX], split)
            for cond in fetch.slices(db, schema.NSYS_NVTX, split):
                what, n = _nvtx_select(db, packed)
                add("nvtx", fetch.Task("ints", f'SELECT {what} FROM "{schema.NSYS_NVTX}" WHERE {cond} AND {rng}', n,
                                       rows))
                what, n = _nvtx_select(db, False)
                self._unpacked["nvtx"].append(
                    fetch.Task("ints", f'SELECT {what} FROM "{schema.NSYS_NVTX}" WHERE {cond} AND {rng}', n))
            self._packed_nvtx = packed
        self._unpacked["kernel"] = []
        rows = fetch.slice_rows(counts[schema.NSYS_KERNEL], split)
        for cond in fetch.slices(db, schema.NSYS_KERNEL, split):
            plain = fetch.Task("ints", f'SELECT {_cols(db, schema.NSYS_KERNEL, KERNEL_COLS)} FROM '
                                       f'"{schema.NSYS_KERNEL}" WHERE {cond}', len(KERNEL_COLS), rows)
            add("kernel", plain if columnar else
                fetch.Task("ints", f'SELECT {_kernel_select(db)} FROM "{schema.NSYS_KERNEL}" WHERE {cond}',
                           KERNEL_PACKED))
            self._unpacked["kernel"].append(plain)
        self._packed_kernel = not columnar
        for table, name in ((schema.NSYS_MEMCPY, "memcpy"), (schema.NSYS_MEMSET, "memset")):
            if counts[table]:
                add(name, fetch.Task("ints", f'SELECT {_cols(db, table, COPY_COLS)} FROM "{table}"', len(COPY_COLS),
                                     counts[table]))
        rcols = db.columns(schema.NSYS_RUNTIME)
        # the API calls some activity correlates to (none where either side lacks correlationId)
        sources = [f'SELECT correlationId FROM "{t}"' for t in (schema.NSYS_KERNEL, schema.NSYS_MEMCPY,
                                                                 schema.NSYS_MEMSET)
                   if counts[t] and "correlationId" in db.columns(t)]
        if counts[schema.NSYS_RUNTIME] and "correlationId" in rcols and sources:
            conds = []
            if "eventClass" in rcols:
                conds.append(f"(eventClass IN {schema.API_EVENT_CLASSES} OR eventClass IS NULL)")
            conds.append(f"correlationId IN ({' UNION ALL '.join(sources)})")
            for cond in fetch.slices(db, schema.NSYS_RUNTIME, split):
                add("api", fetch.Task("ints", f'SELECT {_cols(db, schema.NSYS_RUNTIME, API_COLS)} FROM '
                                              f'"{schema.NSYS_RUNTIME}" WHERE {cond} AND {" AND ".join(conds)}',
                                      len(API_COLS), fetch.slice_rows(counts[schema.NSYS_RUNTIME], split)))
        if has_nvtx and "text" in ncols and "eventType" in ncols and "domainId" in ncols:
            # text messages and domain names in one scan (split in :meth:`_load`; disjoint: rng needs
            # eventType 59/60)
            add("nvtx_meta", fetch.Task("rows", f'SELECT rowid, eventType, globalTid, domainId, text, '
                                                f'{"textId" if "textId" in ncols else "NULL"} FROM '
                                                f'"{schema.NSYS_NVTX}" WHERE (text IS NOT NULL AND {rng}) OR '
                                                f"eventType = {schema.NVTX_DOMAIN_CREATE}"))
        elif has_nvtx:
            if "text" in ncols:
                add("nvtx_text", fetch.Task("rows", f'SELECT rowid, text FROM "{schema.NSYS_NVTX}" WHERE '
                                                    f"text IS NOT NULL AND {rng}"))
            if "eventType" in ncols and "domainId" in ncols:
                text = "text" if "text" in ncols else "NULL"
                add("domains", fetch.Task("rows", f'SELECT globalTid, domainId, {text}, '
                                                  f'{"textId" if "textId" in ncols else "NULL"} FROM '
                                                  f'"{schema.NSYS_NVTX}" WHERE eventType = {schema.NVTX_DOMAIN_CREATE}'))
        return tasks, where, parallel

    def _load(self) -> Prepared:
        db = self.db
        strings = db.strings(schema.NSYS_STRINGS)
        tasks, where, parallel = self._tasks()
        res = fetch.run(db, tasks, parallel)
        for i in where.pop("nvtx_meta", []):
            texts, doms = [], []
            for rowid, etype, gt, did, text, tid in res[i]:
                if etype == schema.NVTX_DOMAIN_CREATE:
                    doms.append((gt, did, text, tid))
                else:
                    texts.append((rowid, text))
            where["nvtx_text"], where["domains"] = [len(res)], [len(res) + 1]
            res += [texts, doms]

        def ints(name, ncols):
            parts = [res[i] for i in where.get(name, [])]
            return np.concatenate(parts) if parts else np.zeros((0, ncols), dtype=np.int64)

        def names(ids: np.ndarray, fix=None) -> np.ndarray:
            # each distinct id looked up (and ``fix``-ed) once; a hash factorize, no sort
            codes, uniq = pd.factorize(ids)
            vals = [strings.get(u) for u in np.asarray(uniq).tolist()]
            if fix is not None:
                vals = [fix(v) for v in vals]
            out = np.empty(len(vals), dtype=object)
            out[:] = vals
            return out[codes]

        if self._packed_kernel:
            kc = _kernel_unpack(ints("kernel", KERNEL_PACKED))
        else:
            kc = dict(zip(KERNEL_COLS, ints("kernel", len(KERNEL_COLS)).T, strict=True))
        if kc is None:  # a grid/block value too big to pack: read the columns one by one
            k = np.concatenate([*fetch.run(db, self._unpacked["kernel"], False),
                                np.zeros((0, len(KERNEL_COLS)), dtype=np.int64)])
            kc = dict(zip(KERNEL_COLS, k.T, strict=False))
        k_len = len(kc["start"])
        frames = {"kind": [np.full(k_len, "kernel", dtype=object)]}
        long_ids = np.where(kc["demangledName"] >= 0, kc["demangledName"], kc["mangledName"])
        frames["kShortName"] = [names(kc["shortName"])]
        frames["kLongName"] = [names(long_ids, lambda v: demangle(v) if isinstance(v, str) and v.startswith("_Z")
                                     else v)]
        for col, src in (("start", "start"), ("end", "end"), ("device", "deviceId"), ("stream", "streamId"),
                         ("correlationId", "correlationId"), ("globalPid", "globalPid"), ("gridX", "gridX"),
                         ("gridY", "gridY"), ("gridZ", "gridZ"), ("blockX", "blockX"), ("blockY", "blockY"),
                         ("blockZ", "blockZ")):
            frames[col] = [kc[src]]
        frames["bytes"] = [np.full(k_len, -1, dtype=np.int64)]
        frames["copyKind"] = [np.full(k_len, None, dtype=object)]
        # integer stand-ins for the string columns, so that Prepared.lines groups rows by ints
        # (assemble.HEAD_IDS / MID_IDS): kind, the name ids, the copy kind
        frames["_kind"] = [np.zeros(k_len, dtype=np.int64)]
        frames["_short"] = [kc["shortName"]]
        frames["_long"] = [long_ids]
        frames["_copyk"] = [np.full(k_len, -3, dtype=np.int64)]  # (memcpy: its copyKind or -1; memset: -2)
        for name in ("memcpy", "memset"):
            m = ints(name, len(COPY_COLS))
            if not len(m):
                continue
            mc = dict(zip(COPY_COLS, m.T, strict=False))
            if name == "memcpy":
                kinds = np.array([schema.copy_kind_name(v) if v >= 0 else "unknown" for v in mc["copyKind"].tolist()],
                                 dtype=object)
                label = np.array(["memcpy " + c for c in kinds.tolist()], dtype=object)
            else:
                kinds = np.full(len(m), "memset", dtype=object)
                label = kinds
            frames["kind"].append(np.full(len(m), name, dtype=object))
            code = mc["copyKind"] if name == "memcpy" else np.full(len(m), -2, dtype=np.int64)
            frames["_kind"].append(np.full(len(m), 1 if name == "memcpy" else 2, dtype=np.int64))
            frames["_short"].append(code)
            frames["_long"].append(code)
            frames["_copyk"].append(code)
            frames["kShortName"].append(label)
            frames["kLongName"].append(label)
            frames["copyKind"].append(kinds)
            frames["bytes"].append(mc["bytes"])
            for col, src in (("start", "start"), ("end", "end"), ("device", "deviceId"), ("stream", "streamId"),
                             ("correlationId", "correlationId"), ("globalPid", "globalPid")):
                frames[col].append(mc[src])
            for col in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"):
                frames[col].append(np.full(len(m), -1, dtype=np.int64))
        acts = pd.DataFrame({c: np.concatenate(v) for c, v in frames.items()})
        gp = acts["globalPid"].to_numpy()
        pid = np.where(gp >= 0, (gp >> PID_SHIFT) & ID_MASK, -1)
        acts["pid"] = pid

        # the API call: same correlationId and pid; first row wins (backtrace duplicates are filtered)
        a = ints("api", len(API_COLS))
        ac = dict(zip(API_COLS, a.T, strict=False))
        a_pid = (ac["globalTid"] >> PID_SHIFT) & ID_MASK
        corr = acts["correlationId"].to_numpy()
        idx = join_first((corr << 24) | pid, (ac["correlationId"] << 24) | a_pid) if len(a) else \
            np.full(len(acts), -1, dtype=np.int64)
        idx = np.where(corr >= 0, idx, -1)
        gt = take(ac["globalTid"], idx)
        acts["thread"] = gt
        acts["tid"] = np.where(gt >= 0, gt & ID_MASK, -1)
        acts["pid"] = np.where(pid >= 0, pid, np.where(gt >= 0, (gt >> PID_SHIFT) & ID_MASK, -1))
        acts["apiStart"] = take(ac["start"], idx)
        acts["apiEnd"] = take(ac["end"], idx)
        acts["apiName"] = take(names(ac["nameId"]) if len(a) else np.zeros(0, dtype=object), idx)
        acts["_api"] = take(ac["nameId"], idx) if len(a) else np.full(len(acts), -1, dtype=np.int64)
        acts["gpu"] = self._gpu_names(acts)

        nv = _nvtx_columns([res[i] for i in where.get("nvtx", [])], self._packed_nvtx)
        if nv is None:  # a textId/domainId too big to pack
            nv = _nvtx_columns(fetch.run(db, self._unpacked["nvtx"], False), False)
        ranges, labels = self._ranges(nv, where, res, strings)
        db.close()
        if not len(ranges):
            self.warnings.append("the export has no NVTX ranges: records carry no ranges, layer or op "
                                 "(profile with --trace=cuda,nvtx and annotate with pyprof.init())")
        return Prepared(acts, ranges, self.kind, self.stats, labels=labels)

    def _gpu_names(self, acts: pd.DataFrame) -> list:
        """GPU name per activity (:func:`nsys_gpu_names`); nulls, with a warning, where the device tables
        lack a column it reads: the names are optional, the records are not."""
        try:
            return nsys_gpu_names(self.db, acts)
        except LayoutError as exc:
            self.warnings.append(f"GPU names left out: {exc.problem.split(': ', 1)[-1]}")
            return [None] * len(acts)

    def _ranges(self, cols: dict, where: dict, res: list, strings: dict[int, str]):
        # never-popped push ranges out first (most rows of some exports), then the rest on what is left
        cols = _nvtx_kept(cols, self._terminated(cols["globalTid"], cols["end"], cols["eventType"]))
        n = len(cols["rowid"])
        # message: text column, else the registered string (textId)
        code = cols["textId"].copy()  # StringIds ids (>= 0) or -1
        offset = (max(strings) + 1) if strings else 0
        text_rows = [r for i in where.get("nvtx_text", []) for r in res[i]]
        extra: list = []
        if text_rows:
            t_rowid = np.fromiter((r[0] for r in text_rows), dtype=np.int64, count=len(text_rows))
            t_codes, extra = pd.factorize(pd.Series([as_text(r[1]) for r in text_rows], dtype=object))
            order = np.argsort(cols["rowid"], kind="stable")
            pos = np.searchsorted(cols["rowid"], t_rowid, sorter=order)
            pos = np.minimum(pos, max(n - 1, 0))
            hit = order[pos] if n else pos
            ok = (cols["rowid"][hit] == t_rowid) if n else np.zeros(len(t_rowid), bool)
            code[hit[ok]] = offset + t_codes[ok]
        extra = list(extra)
        # domains: eventType 75 rows name a domain id
        dnames: dict[int, str] = {}
        for i in where.get("domains", []):
            for _gt, did, text, tid in res[i]:
                name = as_text(text) if text is not None else strings.get(tid)
                if type(did) is int and name is not None:  # (a damaged row may hold no integer)
                    dnames.setdefault(int(did), name)
        dom = np.maximum(cols["domainId"], 0)
        thread, start, end = cols["globalTid"], cols["start"], cols["end"]
        uniq_dom, dinv = np.unique(dom, return_inverse=True) if len(dom) else (np.zeros(0, np.int64), dom)
        key = (code + 1) * max(len(uniq_dom), 1) + dinv.reshape(-1)
        label, luniq = pd.factorize(key)
        labels = []
        for kk in np.asarray(luniq).tolist():
            c, d = divmod(kk, max(len(uniq_dom), 1))
            c -= 1
            text = None if c < 0 else (extra[c - offset] if c >= offset else strings.get(c))
            did = int(uniq_dom[d]) if len(uniq_dom) else 0
            domain = None if did == 0 else dnames.get(did, f"domain {did}")
            labels.append((text, domain))
        ranges = pd.DataFrame({"thread": thread, "pid": (thread >> PID_SHIFT) & ID_MASK, "start": start,
                               "end": end, "label": label.astype(np.int64)})
        return ranges, labels

    def _terminated(self, thread: np.ndarray, end: np.ndarray, etype: np.ndarray) -> np.ndarray:
        """False for push ranges the program never popped.

        nsys ends such ranges when the capture (or the process) ends, so several of them share one end
        timestamp on one thread -- which popped ranges cannot do: a program cannot pop two ranges in the
        same nanosecond. Kept, they would be "open" around every later kernel (mmagic net.sqlite has
        1,404 of them, left by PyProf's ``__getattr__`` wrapper when it raised); so push/pop ranges that
        share their (thread, end) with another are left out, with a warning.
        """
        if not len(end):
            return np.ones(0, dtype=bool)
        bad = _duplicated(thread, end) & (etype == schema.NVTX_PUSH_POP)
        n = int(bad.sum())
        if n:
            self.warnings.append(
                f"{n} NVTX push range(s) were never popped by the program (nsys closed them at the end of "
                "the capture); they are left out of `ranges`")
        return ~bad

