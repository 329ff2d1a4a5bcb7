"""Read a record file (parse's JSON lines, or NVIDIA PyProf's ``str(dict)`` lines) into a list of dicts.

Every way the input can be wrong ends in one :class:`~pyprof.errors.InputError` line naming the file,
the line and what to do: a missing file, an SQLite export given by mistake, an empty file, a line that
is not a record. PyProf lines are normalised to the record fields prof uses (``op``/``mod`` lists to
names, ``args`` from the first argument marker, backward kernels given their forward op's arguments
through ``seqId``, as PyProf's own prof did).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import IO, Any

import orjson

from pyprof.errors import InputError
from pyprof.markers import MarkerError, decode_legacy_pyprof

HINT = "give the output of `pyprof parse FILE.sqlite -o FILE.dict`"


def read_records(source: str | os.PathLike | IO | None) -> list[dict[str, Any]]:
    """All records from a path, ``-``/None (stdin) or an open binary/text file object, as a list."""
    return list(iter_records(source))


def iter_records(source: str | os.PathLike | IO | None) -> Iterator[dict[str, Any]]:
    """Stream records from a path, ``-``/None (stdin) or an open file object, checking each line.

    Records are yielded one at a time so that a caller extracting columns (``table.build``) never holds
    every full record at once. Raises :class:`InputError` for the first bad line, or at the end if there
    was no record at all.
    """
    if source is None or str(source) == "-":
        yield from _read(getattr(sys.stdin, "buffer", sys.stdin), "<stdin>")
        return
    if hasattr(source, "read"):
        yield from _read(source, getattr(source, "name", "<stream>"))
        return
    path = os.fspath(source)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", HINT) from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory", HINT) from None
    except PermissionError:
        raise InputError(f"{path}: permission denied", "check the file's permissions") from None
    with fh:
        yield from _read(fh, path)


# Heavy fields of parse's records, each with the field parse writes right after it. Their values repeat
# across kernels (call sites, argument lists, demangled names), so :class:`_Decoder` decodes each distinct
# value once; ``ranges`` (raw NVTX texts, unused by prof) is not decoded at all.
_HEAVY = ((b"kLongName", b"kDuration"), (b"ranges", b"layer"), (b"layer", b"trace"), (b"trace", b"mod"),
          (b"args", b"cdtype"))
_SKIP = b"ranges"


class _Decoder:
    """Decode one JSON-lines record, reusing the decoded value of every repeated heavy field.

    A heavy field's value is the bytes between ``,"FIELD":`` and ``,"NEXT":``. Both markers hold an
    unescaped quote, which cannot occur inside a JSON string, so they can only be keys; nested objects
    (arguments, ranges) have no such keys. Where a line does not have parse's field order, it is decoded
    whole, so the result is always what ``orjson.loads`` gives (less ``ranges``)."""

    def __init__(self):
        self.cache: dict[bytes, Any] = {}
        self.marks = [(b',"' + k + b'":', b',"' + n + b'":', k.decode()) for k, n in _HEAVY]

    def __call__(self, line: bytes) -> dict[str, Any]:
        pieces = []
        heavy = []
        pos = 0
        find = line.find
        for start_mark, end_mark, key in self.marks:
            a = find(start_mark, pos)
            if a < 0:
                return orjson.loads(line)
            b = find(end_mark, a + len(start_mark))
            if b < 0:
                return orjson.loads(line)
            pieces.append(line[pos:a])
            if key != "ranges":
                heavy.append((key, line[a + len(start_mark):b]))
            pos = b
        pieces.append(line[pos:])
        try:
            rec = orjson.loads(b"".join(pieces))
            cache = self.cache
            for key, raw in heavy:
                value = cache.get(raw)
                if value is None:
                    value = cache[raw] = orjson.loads(raw)
                rec[key] = value
        except orjson.JSONDecodeError:  # not cut where expected (another field between): decode it whole
            return orjson.loads(line)
        if rec.__class__ is not dict:
            return orjson.loads(line)
        return rec


def _read(fh: IO, name: str, allow_empty: bool = False) -> Iterator[dict[str, Any]]:
    reader = _LineReader(name)
    record = reader.record
    lineno = 0
    for lineno, line in enumerate(fh, 1):  # noqa: B007  (lineno is reported after the loop)
        rec = record(line, lineno)
        if rec is not None:
            yield rec
    reader.finish(allow_empty)


class _LineReader:
    """One line at a time: the record it holds (None for a blank line), or an :class:`InputError`."""

    def __init__(self, name: str):
        self.name = name
        self.decode = _Decoder()
        self.legacy: dict | None = None
        self.count = 0

    def record(self, line: bytes | str, lineno: int) -> dict[str, Any] | None:
        name = self.name
        if line.__class__ is str:
            line = line.encode()
        if line[:2] == b'{"':  # the fast path: parse's JSON lines
            try:
                rec = self.decode(line)
            except orjson.JSONDecodeError as exc:
                raise InputError(f"{name} line {lineno}: not a JSON record ({exc})", HINT) from None
            if "kDuration" in rec and "kShortName" in rec:
                self.count += 1
                return rec
        else:
            rec = _slow_line(line, lineno, name)
            if rec is None:
                return None
            if rec.__class__ is dict and line.lstrip()[:2] == b"{'":
                if self.legacy is None:
                    self.legacy = {}
                _normalise_legacy(rec, self.legacy)
        if rec.__class__ is not dict:
            raise InputError(f"{name} line {lineno}: not a record (a JSON {type(rec).__name__})", HINT)
        if "kShortName" not in rec or "kDuration" not in rec:
            raise InputError(f"{name} line {lineno}: record without kShortName/kDuration", HINT)
        self.count += 1
        return rec

    def finish(self, allow_empty: bool = False) -> None:
        if not self.count and not allow_empty:
            raise InputError(f"{self.name} holds no records (empty file)", HINT)


def _slow_line(line: bytes, lineno: int, name: str) -> Any:
    """Anything but a plain JSON record line: blank (None), a PyProf dict line, or an error."""
    if lineno == 1 and line.startswith(b"SQLite format 3"):
        raise InputError(f"{name} is an SQLite export, not a record file",
                         f"run `pyprof parse {name} -o out.dict` first, then `pyprof prof out.dict`")
    stripped = line.strip()
    if not stripped:
        return None
    if stripped[:2] == b"{'":
        try:
            return decode_legacy_pyprof(stripped.decode("utf-8", "replace"))
        except MarkerError:
            raise InputError(f"{name} line {lineno}: malformed PyProf dict line", HINT) from None
    if stripped[:1] in (b"{", b"["):
        try:
            return orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{name} line {lineno}: not a JSON record ({exc})", HINT) from None
    what = "binary data" if b"\0" in line[:200] or b"\xff" in line[:200] else repr(line[:20])
    raise InputError(f"{name} line {lineno}: not a record (starts {what})", HINT)


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _normalise_legacy(rec: dict[str, Any], fprop_by_seq: dict[int, dict[str, Any]]) -> None:
    """A PyProf line: ``mod``/``op`` were lists, args lived in ``marker`` strings, bprop kernels had none
    (take them from the last fprop kernel with the same sequence id, as PyProf's prof did)."""
    rec["op"] = _first(rec.get("op")) or None
    rec["mod"] = _first(rec.get("mod")) or None
    if rec.get("args") is None:
        for text in rec.get("marker") or ():
            try:
                marker = decode_legacy_pyprof(text) if isinstance(text, str) else text
            except MarkerError:
                continue
            if isinstance(marker, dict) and "args" in marker:
                rec["args"] = marker["args"]
                rec["op"] = rec["op"] or marker.get("op")
                rec["mod"] = rec["mod"] or marker.get("mod")
                break
    if rec.get("dir") == "fprop" and rec.get("args") is not None:
        for s in rec.get("seqId") or ():
            fprop_by_seq[s] = rec
    elif rec.get("dir") == "bprop" and rec.get("args") is None:
        for s in list(rec.get("seqId") or ()) + list(rec.get("altSeqId") or ()):
            src = fprop_by_seq.get(s)
            if src is not None:
                rec["args"] = src["args"]
                rec["op"] = rec.get("op") or src.get("op")
                rec["mod"] = rec.get("mod") or src.get("mod")
                break


def is_legacy(path: str | os.PathLike) -> bool:
    """True when the file's first record line is an NVIDIA PyProf ``str(dict)`` line."""
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                return line.lstrip()[:2] == b"{'"
    return False


def split_ranges(path: str | os.PathLike, parts: int) -> list[tuple[int, int]]:
    """``parts`` byte ranges of the file, each starting at a line start, covering it exactly."""
    size = os.path.getsize(path)
    bounds = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(max(size * k // parts, bounds[-1]))
            if fh.tell() > 0:
                fh.readline()  # to the start of the next line
            bounds.append(min(max(fh.tell(), bounds[-1]), size))
    bounds.append(size)
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def iter_range(path: str | os.PathLike, start: int, end: int) -> Iterator[dict[str, Any]]:
    """The records of the lines in bytes ``[start, end)`` (line-aligned, see :func:`split_ranges`)."""

    def lines(fh):
        pos = start
        for line in fh:
            if pos >= end:
                return
            pos += len(line)
            yield line

    with open(path, "rb") as fh:
        fh.seek(start)
        yield from _read(lines(fh), f"{path} (bytes {start}-{end})", allow_empty=True)
