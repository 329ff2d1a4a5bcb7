"""Read a torch.profiler chrome trace (``.json`` or ``.json.gz``), or fail with one line.

The file is memory-mapped (or gunzipped) and its events array parsed chunk by chunk as the caller
iterates (:class:`Trace`), so only one chunk's objects live beside the file's bytes (a 1M-event
trace parsed as one document takes several GB); a layout the chunks do not fit is parsed as one
document (:func:`load_trace` says when).

Kineto before pytorch/kineto#1459 writes event names without escaping their double quotes: a
``record_function`` whose name contains ``"``, which is every pyprof marker (``{"pyprof":1,...}``),
and any ``with_stack`` frame of generated code make the exported file invalid JSON
(pytorch/pytorch#146900). When a parse fails, :func:`repair_unescaped_names` re-escapes the
``"name": "..."`` lines of Kineto's one-field-per-line layout and the parse is retried once; a file
that is still not JSON is reported as such.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import msgspec
import orjson

from pyprof.errors import InputError
from pyprof.parse import limits
from pyprof.parse.kineto.events import EventTypes, event_types

_GZIP_MAGIC = b"\x1f\x8b"
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# between two events: `}, {` with a key next (a pyprof marker's name holds `},{%22name%22...`: cutting
# there would cost a failed parse of the whole piece)
_BOUNDARY = re.compile(rb'\}\s*,\s*\{(?=\s*")')
CHUNK_BYTES = 8 << 20
#: plain files at least this big are memory-mapped instead of read
MMAP_BYTES = 1 << 20
_NONSPACE = re.compile(rb"\S")
# Kineto's layout: `    "name": "<raw text>",` alone on its line. Only lines whose text holds a quote
# are touched; `(.*")` is greedy so the last `"` before `",` closes the value.
_NAME_LINE = re.compile(rb'(?m)^([ \t]*"name": ")(.*".*)("[ \t]*,?[ \t]*\r?)$')
_BARE_QUOTE = re.compile(rb'(?<!\\)"')


@dataclass
class Trace:
    """A chrome trace: the top-level metadata (everything but the events) and the events, in chunks.

    ``chunks`` yields lists of events (iterate it once): the structs of :attr:`types`, made once the
    first piece has shown the trace's key spellings; ``raw`` traces (tools, tests) give every event as
    the dict the JSON holds. ``repaired`` counts event names whose quotes had to be re-escaped.
    """

    chunks: Iterator[list]
    meta: dict[str, Any] = field(default_factory=dict)
    repaired: int = 0
    raw: bool = False
    types: EventTypes | None = None

    @property
    def events(self) -> list:
        """All events as one list (small traces, tools; the parser iterates :attr:`chunks`)."""
        return [ev for chunk in self.chunks for ev in chunk]

    def typed(self, events: list) -> list:
        """Events parsed as dicts, as this trace's structs (the first piece fixes the types); ``raw``:
        as they are."""
        if self.raw:
            return events
        if self.types is None:
            self.types = event_types(events)
        return self.types.from_dicts(events)


def _unescaped(match: re.Match) -> bytes:
    # keep already-escaped quotes as they are, escape the bare ones
    return match.group(1) + _BARE_QUOTE.sub(rb'\\"', match.group(2)) + match.group(3)


def repair_unescaped_names(data: bytes) -> tuple[bytes, int]:
    """Escape bare double quotes inside Kineto's ``"name": "..."`` lines; returns (bytes, lines fixed)."""
    return _NAME_LINE.subn(_unescaped, data)


def _repairing(parse, data, errors) -> tuple[Any, int] | None:
    """(``parse(data)``, 0); else, where that raised ``errors``, ``parse`` of ``data`` with Kineto's
    unescaped names re-escaped and the count of names repaired; None where neither parses."""
    try:
        return parse(data), 0
    except errors:
        pass
    fixed, n = repair_unescaped_names(bytes(data))
    if n:
        try:
            return parse(fixed), n
        except errors:
            pass
    return None


_BOM = b"\xef\xbb\xbf"


def read_bytes(path: str | os.PathLike):
    """The file's bytes, gunzipped when it is gzip (by content, whatever its name). A plain file is
    memory-mapped rather than read (a bytes-like ``mmap``: slices are bytes), which saves copying
    hundreds of MB before the first event is parsed. A UTF-8 byte order mark (written by some Windows
    tools) is dropped, as Python's ``utf-8-sig`` codec drops it."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(3)
            if head[:2] != _GZIP_MAGIC and head != _BOM and not path.endswith(".gz"):
                size = os.fstat(fh.fileno()).st_size
                if size >= MMAP_BYTES:
                    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            data = head + fh.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "check the path of the torch.profiler trace") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory", "give the trace file (.json or .json.gz) inside it") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", "check the file's permissions") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = _gunzip(path, data)
        except (OSError, EOFError, zlib.error):
            raise InputError(
                f"{path}: truncated or corrupt gzip file",
                "copy the trace again or re-export it with prof.export_chrome_trace()",
            ) from None
    elif path.endswith(".gz"):
        raise InputError(f"{path}: named .gz but not gzip-compressed", "rename it to .json or gzip it")
    return data[len(_BOM):] if data[:len(_BOM)] == _BOM else data


def _gunzip(path: str, data: bytes) -> bytes:
    """``gzip.decompress`` (every member of the stream), in pieces, refused once the output passes
    :mod:`pyprof.parse.limits`' bound (``inflate``, or 100 times the compressed size): a small file that
    inflates to gigabytes (a gzip bomb) is stopped at that bound, its memory with it."""
    bound = max(limits.get("inflate"), limits.INFLATE_RATIO * len(data))
    out: list[bytes] = []
    total = 0
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        piece = rest
        while piece:
            chunk = d.decompress(piece, 1 << 24)
            total += len(chunk)
            if total > bound:
                raise limits.exceeded(f"{path}: the gzip trace ({len(data):,} bytes) inflates further",
                                      "inflate", 4 * bound)
            out.append(chunk)
            piece = d.unconsumed_tail
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        rest = d.unused_data.lstrip(b"\0")  # (gzip allows zero padding after a member)
        if rest and rest[:2] != _GZIP_MAGIC:
            raise OSError("not a gzipped file")
    return b"".join(out)


def _layout(data: bytes) -> tuple[dict, int, int] | None:
    """(metadata, start, end) of the ``traceEvents`` array's inside, or None if not found.

    The array's ``]`` is found from the end of the file: the last one after which a valid trailer
    follows (the metadata then parses) *and* before which the array ends in an event
    (:func:`_ends_in_event`). The second test matters when a list-valued key follows the events
    (``"ERROR": ["x"]``, a ``deviceProperties`` list): its ``]`` is later and its trailer parses too.
    """
    m = _EVENTS_KEY.search(data)
    if m is None:
        return None
    head = data[: m.start()]
    pos = len(data)
    unchecked = None  # the last "]" with a valid trailer, if none passes the event test
    for _ in range(64):
        pos = data.rfind(b"]", m.end(), pos)
        if pos < 0:
            break
        try:
            meta = orjson.loads(head + b'"traceEvents":[]' + data[pos + 1:])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(meta, dict):
            return None
        if _ends_in_event(data, m.end(), pos):
            return meta, m.end(), pos
        if unchecked is None:
            unchecked = (meta, m.end(), pos)
    return unchecked


#: how far back from a candidate end of the events array :func:`_ends_in_event` looks for the last event
TAIL_BYTES = 64 << 10


def _ends_in_event(data, start: int, pos: int) -> bool:
    """Whether the events array can close at ``pos``: nothing but space inside it, or its last element
    (parsed from one of the last ``}, {`` boundaries) is an event, an object with a ``"ph"`` key.

    A ``]`` closing a later top-level list fails: its last element is no object (``["x"]``), or an object
    without ``"ph"`` (a device's properties), or no boundary's piece parses up to it at all."""
    lo = max(start, pos - TAIL_BYTES)
    tail = bytes(data[lo:pos])
    if not tail.strip():
        return lo == start
    if not tail.rstrip().endswith(b"}"):
        return False
    starts = [b.end() - 1 for b in _BOUNDARY.finditer(tail)][-16:]
    if lo == start:
        starts.insert(0, cast("re.Match[bytes]", _NONSPACE.search(tail)).start())  # tail is not blank
    for s in reversed(starts):
        last = _repairing(orjson.loads, tail[s:], orjson.JSONDecodeError)
        if last is not None:
            return isinstance(last[0], dict) and "ph" in last[0]
    return False


class _NotJson(Exception):
    """A piece of the events array that is not valid JSON (internal)."""


def _decode(path: str, trace: Trace, piece) -> list:
    """The events of a piece of the events array (bytes, or a memoryview of the file's): typed (msgspec)
    once the trace's types are known; the dict way (orjson, then :meth:`Trace.typed`) before that, or
    for a piece the types do not fit."""
    array = b"".join((b"[", piece, b"]"))
    if trace.types is not None and not trace.raw:
        try:
            return trace.types.decoder.decode(array)
        except msgspec.ValidationError:  # (a DecodeError too: caught first) valid JSON, unexpected shape
            pass
        except msgspec.DecodeError:
            raise _NotJson from None
    try:
        events = orjson.loads(array)
    except orjson.JSONDecodeError:
        raise _NotJson from None
    if events and not isinstance(events[0], dict):
        raise InputError(f"{path}: 'traceEvents' is not a list of events", "give a torch.profiler chrome trace")
    if trace.types is None and not trace.raw:
        # the first piece: its dicts fix the types, then the typed decoder reads it again (several times
        # faster than converting the dicts, and the same structs where the types fit)
        trace.types = event_types(events)
        try:
            return trace.types.decoder.decode(array)
        except msgspec.DecodeError:
            pass
    return trace.typed(events)


def _chunks(path: str, data: bytes, start: int, end: int, trace: Trace) -> Iterator[list]:
    """Parse the events array piece by piece, cutting between two events (``}, {``), Kineto's unescaped
    names repaired where a piece needs it; raises :class:`_NotJson` where a piece does not parse
    (:func:`_or_reference` then takes over)."""
    view = memoryview(data)
    pos = start
    while pos < end:
        m = _BOUNDARY.search(data, pos + CHUNK_BYTES, end) if pos + CHUNK_BYTES < end else None
        for _ in range(17):  # (a cut inside a nested value: the piece extended to the next boundary)
            cut, nxt = (m.start() + 1, m.end() - 1) if m is not None else (end, end)
            got = _repairing(partial(_decode, path, trace), view[pos:cut], _NotJson)
            if got is not None or m is None:
                break
            m = _BOUNDARY.search(data, m.end(), end)
        if got is None:
            raise _NotJson
        trace.repaired += got[1]
        yield got[0]
        pos = nxt


def load_trace(path: str | os.PathLike, raw: bool = False) -> Trace:
    """Open a chrome trace; raise :class:`InputError` with one line if it is none.

    Two paths read the same events. The fast one parses Kineto's layout (``{..., "traceEvents":
    [ ... ], ...}``) in chunks, lazily (:func:`_load_chunked`). The reference one parses the whole
    document at once (:func:`_parse_whole`: orjson, then Python's json), and reads any other layout
    (the Trace Event Format's bare array). Any failure of the fast path, found when the file is
    opened or later while its chunks are read, hands over to the reference path; only a file the
    reference path cannot read either is an :class:`InputError`. ``raw``: events as dicts.
    """
    path = os.fspath(path)
    data = read_bytes(path)
    first = _NONSPACE.search(data)  # (no .strip(): that would copy hundreds of MB)
    if first is None:
        raise InputError(f"{path}: empty file", "export the trace with prof.export_chrome_trace(path)")
    if data[first.start():first.start() + 1] == b"{":
        try:
            trace = _load_chunked(path, data, raw)
        except Exception:  # noqa: BLE001 - the reference path reads the file again, and reports what is wrong
            trace = None
        if trace is not None:
            return trace
    events, meta, repaired = _parse_whole(path, data)
    trace = Trace(chunks=iter(()), meta=meta, repaired=repaired, raw=raw)
    trace.chunks = iter([trace.typed(events)])
    return trace


def _load_chunked(path: str, data, raw: bool) -> Trace | None:
    """The fast path: Kineto's layout, parsed chunk by chunk as the caller iterates; None where that
    layout is not found. The chunk iterator falls back to the reference path itself
    (:func:`_or_reference`), since it fails only once the caller reads it."""
    layout = _layout(data)
    if layout is None:
        return None
    meta, start, end = layout
    if _NONSPACE.search(data, start, end) is None:
        raise InputError(f"{path}: the trace holds no events", "profile at least one active step (check the schedule)")
    trace = Trace(chunks=iter(()), meta=meta, raw=raw)
    trace.chunks = _or_reference(path, data, trace, _chunks(path, data, start, end, trace))
    return trace


def _or_reference(path: str, data, trace: Trace, chunks: Iterator[list]) -> Iterator[list]:
    """``chunks`` (the fast path's) as long as they parse; after a failure, the rest from the reference
    parse of the whole file: its events after the ones ``chunks`` already gave. The reference parse's
    metadata replaces the fast path's (in place: the caller may hold the dict already)."""
    given = 0
    while True:
        try:
            events = next(chunks)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001 - the reference path reads the file again, and reports what is wrong
            break
        given += len(events)
        yield events
    events, meta, repaired = _parse_whole(path, data)
    trace.meta.clear()
    trace.meta.update(meta)
    trace.repaired = max(trace.repaired, repaired)
    rest = events[given:]
    del events
    if rest:
        yield trace.typed(rest)


def _parse_doc(path: str, data: bytes) -> tuple[Any, int]:
    """(the JSON document, event names repaired): orjson; then orjson after re-escaping Kineto's
    unescaped names; then Python's json, which also reads what orjson refuses (``NaN``, ``Infinity``,
    integers beyond 64 bits). Raises the one-line "not JSON" :class:`InputError` when none can."""
    try:
        return orjson.loads(data), 0
    except orjson.JSONDecodeError as exc:
        first_error: Exception = exc
    first = _NONSPACE.search(data)
    if first is not None and data[first.start():first.start() + 1] in (b"{", b"["):
        fixed, repaired = repair_unescaped_names(data)
        if repaired:
            try:
                return orjson.loads(fixed), repaired
            except orjson.JSONDecodeError:
                pass
        del fixed
        try:
            return json.loads(data), 0
        except (ValueError, RecursionError):
            pass
    raise InputError(f"{path}: not JSON ({first_error}); truncated or not a torch.profiler trace",
                     "give a file written by prof.export_chrome_trace() (.json or .json.gz)")


def _parse_whole(path: str, data) -> tuple[list, dict, int]:
    """(events, metadata, event names repaired) of the whole document, or a one-line InputError."""
    if not isinstance(data, bytes):  # a mapped file (orjson takes bytes)
        data = bytes(data)
    doc, repaired = _parse_doc(path, data)
    del data
    if isinstance(doc, list):  # the Trace Event Format's "JSON Array Format"
        events, meta = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc.pop("traceEvents")
        meta = doc
    else:
        raise InputError(
            f"{path}: JSON but not a chrome trace (no 'traceEvents' list)",
            "give a file written by torch.profiler's export_chrome_trace()",
        )
    if not events:
        raise InputError(f"{path}: the trace holds no events", "profile at least one active step (check the schedule)")
    if not isinstance(events[0], dict):
        raise InputError(f"{path}: 'traceEvents' is not a list of events", "give a torch.profiler chrome trace")
    return events, meta, repaired
