"""Turn one source's kernels and NVTX ranges into kernel records (shared by nsys and nvprof).

The readers hand over :class:`Activities` (every kernel/memcpy/memset in output order, integer columns
with -1 for unknown, what repeats as codes into tables of distinct values) and the ranges as
:class:`RangeWindow` objects in time order (nsys: window by window as they are read; nvprof: all in one).

:class:`Streamed`, per window: the sweep (:mod:`pyprof.parse.sweep`) gives each launch its stack of
open ranges, each distinct stack is decoded (:mod:`pyprof.parse.decode`) and serialised once, then op
instance ids, per-op kernel indices and backward links; records as dicts or spliced JSON lines.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

if TYPE_CHECKING:
    import pandas as pd

from pyprof.parse import decode as dec
from pyprof.parse.db import Database, escaped
from pyprof.parse.sweep import open_stacks
from pyprof.records import CHECKS, nulled

CHUNK = 2048  # records per output chunk
#: lines formatted and joined at a time (a piece of bytes): ~0.4 MB, where 2048 lines (3 MB) were 2-3x slower
#: to make, each chunk's new large strings paying their page faults and cache misses twice (join, encode)
PIECE = 256


@dataclass
class Stats:
    """What a run found, for the summary line; ``dropped``: what no record keeps as the export held it, by
    reason (the end line's); ``escaped0``: :func:`pyprof.parse.db.escaped` as the source began."""

    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    malformed: int = 0
    warnings: list[str] = field(default_factory=list)
    dropped: dict = field(default_factory=dict)
    escaped0: int = field(default_factory=escaped)


#: reasons of :attr:`Stats.dropped`
ESCAPED = "texts not UTF-8, kept with their bytes escaped"
NEVER_POPPED = "NVTX push ranges never popped (closed by nsys at the capture's end), left out"
BACKWARDS = "NVTX ranges ending before they start, left out"


def count(counts: dict, reason: str, n: int) -> None:
    if n:
        counts[reason] = counts.get(reason, 0) + n


def pylist(values) -> list:
    """A column as a list of plain Python values, nulls (None, NaN, -1 in int columns) as None."""
    arr = np.asarray(values)  # (a pandas Series too: nvprof's columns)
    if arr.dtype == object:
        import pandas as pd  # (object columns are nvprof's, which reads through pandas anyway)

        null, vals = pd.isna(arr), arr.tolist()
    elif arr.dtype.kind in "iu":
        null, vals = arr < 0, arr.tolist()
    elif arr.dtype.kind == "f":
        null = np.isnan(arr)
        vals = np.where(null, 0, arr).astype(np.int64).tolist()
    else:  # (booleans: no nulls)
        return arr.tolist()
    return [None if m else v for v, m in zip(vals, null.tolist(), strict=True)] if null.any() else vals


def op_range(r: int, sid: int, decoded: dict, st, labels: list, bare_names) -> int | None:
    """The forward range ``r``'s op instance: the range at its stack's op position (``r`` or an enclosing
    op range), whose index is its kernels' ``opId``. ``st``: the ranges' stack table (``stack_labels``,
    ``r_parent``); ``decoded``: stack id -> decoded stack, filled here when no kernel was launched directly
    under that stack (emit_nvtx's ``aten::linear`` around ``aten::addmm``)."""
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


def group_codes(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal values across ``columns`` (nulls equal to nulls): a code per row (0..m-1, in
    order of first appearance) and the first row of each code. Each column is coded (:func:`_column_codes`)
    and the codes combined in mixed radix, re-coded only when the next product could overflow int64."""
    n = len(columns[0]) if columns else 0
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for col in columns:
        codes, width = _column_codes(col)
        width = max(width, 1)
        if span * width >= 1 << 62:
            key, span = _column_codes(key)
            span = max(span, 1)
        key = key * width + codes
        span *= width
    return _first_codes(key, span)


#: an integer column whose values span at most this many times its length (or this many values in all)
#: is coded by its offset from its smallest value, without a sort
_DIRECT_SPAN = 4
_DIRECT_MIN = 1 << 16
#: ``np.minimum.at`` finds first appearances without a sort (1 ms for 375k rows, against 35 ms for
#: ``np.unique``) since numpy 1.25 made ``ufunc.at`` fast; before, a sort is the faster way
_FAST_AT = np.lib.NumpyVersion(np.__version__) >= "1.25.0"


def _column_codes(col) -> tuple[np.ndarray, int]:
    """Codes 0..width-1 of a column's values (equal values, equal codes; nulls equal to nulls) and the
    width. Integers in numpy, by offset where they span few values, else by a sort; anything else (nvprof's
    object columns) by pandas' hash."""
    arr = np.asarray(col)
    n = len(arr)
    if arr.dtype.kind in "iub":
        if not n:
            return np.zeros(0, dtype=np.int64), 1
        arr = arr.astype(np.int64, copy=False)
        lo, hi = int(arr.min()), int(arr.max())
        if hi - lo < max(_DIRECT_SPAN * n, _DIRECT_MIN):
            return arr - lo, hi - lo + 1
        uniq, inv = np.unique(arr, return_inverse=True)
        return inv.reshape(-1).astype(np.int64, copy=False), len(uniq)
    import pandas as pd  # (object columns are nvprof's, which reads through pandas anyway)

    codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniq)


def _first_codes(key: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``key`` (values in 0..span-1) numbered by first appearance, and the first row of each."""
    n = len(key)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if _FAST_AT and span <= max(_DIRECT_SPAN * n, _DIRECT_MIN):
        first = np.full(span, n, dtype=np.int64)
        np.minimum.at(first, key, np.arange(n, dtype=np.int64))
        present = np.flatnonzero(first < n)
        firsts = first[present]
    else:
        uniq, firsts, inv = np.unique(key, return_index=True, return_inverse=True)
        key, span = inv.reshape(-1), len(uniq)
        present = np.arange(span)
    order = np.argsort(firsts, kind="stable")
    rank = np.empty(span, dtype=np.int64)
    rank[present[order]] = np.arange(len(order), dtype=np.int64)
    return rank[key], firsts[order]


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
    for i in np.flatnonzero(values < 0 if null is None else null).tolist():
        out[i] = "null"
    return out


def _ints(series: pd.Series) -> np.ndarray:
    """An id/time column as int64 with -1 for null."""
    arr = series.to_numpy()
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    import pandas as pd  # (nvprof's columns)

    f = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    return np.where(np.isnan(f), -1, f).astype(np.int64)


def join_first(left_keys: np.ndarray, right_keys: np.ndarray) -> np.ndarray:
    """For each left key, the index of the FIRST right row with that key, or -1 (a left join)."""
    right_keys = np.asarray(right_keys, dtype=np.int64)
    left_keys = np.asarray(left_keys, dtype=np.int64)
    if not len(right_keys):
        return np.full(len(left_keys), -1, dtype=np.int64)
    uniq, first = np.unique(right_keys, return_index=True)
    out = np.empty(len(left_keys), dtype=np.int64)
    for lo in range(0, len(left_keys), 1 << 20):  # (a million at a time: few temporaries, on 10M kernels too)
        left = left_keys[lo:lo + (1 << 20)]
        pos = np.minimum(np.searchsorted(uniq, left), len(uniq) - 1)
        out[lo:lo + len(left)] = np.where(uniq[pos] == left, first[pos], -1)
    return out


def take(values: np.ndarray, idx: np.ndarray, fill=-1) -> np.ndarray:
    """``values[idx]`` with ``fill`` where ``idx`` is -1 (object arrays get None)."""
    values = np.asarray(values)
    out = np.empty(len(idx), dtype=object) if values.dtype == object else np.full(len(idx), fill, values.dtype)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


class PreparedSource:
    """The :class:`~pyprof.parse.source.Source` state and methods shared by the SQLite sources (nsys,
    nvprof): each defines ``prepared()``, which reads its export once into a :class:`Streamed` that builds
    the records."""

    def __init__(self, path: str, db: Database | None = None):
        self.path = path
        self.db = db or Database(path)
        self.warnings: list[str] = []
        self.stats = Stats(warnings=self.warnings)

    if TYPE_CHECKING:  # each source's own: everything read and attributed
        def prepared(self) -> Streamed: ...

    @property
    def dropped(self) -> dict[str, int]:  # (see Stats)
        return self.stats.dropped

    def records(self):
        yield from self.prepared().records()


# -- the streaming assembler (Nsight Systems) ----------------------------------------------------------

@dataclass
class Activities:
    """Every kernel, memcpy and memset of an export, in output order ((start, correlationId), stable),
    as integer columns (-1 for null) and codes into two tables of what repeats: ``heads`` (kind and
    kernel names) and ``mids`` (pid, tid, device, GPU, stream, grid, block, bytes, copy kind, API name),
    rows of record values. ``thread`` is the launching thread's globalTid (-1: no API call found)."""

    start: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    api_start: np.ndarray
    api_end: np.ndarray
    thread: np.ndarray
    pid: np.ndarray
    is_kernel: np.ndarray
    hcode: np.ndarray
    mcode: np.ndarray
    heads: list
    mids: list

    @property
    def n(self) -> int:
        return len(self.start)


@dataclass
class RangeWindow:
    """The NVTX ranges that start in one window of time, in the order of the export (``gidx``: a range's
    index among all the export's ranges, its kernels' ``opId``), with ``label`` codes into ``labels``
    ((text, domain) pairs, this window's own). ``t_hi``: where the next window's ranges start (None: the
    last window); the kernels launched before it, and after the previous window's, are this window's."""

    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gidx: np.ndarray | None  # (None until the windows are numbered: see nsys.windows)
    label: np.ndarray
    labels: list
    t_hi: int | None


class _WindowLinker:
    """:class:`~pyprof.parse.decode.BackwardLinker` for ranges registered window by window, in time
    order: a lookup in a window sees this window's forward ranges and, per (pid, seq), the latest one of
    the windows before (their ranges all start earlier), so only that one is kept of them."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, tuple[list, list]] = {}

    def add_window(self, entries: list[tuple]) -> None:
        """``entries``: (pid, seq, time, value) in registration order."""
        touched: dict[tuple, None] = {}
        for pid, seq, time, value in entries:
            key = (pid, seq)
            times_vals = self._by_key.setdefault(key, ([], []))
            if key not in touched:  # (of the windows before, the latest only)
                touched[key] = None
                del times_vals[0][:-1]
                del times_vals[1][:-1]
            times_vals[0].append(time)
            times_vals[1].append(value)
        for key in touched:
            times, vals = self._by_key[key]
            if any(b < a for a, b in zip(times, times[1:], strict=False)):
                order = sorted(range(len(times)), key=times.__getitem__)  # stable: ties keep their order
                self._by_key[key] = ([times[i] for i in order], [vals[i] for i in order])

    def find(self, pid, seq, time: int):
        entry = self._by_key.get((pid, seq))
        if not entry:
            return None
        i = bisect.bisect_right(entry[0], time) - 1
        return entry[1][i] if i >= 0 else None


class Streamed:
    """Records of an export whose NVTX ranges arrive window by window (:class:`RangeWindow`, in time
    order), one window of ranges (and those still open from before) held at a time. A window's launches
    are attributed as from all ranges at once: every range open at a launch started in that window or
    an earlier one, a backward kernel's forward op earlier still, and ``subSeqId`` counts carry over.
    Records go out in output order once every one before them is attributed. Whether texts hold bare
    op names is undecided until a text it would change shows up; ``resolve_bare`` then tells it (a look
    at the whole export). ``close``: what ends the source's reading (a forked reader, connections)."""

    def __init__(self, acts: Activities, windows, source: str, stats: Stats, resolve_bare=None, close=None,
                 range_pid=None, range_tid=None):
        self.acts, self.source, self.stats = acts, source, stats
        # the process and thread of a range's thread key (default: an nsys globalTid, the pid in bits 24-47)
        self._range_pid = range_pid or (lambda thread: (thread >> 24) & 0xFFFFFF)
        self._range_tid = range_tid or (lambda thread: thread & 0xFFFFFF)
        self.n = n = acts.n
        self._windows = windows
        self._close = close
        self._bare: bool | None = None  # (bare_names: see _bare_for)
        self._resolve_bare = resolve_bare
        stats.kernels = int(acts.is_kernel.sum())
        stats.copies = n - stats.kernels
        stats.attributed = stats.malformed = 0
        self.op_id = np.full(n, -1, dtype=np.int64)
        self.sub_seq = np.full(n, -1, dtype=np.int32)
        self.fwin = np.full(n, -1, dtype=np.int32)  # window of a row's fields (-1: no ranges open)
        self.fcode = np.zeros(n, dtype=np.int32)
        q = (acts.thread >= 0) & (acts.api_start >= 0)
        qpos = np.flatnonzero(q).astype(np.int32 if n < 1 << 31 else np.int64)
        self._q_order = qpos[np.argsort(acts.api_start[qpos], kind="stable")]
        self._q_times = acts.api_start[self._q_order]
        # rows 0..k-1 are final once every launch among them is attributed: after the window whose
        # t_hi passes the largest launch time up to k
        launch = np.where(q, acts.api_start, np.iinfo(np.int64).min)
        self._ready_at = np.maximum.accumulate(launch) if n else launch
        self._tables: dict[int, list] = {-1: [([], dec.decode([], False).fields)]}
        self.nulled: dict[str, int] = {}  # fields written as null where their check refused them (see lines)
        self._parts: tuple | None = None
        self._strs: dict[int, np.ndarray] = {}
        self._last_row: dict[int, int] = {}

    def close(self) -> None:
        """Stop reading windows: the source's reader ended and its connections closed now, not whenever
        the garbage collector gets to them (after a failed write, that would be at interpreter exit,
        in no set order with the objects they use). Idempotent; a no-op once every window was read."""
        stop = getattr(self._windows, "close", None)
        if stop is not None:
            stop()
        if self._close is not None:
            self._close, close = None, self._close
            close()

    # -- per window ---------------------------------------------------------------------------------
    def _bare_for(self, labels: list) -> bool:
        """``bare_names`` for a window's labels: decided where a text shows PyTorch <= 1.x emit_nvtx, or
        (by ``resolve_bare``) where one would read differently with bare names; else (still undecided)
        False, which reads these texts as True would."""
        if self._bare is None:
            texts = [t for t, _ in labels if t]
            if dec.looks_like_legacy_emit_nvtx(texts):
                self._bare = True
            elif any(dec.classify(t, False) != dec.classify(t, True) for t in texts):
                self._bare = bool(self._resolve_bare()) if self._resolve_bare is not None else False
        return bool(self._bare)

    def _run(self):
        """Attribute window after window; yields how many rows are final after each."""
        carry = None  # (thread, start, end, gidx, label, labels) of ranges still open
        linker = _WindowLinker()
        counts = [np.zeros(0, np.int64)] * 3  # see _number
        qi = 0
        empty = self._tables[-1][0][1]
        for w, win in enumerate(self._windows):
            nc, labels, bare, r = self._window_ranges(win, carry)
            r_thread, r_start, r_end, r_gidx, r_label = r
            # the launches of this window
            qj = len(self._q_order) if win.t_hi is None else \
                int(np.searchsorted(self._q_times, win.t_hi, side="left"))
            rows, qi = np.sort(self._q_order[qi:qj]), qj
            st, decoded, ranges_of, op_local = self._stacks(rows, r, labels, bare)
            fields: dict[Any, dict] = {sid: d.fields for sid, d in decoded.items()}
            # a row's key into this window's table: its stack id, or (linked backward rows) a number past the
            # stack ids standing for a (stack id, forward fields) key of ``linked_keys``
            row_key = st.q_sid.astype(np.int64)
            linked_keys: dict[tuple, int] = {}
            linked = np.zeros(len(rows), dtype=np.int64)
            self._link(linker, rows, decoded, st, nc, r, labels, bare, fields, ranges_of, row_key, linked_keys,
                       op_local, linked, last=win.t_hi is None)
            self.op_id[rows] = op_local
            self._number(counts, rows, op_local, linked, r_gidx, r_end, win.t_hi)
            # the window's table of (ranges, fields); rows with nothing open use the shared empty one
            codes, first = group_codes([row_key])
            key_of = {v: k for k, v in linked_keys.items()}
            table = [(ranges_of[k], fields[k]) if k != -1 else ([], empty)
                     for k in (key_of.get(u, u) for u in row_key[first].tolist())]
            checked = [f for _, f in table]
            for i in nulled(checked, self.nulled, np.bincount(codes, minlength=len(table))):
                table[i] = (table[i][0], checked[i])
            self._tables[w], self.fwin[rows], self.fcode[rows] = table, w, codes
            self._last_row[w] = int(rows[-1]) if len(rows) else -1
            if win.t_hi is None:
                carry = None
                yield self.n
                continue
            # carried over: what is still open where the next window starts
            keep = np.flatnonzero((r_end > win.t_hi) & (r_end > r_start))
            used, lab = np.unique(r_label[keep], return_inverse=True)
            carry = (r_thread[keep], r_start[keep], r_end[keep], r_gidx[keep], lab.reshape(-1).astype(np.int64),
                     [labels[i] for i in used.tolist()])
            yield int(np.searchsorted(self._ready_at, win.t_hi, side="left"))
        yield self.n  # (rows no window took keep fwin -1: no ranges)
        stats = self.stats
        count(stats.dropped, ESCAPED, escaped() - stats.escaped0)
        told = {r: n for r, n in stats.dropped.items() if r != NEVER_POPPED}  # (that one has its own line)
        if told:
            stats.warnings.append("; ".join(f"{n:,} {r}" for r, n in told.items()))
        if stats.malformed:
            stats.warnings.append(
                f"{stats.malformed} malformed pyprof/PyProf marker range(s): not decodable, or a field of "
                "the wrong type (left out); their kernels keep the raw range text in `ranges`")


    def _window_ranges(self, win, carry) -> tuple:
        """A window's ranges, those carried over (all earlier: their indices are smaller) then its own, counted:
        (how many carried, labels, bare_names, (thread, start, end, gidx, label) arrays)."""
        nc = 0 if carry is None else len(carry[0])
        labels = list(win.labels) + ([] if carry is None else carry[5])
        cols = [win.thread, win.start, win.end, win.gidx, win.label]
        if nc:
            cols = [np.concatenate([c, x]) for c, x in zip(carry[:4], cols[:4], strict=True)] + \
                   [np.concatenate([carry[4] + len(win.labels), win.label])]
        r = tuple(np.asarray(c, dtype=np.int64) for c in cols)
        bare = self._bare_for(win.labels)
        new_lab, stats = r[4][nc:], self.stats
        count(stats.dropped, BACKWARDS, int((r[2][nc:] < r[1][nc:]).sum()))  # (the sweep skips them)
        if len(new_lab) and labels:
            bad = np.array([dec.classify(t, bare).malformed for t, _ in labels], dtype=bool)
            stats.malformed += int(bad[new_lab].sum())
        return nc, labels, bare, r

    def _stacks(self, rows, r, labels: list, bare: bool) -> tuple:
        """The open-range stacks of a window's launches ``rows``: (stacks, decoded fields and ranges of each
        stack id a launch has, each row's op instance (a range's global index, or -1))."""
        acts = self.acts
        st = open_stacks(r[0], r[1], r[2], r[4], acts.thread[rows], acts.api_start[rows],
                         lambda th: f"{self._range_tid(th)} of process {self._range_pid(th)}")
        q_sid = st.q_sid
        self.stats.attributed += int(((q_sid >= 0) & acts.is_kernel[rows]).sum())
        sids = np.unique(q_sid[q_sid >= 0]).tolist()
        decoded = {sid: dec.decode([labels[lab][0] for lab in st.stack_labels[sid]], bare) for sid in sids}
        ranges_of = {sid: [{"text": labels[lab][0], "domain": labels[lab][1]} for lab in st.stack_labels[sid]]
                     for sid in sids}
        op_pos_of_sid = np.full(len(st.stack_labels) + 1, -1, dtype=np.int64)
        for sid, d in decoded.items():
            if d.op_pos is not None:
                op_pos_of_sid[sid] = d.op_pos
        q_pos = op_pos_of_sid[q_sid] if len(rows) else np.zeros(0, np.int64)
        op_local = np.full(len(rows), -1, dtype=np.int64)
        sel = np.flatnonzero(q_pos >= 0)
        if len(sel):
            found = st.q_chain(sel, q_pos[sel])
            op_local[sel] = np.where(found >= 0, r[3][np.maximum(found, 0)], -1)
        return st, decoded, ranges_of, op_local

    def _link(self, linker, rows, decoded, st, nc, r, labels, bare, fields, ranges_of, row_key, linked_keys,
              op_local, linked, last: bool = False) -> None:
        """Backward kernels -> their forward op, for one window: register its own forward ranges, then link its
        backward launches. In the ``last`` window (nvprof's only one) no later window looks anything up, so
        only the sequence numbers its own backward launches need are registered."""
        r_thread, r_start, _, r_gidx, r_label = r
        link_of_sid = {sid: d.link_seq for sid, d in decoded.items() if d.link_seq is not None}
        needed = set(link_of_sid.values()) if last else None
        seqs_of_label = [dec.forward_seqs(t, bare) for t, _ in labels]
        reg = np.array([bool(s) if needed is None else bool(set(s) & needed) for s in seqs_of_label], dtype=bool)
        new = nc + np.flatnonzero(reg[r_label[nc:]]) if len(labels) else np.zeros(0, np.int64)
        entries = []
        fwd_of_sid: dict[int, dict] = {}
        for r in new.tolist():  # each forward range opening a sequence number its parent range does not
            sid, p = int(st.r_sid[r]), int(st.r_parent[r])
            if sid < 0:
                continue
            own = set(seqs_of_label[r_label[r]])
            if needed is not None:
                own &= needed
            if p >= 0:
                own -= set(seqs_of_label[r_label[p]])
            if not own:
                continue
            f = fwd_of_sid.get(sid)
            if f is None:
                f = fwd_of_sid[sid] = dec.forward_fields([labels[x][0] for x in st.stack_labels[sid]], bare)
            op = op_range(r, sid, decoded, st, labels, bare)
            value = (f, int(r_gidx[op]) if op is not None else None)
            pid = self._range_pid(int(r_thread[r]))
            entries += [(pid, seq, int(r_start[r]), value) for seq in own]
        linker.add_window(entries)
        if not link_of_sid:
            return
        want = np.flatnonzero(np.isin(st.q_sid, np.fromiter(link_of_sid, dtype=np.int64)))
        pids = self.acts.pid[rows[want]].tolist()
        times = self.acts.api_start[rows[want]].tolist()
        for i, pid, t in zip(want.tolist(), pids, times, strict=True):
            sid = int(row_key[i])
            found = linker.find(pid if pid >= 0 else None, link_of_sid[sid], t)
            if found is None:
                continue
            f, fwd_op = found
            if fwd_op is not None and fields[sid].get("dir") == "bprop":
                op_local[i] = fwd_op
                linked[i] = 1
            key = (sid, id(f))
            if key not in fields:
                fields[key] = dec.link(decoded[sid].fields, f)
                ranges_of[key] = ranges_of[sid]
            row_key[i] = linked_keys.setdefault(key, len(st.stack_labels) + 1 + len(linked_keys))

    def _number(self, counts: list, rows, op_local, linked, r_gidx, r_end, t_hi) -> None:
        """``subSeqId`` (each row's index among its op instance's kernels, or copies, in launch order; a
        backward instance shares its forward op's id and is counted apart) of this window's rows, counting
        on from the earlier windows'. ``counts``: [keys, counts, ends] of the instances met so far, keyed
        (opId, linked, is_kernel) as one int, ascending; an instance is forgotten once its range has
        closed, a linked backward instance never (its end: the largest int64)."""
        has = np.flatnonzero(op_local >= 0)
        if not len(has):
            return
        acts = self.acts
        kern = acts.is_kernel[rows].astype(np.int64)
        corr, api = acts.corr[rows], acts.api_start[rows]
        order = has[np.lexsort((corr[has], api[has], kern[has], linked[has], op_local[has]))]
        ids, lk, kd = op_local[order], linked[order], kern[order]
        first = np.r_[True, (ids[1:] != ids[:-1]) | (lk[1:] != lk[:-1]) | (kd[1:] != kd[:-1])]
        starts = np.maximum.accumulate(np.where(first, np.arange(len(ids)), 0))
        local = np.arange(len(ids)) - starts
        group_first = np.flatnonzero(first)
        sizes = np.diff(np.r_[group_first, len(ids)])
        gid = ids[group_first]
        gkey = (gid * 2 + lk[group_first]) * 2 + kd[group_first]  # ascending, as the groups are
        keys, vals, ends = counts
        pos = np.minimum(np.searchsorted(keys, gkey), max(len(keys) - 1, 0))
        hit = (keys[pos] == gkey) if len(keys) else np.zeros(len(gkey), dtype=bool)
        base = np.where(hit, vals[pos] if len(keys) else 0, 0)
        self.sub_seq[rows[order]] = local + np.repeat(base, sizes)
        if t_hi is None:
            return
        vals = vals.copy()
        vals[pos[hit]] = base[hit] + sizes[hit]
        # a forward instance's range is one of this window's (r_gidx ascending): its end
        new = ~hit
        at = np.minimum(np.searchsorted(r_gidx, gid[new]), max(len(r_gidx) - 1, 0))
        new_end = np.where(lk[group_first][new] > 0, np.iinfo(np.int64).max, r_end[at] if len(r_gidx) else 0)
        keys = np.concatenate([keys, gkey[new]])
        vals = np.concatenate([vals, sizes[new]])
        ends = np.concatenate([ends, new_end])
        keep = ends > t_hi
        order2 = np.argsort(keys[keep], kind="stable")
        counts[:] = [keys[keep][order2], vals[keep][order2], ends[keep][order2]]

    # -- output -------------------------------------------------------------------------------------
    def _chunks(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, int]]:
        """Row ranges (at most :data:`CHUNK` rows) in output order, each once its rows are final; the
        tables of windows no longer needed are dropped as they go."""
        hi = self.n if hi is None else hi
        done = lo
        for ready in self._run():
            ready = min(ready, hi)
            while done < ready:
                top = min(ready, done + CHUNK)
                yield done, top
                done = top
            for w in [w for w, last in self._last_row.items() if last < done]:
                self._tables.pop(w, None)
                self._strs.pop(w, None)
                del self._last_row[w]

    def _frags(self, lo: int, hi: int) -> list:
        """The serialised ranges and fields of rows lo..hi-1."""
        fw, fc = self.fwin[lo:hi], self.fcode[lo:hi]
        out = np.empty(hi - lo, dtype=object)
        for w in np.unique(fw).tolist():
            strs = self._strs.get(w)
            if strs is None:
                strs = self._strs[w] = _strings(orjson.dumps({"ranges": r, **f})[1:-1].decode()
                                                for r, f in self._tables[w])
            m = fw == w
            out[m] = strs[fc[m]]
        return out.tolist()

    def checked_parts(self) -> tuple[list[dict], list[dict], list[dict]]:
        """The records' repeated pieces as dicts, heads (kind, names) and middles (device ... API name),
        each value its check refuses made null (:func:`pyprof.records.nulled`), and those nulled per piece."""
        if self._parts is None:
            a = self.acts
            heads = [{"kind": k, "source": self.source, "kShortName": sh, "kLongName": lg} for k, sh, lg in a.heads]
            mids = [dict(zip(("pid", "tid", "device", "gpu", "gpuProps", "stream", "grid", "block", "bytes", "copyKind",
                              "apiName"), m, strict=True)) for m in a.mids]
            self._parts = (heads, mids, [nulled(heads, {}), nulled(mids, {})])
        return self._parts

    def _nulls(self, clo: int, chi: int) -> np.ndarray:
        """Rows clo..chi-1 whose duration its check refuses; their nulls counted (:meth:`checked_parts`)."""
        a, check = self.acts, CHECKS["kDuration"]
        s, e = a.start[clo:chi], a.end[clo:chi]
        bad = (s >= 0) & (e >= 0) & ((e - s < check.low) | (e - s > check.high))
        count(self.nulled, "kDuration", int(bad.sum()))
        for codes, parts in zip((a.hcode[clo:chi], a.mcode[clo:chi]), self.checked_parts()[2], strict=True):
            uses = np.bincount(codes, minlength=max(parts) + 1) if parts else ()
            for code, names in parts.items():
                for name in names:
                    count(self.nulled, name, int(uses[code]))
        return bad

    def lines(self, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
        """Records as JSON lines, in chunks of bytes: the bytes of :meth:`records` dumped one by one. What
        repeats (the head: kind and names; the middle: device ... API name; each distinct range stack's
        fields) is serialised once and spliced in by one f-string per record (no format string parsed per
        record, as a ``%`` template would be), :data:`PIECE` lines joined at a time; a value its check
        refuses as null."""
        a = self.acts
        head_parts, mid_parts, _ = self.checked_parts()
        heads = _strings(orjson.dumps(h)[:-1].decode() + ',"kDuration":' for h in head_parts)
        mids = _strings("," + orjson.dumps(m)[1:-1].decode() + ',"apiStart":' for m in mid_parts)
        for clo, chi in self._chunks(lo, hi):
            s, e = a.start[clo:chi], a.end[clo:chi]
            known = (s >= 0) & (e >= 0) & ~self._nulls(clo, chi)
            dur = e - s
            # a line's parts, in its order: head, kDuration, start, end, correlationId, middle, apiStart, apiEnd,
            # ranges and fields, opId, subSeqId
            cols = (heads[a.hcode[clo:chi]].tolist(), _json_ints(np.where(known, dur, 0), ~known), _json_ints(s),
                    _json_ints(e), _json_ints(a.corr[clo:chi]), mids[a.mcode[clo:chi]].tolist(),
                    _json_ints(a.api_start[clo:chi]), _json_ints(a.api_end[clo:chi]), self._frags(clo, chi),
                    _json_ints(self.op_id[clo:chi]), _json_ints(self.sub_seq[clo:chi]))
            for i in range(0, chi - clo, PIECE):
                yield "".join([f'{h}{d},"start":{s0},"end":{e0},"correlationId":{co}{m}{a0},"apiEnd":{a1},{f},"opId":{o},'
                               f'"subSeqId":{ss}}}\n' for h, d, s0, e0, co, m, a0, a1, f, o, ss
                               in zip(*(c[i:i + PIECE] for c in cols), strict=True)]).encode()

    def records(self) -> Iterator[dict[str, Any]]:
        """Records as dicts (shared sub-objects: do not mutate); the same values as :meth:`lines`."""
        a = self.acts
        heads, mids, _ = self.checked_parts()
        for clo, chi in self._chunks():
            ints = [pylist(c[clo:chi]) for c in (a.start, a.end, a.corr, a.api_start, a.api_end)]
            op_ids, subs = self.op_id[clo:chi].tolist(), self.sub_seq[clo:chi].tolist()
            fw, fc = self.fwin[clo:chi].tolist(), self.fcode[clo:chi].tolist()
            bad = self._nulls(clo, chi).tolist()
            for j, (h, m, s, e, corr, a0, a1) in enumerate(zip(a.hcode[clo:chi].tolist(), a.mcode[clo:chi].tolist(),
                                                                *ints, strict=True)):
                rec = {**heads[h], "kDuration": e - s if s is not None and e is not None and not bad[j] else None,
                       "start": s, "end": e, "correlationId": corr, **mids[m], "apiStart": a0, "apiEnd": a1}
                ranges, fields = self._tables[fw[j]][fc[j]]
                rec["ranges"] = ranges
                rec.update(fields)
                rec["opId"] = op_ids[j] if op_ids[j] >= 0 else None
                rec["subSeqId"] = subs[j] if subs[j] >= 0 else None
                yield rec
