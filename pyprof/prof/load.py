"""Read a record file (parse's JSON lines, or NVIDIA PyProf's ``str(dict)`` lines) into a list of dicts.

Every way the input can be wrong ends in one :class:`~pyprof.errors.InputError` line naming the file,
the line and what to do: a missing file, an SQLite export given by mistake, an empty file, a line that
is not a record, a record whose field has the wrong type or an impossible value (a
:class:`~pyprof.errors.RecordError`: ``"layer": 5``, a negative, NaN or over 2**62 ns duration,
``"dir": "sideways"``). Under :func:`skipping_bad` (``pyprof prof --skip-bad``) such records are skipped
and counted instead.

The fields prof reads are checked against :data:`pyprof.records.CHECKS` a chunk of records at a time,
column by column. PyProf lines are normalised to the record fields prof uses (:func:`_normalise_legacy`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import IO, Any, cast

import orjson

from pyprof.errors import InputError, RecordError
from pyprof.markers import LEGACY_MAX, MarkerError, as_lists, decode_legacy_pyprof
from pyprof.prof.fields import KEYS
from pyprof.records import (
    BACKWARD_DIRS,
    CHECKS,
    END_FLAG,
    HEADER_PREFIX,
    UNVERSIONED,
    Check,
    RecordEnds,
    bad_field,
    check_version,
    is_end,
    read_line,
    thread_id,
)

HINT = "give the output of `pyprof parse FILE.sqlite -o FILE.dict`"
FIX_HINT = "correct or delete the records with a bad field"
BAD_HINT = "correct or delete that record, or run `pyprof prof --skip-bad` to skip such records"
CHUNK = 512  # records checked together by the record-by-record reader (few enough to stay in the CPU cache)


class BadRecords:
    """What the readers do with a record whose field has the wrong type or an impossible value: stop with
    a :class:`~pyprof.errors.RecordError` (the default), or with ``skip`` drop it, counting it in ``count``
    and keeping the first one's place and problem in ``first`` (``(file, byte offset of the part read,
    line within it, problem)``)."""

    def __init__(self, skip: bool = False):
        self.skip = skip
        self.count = 0
        self.first: tuple[str, int, int, str] | None = None

    def add(self, count: int, first: tuple[str, int, int, str] | None) -> None:
        self.count += count
        if self.first is None:
            self.first = first

    def first_text(self) -> str:
        """``net.dict line 12: field "layer" is 5, expected a list of strings`` for the first skipped record
        (a line counted from the part's start is turned into the file's own line number)."""
        if self.first is None:
            return ""
        name, start, line, problem = self.first
        if start:
            line += _lines_before(name, start)
        return f"{name} line {line}: {problem}"


_policy = BadRecords()


@contextlib.contextmanager
def skipping_bad(skip: bool = True) -> Iterator[BadRecords]:
    """Within the block, records with a bad field are skipped (``skip``) or stop the read (not ``skip``);
    the :class:`BadRecords` yielded counts the skipped ones once the records are read. A module setting,
    not an argument, because it must reach the decoding processes :func:`pyprof.prof.table.build_file`
    forks, and those inherit it."""
    global _policy
    old, _policy = _policy, BadRecords(skip)
    try:
        yield _policy
    finally:
        _policy = old


def policy() -> BadRecords:
    """The :class:`BadRecords` in force (see :func:`skipping_bad`)."""
    return _policy


def _lines_before(path: str, offset: int) -> int:
    """Newlines in the first ``offset`` bytes of ``path``."""
    n = 0
    with open(path, "rb") as fh:
        while offset > 0:
            data = fh.read(min(offset, 16 << 20))
            if not data:
                break
            n += data.count(b"\n")
            offset -= len(data)
    return n


@functools.cache
def prof_checks(ranges: bool = False) -> tuple[Check, ...]:
    """The checks of the fields prof reads (:data:`pyprof.prof.fields.KEYS`) that have a documented type: a field prof never reads cannot break its table, and is not checked.
    ``ranges``: ``ranges`` too, for the readers that keep it (the report, diff and advise walk it for
    the steps: ``"ranges": 5`` must be a bad field there, not a TypeError)."""
    return tuple(CHECKS[k] for k in KEYS + (("ranges",) if ranges else ()) if k in CHECKS)


def columns_ok(recs: list[dict[str, Any]], checks: tuple[Check, ...]) -> bool:
    """True when every record of ``recs`` passes ``checks``, tested column by column (a missing field is
    null): the same answer as ``bad_field`` record by record."""
    if not recs or not checks:
        return True
    names = tuple(c.name for c in checks)
    get = itemgetter(*names)
    try:
        rows = list(map(get, recs))
    except KeyError:  # records without some field
        rows = [tuple(map(r.get, names)) for r in recs]
    if len(names) == 1:
        rows = [(v,) for v in rows]
    return all(all(map(check.ok, col)) for check, col in zip(checks, zip(*rows, strict=True), strict=True))


def good_records(recs: list[dict[str, Any]], places: Sequence[int], checks: tuple[Check, ...],
                 reject: Callable[[int, Check, dict[str, Any]], None]) -> list[dict[str, Any]]:
    """``recs`` less those with a bad field, each of which goes to ``reject(place, check, rec)`` (which
    raises, or counts it): all of them when every column passes (:func:`columns_ok`), else
    record by record, in order, so that the first bad record is the one reported. ``places``: where
    each record was read (a line, a row)."""
    if columns_ok(recs, checks):
        return recs
    keep = []
    for rec, place in zip(recs, places, strict=True):
        bad = bad_field(rec, checks)
        if bad is None:
            keep.append(rec)
        else:
            reject(place, bad, rec)
    return keep


def _json_line(line: bytes, lineno: int, name: str) -> Any:
    """A JSON line as orjson reads it, or as Python's json module does where orjson refuses it (``NaN``,
    ``Infinity``, ``1e400``: what ``json.dumps`` writes for non-finite floats), so that such a value is
    reported as the field it is in, not as a broken line; an InputError when neither reads it."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        import json

        try:
            return json.loads(line)
        except (ValueError, RecursionError):
            raise InputError(f"{name} line {lineno}: not a JSON record ({exc})", HINT) from None


def read_records(source: str | os.PathLike | IO | None, keep_ranges: bool = False) -> list[dict[str, Any]]:
    """All records from a path, ``-``/None (stdin) or an open binary/text file object, as a list
    (``keep_ranges``: see :func:`iter_records`)."""
    return list(iter_records(source, keep_ranges))


def iter_records(source: str | os.PathLike | IO | None, keep_ranges: bool = False) -> Iterator[dict[str, Any]]:
    """Stream records from a path, ``-``/None (stdin) or an open file object, checking each line.

    Records are yielded one at a time so that a caller extracting columns (``table.build``) never holds
    every full record at once. Raises :class:`InputError` for the first bad line, or at the end if there
    was no record at all. Records come without ``ranges`` (raw NVTX texts prof does not use) unless
    ``keep_ranges``: the report and diff need them for the ``ProfilerStep#N`` steps.
    """
    if source is None or str(source) == "-":
        yield from _read(getattr(sys.stdin, "buffer", sys.stdin), "<stdin>", keep_ranges=keep_ranges)
        return
    if hasattr(source, "read"):
        yield from _read(cast(IO, source), getattr(source, "name", "<stream>"), keep_ranges=keep_ranges)
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
        mode = os.fstat(fh.fileno()).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero: no end, no lines
            raise InputError(f"{path}: a device, not a record file", HINT)
        yield from _read(fh, path, keep_ranges=keep_ranges)


def _read(fh: IO, name: str, keep_ranges: bool = False) -> Iterator[dict[str, Any]]:
    """The records of ``fh``, checked :data:`CHUNK` at a time, column by column (:meth:`_LineReader.checked`)."""
    reader = _LineReader(name, check=False, keep_ranges=keep_ranges)
    record = reader.record
    recs: list[dict[str, Any]] = []  # records waiting to be checked (and those read after them)
    lines: list[int] = []
    for lineno, line in enumerate(fh, 1):
        try:
            rec = record(line, lineno)
        except InputError:
            reader.checked(recs, lines)  # a bad field on an earlier line is the first error
            raise
        if rec is None:
            continue
        recs.append(rec)
        lines.append(lineno)
        if len(recs) >= CHUNK:
            yield from reader.checked(recs, lines)
            recs, lines = [], []
    yield from reader.checked(recs, lines)
    reader.finish()
    _policy.add(reader.skipped, reader.first_bad)


class _LineReader:
    """One line at a time: the record it holds (None for a blank line or a skipped record), or an
    :class:`InputError`. ``count`` counts the records read, ``skipped`` those of them dropped for a bad
    field (under :func:`skipping_bad`), ``first_bad`` the first of those.

    With ``check``, each record's fields are checked as it is read (:mod:`pyprof.prof.fastread` reads
    only odd lines this way); without, the caller checks them a chunk at a time, per column, with
    :meth:`checked`. ``keep_ranges``: records keep their ``ranges`` (prof does not read them)."""

    def __init__(self, name: str, check: bool = True, path: str | None = None, offset: int = 0,
                 keep_ranges: bool = False):
        self.name = name
        self.checks = prof_checks(keep_ranges)
        self.keep_ranges = keep_ranges
        self.legacy: dict | None = None
        self.count = 0
        self.check = check
        self.skip = _policy.skip
        self.skipped = 0
        self.first_bad: tuple[str, int, int, str] | None = None
        self.where = (path or name, offset)  # how a skipped record's place is told (see BadRecords.first)
        # the file's record format (pyprof.records) and whether it announces an end line: from its header
        # line; a part of a file (``offset``) reads them from the file's first line
        head = read_line(path) if path is not None and offset > 0 else {}
        self.version = check_version(head, name) if head else UNVERSIONED
        self.ends = RecordEnds(inside=head.get(END_FLAG) is True)
        self.fast = 0  # records the block reader (fastread) has read but not counted yet

    def state(self) -> tuple:
        return self.count, self.skipped, self.first_bad, self.ends.copy()

    def restore(self, state: tuple) -> None:
        self.count, self.skipped, self.first_bad, ends = state
        self.ends = ends.copy()
        self.fast = 0

    def reject(self, lineno: int, check: Check, rec: dict[str, Any]) -> None:
        """A record with a bad field: a :class:`RecordError`, or (skipping) counted."""
        problem = check.problem(rec.get(check.name))
        if not self.skip:
            raise RecordError(f"{self.name} line {lineno}: {problem}", BAD_HINT, name=self.name, line=lineno,
                              field=check.name)
        self.skipped += 1
        if self.first_bad is None:
            self.first_bad = (*self.where, lineno, problem)

    def checked(self, recs: list[dict[str, Any]], lines: list[int]) -> list[dict[str, Any]]:
        """``recs`` (read from ``lines``) less those with a bad field (:func:`good_records`)."""
        return good_records(recs, lines, self.checks, self.reject)

    def _accept(self, rec: dict[str, Any], lineno: int) -> dict[str, Any] | None:
        """A record read but not known good: checked now (``check``), or left to :meth:`checked`."""
        self.count += 1
        if self.check:
            bad = bad_field(rec, self.checks)
            if bad is not None:
                self.reject(lineno, bad, rec)
                return None
        return rec

    def header(self, line: bytes, lineno: int) -> None:
        """A header line (:data:`pyprof.records.HEADER_PREFIX`): its format version, checked, is the
        version of the lines after it. Only the first line holds one; one further on is a file appended
        to another (``cat a.dict b.dict``): its version must be the same."""
        try:
            head = orjson.loads(line)
        except orjson.JSONDecodeError:
            head = None
        if head.__class__ is not dict:
            raise InputError(f"{self.name} line {lineno}: a broken record file header", HINT)
        if is_end(head):
            self.ends.end(head, self.count + self.fast, f"{self.name} line {lineno}")
            return
        self.ends.header(head, self.count + self.fast)
        version = check_version(head, self.name)
        if lineno > 1 and version != self.version and self.count:
            raise InputError(f"{self.name} line {lineno}: a header of record format {version} after records "
                             f"of format {self.version}", "parse each file into a file of its own")
        self.version = version

    def record(self, line: bytes | str, lineno: int) -> dict[str, Any] | None:
        name = self.name
        if isinstance(line, str):
            line = line.encode()
        if line[:2] == b'{"':  # the fast path: parse's JSON lines
            if line.startswith(HEADER_PREFIX):
                self.header(line, lineno)
                return None
            rec = _json_line(line, lineno, name)
            if rec.__class__ is dict and not self.keep_ranges:
                rec.pop("ranges", None)
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
        if self.version == UNVERSIONED and rec.get("tid").__class__ is str:
            rec["tid"] = thread_id(rec["tid"])  # format 1: a torch.profiler trace's decimal text
        if "kShortName" not in rec or "kDuration" not in rec:
            raise InputError(f"{name} line {lineno}: record without kShortName/kDuration", HINT)
        return self._accept(rec, lineno)

    def finish(self, allow_empty: bool = False) -> None:
        """The end of the file (``allow_empty``: of a part of it, whose caller checks the whole): refused
        where it was cut short (:class:`~pyprof.records.RecordEnds`), holds no records, or only bad ones."""
        self.ends.finish(self.count)
        if allow_empty:
            return
        self.ends.check(self.name)
        if self.count > self.skipped:
            return
        if self.skipped and self.first_bad is not None:
            raise InputError(f"{self.name}: all {self.skipped} records have a bad field, the first: line "
                             f"{self.first_bad[2]}: {self.first_bad[3]}", FIX_HINT)
        raise InputError(f"{self.name} holds no records (empty file)", HINT)


def _lenient_legacy(text: str) -> Any:
    """A PyProf ``str(dict)`` line holding ``nan``, ``inf`` or ``-inf`` (how ``str`` writes non-finite
    floats, which ``ast.literal_eval`` refuses), read with those names as floats, so that such a value is
    reported as the field it is in; None when the line does not read that way either."""
    import ast

    class _Floats(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in ("nan", "inf"):
                return ast.copy_location(ast.Constant(float(node.id)), node)
            return node

    if len(text) > LEGACY_MAX:  # (as decode_legacy_pyprof bounds it)
        return None
    try:
        value = ast.literal_eval(_Floats().visit(ast.parse(text, mode="eval")))
        return as_lists(value) if isinstance(value, dict) else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # (MarkerError: a ValueError)
        return None


def _slow_line(line: bytes, lineno: int, name: str) -> Any:
    """Anything but a plain JSON record line: blank (None), a PyProf dict line, or an error."""
    if lineno == 1 and line.startswith(b"SQLite format 3"):
        raise InputError(f"{name} is an SQLite export, not a record file",
                         f"run `pyprof parse {name} -o out.dict` first, then `pyprof prof out.dict`")
    stripped = line.strip()
    if not stripped:
        return None
    if stripped[:2] == b"{'":
        text = stripped.decode("utf-8", "replace")
        try:
            return decode_legacy_pyprof(text)
        except MarkerError:
            rec = _lenient_legacy(text)
            if rec is None:
                raise InputError(f"{name} line {lineno}: malformed PyProf dict line", HINT) from None
            return rec
    if stripped[:1] in (b"{", b"["):
        return _json_line(stripped, lineno, name)
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
    elif rec.get("dir") in BACKWARD_DIRS and rec.get("args") is None:
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
