"""A small builder of synthetic Nsight Systems SQLite exports, for tests that need exact control over
what a capture holds (which NVTX ranges are open on which thread when which kernel is launched).

What it writes is the *recent* layout (nsys 2024.6, export schema 3.16; see the shared
``docs/nsys-schema.md``), restricted to the tables a kernel-to-range parser reads, each with every
column of the real table under its real name and declared type:

* ``StringIds(id, value)``: every kernel and API name, thread and registered NVTX string.
* ``CUPTI_ACTIVITY_KIND_KERNEL``: one row per kernel (``shortName``/``demangledName``/``mangledName`` are
  StringIds ids; ``greenContextId`` sits after ``contextId``, as from 2023.4.4 on).
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: the launch call of each kernel (``eventClass`` 0 = CUDA runtime,
  ``nameId`` ``cudaLaunchKernel_v7000``), joined to its kernel on ``correlationId`` and the pid.
* ``NVTX_EVENTS``: push/pop ranges (``eventType`` 59) with the message inline in ``text`` (what both
  ``torch.cuda.nvtx.range_push`` and pyprof's C extension produce) or, with ``registered=True``, as a
  ``textId`` into StringIds (the Python ``nvtx`` package's registered strings). A range in a named
  domain gets ``domainId``, and the domain one ``eventType`` 75 row naming it, as nsys writes them.
* ``TARGET_INFO_GPU`` (the GPU name, found through ``cuDevice``: no ``TARGET_INFO_CUDA_DEVICE`` before
  2025.1), ``META_DATA_EXPORT`` (the exporter version), ``PROCESSES``, ``ThreadNames`` and
  ``TARGET_INFO_SESSION_START_TIME``.

Encodings as in real exports: timestamps are integer ns from the session start; ``globalTid`` is
``(1 << 48) | (pid << 24) | tid`` and ``globalPid`` the same with the tid bits zero; the main thread's
tid equals the pid. The builder checks what a real capture guarantees and the parser relies on: the
push/pop ranges of one thread nest properly (ranges the program never popped aside: nsys ends them at
the capture's end, :meth:`Export.never_popped`), an API call ends after it starts, and a kernel starts
after its launch call began. Nested ranges may end in the same tick (a coarse clock: Windows' 100 ns).
``ANALYSIS_DETAILS.duration`` (when the capture ended) is written where ``capture_end`` is set or a range
was never popped; ``null_pid`` writes the kernels' ``globalPid`` as NULL, as some exports do.

Two levels of description:

* explicit: :meth:`Export.thread`, :meth:`Export.range` (text, start, end, thread) and
  :meth:`Export.kernel` (name, API call start/end on a thread, kernel start/end, correlation id,
  device, stream, grid, block), then :meth:`Export.write`;
* sequential: :meth:`Export.track` gives a :class:`Track`, one thread's program order, where
  ``with track.range(text):`` pushes and pops a range and ``track.launch(name)`` makes a launch call and
  its kernel. Every event takes the next tick of one clock shared by all tracks (so a later event on any
  thread is later in time), and kernels of one stream run one after another on the GPU, each after its
  launch call returned.

Example::

    ex = Export()
    main = ex.track(name="python")
    with main.range('{"pyprof":1,"k":"mod","path":"fc"}', domain="pyprof"):
        main.launch("ampere_sgemm_32x128_tn")
    ex.write(tmp_path / "x.sqlite")
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field

NVTX_PUSH_POP = 59
NVTX_DOMAIN_CREATE = 75
EVENT_CLASS_CUDA_RUNTIME = 0
LAUNCH_API = "cudaLaunchKernel_v7000"

# The tables written, columns and declared types as in an nsys 2024.6.2 export (schema 3.16.1).
SCHEMA = {
    "StringIds": """
        id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """
        start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
        greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
        demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
        cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
        gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
        blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
        localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
        sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER""",
    "CUPTI_ACTIVITY_KIND_RUNTIME": """
        start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
        correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER""",
    "NVTX_EVENTS": """
        start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER,
        color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
        uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
        floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT""",
    "TARGET_INFO_GPU": """
        vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
        l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER,
        pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT,
        ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER,
        maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER,
        maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER,
        maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER,
        maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER,
        maxGridDimZ INTEGER, computeMajor INTEGER, computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER""",
    "META_DATA_EXPORT": """
        name TEXT NOT NULL, value TEXT""",
    "PROCESSES": """
        globalPid INTEGER, pid INTEGER, name TEXT""",
    "ThreadNames": """
        nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER""",
    "TARGET_INFO_SESSION_START_TIME": """
        utcEpochNs INTEGER, utcTime TEXT, localTime TEXT""",
    "ANALYSIS_DETAILS": """
        globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL,
        stopTime INTEGER NOT NULL""",
}


def global_tid(pid: int, tid: int, vm: int = 1) -> int:
    """nsys's serialized thread id: ``(vm << 48) | (pid << 24) | tid`` (schema doc §2)."""
    return (vm << 48) | (pid << 24) | tid


@dataclass
class Range:
    thread: int  # globalTid
    text: str
    start: int
    end: int
    domain: str | None = None  # None: the default domain (domainId 0)
    registered: bool = False   # message as a StringIds textId instead of inline text
    popped: bool = True        # False: never popped (``end`` is then the capture's end, set by write)


@dataclass
class Kernel:
    thread: int  # globalTid of the launching thread
    name: str    # shortName
    api_start: int
    api_end: int
    start: int
    end: int
    correlation: int
    long_name: str | None = None  # demangledName (default: the short name, as for C-linkage kernels);
    # mangledName is written with the same string id, as nsys does for C-linkage kernels
    device: int = 0
    stream: int = 7
    grid: tuple = (1, 1, 1)
    block: tuple = (128, 1, 1)
    api: str = LAUNCH_API


@dataclass
class Export:
    """One process's capture (pid ``pid``) on one GPU; see the module docstring."""

    pid: int = 4242
    gpu: str = "NVIDIA A100-SXM4-80GB"
    chip: str = "GA100"
    version: str = "2024.6.2.225"
    schema_version: str = "3.16.1"
    process_name: str = "python3"
    ranges: list[Range] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)  # globalTid -> thread name
    clock: int = 1_000_000_000  # the shared clock of the sequential API (ns since session start)
    capture_end: int | None = None  # ANALYSIS_DETAILS.duration (default, where needed: after every event)
    null_pid: bool = False  # kernel rows' globalPid NULL
    _gpu_free: dict[int, int] = field(default_factory=dict)  # stream -> when its last kernel ends
    _next_corr: int = 1

    # -- explicit description ----------------------------------------------------------------------
    def thread(self, tid: int | None = None, name: str = "python3") -> int:
        """Declare a thread (default: the main thread, tid == pid); returns its globalTid."""
        gt = global_tid(self.pid, self.pid if tid is None else tid)
        self.threads.setdefault(gt, name)
        return gt

    def range(self, thread: int, text: str, start: int, end: int, domain: str | None = None,
              registered: bool = False) -> Range:
        """A push/pop range on ``thread`` (a globalTid from :meth:`thread`), open over [start, end)."""
        if end <= start:
            raise ValueError(f"range {text!r} ends ({end}) before it starts ({start})")
        r = Range(thread, text, start, end, domain, registered)
        self.ranges.append(r)
        return r

    def never_popped(self, thread: int, text: str, start: int, domain: str | None = None) -> Range:
        """A push range on ``thread`` from ``start`` that the program never popped: nsys ends it when the
        capture ends (:attr:`capture_end`, which :meth:`write` fills in when unset)."""
        r = Range(thread, text, start, start + 1, domain, popped=False)
        self.ranges.append(r)
        return r

    def kernel(self, thread: int, name: str, api_start: int, api_end: int, start: int, end: int,
               correlation: int | None = None, **kw) -> Kernel:
        """A kernel launched by a runtime call on ``thread`` over [api_start, api_end), run on the GPU over
        [start, end). ``correlation`` defaults to the next unused id; ``kw``: the other :class:`Kernel`
        fields (long_name, device, stream, grid, block, api)."""
        if not api_start < api_end or not start < end or start < api_start:
            raise ValueError(f"kernel {name!r}: API call [{api_start}, {api_end}), kernel [{start}, {end})")
        if correlation is None:
            correlation = self._next_corr
        if any(k.correlation == correlation for k in self.kernels):
            raise ValueError(f"correlation id {correlation} used twice in one process")
        self._next_corr = max(self._next_corr, correlation + 1)
        k = Kernel(thread, name, api_start, api_end, start, end, correlation, **kw)
        self.kernels.append(k)
        return k

    # -- sequential description -------------------------------------------------------------------
    def tick(self, step: int = 1_000) -> int:
        """Advance the shared clock by ``step`` ns and return it."""
        self.clock += step
        return self.clock

    def track(self, tid: int | None = None, name: str = "python3") -> Track:
        """One thread's events in program order (see :class:`Track`)."""
        return Track(self, self.thread(tid, name))

    # -- writing -----------------------------------------------------------------------------------
    def _check(self) -> None:
        by_thread: dict[int, list[Range]] = {}
        for r in self.ranges:
            by_thread.setdefault(r.thread, []).append(r)
        for th, rs in by_thread.items():
            rs = [r for r in rs if r.popped]
            open_: list[Range] = []
            for r in sorted(rs, key=lambda r: (r.start, -r.end)):
                while open_ and open_[-1].end <= r.start:
                    open_.pop()
                if open_ and r.end > open_[-1].end:
                    raise ValueError(f"thread {th}: push/pop range {r.text!r} does not nest in {open_[-1].text!r}")
                open_.append(r)

    def write(self, path: str | os.PathLike) -> str:
        """Write the export to ``path`` (overwritten) and return the path as a string."""
        self._check()
        if self.capture_end is None and any(not r.popped for r in self.ranges):
            last = max([r.end for r in self.ranges] + [k.end for k in self.kernels] + [self.clock])
            self.capture_end = last + 1_000
        for r in self.ranges:
            if not r.popped:
                r.end = self.capture_end
        path = os.fspath(path)
        if os.path.exists(path):
            os.remove(path)
        strings: dict[str, int] = {}

        def sid(value: str) -> int:
            if value not in strings:
                strings[value] = len(strings) + 1
            return strings[value]

        domains: dict[str, int] = {}
        for r in self.ranges:
            if r.domain is not None and r.domain not in domains:
                domains[r.domain] = len(domains) + 1
        gpid = global_tid(self.pid, 0)
        con = sqlite3.connect(path)
        try:
            for table, cols in SCHEMA.items():
                con.execute(f"CREATE TABLE {table} ({cols})")
            kern_rows, api_rows = [], []
            for grid_id, k in enumerate(sorted(self.kernels, key=lambda k: k.start), 1):
                long_id = sid(k.long_name or k.name)
                kern_rows.append((k.start, k.end, k.device, 1, 0, k.stream, k.correlation, None if self.null_pid else gpid,
                                  long_id, sid(k.name),
                                  long_id, 1, 0, 32, *k.grid, *k.block, 0, 0, 0, 0, grid_id, 0, None, 0))
                api_rows.append((k.api_start, k.api_end, EVENT_CLASS_CUDA_RUNTIME, k.thread, k.correlation,
                                 sid(k.api), 0, None))
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * 28)})", kern_rows)
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                            sorted(api_rows, key=lambda a: a[0]))
            nvtx_rows = []
            first_use: dict[str, Range] = {}
            for r in sorted(self.ranges, key=lambda r: r.start):
                if r.domain is not None:
                    first_use.setdefault(r.domain, r)
            for name, r in first_use.items():  # nvtxDomainCreate: before the domain's first range
                nvtx_rows.append((r.start - 1, None, NVTX_DOMAIN_CREATE, name, r.thread, None, domains[name]))
            for r in self.ranges:
                text, text_id = (None, sid(r.text)) if r.registered else (r.text, None)
                nvtx_rows.append((r.start, r.end, NVTX_PUSH_POP, text, r.thread, text_id,
                                  domains[r.domain] if r.domain is not None else 0))
            # nsys writes a push/pop range when it is popped: rows in order of their end
            nvtx_rows.sort(key=lambda x: (x[1] if x[1] is not None else x[0]))
            con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, textId, domainId) '
                            "VALUES (?,?,?,?,?,?,?)", nvtx_rows)
            con.execute("INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, chipName, cuDevice, "
                        "smCount, computeMajor, computeMinor) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (1 << 48, 0, self.gpu, "0000:57:00.0", 1, self.chip, 0, 108, 8, 0))
            major, minor, micro = (self.schema_version.split(".") + ["0", "0"])[:3]
            meta = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", self.version),
                    ("EXPORT_SCHEMA_VERSION", self.schema_version), ("EXPORT_SCHEMA_VERSION_MAJOR", major),
                    ("EXPORT_SCHEMA_VERSION_MINOR", minor), ("EXPORT_SCHEMA_VERSION_MICRO", micro),
                    ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_PARAM_LAZY", "true")]
            con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
            con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, self.pid, self.process_name))
            con.executemany("INSERT INTO ThreadNames VALUES (?, ?, ?)",
                            [(sid(name), 20, gt) for gt, name in self.threads.items()])
            con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
                        (1_765_000_000_000_000_000, "2025-12-06T05:46:40", "2025-12-06T05:46:40"))
            if self.capture_end is not None:
                con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
                            (1 << 48, self.capture_end, 7_000_000_000, 7_000_000_000 + self.capture_end))
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in strings.items()])
            con.commit()
        finally:
            con.close()
        return path


@dataclass
class Track:
    """One thread of an :class:`Export`, described in program order on the export's shared clock."""

    export: Export
    thread: int  # globalTid

    @contextlib.contextmanager
    def range(self, text: str, domain: str | None = None, registered: bool = False) -> Iterator[None]:
        """``with track.range(text):`` a push at the next tick, the pop at the tick after the body."""
        start = self.export.tick()
        yield
        self.export.range(self.thread, text, start, self.export.tick(), domain, registered)

    def launch(self, name: str, duration: int = 5_000, stream: int = 7, **kw) -> Kernel:
        """A launch call (1 us) at the next tick; its kernel runs on ``stream`` for ``duration`` ns, as soon as
        the call returned and the stream's previous kernel finished. ``kw``: other :class:`Kernel` fields."""
        ex = self.export
        api_start = ex.tick()
        api_end = ex.tick()
        start = max(api_end + 2_000, ex._gpu_free.get(stream, 0) + 500)
        ex._gpu_free[stream] = start + duration
        return ex.kernel(self.thread, name, api_start, api_end, start, start + duration, stream=stream, **kw)


_TICK = 1_000  # ns between two events of one stack (write_nested)


def write_nested(path: str, ranges: int, depth: int, kernels: int = 1) -> dict:
    """A big export of nested NVTX ranges at ``path`` (overwritten), written in bulk (the
    :class:`Export` API makes Python objects per event; this makes a million ranges in seconds):
    ``ranges`` push/pop ranges on the main thread in stacks ``depth`` deep, one stack after another, with
    ``kernels`` kernels launched inside each stack's innermost range. :class:`Export` writes the base
    (one range, one kernel), whose rows are replaced. Used by the hostile-input tests and
    ``scripts/nested_export.py``. Returns the counts written."""
    if not 1 <= depth <= ranges:
        raise ValueError("need 1 <= depth <= ranges")
    ex = Export()
    main = ex.track(name="python")
    with main.range("base"):
        main.launch("base_kernel")
    ex.write(path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    (thread,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = ?", (NVTX_PUSH_POP,)).fetchone()
    kernel_row = list(con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone())
    api_row = list(con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone())
    (api_name,) = con.execute("SELECT id FROM StringIds WHERE value = ?", (LAUNCH_API,)).fetchone()
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        con.execute(f"DELETE FROM {table}")
    stacks = -(-ranges // depth)
    # one stack: pushes at ticks 0..d-1, the kernels' launch calls, then pops in reverse order
    span = (2 * depth + 3 * kernels + 4) * _TICK

    def nvtx_rows():
        left = ranges
        for s in range(stacks):
            d = min(depth, left)
            left -= d
            t0 = 1_000_000 + s * span
            close = t0 + (d + 3 * kernels + 2) * _TICK  # the innermost pop
            for i in range(d - 1, -1, -1):  # innermost first: rows in order of their end
                yield (t0 + i * _TICK, close + (d - 1 - i) * _TICK, NVTX_PUSH_POP, f"layer:n{i % 97}", thread, 0)

    def kernel_rows():
        corr = 0
        left = ranges
        for s in range(stacks):
            d = min(depth, left)
            left -= d
            t = 1_000_000 + s * span + d * _TICK
            for _ in range(kernels):
                corr += 1
                api = api_row[:]
                api[0], api[1], api[3], api[4], api[5] = t, t + _TICK // 2, thread, corr, api_name
                k = kernel_row[:]
                k[0], k[1], k[6] = t + _TICK, t + 2 * _TICK, corr
                t += 3 * _TICK
                yield k, api

    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                    "VALUES (?,?,?,?,?,?)", nvtx_rows())
    krows, arows = [], []
    for k, api in kernel_rows():
        krows.append(k)
        arows.append(api)
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(kernel_row))})", krows)
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({','.join('?' * len(api_row))})", arows)
    con.commit()
    con.close()
    return {"ranges": ranges, "depth": depth, "kernels": len(krows)}
