"""Nsight Systems SQLite exports (every layout from <= 2021.1 to 2026.2) -> kernel records.

Reads KERNEL, MEMCPY, MEMSET, RUNTIME (runtime + driver calls, CUDA-backtrace duplicates dropped) and
NVTX_EVENTS (push/pop and start/end ranges, text or registered string, any domain) by column name,
and hands them to :mod:`pyprof.parse.assemble`. Facts about the layouts live in
:mod:`pyprof.parse.schema`; the GPU name mapping in :mod:`pyprof.parse.gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from pyprof.errors import NoKernelsError
from pyprof.parse import schema
from pyprof.parse.assemble import Stats, build
from pyprof.parse.db import Database
from pyprof.parse.demangle import demangle
from pyprof.parse.gpus import nsys_gpu_names

PID_SHIFT = 24
ID_MASK = 0xFFFFFF


def nsys_version(db: Database) -> str:
    """Exporter version: the metadata table (2022.1+), else install path heuristics (see schema doc §1)."""
    for table in schema.NSYS_META_TABLES:
        if db.has(table):
            meta = dict(db.execute(f'SELECT name, value FROM "{table}"'))
            ver = meta.get("EXPORT_PRODUCT_VERSION")
            if ver:
                extra = [f"schema {meta['EXPORT_SCHEMA_VERSION']}"] if meta.get("EXPORT_SCHEMA_VERSION") else []
                if meta.get("EXPORT_PLATFORM"):
                    extra.append(meta["EXPORT_PLATFORM"])
                return f"{ver} ({', '.join(extra)})" if extra else str(ver)
    pattern = re.compile(r"nsight-systems/(\d{4}\.\d+(?:\.\d+)*)")
    if db.has("TARGET_INFO_SYSTEM_ENV") and "name" in db.columns("TARGET_INFO_SYSTEM_ENV"):
        for (value,) in db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'TargetInstallDir'"):
            m = pattern.search(str(value or ""))
            if m:
                return f"{m.group(1)} (from install path)"
    if db.has("StringIds"):
        for (value,) in db.execute("SELECT value FROM StringIds WHERE value LIKE '%nsight-systems/%' LIMIT 20"):
            m = pattern.search(str(value or ""))
            if m:
                return f"{m.group(1)} (from install path)"
    if db.has("TARGET_INFO_CUDA_GPU") and not db.has("PROCESSES") and not db.has("TARGET_INFO_SESSION_START_TIME"):
        return "<=2021.1 (no metadata table)"
    return "unknown (no metadata table)"


class NsysSource:
    """An Nsight Systems export. ``records()`` reads everything, then streams records."""

    kind = "nsys"

    def __init__(self, path: str, db: Database | None = None):
        self.path = path
        self.db = db or Database(path)
        self.version = nsys_version(self.db)
        self.warnings: list[str] = []
        self.stats = Stats(warnings=self.warnings)

    # -- reading ---------------------------------------------------------------------------------
    def _activities(self, strings: dict[int, str]) -> pd.DataFrame:
        db = self.db
        common = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                  "correlationId": "correlationId", "globalPid": "globalPid"}
        k = db.select(schema.NSYS_KERNEL, {**common, "short": "shortName", "demangled": "demangledName",
                                          "mangled": "mangledName", "gridX": "gridX", "gridY": "gridY",
                                          "gridZ": "gridZ", "blockX": "blockX", "blockY": "blockY",
                                          "blockZ": "blockZ"})
        if not len(k):
            raise NoKernelsError(
                f"{self.path}: this Nsight Systems export holds no CUDA kernels (no CUDA trace in the capture)",
                "profile with `nsys profile --trace=cuda,nvtx` and run some GPU work",
            )
        k["kind"] = "kernel"
        short_ids = k["short"].to_numpy()
        long_ids = k["demangled"].where(k["demangled"].notna(), k["mangled"])
        k["kShortName"] = pd.Series(short_ids).map(strings)
        longs = long_ids.map(strings)
        k["kLongName"] = [demangle(v) if isinstance(v, str) and v.startswith("_Z") else v for v in longs.tolist()]
        frames = [k]
        for table, kind in ((schema.NSYS_MEMCPY, "memcpy"), (schema.NSYS_MEMSET, "memset")):
            m = db.select(table, {**common, "bytes": "bytes", "copyKindRaw": "copyKind"})
            if not len(m):
                continue
            m["kind"] = kind
            if kind == "memcpy":
                m["copyKind"] = [schema.copy_kind_name(v) for v in m["copyKindRaw"].tolist()]
            else:
                m["copyKind"] = "memset"
            m["kShortName"] = m["kLongName"] = [f"{kind} {c}" if kind == "memcpy" else "memset"
                                                for c in m["copyKind"].tolist()]
            frames.append(m)
        acts = pd.concat(frames, ignore_index=True, sort=False)
        gp = acts["globalPid"].to_numpy(dtype=np.float64, na_value=np.nan)
        acts["pid"] = pd.array(np.where(np.isnan(gp), -1, (np.nan_to_num(gp).astype(np.int64) >> PID_SHIFT) & ID_MASK))
        return acts

    def _api(self, strings: dict[int, str]) -> pd.DataFrame:
        db = self.db
        cols = db.columns(schema.NSYS_RUNTIME)
        where = ""
        if "eventClass" in cols:
            where = f"eventClass IN {schema.API_EVENT_CLASSES} OR eventClass IS NULL"
        api = db.select(schema.NSYS_RUNTIME, {"apiStart": "start", "apiEnd": "end", "globalTid": "globalTid",
                                              "correlationId": "correlationId", "nameId": "nameId"}, where)
        api = api[api["correlationId"].notna()]
        gt = api["globalTid"].to_numpy(dtype=np.int64, na_value=0)
        api = api.assign(pid=(gt >> PID_SHIFT) & ID_MASK, tid=gt & ID_MASK, thread=gt)
        api = api.drop_duplicates(["correlationId", "pid"], keep="first")
        api["apiName"] = api["nameId"].map(strings)
        return api[["correlationId", "pid", "tid", "thread", "apiName", "apiStart", "apiEnd"]]

    def _ranges(self) -> pd.DataFrame:
        db = self.db
        cols = db.columns(schema.NSYS_NVTX)
        if not cols:
            return pd.DataFrame({c: [] for c in ("thread", "pid", "start", "end", "text", "domain")})
        textid = "textId" in cols and db.has(schema.NSYS_STRINGS)
        text = "COALESCE(n.text, s.value)" if textid and "text" in cols else (
            "s.value" if textid else ("n.text" if "text" in cols else "NULL"))
        join = f'LEFT JOIN "{schema.NSYS_STRINGS}" s ON s.id = n.textId' if textid else ""
        dom = "n.domainId" if "domainId" in cols else "NULL"
        types = ",".join(str(t) for t in schema.NVTX_RANGE_TYPES)
        etype = f"n.eventType IN ({types}) AND " if "eventType" in cols else ""
        rows = db.execute(
            f'SELECT n.globalTid, n.start, n."end", {text}, {dom}, {"n.eventType" if "eventType" in cols else 59} FROM "{schema.NSYS_NVTX}" n {join} '
            f'WHERE {etype}n."end" IS NOT NULL AND n.start IS NOT NULL AND n.globalTid IS NOT NULL'
        )
        r = pd.DataFrame.from_records(rows, columns=["thread", "start", "end", "text", "domainId", "eventType"])
        # domain names: eventType 75 rows (text = name, domainId = id), per process
        names: dict[tuple, str] = {}
        if "eventType" in cols and "domainId" in cols:
            for gt, did, name in db.execute(
                f'SELECT n.globalTid, n.domainId, {text} FROM "{schema.NSYS_NVTX}" n {join} '
                f"WHERE n.eventType = {schema.NVTX_DOMAIN_CREATE}"
            ):
                pid = (int(gt or 0) >> PID_SHIFT) & ID_MASK
                names[(pid, did)] = name
                names.setdefault((None, did), name)
        thread = r["thread"].to_numpy(dtype=np.int64)
        r["pid"] = (thread >> PID_SHIFT) & ID_MASK
        domain = [None] * len(r)
        dids = r["domainId"].tolist()
        if names or any(d for d in dids):
            pids = r["pid"].tolist()
            for i, (p, d) in enumerate(zip(pids, dids)):
                if d:
                    domain[i] = names.get((p, d)) or names.get((None, d)) or f"domain {d}"
        r["domain"] = domain
        r = self._drop_unterminated(r)
        return r[["thread", "pid", "start", "end", "text", "domain"]]

    def _drop_unterminated(self, r: pd.DataFrame) -> pd.DataFrame:
        """Drop push ranges the program never popped.

        nsys ends such ranges when the capture (or the process) ends, so several of them share one end
        timestamp on one thread -- which popped ranges cannot do: a program cannot pop two ranges in the
        same nanosecond. Kept, they would be "open" around every later kernel (mmagic net.sqlite has
        1,404 of them, left by PyProf's ``__getattr__`` wrapper when it raised); so push/pop ranges that
        share their (thread, end) with another are left out, with a warning.
        """
        if not len(r):
            return r
        same = r.groupby(["thread", "end"])["end"].transform("size")
        bad = (same >= 2) & (r["eventType"] == schema.NVTX_PUSH_POP)
        n = int(bad.sum())
        if n:
            self.warnings.append(
                f"{n} NVTX push range(s) were never popped by the program (nsys closed them at the end of "
                "the capture); they are left out of `ranges`")
            r = r[~bad.to_numpy()]
        return r

    def records(self) -> Iterator[dict[str, Any]]:
        strings = self.db.strings(schema.NSYS_STRINGS)
        acts = self._activities(strings)
        api = self._api(strings)
        acts = acts.merge(api, on=["correlationId", "pid"], how="left", sort=False)
        acts["pid"] = acts["pid"].where(acts["pid"] >= 0, None)
        acts["thread"] = acts["thread"].fillna(-1).astype(np.int64)
        acts["gpu"] = nsys_gpu_names(self.db, acts)
        ranges = self._ranges()
        self.db.close()
        if not len(ranges):
            self.warnings.append("the export has no NVTX ranges: records carry no ranges, layer or op "
                                 "(profile with --trace=cuda,nvtx and annotate with pyprof.init())")
        yield from build(acts, ranges, self.kind, self.stats)
