"""Read a JSON-lines record file straight into prof's columns, block by block, without a dict per record.

``pyprof parse`` writes every record with the same field order (:data:`pyprof.records.FIELDS`), except
that torch.profiler records (:mod:`pyprof.parse.kineto.lines`) have ``ranges`` after ``opDir``, just
before ``opId``. A line is cut at six top-level key markers (:data:`KD` .. :data:`SQ`; and :data:`OI` in
the torch.profiler order); each marker holds an unescaped quote, which cannot occur inside a JSON string,
so it can only be a key. The cut gives:

* the *static* part (kind and names; pid..apiName; layer..atenSizes): repeated across a training loop, so
  its bytes are the key of a table of distinct static parts, each decoded once; a record is a code into it;
* the *varying* part (kDuration..correlationId; apiStart, apiEnd; seqId..subSeqId, less ``ranges``):
  gathered for a whole block of lines and decoded with one ``orjson.loads`` call;
* ``ranges``: not decoded (prof does not use it; the line reader skips it too).

Any line that does not cut this way (the header line, another field order, a PyProf dict line, a blank
or bad line) goes through :mod:`pyprof.prof.load`'s line reader, with the same errors and line numbers; a
block whose varying parts do not decode, or fail a check, is read again line by line. So the columns are
always those of ``record_columns(load.iter_records(path))``.

Fields are checked as the line reader checks them (:data:`pyprof.records.CHECKS`) at no cost per record:
a static part once, when first seen; the varying fields of a block column by column. Records skipped under
``load.skipping_bad`` are counted in :attr:`Columns.skipped`, and :meth:`Columns.arrays` reports them in
the process that builds the table, whatever process decoded the lines.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import orjson

from pyprof.errors import InputError
from pyprof.prof.fields import STATIC, VARYING
from pyprof.records import UNVERSIONED, RecordEnds, thread_id

# (later fields: record files written before them lack them)
_STATIC_SET = frozenset(STATIC) - {"gpuProps", "aten", "atenSizes"}
_VARYING_SET = frozenset(VARYING)
_INTERN = frozenset(("kind", "kShortName", "kLongName", "gpu", "mod", "op", "cdtype"))
_SHARE = frozenset(("layer", "trace"))
_INT_FIELDS = ("kDuration", "start", "end", "apiStart", "opId", "subSeqId")  # integers in parse's records (or null)

KD, PID, AS, RG, LY, SQ, OI = (b',"kDuration":', b',"pid":', b',"apiStart":', b',"ranges":', b',"layer":',
                               b',"seqId":', b',"opId":')
BLOCK = 8 << 20


@functools.cache
def _checks() -> tuple[tuple, tuple]:
    """``(position, check)`` of each static and each varying field with a documented type
    (:data:`pyprof.records.CHECKS`), by position in :data:`STATIC` / :data:`VARYING`."""
    from pyprof.records import CHECKS

    return tuple((i, CHECKS[k]) for i, k in enumerate(STATIC) if k in CHECKS), \
        tuple((i, CHECKS[k]) for i, k in enumerate(VARYING) if k in CHECKS)


def freeze(value: Any) -> Any:
    """A hashable stand-in for a list field (lists of str/int; anything odd keeps its own identity), to
    pool equal ``layer``/``trace`` lists into one object."""
    if value.__class__ is list:
        frozen = tuple(value)
        try:
            hash(frozen)
        except TypeError:
            return id(value)
        return frozen
    return value if value is None else id(value)


class Columns:
    """Distinct static parts, one code per record, and the varying fields as lists; ``skipped``: records
    dropped for a bad field (under ``load.skipping_bad``), ``first_bad`` the first of them."""

    def __init__(self):
        self.statics: list[tuple] = []
        self.index: dict[Any, int] = {}  # static-part bytes (or a frozen record) -> code
        self.codes: Any = []  # a list while read, an int64 array once packed (pack)
        self.var: dict[str, Any] = {k: [] for k in VARYING}  # (each the same: a list or an int64 array)
        self.pools: dict[str, dict] = {k: {} for k in STATIC}
        self.skipped = 0
        self.first_bad: tuple[str, int, int, str] | None = None
        self.ends = RecordEnds()  # the header and end lines read (see pyprof.records.RecordEnds)

    def static_code(self, values: tuple, key: Any) -> int:
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.statics)
            self.statics.append(self._pool(values))
        return code

    def _pool(self, values: tuple) -> tuple:
        """One object per distinct value of a field, across every static part."""
        out = []
        for k, v in zip(STATIC, values, strict=True):
            pool = self.pools[k]
            if k in _INTERN:
                v = pool.setdefault(v, v)
            elif k in ("args", "gpuProps") and v is not None:  # (prof keys devices by gpuProps' id)
                v = pool.setdefault(orjson.dumps(v, option=orjson.OPT_SORT_KEYS if k == "gpuProps" else 0), v)
            elif k in _SHARE:
                v = pool.setdefault(freeze(v), v)
            out.append(v)
        return tuple(out)

    def record_code(self, rec: dict) -> int:
        """The static code of a record read the slow way (a whole dict)."""
        values = tuple(map(rec.get, STATIC))
        key: tuple[str, Any]
        try:
            key = ("rec", orjson.dumps(values))
        except TypeError:  # not serialisable: its own static part
            key = ("id", len(self.statics))
        return self.static_code(values, key)

    def add_record(self, rec: dict) -> None:
        self.codes.append(self.record_code(rec))
        for k in VARYING:
            self.var[k].append(rec.get(k))

    def add_var(self, dicts: list, whole: bool = False) -> bool:
        """Append the varying fields of ``dicts``; False (nothing appended) when a value fails its check,
        or (``whole``: every record must hold every varying field) when one lacks a field."""
        var = self.var
        try:
            from operator import itemgetter

            rows = list(map(itemgetter(*VARYING), dicts))
        except KeyError:
            if whole:
                return False
            rows = [tuple(map(d.get, VARYING)) for d in dicts]
        if rows:
            cols = list(zip(*rows, strict=True))
            for i, check in _checks()[1]:
                if not all(map(check.ok, cols[i])):
                    return False
            for k, col in zip(VARYING, cols, strict=True):
                var[k].extend(col)
        return True

    def pack(self) -> Columns:
        """Made compact for sending to another process (a worker's columns, pickled): the codes and each
        all-integer field as one int64 array (one buffer, not a million int objects), equal ``dir`` strings
        one object. :meth:`extend` and :meth:`arrays` take either form; the values are the same."""
        self.codes = np.asarray(self.codes, dtype=np.int64)
        for k in _INT_FIELDS:
            col = self.var[k]
            if col and set(map(type, col)) == {int}:  # not bool, float or None
                with contextlib.suppress(OverflowError):  # beyond int64: stays a list
                    self.var[k] = np.array(col, dtype=np.int64)
        pool: dict = {}
        self.var["dir"] = list(map(pool.setdefault, self.var["dir"], self.var["dir"]))
        return self

    def extend(self, other: Columns) -> None:
        self.ends.merge(other.ends)
        self.skipped += other.skipped
        self.first_bad = self.first_bad or other.first_bad
        keys = {code: key for key, code in other.index.items() if code >= 0}  # (-1: a layout read the slow way)
        remap = np.asarray([self.static_code(values, keys[code]) for code, values in enumerate(other.statics)],
                           dtype=np.int64)
        mapped = remap[np.asarray(other.codes, dtype=np.int64)] if len(other.codes) else np.zeros(0, np.int64)
        self.codes = np.concatenate([np.asarray(self.codes, dtype=np.int64), mapped])
        for k in VARYING:
            mine, theirs = self.var[k], other.var[k]
            if isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray):
                self.var[k] = np.concatenate([mine, theirs])
            else:
                self.var[k] = _as_list(mine) + _as_list(theirs)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every field of :data:`~pyprof.prof.fields.KEYS` as an object array, one entry per record. The records skipped
        for a bad field are counted now (here: the columns of every decoding process are in)."""
        from pyprof.prof.load import policy

        if self.skipped:
            policy().add(self.skipped, self.first_bad)
            self.skipped, self.first_bad = 0, None
        codes = np.asarray(self.codes, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for j, k in enumerate(STATIC):
            distinct = np.fromiter((t[j] for t in self.statics), dtype=object, count=len(self.statics))
            out[k] = distinct[codes] if len(codes) else np.zeros(0, dtype=object)
        dir_pool: dict = {}
        self.var["dir"] = list(map(dir_pool.setdefault, self.var["dir"], self.var["dir"]))
        for k in VARYING:
            col = self.var.pop(k)
            if isinstance(col, np.ndarray):  # packed: Python ints again, as decoded
                out[k] = col.astype(object)
            else:
                out[k] = np.fromiter(col, dtype=object, count=len(col))
        self.var = {k: [] for k in VARYING}
        return out

    def __len__(self) -> int:
        return len(self.codes)


def record_columns(records: Iterable[dict[str, Any]]) -> dict[str, np.ndarray]:
    """:meth:`Columns.arrays` of records already decoded (a stream, PyProf lines, ``pyprof run``'s), one
    dict at a time: the columns the block reader gives for the same records."""
    cols = Columns()
    for rec in records:
        cols.add_record(rec)
    return cols.arrays()


def _as_list(col) -> list:
    return col.tolist() if isinstance(col, np.ndarray) else col


def read_columns(path: str | os.PathLike, start: int = 0, end: int | None = None, name: str | None = None,
                 allow_empty: bool = False) -> Columns:
    """The columns of the records in bytes ``[start, end)`` of ``path`` (line-aligned; default: all)."""
    from pyprof.prof.load import _LineReader

    path = os.fspath(path)
    if end is None:
        end = os.path.getsize(path)
    name = name or path
    cols = Columns()
    reader = _LineReader(name, path=path, offset=start)
    with open(path, "rb") as fh:
        if end > start:
            try:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # not mappable: the part's bytes, read whole
                fh.seek(start)
                _map_blocks(fh.read(end - start), 0, end - start, cols, reader)
            else:
                with mm:
                    _map_blocks(mm, start, end, cols, reader)
    reader.finish(allow_empty)
    cols.skipped, cols.first_bad, cols.ends = reader.skipped, reader.first_bad, reader.ends
    return cols


def _map_blocks(mm: mmap.mmap | bytes, start: int, end: int, cols: Columns, reader) -> None:
    """Windows of the mapped file (or of its bytes), each ending after a newline, read in place (no copy
    of the file); each window's pages are given back once read, so the file never counts whole in the
    process's memory."""
    lines = 0
    pos = start
    page = mmap.PAGESIZE
    while pos < end:
        stop = min(pos + BLOCK, end)
        cut = mm.rfind(b"\n", pos, stop) + 1
        if cut <= pos:  # no newline in this window: a line longer than it
            cut = mm.find(b"\n", stop, end) + 1
        if cut <= pos:  # the last line, without a newline
            _block(mm[pos:end] + b"\n", 0, end - pos + 1, cols, reader, lines)
            break
        lines = _block(mm, pos, cut, cols, reader, lines)
        done = pos // page * page
        with contextlib.suppress(OSError, ValueError, AttributeError):  # (no madvise on this platform)
            if not isinstance(mm, bytes):
                mm.madvise(mmap.MADV_DONTNEED, done, cut // page * page - done)
        pos = cut


def _block(buf, start: int, size: int, cols: Columns, reader, lines_before: int) -> int:
    """Records of ``buf[start:size]`` (bytes or a mapped file; whole lines, each ending in a newline);
    returns the line count so far."""
    find = buf.find
    rfind = buf.rfind
    index = cols.index
    codes = cols.codes
    pieces = [b"[0"]
    append = pieces.append
    slow: list[tuple[int, dict]] = []  # (position among this block's records, record)
    nrec = 0
    kineto = False  # a line cut in the torch.profiler order (see below)
    known_pos, known_no = start, lines_before
    pos = start
    nslow = 0  # lines read the slow way (records or not)
    before = reader.state()
    kin = False  # the last line cut was in the torch.profiler order: try that first
    while pos < size:
        nl = find(b"\n", pos)
        if buf[pos:pos + 2] == b'{"':
            a = find(KD, pos, nl)
            b = find(PID, a, nl)
            c = find(AS, b, nl)
            k = cut = False
            if kin:
                e = find(LY, c, nl)
                g = rfind(OI, e, nl)
                d = rfind(RG, e, g)
                f = rfind(SQ, e, d)
                cut = k = pos < a < b < c < e < f < d < g
            if not cut:
                d = find(RG, c, nl)
                f = rfind(SQ, d, nl)  # from the end: ranges (the longest field) is never scanned
                e = rfind(LY, d, f)
                cut = pos < a < b < c < d < e < f
                if not cut and not kin and pos < a < b < c < d:
                    # torch.profiler's order: layer right after apiEnd, ranges after opDir, then opId
                    # and subSeqId (the markers taken from the end: ranges, opId and subSeqId hold no
                    # object key)
                    e = find(LY, c, d)
                    g = rfind(OI, d, nl)
                    d = rfind(RG, e, g)
                    f = rfind(SQ, e, d)
                    cut = k = c < e < f < d < g
                kin = k
            if cut:
                key = buf[pos:a] + buf[b:c] + buf[e:f]
                code = index.get(key)
                if code is None:
                    code = _new_static(key, cols, reader.version)
                if code is not None and code >= 0:
                    codes.append(code)
                    append(b",{")
                    append(buf[a + 1:b])
                    if k:  # (apiStart and apiEnd lie between c and e in this order)
                        append(buf[c:e])
                        append(buf[f:d])
                        append(buf[g:nl])
                        kineto = True
                    else:
                        append(buf[c:d])
                        append(buf[f:nl])
                    nrec += 1
                    pos = nl + 1
                    continue
        # the slow way: this line alone, through the line reader
        known_no += buf[known_pos:pos].count(b"\n")
        known_pos = pos
        nslow += 1
        reader.fast = nrec - len(slow)  # (a header or end line counts the records before it)
        try:
            rec = reader.record(buf[pos:nl + 1], known_no + 1)
        except InputError:
            if nrec > len(slow) and not reader.skip:  # a bad field on an earlier line is the first error
                reader.restore(before)
                _block_slow(buf[start:pos], Columns(), reader, lines_before)
            raise
        if rec is not None:
            slow.append((nrec, rec))
            append(b",0")
            codes.append(cols.record_code(rec))
            nrec += 1
        pos = nl + 1
    reader.fast = 0
    if _decode(pieces, slow, nrec, cols, kineto):
        reader.count += nrec - len(slow)
        return lines_before + nslow + nrec - len(slow)
    # a varying part that does not decode, or a bad value in one: read the block again, line by line
    del codes[len(codes) - nrec:]
    reader.restore(before)
    return _block_slow(buf[start:size], cols, reader, lines_before)


def _decode(pieces: list[bytes], slow: list[tuple[int, dict]], nrec: int, cols: Columns, kineto: bool) -> bool:
    """The block's varying parts decoded in one go into ``cols``, its slow lines' records in their places;
    False where they do not decode or hold a bad value."""
    try:
        dicts = orjson.loads(b"".join(pieces) + b"]")
    except orjson.JSONDecodeError:
        return False
    if len(dicts) != nrec + 1:
        return False
    del dicts[0]
    for i, rec in slow:
        dicts[i] = rec
    # (a field the torch.profiler cut skipped, between ranges and opId, would be missing: read again)
    return cols.add_var(dicts, whole=kineto)


def _block_slow(buf: bytes, cols: Columns, reader, lines_before: int) -> int:
    lineno = lines_before
    for line in buf.splitlines(keepends=True):
        lineno += 1
        rec = reader.record(line, lineno)
        if rec is not None:
            cols.add_record(rec)
    return lineno


def _new_static(key: bytes, cols: Columns, version: int) -> int | None:
    """Decode a new static part of a file of record format ``version``; None when it is not one (the
    line then goes the slow way)."""
    try:
        rec = orjson.loads(key + b"}")
    except orjson.JSONDecodeError:
        rec = None
    if rec.__class__ is not dict or not _STATIC_SET <= rec.keys() or not _VARYING_SET.isdisjoint(rec):
        cols.index[key] = -1  # not parse's layout: lines with this part go the slow way
        return None
    if version == UNVERSIONED and rec["tid"].__class__ is str:  # format 1: a decimal text
        rec["tid"] = thread_id(rec["tid"])
    values = tuple(map(rec.get, STATIC))
    if not all(check.ok(values[i]) for i, check in _checks()[0]):
        cols.index[key] = -1  # a bad field: the line reader names (or skips) each line with this part
        return None
    return cols.static_code(values, key)
