"""The source interface and ``open_source(path)``: sniff a file and return the reader for it.

A *source* (:class:`Source`) reads one export: ``prepared()`` reads and attributes everything, then
gives its records as JSON lines (what ``pyprof parse`` writes), ``records()`` as dicts (fields:
:mod:`pyprof.records`); ``warnings`` are one-line strings, complete once it is read.

Sniffing: SQLite header -> nvprof (``StringTable``, with ``Version`` or without nsys's ``StringIds``) or
Nsight Systems (``StringIds`` / ``TARGET_INFO_*`` / ``CUPTI_*`` tables); ``.json``/``.json.gz`` or JSON
content -> the torch.profiler (Kineto) reader, imported lazily. Anything else is an :class:`~pyprof.errors.InputError`.
"""

from __future__ import annotations

import gzip
import os
import stat
from collections.abc import Iterator
from typing import Any, Protocol

from pyprof.errors import InputError
from pyprof.parse.db import REEXPORT, Database, is_sqlite
from pyprof.records import HEADER_PREFIX


class Counts(Protocol):
    """What a parse counted, for its summary line."""

    kernels: int
    copies: int
    attributed: int  # kernels launched under a range


class Prepared(Protocol):
    """A source read and attributed, as the record writer takes it: ``n`` records as JSON lines, and the
    values written as null where their check refused them, by field (the end line's ``nulled``)."""

    n: int
    nulled: dict[str, int]

    def lines(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...  # ends any reading still open (after a failed write too)


class Source(Protocol):
    kind: str  # nsys, nvprof, kineto
    version: str  # the exporter's version, as text
    warnings: list[str]

    @property
    def dropped(self) -> dict[str, int]: ...  # what the input held that no record keeps as it was, by reason

    @property
    def stats(self) -> Counts | None: ...  # complete once prepared() returns

    def prepared(self) -> Prepared: ...

    def records(self) -> Iterator[dict[str, Any]]: ...


def _looks_json(path: str) -> bool:
    if path.endswith((".json", ".json.gz", ".pt.trace.json")):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                head = fh.read(64)
        return head.lstrip()[:1] in (b"{", b"[")
    except OSError:
        return False


def is_export(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an export to parse rather than a record file (parse's JSON lines): an SQLite
    database, a gzip file, or JSON whose first line is not a record (a pretty-printed trace's ``{``, a
    trace in one line, a list of trace events). A path that cannot be read is not (the record reader
    says why)."""
    path = os.fspath(path)
    try:
        if not os.path.isfile(path) or is_sqlite(path):
            return os.path.isfile(path)
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b":
        return True
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if first in (b"{", b"[") or (first[:2] == b"[{" and b'"ph"' in head):  # pretty-printed, or a list of events
        return True
    if first[:1] != b"{" or b'"kShortName"' in first or first.startswith(HEADER_PREFIX):
        return False  # a record, a PyProf dict line, or not JSON at all: the record reader's to judge
    return any(k in head for k in (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"'))


def open_source(path: str | os.PathLike) -> Source:
    """The reader for ``path``; raises :class:`InputError` for a missing, foreign or corrupt file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file", "check the path (an Nsight Systems or nvprof .sqlite export, "
                         "or a torch.profiler .json trace)")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not an export", "pass the .sqlite or .json file inside it")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied", "make the file readable")
    if not stat.S_ISREG(os.stat(path).st_mode):
        # a FIFO, /dev/zero, a terminal: no size, maybe no end; an export is a file that can be read twice
        raise InputError(f"{path}: not a regular file (a pipe or a device)",
                         "save the export to a file first and give its path")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: the file is empty", REEXPORT)
    if is_sqlite(path):
        db = Database(path)
        try:
            # nvprof: StringTable (nsys names its string table StringIds); Version may be absent
            if db.has("StringTable") and (db.has("Version") or not db.has("StringIds")):
                from pyprof.parse.nvprof import NvprofSource

                return NvprofSource(path, db)
            if db.has("StringIds") or any(t.startswith(("TARGET_INFO_", "CUPTI_", "NVTX_")) for t in db.tables):
                from pyprof.parse.nsys import NsysSource

                return NsysSource(path, db)
        except BaseException:
            db.close()
            raise
        n = len(db.tables)
        db.close()
        if n == 0:
            raise InputError(f"{path}: an SQLite file with no tables (empty, truncated or corrupt)", REEXPORT)
        raise InputError(
            f"{path}: an SQLite database but not an Nsight Systems or nvprof export (no StringIds or "
            "StringTable/Version tables)",
            "export the report with `nsys export --type sqlite REPORT.nsys-rep`",
        )
    if _looks_json(path):
        from pyprof.parse.kineto import KinetoSource

        return KinetoSource(path)
    raise InputError(
        f"{path}: not an SQLite database or a JSON trace",
        "give an Nsight Systems/nvprof SQLite export (nsys export --type sqlite) or a torch.profiler trace",
    )
