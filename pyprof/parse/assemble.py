"""Turn one source's activity and range tables into kernel records (shared by nsys and nvprof).

The readers hand over two DataFrames in a common shape:

* ``acts``: one row per kernel/memcpy/memset with the record's base columns (:data:`ACT_COLUMNS`) and
  ``thread`` (an int key of the launching thread, -1 when the API call is unknown). Integer columns
  may use -1 for "unknown" (none of them can be negative), or NaN.
* ``ranges``: one row per NVTX range: ``thread``, ``pid``, ``start``, ``end`` and either ``label`` (an
  int code into the ``labels`` list of (text, domain) pairs) or ``text`` and ``domain``.

Steps: the sweep (:mod:`pyprof.parse.sweep`) gives each launch its stack of open ranges -> each
distinct stack is decoded once (:mod:`pyprof.parse.decode`) and serialised once -> op instance ids
and per-op kernel indices -> backward kernels linked to their forward op -> records streamed one at a
time in kernel start order, as dicts (:meth:`Prepared.records`) or JSON lines (:meth:`Prepared.lines`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from pyprof.parse import decode as dec
from pyprof.parse.sweep import open_stacks

ACT_COLUMNS = ("kind", "kShortName", "kLongName", "start", "end", "correlationId", "pid", "tid", "device",
               "gpu", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "bytes", "copyKind",
               "apiName", "apiStart", "apiEnd", "thread")
BASE_KEYS = ("kind", "source", "kShortName", "kLongName", "kDuration", "start", "end", "correlationId", "pid",
             "tid", "device", "gpu", "stream", "grid", "block", "bytes", "copyKind", "apiName", "apiStart",
             "apiEnd")
CHUNK = 2048  # records per output chunk


@dataclass
class Stats:
    """What a run found, for the summary line."""

    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    ranges: int = 0
    malformed: int = 0
    warnings: list[str] = field(default_factory=list)


def _sub_seq(op_id: np.ndarray, linked: np.ndarray, is_kernel: np.ndarray, corr: np.ndarray,
             api_start: np.ndarray) -> np.ndarray:
    """``subSeqId``: each row's index among its op instance's kernels (or copies) in launch order. An
    instance is (opId, linked): a backward instance shares its forward op's id and is counted apart."""
    sub_seq = np.full(len(op_id), -1, dtype=np.int64)
    has_op = np.flatnonzero(op_id >= 0)
    if len(has_op):
        kern = is_kernel.astype(np.int64)
        order = has_op[np.lexsort((corr[has_op], api_start[has_op], kern[has_op], linked[has_op], op_id[has_op]))]
        ids, lk, kd = op_id[order], linked[order], kern[order]
        first = np.r_[True, (ids[1:] != ids[:-1]) | (lk[1:] != lk[:-1]) | (kd[1:] != kd[:-1])]
        starts = np.maximum.accumulate(np.where(first, np.arange(len(ids)), 0))
        sub_seq[order] = np.arange(len(ids)) - starts
    return sub_seq


def pylist(values) -> list:
    """A column as a list of plain Python values, nulls (None, NaN, -1 in int columns) as None."""
    if isinstance(values, pd.Series):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.dtype == object:
        mask = pd.isna(arr)
        if not mask.any():
            return arr.tolist()
        return [None if m else v for v, m in zip(arr.tolist(), mask.tolist(), strict=True)]
    if arr.dtype.kind in "iu":
        out = arr.tolist()
        if (arr < 0).any():
            out = [None if v < 0 else v for v in out]
        return out
    if arr.dtype.kind == "f":
        mask = np.isnan(arr)
        vals = np.where(mask, 0, arr).astype(np.int64).tolist()
        if not mask.any():
            return vals
        return [None if m else v for v, m in zip(vals, mask.tolist(), strict=False)]
    if arr.dtype.kind == "b":
        return arr.tolist()
    return [None if v is None else v for v in arr.tolist()]


def text_labels(ranges: pd.DataFrame) -> tuple[np.ndarray, list[tuple]]:
    """(text, domain) columns -> label id per range and the list of distinct (text, domain) pairs."""
    tcodes, texts = pd.factorize(ranges["text"], use_na_sentinel=False)
    dcodes, domains = pd.factorize(ranges["domain"], use_na_sentinel=False)
    combo = tcodes.astype(np.int64) * (len(domains) + 1) + dcodes
    lcodes, luniq = pd.factorize(combo)
    labels = []
    for key in np.asarray(luniq).tolist():
        t, d = divmod(key, len(domains) + 1)
        text, domain = texts[t], domains[d]
        labels.append((None if text is None or text != text else str(text),
                       None if domain is None or domain != domain else str(domain)))
    return lcodes.astype(np.int64), labels


class Prepared:
    """Everything computed; records are produced lazily from here."""

    def __init__(self, acts: pd.DataFrame, ranges: pd.DataFrame, source: str, stats: Stats,
                 labels: list[tuple] | None = None, bare_names: bool | None = None):
        self.source = source
        acts = acts.sort_values(["start", "correlationId"], kind="stable").reset_index(drop=True)
        n = len(acts)
        self.n = n
        kind = acts["kind"].to_numpy()
        is_kernel = kind == "kernel"
        stats.kernels = int(is_kernel.sum())
        stats.copies = n - stats.kernels
        stats.ranges = len(ranges)

        if labels is None:
            lab_of_range, labels = text_labels(ranges) if len(ranges) else (np.zeros(0, np.int64), [])
        else:
            lab_of_range = ranges["label"].to_numpy(np.int64)
        if bare_names is None:
            bare_names = dec.looks_like_legacy_emit_nvtx(t for t, _ in labels)
        self.bare_names = bare_names
        info = [dec.classify(t, bare_names) for t, _ in labels]
        if labels and len(lab_of_range):
            bad = np.array([i.malformed for i in info], dtype=bool)
            stats.malformed = int(bad[lab_of_range].sum())
            if stats.malformed:
                stats.warnings.append(
                    f"{stats.malformed} malformed pyprof/PyProf marker range(s) could not be decoded; their "
                    "kernels are written with the raw range text in `ranges`")

        thread = _ints(acts["thread"])
        api_start = _ints(acts["apiStart"])
        q_rows = np.flatnonzero((thread >= 0) & (api_start >= 0))
        r_start = ranges["start"].to_numpy(np.int64)
        st = open_stacks(ranges["thread"].to_numpy(np.int64), r_start, ranges["end"].to_numpy(np.int64),
                         lab_of_range, thread[q_rows], api_start[q_rows])
        row_sid = np.full(n, -1, dtype=np.int64)
        row_sid[q_rows] = st.q_sid
        stats.attributed = int(((row_sid >= 0) & is_kernel).sum())

        # decode each distinct stack once
        sids = np.unique(row_sid[row_sid >= 0]).tolist()
        decoded: dict[int, dec.Decoded] = {}
        for sid in sids:
            decoded[sid] = dec.decode([labels[lab][0] for lab in st.stack_labels[sid]], bare_names)
        self.ranges_of = {sid: [{"text": labels[lab][0], "domain": labels[lab][1]} for lab in st.stack_labels[sid]]
                          for sid in sids}

        # op instance ids: the range at the decoded op position
        op_pos_of_sid = np.full(len(st.stack_labels) + 1, -1, dtype=np.int64)
        for sid, d in decoded.items():
            if d.op_pos is not None:
                op_pos_of_sid[sid] = d.op_pos
        q_pos = op_pos_of_sid[st.q_sid] if len(q_rows) else np.zeros(0, np.int64)
        op_id = np.full(n, -1, dtype=np.int64)
        sel = np.flatnonzero(q_pos >= 0)
        if len(sel):
            op_id[q_rows[sel]] = st.q_chain(sel, q_pos[sel])
        self.op_id = op_id
        # backward kernels -> forward op: per row, a variant key into self.fields; a linked backward
        # kernel takes its forward op's instance id (``linked``), so all nodes of one op are one instance
        self.fields: dict[Any, dict] = {sid: d.fields for sid, d in decoded.items()}
        self.row_key: list = row_sid.tolist()
        linked = np.zeros(n, dtype=np.int64)
        self._link(acts, row_sid, decoded, st, ranges, lab_of_range, labels, bare_names, api_start, linked)
        self.empty = dec.decode([], bare_names).fields
        self.fields[-1] = self.empty
        self.ranges_of[-1] = []
        self.sub_seq = _sub_seq(op_id, linked, is_kernel, _ints(acts["correlationId"]), api_start)
        self.acts = acts
        self._parts = None

    def _link(self, acts, row_sid, decoded, st, ranges, lab_of_range, labels, bare_names, api_start, linked):
        link_of_sid = {sid: d.link_seq for sid, d in decoded.items() if d.link_seq is not None}
        if not link_of_sid or not len(ranges):
            return
        want_rows = np.flatnonzero(np.isin(row_sid, np.fromiter(link_of_sid, dtype=np.int64)))
        pid_col = pylist(acts["pid"])
        needed = set(link_of_sid.values())
        seqs_of_label = [dec.forward_seqs(t, bare_names) for t, _ in labels]
        reg_labels = np.array([bool(set(s) & needed) for s in seqs_of_label], dtype=bool)
        rows = np.flatnonzero(reg_labels[lab_of_range])
        linker = dec.BackwardLinker()
        fwd_cache: dict[int, dict] = {}

        def op_range(r: int, sid: int) -> int | None:
            """The forward range ``r``'s op instance id: the range at its stack's op position (``r`` or
            an enclosing op range), as its kernels' ``opId``; the stack is decoded here when no kernel
            was launched directly under it (emit_nvtx's ``aten::linear`` around ``aten::addmm``)."""
            d = decoded.get(sid)
            if d is None:
                d = decoded[sid] = dec.decode([labels[x][0] for x in st.stack_labels[sid]], bare_names)
            if d.op_pos is None:
                return None
            up = len(st.stack_labels[sid]) - 1 - d.op_pos
            while up > 0 and r >= 0:
                r = int(st.r_parent[r])
                up -= 1
            return r if r >= 0 else None

        r_pid = ranges["pid"].to_numpy(np.int64).tolist()
        r_start = ranges["start"].to_numpy(np.int64).tolist()
        parents = st.r_parent.tolist()
        r_sid = st.r_sid.tolist()
        lab_list = lab_of_range.tolist()
        for r in rows.tolist():
            sid = r_sid[r]
            if sid < 0:
                continue
            own = set(seqs_of_label[lab_list[r]]) & needed
            p = parents[r]
            if p >= 0:
                own -= set(seqs_of_label[lab_list[p]])
            if not own:
                continue
            f = fwd_cache.get(sid)
            if f is None:
                f = fwd_cache[sid] = dec.forward_fields([labels[x][0] for x in st.stack_labels[sid]], bare_names)
            for seq in own:
                linker.add(r_pid[r], seq, r_start[r], f, op_range(r, sid))
        linker.freeze()
        for i in want_rows.tolist():
            sid = self.row_key[i]
            found = linker.find_op(pid_col[i], link_of_sid[sid], int(api_start[i]))
            if found is None:
                continue
            f, fwd_op = found
            if fwd_op is not None and self.fields[sid].get("dir") == "bprop":
                self.op_id[i] = fwd_op
                linked[i] = 1
            key = (sid, id(f))
            if key not in self.fields:
                self.fields[key] = dec.link(decoded[sid].fields, f)
                self.ranges_of[key] = self.ranges_of[sid]
            self.row_key[i] = key

    def _columns(self, lo: int = 0, hi: int | None = None):
        a = self.acts.iloc[lo:hi]
        return {c: pylist(a[c]) for c in ACT_COLUMNS if c != "thread"}

    def _base_rows(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple]:
        hi = self.n if hi is None else hi
        c = self._columns(lo, hi)
        src = self.source
        cols = [c[k] for k in ("kind", "kShortName", "kLongName", "start", "end", "correlationId", "pid", "tid",
                               "device", "gpu", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                               "bytes", "copyKind", "apiName", "apiStart", "apiEnd")]
        for i, (kind, short, long_, s, e, corr, pid, tid, dev, gpu, stream, gx, gy, gz, bx, by, bz, nbytes,
                copy, api, a0, a1) in enumerate(zip(*cols, strict=True), lo):
            yield i, {
                "kind": kind, "source": src, "kShortName": short, "kLongName": long_,
                "kDuration": e - s if s is not None and e is not None else None, "start": s, "end": e,
                "correlationId": corr, "pid": pid, "tid": tid, "device": dev, "gpu": gpu, "stream": stream,
                "grid": [gx, gy, gz] if gx is not None else None, "block": [bx, by, bz] if bx is not None else None,
                "bytes": nbytes, "copyKind": copy, "apiName": api, "apiStart": a0, "apiEnd": a1,
            }

    def records(self) -> Iterator[dict[str, Any]]:
        """Records as dicts (shared sub-objects: do not mutate ``ranges``/``args``/... in place)."""
        op_ids, subs, keys = self.op_id.tolist(), self.sub_seq.tolist(), self.row_key
        for i, rec in self._base_rows():
            k = keys[i]
            rec["ranges"] = self.ranges_of[k]
            rec.update(self.fields[k])
            rec["opId"] = op_ids[i] if op_ids[i] >= 0 else None
            rec["subSeqId"] = subs[i] if subs[i] >= 0 else None
            yield rec

    def lines(self, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
        """Records ``lo:hi`` as JSON lines, in chunks of bytes.

        What repeats is serialised once per distinct value and spliced in: the head (kind, source and
        kernel names), the middle (device, GPU, stream, grid, block, bytes, copy kind, API name) and the
        decoded part of each distinct range stack. Rows are grouped by those keys with vectorised
        factorisation (:func:`group_codes`), so the per-record work is one ``%`` format of the
        integers, run by ``map`` over whole chunks without a Python loop body."""
        if not all(self.acts[c].dtype.kind in "iuf" for c in _INT_FIELDS):
            yield from self._lines_dicts(lo, hi)
            return
        hi = self.n if hi is None else hi
        heads, hcode, mids, mcode, frags, fcode = self._line_parts()
        a = self.acts
        start, end = _ints(a["start"]), _ints(a["end"])
        known = (start >= 0) & (end >= 0)
        dur = np.where(known, end - start, 0)
        ints = [(dur, ~known), (start, None), (end, None), (_ints(a["correlationId"]), None),
                (_ints(a["apiStart"]), None), (_ints(a["apiEnd"]), None), (self.op_id, None), (self.sub_seq, None)]
        tmpl = '%s%s,"start":%s,"end":%s,"correlationId":%s%s%s,"apiEnd":%s,%s,"opId":%s,"subSeqId":%s}\n'
        fmt = tmpl.__mod__
        for clo in range(lo, hi, CHUNK):
            chi = min(hi, clo + CHUNK)
            d, s0, e, corr, a0, a1, o, ss = (_json_ints(v[clo:chi], None if m is None else m[clo:chi])
                                             for v, m in ints)
            yield "".join(map(fmt, zip(heads[hcode[clo:chi]].tolist(), d, s0, e, corr, mids[mcode[clo:chi]].tolist(),
                                       a0, a1, frags[fcode[clo:chi]].tolist(), o, ss, strict=True))).encode()

    def _line_parts(self):
        """The JSON fragments :meth:`lines` splices (object arrays of str) and each row's code into them;
        computed once (before a forked writer splits the rows, so both halves share them)."""
        if self._parts is None:
            a = self.acts
            ids = set(HEAD_IDS + MID_IDS) <= set(a.columns)  # integer stand-ins (nsys): hashing ints is cheaper
            hcode, hfirst = group_codes([a[c].to_numpy() for c in
                                         (HEAD_IDS if ids else ("kind", "kShortName", "kLongName"))])
            head_cols = {c: pylist(a[c].to_numpy()[hfirst]) for c in ("kind", "kShortName", "kLongName")}
            src = self.source
            heads = _strings(orjson.dumps({"kind": k, "source": src, "kShortName": sh, "kLongName": lg})[:-1].decode()
                             + ',"kDuration":' for k, sh, lg in zip(head_cols["kind"], head_cols["kShortName"],
                                                                     head_cols["kLongName"], strict=True))
            # pid and tid sit next to the device/stream/grid/API fields, and repeat as much
            mid_names = ("pid", "tid", "device", "gpu", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY",
                         "blockZ", "bytes", "copyKind", "apiName")
            mcode, mfirst = group_codes([a[c].to_numpy() for c in (MID_IDS if ids else mid_names)])
            m = {c: pylist(a[c].to_numpy()[mfirst]) for c in mid_names}
            mids = _strings("," + orjson.dumps({
                "pid": pid, "tid": tid, "device": dev, "gpu": gpu, "stream": stream,
                "grid": [gx, gy, gz] if gx is not None else None,
                "block": [bx, by, bz] if bx is not None else None,
                "bytes": nbytes, "copyKind": copy, "apiName": api})[1:-1].decode() + ',"apiStart":'
                for pid, tid, dev, gpu, stream, gx, gy, gz, bx, by, bz, nbytes, copy, api in zip(
                    *(m[c] for c in mid_names), strict=True))
            keys = np.empty(self.n, dtype=object)
            keys[:] = self.row_key
            fcode, uniq = pd.factorize(keys)
            frags = _strings(orjson.dumps({"ranges": self.ranges_of[k], **self.fields[k]})[1:-1].decode()
                             for k in uniq.tolist())
            self._parts = (heads, hcode, mids, mcode, frags, fcode)
        return self._parts

    def _lines_dicts(self, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
        """:meth:`lines` for activity tables with non-integer columns: one dict per record."""
        frags: dict[Any, bytes] = {}
        op_ids, subs, keys = self.op_id.tolist(), self.sub_seq.tolist(), self.row_key
        dumps = orjson.dumps
        buf: list[bytes] = []
        for i, base in self._base_rows(lo, hi):
            k = keys[i]
            frag = frags.get(k)
            if frag is None:
                frag = frags[k] = dumps({"ranges": self.ranges_of[k], **self.fields[k]})[1:-1]
            o, s = op_ids[i], subs[i]
            buf.append(dumps(base)[:-1] + b"," + frag
                       + (b',"opId":%d' % o if o >= 0 else b',"opId":null')
                       + (b',"subSeqId":%d}\n' % s if s >= 0 else b',"subSeqId":null}\n'))
            if len(buf) >= CHUNK:
                yield b"".join(buf)
                buf = []
        if buf:
            yield b"".join(buf)


#: optional integer columns standing in for the head's strings (kind, kShortName, kLongName) when
#: :meth:`Prepared.lines` groups rows: equal ids give equal strings (unequal ids may too: a fragment
#: then repeats, the bytes are the same)
HEAD_IDS = ("_kind", "_short", "_long")
#: ... and for the middle's: the GPU name is a function of (pid, device), the copy kind of ``_copyk``,
#: the API name of ``_api``
MID_IDS = ("pid", "tid", "device", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "bytes",
           "_copyk", "_api")
#: columns :meth:`Prepared.lines` formats (or interns) as integers; any other dtype takes the dict path
_INT_FIELDS = ("start", "end", "correlationId", "pid", "tid", "apiStart", "apiEnd", "device", "stream", "gridX",
               "gridY", "gridZ", "blockX", "blockY", "blockZ", "bytes")


def group_codes(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal values across ``columns`` (nulls equal to nulls): a code per row (0..m-1, in
    order of first appearance) and the first row of each code. Each column is factorised by hash and the
    codes combined in mixed radix, re-factorised only when the next product could overflow int64."""
    n = len(columns[0]) if columns else 0
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for col in columns:
        codes, uniq = pd.factorize(col, use_na_sentinel=False)
        width = max(len(uniq), 1)
        if span * width >= 1 << 62:
            key, kuniq = pd.factorize(key)
            span = max(len(kuniq), 1)
        key = key * width + codes
        span *= width
    codes = pd.factorize(key)[0].astype(np.int64, copy=False)
    # codes number groups by first appearance, so a group's first row is where the running max grows
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    return codes, np.flatnonzero(new)


def _strings(values) -> np.ndarray:
    """An object array of the given strings (for fancy-indexing by code)."""
    vals = list(values)
    out = np.empty(len(vals), dtype=object)
    out[:] = vals
    return out


def _json_ints(values: np.ndarray, null: np.ndarray | None = None) -> list:
    """An int64 column as a list for ``%s`` formatting: ints, and "null" where ``null`` is set (default:
    where the value is negative, -1 standing for unknown)."""
    out = values.tolist()
    if null is None:
        null = values < 0
    if null.any():
        for i in np.flatnonzero(null).tolist():
            out[i] = "null"
    return out


def _ints(series: pd.Series) -> np.ndarray:
    """An id/time column as int64 with -1 for null."""
    arr = series.to_numpy()
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    f = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    return np.where(np.isnan(f), -1, f).astype(np.int64)


def build(acts, ranges, source, stats, labels=None, bare_names=None) -> Iterator[dict[str, Any]]:
    """Yield record dicts (all computing happens before the first yield)."""
    yield from Prepared(acts, ranges, source, stats, labels, bare_names).records()


def join_first(left_keys: np.ndarray, right_keys: np.ndarray) -> np.ndarray:
    """For each left key, the index of the FIRST right row with that key, or -1 (a left join)."""
    right_keys = np.asarray(right_keys, dtype=np.int64)
    left_keys = np.asarray(left_keys, dtype=np.int64)
    if not len(right_keys):
        return np.full(len(left_keys), -1, dtype=np.int64)
    uniq, first = np.unique(right_keys, return_index=True)
    pos = np.searchsorted(uniq, left_keys)
    pos = np.minimum(pos, len(uniq) - 1)
    hit = uniq[pos] == left_keys
    return np.where(hit, first[pos], -1)


def take(values: np.ndarray, idx: np.ndarray, fill=-1) -> np.ndarray:
    """``values[idx]`` with ``fill`` where ``idx`` is -1 (object arrays get None)."""
    values = np.asarray(values)
    if values.dtype == object:
        out = np.empty(len(idx), dtype=object)
        ok = idx >= 0
        out[ok] = values[idx[ok]]
        return out
    out = np.full(len(idx), fill, dtype=values.dtype)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


class PreparedSource:
    """The :class:`~pyprof.parse.source.Source` methods shared by the SQLite sources (nsys, nvprof):
    each defines ``_load()``, which reads its export once into a :class:`Prepared` that builds the records."""

    def prepared(self, split: bool = False) -> Prepared:
        """Everything read and attributed. ``split`` (two processes where it pays, as for a big
        torch.profiler CPU trace) is accepted and not used: an export's lines cost too little to make
        for a second process to gain (see :func:`pyprof.parse.run.write_lines`)."""
        return self._load()

    def records(self):
        yield from self._load().records()

    def lines(self):
        yield from self._load().lines()
