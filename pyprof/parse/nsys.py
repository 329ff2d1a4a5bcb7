"""Nsight Systems SQLite exports (every layout from <= 2021.1 to 2026.2) -> kernel records.

Reads KERNEL, MEMCPY, MEMSET, RUNTIME (runtime + driver calls, CUDA-backtrace duplicates dropped,
only the rows some activity correlates to) and NVTX_EVENTS (push/pop and start/end ranges, text or
registered string, any domain) by column name -- integer columns straight into numpy
(:mod:`pyprof.parse.fetch`), split over worker processes on big exports -- and hands them to
:mod:`pyprof.parse.assemble`. Facts about the layouts live in :mod:`pyprof.parse.schema`; GPU names
in :mod:`pyprof.parse.gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from pyprof.errors import NoKernelsError
from pyprof.parse import fetch, schema
from pyprof.parse.assemble import Prepared, Stats, join_first, take
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


def _cols(db: Database, table: str, names: list[str]) -> str:
    """Integer select list: present columns as IFNULL(col, -1), absent ones as -1."""
    present = set(db.columns(table))
    return ", ".join(f'IFNULL("{c}", -1)' if c in present else "-1" for c in names)


KERNEL_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName", "demangledName",
               "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
COPY_COLS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"]
API_COLS = ["start", "end", "globalTid", "correlationId", "nameId"]
NVTX_COLS = ["globalTid", "start", "end", "textId", "domainId", "eventType"]


class NsysSource:
    """An Nsight Systems export. ``records()``/``lines()`` read everything, then stream records."""

    kind = "nsys"

    def __init__(self, path: str, db: Database | None = None):
        self.path = path
        self.db = db or Database(path)
        self.version = nsys_version(self.db)
        self.warnings: list[str] = []
        self.stats = Stats(warnings=self.warnings)

    # -- reading ---------------------------------------------------------------------------------
    def _tasks(self) -> tuple[list, dict]:
        db = self.db
        counts = {t: db.count(t) for t in (schema.NSYS_KERNEL, schema.NSYS_MEMCPY, schema.NSYS_MEMSET,
                                           schema.NSYS_RUNTIME, schema.NSYS_NVTX)}
        if not counts[schema.NSYS_KERNEL]:
            raise NoKernelsError(
                f"{self.path}: this Nsight Systems export holds no CUDA kernels (no CUDA trace in the capture)",
                "profile with `nsys profile --trace=cuda,nvtx` and run some GPU work",
            )
        parallel = sum(counts.values()) >= fetch.PARALLEL_MIN_ROWS
        split = 2 if parallel else 1
        tasks, where = [], {}

        def add(name, task):
            where.setdefault(name, []).append(len(tasks))
            tasks.append(task)

        for cond in fetch.slices(db, schema.NSYS_KERNEL, split):
            add("kernel", fetch.Task("ints", f'SELECT {_cols(db, schema.NSYS_KERNEL, KERNEL_COLS)} FROM '
                                             f'"{schema.NSYS_KERNEL}" WHERE {cond}', len(KERNEL_COLS)))
        for table, name in ((schema.NSYS_MEMCPY, "memcpy"), (schema.NSYS_MEMSET, "memset")):
            if counts[table]:
                add(name, fetch.Task("ints", f'SELECT {_cols(db, table, COPY_COLS)} FROM "{table}"', len(COPY_COLS)))
        if counts[schema.NSYS_RUNTIME]:
            rcols = db.columns(schema.NSYS_RUNTIME)
            conds = []
            if "eventClass" in rcols:
                conds.append(f"(eventClass IN {schema.API_EVENT_CLASSES} OR eventClass IS NULL)")
            sources = [f'SELECT correlationId FROM "{t}"' for t in (schema.NSYS_KERNEL, schema.NSYS_MEMCPY,
                                                                     schema.NSYS_MEMSET) if counts[t]]
            conds.append(f"correlationId IN ({' UNION ALL '.join(sources)})")
            for cond in fetch.slices(db, schema.NSYS_RUNTIME, split):
                add("api", fetch.Task("ints", f'SELECT {_cols(db, schema.NSYS_RUNTIME, API_COLS)} FROM '
                                              f'"{schema.NSYS_RUNTIME}" WHERE {cond} AND {" AND ".join(conds)}',
                                      len(API_COLS)))
        ncols = db.columns(schema.NSYS_NVTX)
        if counts[schema.NSYS_NVTX] and {"start", "end", "globalTid"} <= set(ncols):
            types = ",".join(str(t) for t in schema.NVTX_RANGE_TYPES)
            rng = (f"eventType IN ({types}) AND " if "eventType" in ncols else "") + \
                '"end" IS NOT NULL AND start IS NOT NULL AND globalTid IS NOT NULL'
            for cond in fetch.slices(db, schema.NSYS_NVTX, split):
                add("nvtx", fetch.Task("ints", f'SELECT rowid, {_cols(db, schema.NSYS_NVTX, NVTX_COLS)} FROM '
                                               f'"{schema.NSYS_NVTX}" WHERE {cond} AND {rng}', len(NVTX_COLS) + 1))
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

        def ints(name, ncols):
            parts = [res[i] for i in where.get(name, [])]
            return np.concatenate(parts) if parts else np.zeros((0, ncols), dtype=np.int64)

        def names(ids: np.ndarray) -> np.ndarray:
            uniq, inv = np.unique(ids, return_inverse=True)
            return np.array([strings.get(u) for u in uniq.tolist()], dtype=object)[inv.reshape(-1)]

        k = ints("kernel", len(KERNEL_COLS))
        kc = dict(zip(KERNEL_COLS, k.T, strict=False))
        frames = {"kind": [np.full(len(k), "kernel", dtype=object)]}
        long_ids = np.where(kc["demangledName"] >= 0, kc["demangledName"], kc["mangledName"])
        longs = names(long_ids)
        frames["kShortName"] = [names(kc["shortName"])]
        frames["kLongName"] = [np.array([demangle(v) if isinstance(v, str) and v.startswith("_Z") else v
                                         for v in longs.tolist()], dtype=object) if len(longs) else longs]
        for col, src in (("start", "start"), ("end", "end"), ("device", "deviceId"), ("stream", "streamId"),
                         ("correlationId", "correlationId"), ("globalPid", "globalPid"), ("gridX", "gridX"),
                         ("gridY", "gridY"), ("gridZ", "gridZ"), ("blockX", "blockX"), ("blockY", "blockY"),
                         ("blockZ", "blockZ")):
            frames[col] = [kc[src]]
        frames["bytes"] = [np.full(len(k), -1, dtype=np.int64)]
        frames["copyKind"] = [np.full(len(k), None, dtype=object)]
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
        acts["gpu"] = nsys_gpu_names(db, acts)

        ranges, labels = self._ranges(ints("nvtx", len(NVTX_COLS) + 1), where, res, strings)
        db.close()
        if not len(ranges):
            self.warnings.append("the export has no NVTX ranges: records carry no ranges, layer or op "
                                 "(profile with --trace=cuda,nvtx and annotate with pyprof.init())")
        return Prepared(acts, ranges, self.kind, self.stats, labels=labels)

    def _ranges(self, nv: np.ndarray, where: dict, res: list, strings: dict[int, str]):
        cols = dict(zip(["rowid", *NVTX_COLS], nv.T, strict=False))
        n = len(nv)
        # message: text column, else the registered string (textId)
        code = cols["textId"].copy()  # StringIds ids (>= 0) or -1
        offset = (max(strings) + 1) if strings else 0
        text_rows = [r for i in where.get("nvtx_text", []) for r in res[i]]
        extra: list = []
        if text_rows:
            t_rowid = np.fromiter((r[0] for r in text_rows), dtype=np.int64, count=len(text_rows))
            t_codes, extra = pd.factorize(pd.Series([r[1] for r in text_rows], dtype=object))
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
                name = text if text is not None else strings.get(tid)
                if did is not None and name is not None:
                    dnames.setdefault(int(did), name)
        dom = np.maximum(cols["domainId"], 0)
        thread = cols["globalTid"]
        keep = code >= 0 if n else np.zeros(0, bool)
        keep |= code < 0  # a range without message is still a range (text None)
        keep &= self._terminated(thread, cols["end"], cols["eventType"])
        code, dom, thread = code[keep], dom[keep], thread[keep]
        start, end = cols["start"][keep], cols["end"][keep]
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
        dup = pd.DataFrame({"t": thread, "e": end}).duplicated(keep=False).to_numpy()
        bad = dup & (etype == schema.NVTX_PUSH_POP)
        n = int(bad.sum())
        if n:
            self.warnings.append(
                f"{n} NVTX push range(s) were never popped by the program (nsys closed them at the end of "
                "the capture); they are left out of `ranges`")
        return ~bad

    def prepared(self) -> Prepared:
        return self._load()

    def records(self) -> Iterator[dict[str, Any]]:
        yield from self._load().records()

    def lines(self) -> Iterator[bytes]:
        yield from self._load().lines()
