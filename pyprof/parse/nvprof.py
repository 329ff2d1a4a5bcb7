"""nvprof / nvvp SQLite databases (Version 9 to 22) -> kernel records.

Kernels from ``CONCURRENT_KERNEL`` (and ``KERNEL`` in serialized runs), mangled names demangled; API
calls from ``RUNTIME`` and ``DRIVER`` (names from CUPTI callback ids, :mod:`pyprof.parse.schema`);
NVTX ranges rebuilt from ``MARKER`` start (flags 2) / end (flags 4) rows paired by ``id``, on the thread
packed in ``objectId`` (uint32 pid, int32 tid). Timestamps are absolute CUPTI ns.

An absent optional column reads as nulls (one warning names them all), an absent kernel or copy
``start``/``end`` is a one-line error, and a MARKER table that cannot be paired gives no ranges (a warning).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pyprof.errors import NoKernelsError
from pyprof.parse import schema
from pyprof.parse.assemble import (
    Activities,
    PreparedSource,
    RangeWindow,
    Streamed,
    _ints,
    group_codes,
    join_first,
    pylist,
    take,
)
from pyprof.parse.db import Database, as_text, check_columns
from pyprof.parse.demangle import demangle, short_name
from pyprof.parse.gpus import nvprof_gpu_names, nvprof_gpu_props


def thread_key(pid, tid) -> np.ndarray:
    """One int per (pid, 32-bit tid): the same key for API rows and marker rows."""
    pid = np.asarray(pid, dtype=np.int64)
    tid = np.asarray(tid, dtype=np.int64) & 0xFFFFFFFF
    return (pid << 32) | tid


def _object_ids(blobs: list) -> tuple[np.ndarray, np.ndarray]:
    """objectId blobs (12 bytes: uint32 pid, int32 tid, 4 zero bytes) -> pid, tid arrays."""
    pid = np.full(len(blobs), -1, dtype=np.int64)
    tid = np.full(len(blobs), -1, dtype=np.int64)
    for i, b in enumerate(blobs):
        if isinstance(b, (bytes, memoryview)) and len(b) >= 8:
            pid[i] = int.from_bytes(b[0:4], "little")
            tid[i] = int.from_bytes(b[4:8], "little", signed=True)
    return pid, tid


KERNEL_WANT = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
               "correlationId": "correlationId", "nameId": "name", "gridX": "gridX", "gridY": "gridY",
               "gridZ": "gridZ", "blockX": "blockX", "blockY": "blockY", "blockZ": "blockZ"}
COPY_WANT = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
             "correlationId": "correlationId", "bytes": "bytes"}
API_WANT = {"cbid": "cbid", "apiStart": "start", "apiEnd": "end", "pid": "processId", "tid": "threadId",
            "correlationId": "correlationId"}
MARKER_OPTIONAL = ("objectId", "name", "domain")
#: activity columns that are integers (-1 for null) once read
_INT_ACT = ("start", "end", "correlationId", "device", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY",
            "blockZ", "bytes")


def _optional_columns() -> dict[str, list[str]]:
    """Per table, the columns read that an export may lack (they read as null): all but the essential."""
    read = {**dict.fromkeys(schema.NVPROF_KERNEL_TABLES, KERNEL_WANT.values()),
            schema.NVPROF_MEMCPY: [*COPY_WANT.values(), "copyKind"], schema.NVPROF_MEMSET: COPY_WANT.values(),
            **dict.fromkeys(schema.NVPROF_API_TABLES, API_WANT.values()), schema.NVPROF_MARKER: MARKER_OPTIONAL}
    return {t: [c for c in cols if c not in schema.NVPROF_ESSENTIAL.get(t, ())] for t, cols in read.items()}


def _texts(ids, strings: dict) -> list:
    """String-table ids (None, NaN or -1 for null) -> their text, None where unknown."""
    return [None if v is None else strings.get(v) for v in pylist(ids)]


class NvprofSource(PreparedSource):
    kind = "nvprof"

    def __init__(self, path: str, db: Database | None = None):
        super().__init__(path, db)
        rows = self.db.execute("SELECT * FROM Version") if self.db.has_rows("Version") else []
        self.version = f"v{as_text(rows[0][0])}" if rows and rows[0] else "unknown"

    def _kernels(self, strings: dict[int, str | None]) -> pd.DataFrame:
        frames = [self.db.select(t, KERNEL_WANT) for t in schema.NVPROF_KERNEL_TABLES]
        k = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
        k = k.drop_duplicates(["correlationId", "start", "end"])
        if not len(k):
            self.db.view_problem(schema.NVPROF_KERNEL_TABLES)
            raise NoKernelsError(f"{self.path}: this nvprof database holds no CUDA kernels",
                                 "profile a run that launches GPU kernels (nvprof -o FILE ...)")
        longs = [demangle(v) for v in _texts(k["nameId"], strings)]
        k["kLongName"] = longs
        k["kShortName"] = [short_name(v) for v in longs]
        k["kind"] = "kernel"
        return k

    def _copies(self) -> list[pd.DataFrame]:
        out = []
        m = self.db.select(schema.NVPROF_MEMCPY, {**COPY_WANT, "copyKindRaw": "copyKind"})
        if len(m):
            m["kind"] = "memcpy"
            m["copyKind"] = [schema.copy_kind_name(v) for v in pylist(m["copyKindRaw"])]
            m["kShortName"] = m["kLongName"] = ["memcpy " + c for c in m["copyKind"].tolist()]
            out.append(m.drop(columns="copyKindRaw"))
        s = self.db.select(schema.NVPROF_MEMSET, COPY_WANT)
        if len(s):
            s["kind"] = "memset"
            s["copyKind"] = "memset"
            s["kShortName"] = s["kLongName"] = "memset"
            out.append(s)
        return out

    def _api(self) -> pd.DataFrame:
        frames = []
        for table, names in zip(schema.NVPROF_API_TABLES, (schema.RUNTIME_CBID, schema.DRIVER_CBID), strict=False):
            a = self.db.select(table, API_WANT)
            if not len(a):
                continue
            label = "runtime" if "RUNTIME" in table else "driver"
            a["apiName"] = [None if c is None else names.get(c, f"{label} cbid {c}") for c in pylist(a["cbid"])]
            # the launching thread: unknown where the pid or the tid is null (a tid may be negative: int32)
            known = (a["pid"].notna() & a["tid"].notna()).to_numpy()
            for col in ("correlationId", "pid", "tid", "apiStart", "apiEnd"):
                a[col] = _ints(a[col]) if col != "tid" else a["tid"].fillna(-1).to_numpy(np.int64)
            a["thread"] = np.where(known, thread_key(a["pid"].to_numpy(np.int64), a["tid"].to_numpy(np.int64)), -1)
            frames.append(a)
        cols = ["correlationId", "pid", "tid", "thread", "apiName", "apiStart", "apiEnd"]
        if not frames:
            return pd.DataFrame({c: np.zeros(0, dtype=object if c == "apiName" else np.int64) for c in cols})
        api = pd.concat(frames, ignore_index=True)
        return api[api["correlationId"] > 0].drop_duplicates("correlationId", keep="first")[cols]

    def _ranges(self, strings: dict[int, str | None]) -> pd.DataFrame:
        table, rows = schema.NVPROF_MARKER, []
        absent = self.db.missing(table, schema.NVPROF_MARKER_NEEDS)
        if absent:
            self.warnings.append(f"table {table} has no column {absent[0]!r}: its NVTX ranges cannot be rebuilt")
        elif self.db.has_rows(table):
            cols = set(self.db.columns(table))
            obj_c, name_c, domain_c = (f"s.{c}" if c in cols else "NULL" for c in MARKER_OPTIONAL)
            rows = self.db.execute(
                f'SELECT s.timestamp, {obj_c}, {name_c}, {domain_c}, e.timestamp FROM "{table}" s '
                f'JOIN "{table}" e ON e.id = s.id AND (e.flags & {schema.NVPROF_MARKER_END}) '
                f"WHERE (s.flags & {schema.NVPROF_MARKER_START})"
            )
        start, obj, name, domain, end = zip(*rows, strict=True) if rows else ((),) * 5
        pid, tid = _object_ids(list(obj))
        return pd.DataFrame({"thread": thread_key(pid, tid), "start": _ints(pd.Series(start, dtype=object)),
                             "end": _ints(pd.Series(end, dtype=object)),
                             "text": _texts(pd.Series(name, dtype=object), strings),
                             "domain": [strings.get(d) if d else None for d in pylist(pd.Series(domain, dtype=object))]})

    def prepared(self) -> Streamed:
        absent = check_columns(self.db, schema.NVPROF_ESSENTIAL, _optional_columns())
        if absent:
            self.warnings.append(absent)
        strings = self.db.strings(schema.NVPROF_STRINGS, "_id_", "value")
        acts = pd.concat([self._kernels(strings), *self._copies()], ignore_index=True, sort=False)
        # every record column present (a database without copies gives kernels only: no bytes or copy
        # kind), integers with -1 for null
        for col in _INT_ACT:
            acts[col] = _ints(acts[col]) if col in acts else np.full(len(acts), -1, dtype=np.int64)
        if "copyKind" not in acts:
            acts["copyKind"] = None
        api = self._api()
        corr = acts["correlationId"].to_numpy()
        idx = join_first(corr, api["correlationId"].to_numpy(np.int64))
        idx = np.where(corr > 0, idx, -1)
        for col in ("pid", "tid", "thread", "apiStart", "apiEnd"):
            acts[col] = take(api[col].to_numpy(np.int64), idx)
        acts["tid"] = np.where(acts["tid"].to_numpy() != -1, acts["tid"].to_numpy() & 0xFFFFFFFF, -1)
        acts["apiName"] = take(api["apiName"].to_numpy(dtype=object), idx)
        acts["gpu"] = nvprof_gpu_names(self.db, pylist(acts["device"]), strings)
        acts["gpuProps"] = nvprof_gpu_props(self.db, pylist(acts["device"]))
        ranges = self._ranges(strings)
        self.db.close()
        if not len(ranges):
            self.warnings.append("the database has no NVTX ranges: records carry no ranges, layer or op")
        return Streamed(_activities(acts), iter([_window(ranges)]), self.kind, self.stats,
                        range_pid=lambda thread: thread >> 32, range_tid=lambda thread: thread & 0xFFFFFFFF)


#: the record fields between the kernel names and ``apiStart``, in record order
_MIDS = ("pid", "tid", "device", "gpu", "gpuProps", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
         "bytes", "copyKind", "apiName")


def _activities(acts: pd.DataFrame) -> Activities:
    """The activity table -> :class:`Activities`: rows in output order ((start, correlationId), stable),
    what repeats (kind and names; the middle fields) as codes into tables of distinct values."""
    acts = acts.sort_values(["start", "correlationId"], kind="stable").reset_index(drop=True)
    heads_of = ("kind", "kShortName", "kLongName")
    hcode, hfirst = group_codes([acts[c].to_numpy() for c in heads_of])
    heads = list(zip(*(pylist(acts[c].to_numpy()[hfirst]) for c in heads_of), strict=True))
    # (gpuProps, objects, follow the device and GPU name: left out of the grouping)
    mcode, mfirst = group_codes([acts[c].to_numpy() for c in _MIDS if c != "gpuProps"])
    m = [pylist(acts[c].to_numpy()[mfirst]) for c in _MIDS]
    mids = [(pid, tid, dev, gpu, props, stream, [gx, gy, gz] if gx is not None else None,
             [bx, by, bz] if bx is not None else None, nbytes, copy, api)
            for pid, tid, dev, gpu, props, stream, gx, gy, gz, bx, by, bz, nbytes, copy, api in zip(*m, strict=True)]
    return Activities(_ints(acts["start"]), _ints(acts["end"]), _ints(acts["correlationId"]), _ints(acts["apiStart"]),
                      _ints(acts["apiEnd"]), _ints(acts["thread"]), _ints(acts["pid"]),
                      acts["kind"].to_numpy() == "kernel", hcode, mcode.astype(np.int32), heads, mids)


def _window(ranges: pd.DataFrame) -> RangeWindow:
    """Every range of the database as one window (each range's index its kernels' ``opId``)."""
    n = len(ranges)
    cols = [ranges["text"].to_numpy(), ranges["domain"].to_numpy()]
    label, first = group_codes(cols)  # (a label per distinct (text, domain), numbered as first met)
    labels = [(None if t is None else str(t), None if d is None else str(d))
              for t, d in zip(*(pylist(c[first]) for c in cols), strict=True)]
    return RangeWindow(ranges["thread"].to_numpy(np.int64), ranges["start"].to_numpy(np.int64),
                       ranges["end"].to_numpy(np.int64), np.arange(n, dtype=np.int64), label, labels, None)
