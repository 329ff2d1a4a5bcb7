"""nvprof / nvvp SQLite databases (Version 9 to 22) -> kernel records.

Kernels from ``CONCURRENT_KERNEL`` (and ``KERNEL`` in serialized runs), mangled names demangled; API
calls from ``RUNTIME`` and ``DRIVER`` (names from CUPTI callback ids, :mod:`pyprof.parse.schema`);
NVTX ranges rebuilt from ``MARKER`` start (flags 2) / end (flags 4) rows paired by ``id``, on the thread
packed in ``objectId`` (uint32 pid, int32 tid). Timestamps are absolute CUPTI ns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pyprof.errors import NoKernelsError
from pyprof.parse import schema
from pyprof.parse.assemble import Prepared, PreparedSource, Stats, _ints, join_first, pylist, take
from pyprof.parse.db import Database
from pyprof.parse.demangle import demangle, short_name
from pyprof.parse.gpus import nvprof_gpu_names


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


class NvprofSource(PreparedSource):
    kind = "nvprof"

    def __init__(self, path: str, db: Database | None = None):
        self.path = path
        self.db = db or Database(path)
        rows = self.db.execute("SELECT * FROM Version")
        self.version = f"v{rows[0][0]}" if rows else "unknown"
        self.warnings: list[str] = []
        self.stats = Stats(warnings=self.warnings)

    def _kernels(self, strings: dict[int, str]) -> pd.DataFrame:
        want = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                "correlationId": "correlationId", "nameId": "name", "gridX": "gridX", "gridY": "gridY",
                "gridZ": "gridZ", "blockX": "blockX", "blockY": "blockY", "blockZ": "blockZ"}
        frames = [self.db.select(t, want) for t in schema.NVPROF_KERNEL_TABLES]
        k = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
        k = k.drop_duplicates(["correlationId", "start", "end"])
        if not len(k):
            raise NoKernelsError(f"{self.path}: this nvprof database holds no CUDA kernels",
                                 "profile a run that launches GPU kernels (nvprof -o FILE ...)")
        raw = k["nameId"].map(strings)
        longs = [demangle(v) for v in raw.tolist()]
        k["kLongName"] = longs
        k["kShortName"] = [short_name(v) for v in longs]
        k["kind"] = "kernel"
        return k

    def _copies(self) -> list[pd.DataFrame]:
        out = []
        base = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                "correlationId": "correlationId", "bytes": "bytes"}
        m = self.db.select(schema.NVPROF_MEMCPY, {**base, "copyKindRaw": "copyKind"})
        if len(m):
            m["kind"] = "memcpy"
            m["copyKind"] = [schema.copy_kind_name(v) for v in m["copyKindRaw"].tolist()]
            m["kShortName"] = m["kLongName"] = ["memcpy " + c for c in m["copyKind"].tolist()]
            out.append(m)
        s = self.db.select(schema.NVPROF_MEMSET, base)
        if len(s):
            s["kind"] = "memset"
            s["copyKind"] = "memset"
            s["kShortName"] = s["kLongName"] = "memset"
            out.append(s)
        return out

    def _api(self) -> pd.DataFrame:
        frames = []
        for table, names in zip(schema.NVPROF_API_TABLES, (schema.RUNTIME_CBID, schema.DRIVER_CBID), strict=False):
            a = self.db.select(table, {"cbid": "cbid", "apiStart": "start", "apiEnd": "end", "pid": "processId",
                                       "tid": "threadId", "correlationId": "correlationId"})
            if not len(a):
                continue
            label = "runtime" if "RUNTIME" in table else "driver"
            a["apiName"] = [names.get(c, f"{label} cbid {c}") for c in a["cbid"].tolist()]
            frames.append(a)
        if not frames:
            return pd.DataFrame(columns=["correlationId", "pid", "tid", "thread", "apiName", "apiStart", "apiEnd"])
        api = pd.concat(frames, ignore_index=True)
        api = api[api["correlationId"].notna() & (api["correlationId"] != 0)]
        api = api.drop_duplicates("correlationId", keep="first")
        api["thread"] = thread_key(api["pid"].to_numpy(np.int64), api["tid"].to_numpy(np.int64))
        return api[["correlationId", "pid", "tid", "thread", "apiName", "apiStart", "apiEnd"]]

    def _ranges(self, strings: dict[int, str]) -> pd.DataFrame:
        cols = self.db.columns(schema.NVPROF_MARKER)
        empty = pd.DataFrame({c: [] for c in ("thread", "pid", "start", "end", "text", "domain")})
        if not cols:
            return empty
        rows = self.db.execute(
            f"SELECT s.timestamp, s.objectId, s.name, s.domain, e.timestamp FROM {schema.NVPROF_MARKER} s "
            f"JOIN {schema.NVPROF_MARKER} e ON e.id = s.id AND (e.flags & {schema.NVPROF_MARKER_END}) "
            f"WHERE (s.flags & {schema.NVPROF_MARKER_START})"
        )
        if not rows:
            return empty
        start, obj, name, domain, end = zip(*rows, strict=False)
        pid, tid = _object_ids(list(obj))
        r = pd.DataFrame({"start": np.asarray(start, dtype=np.int64), "end": np.asarray(end, dtype=np.int64)})
        r["pid"] = pid
        r["thread"] = thread_key(pid, tid)
        r["text"] = [strings.get(n) for n in name]
        r["domain"] = [strings.get(d) if d else None for d in domain]
        return r[["thread", "pid", "start", "end", "text", "domain"]]

    def _load(self) -> Prepared:
        strings = self.db.strings(schema.NVPROF_STRINGS, "_id_", "value")
        acts = pd.concat([self._kernels(strings), *self._copies()], ignore_index=True, sort=False)
        api = self._api()
        corr = _ints(acts["correlationId"])
        idx = join_first(corr, _ints(api["correlationId"]))
        idx = np.where(corr > 0, idx, -1)
        for col in ("pid", "tid", "thread", "apiStart", "apiEnd"):
            acts[col] = take(_ints(api[col]), idx)
        acts["tid"] = np.where(acts["tid"].to_numpy() != -1, acts["tid"].to_numpy() & 0xFFFFFFFF, -1)
        acts["apiName"] = take(api["apiName"].to_numpy(dtype=object), idx)
        acts["gpu"] = nvprof_gpu_names(self.db, pylist(acts["device"]), strings)
        ranges = self._ranges(strings)
        self.db.close()
        if not len(ranges):
            self.warnings.append("the database has no NVTX ranges: records carry no ranges, layer or op")
        return Prepared(acts, ranges, self.kind, self.stats)

