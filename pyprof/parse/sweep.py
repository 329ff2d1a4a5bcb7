"""Which NVTX ranges are open on a thread at a time: a per-thread sweep, O((R + K) log R).

Input: ranges (thread, start, end, label) and queries (thread, time) -- the queries are kernels'
API-call starts. A range is open at ``t`` when ``start <= t < end``. Output: for every query the
*stack* of open ranges (outermost first), interned so that queries under the same sequence of labels
share one stack id (and one decode downstream).

Push/pop ranges on one thread nest properly; for those the sweep is vectorised with numpy (searchsorted
steps, and a walk up the parents one numpy step per nesting level). Threads whose ranges overlap without
nesting (start/end ranges, nvprof) fall back to a plain Python active-set sweep, still one pass per
thread, never a query per kernel.
"""

from __future__ import annotations

import bisect
import heapq
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyprof.parse import limits


class StackLabels:
    """The interned label stacks: ``stack_labels[sid]`` is a tuple of label ids (outermost first).

    A stack is stored as (its parent's stack id, its own label) and made into its tuple only when asked
    for (then kept): the consumers ask only for the stacks kernels are launched under, and a tuple per
    stack would cost the square of the nesting depth (8 GB for one stack 40,000 deep). Both sweeps
    (nested and crossing threads) make their stacks with :meth:`child`, so a sequence of labels met on
    both is one id."""

    def __init__(self, width: int = 1) -> None:
        self.width = width  # labels are 0 .. width - 1
        self._parent: Any = array("q")
        self._label: Any = array("q")
        self._pairs: dict[int, int] = {}  # (parent stack id + 1) * width + label -> stack id
        self._tuples: dict[int, tuple] = {}  # stacks already made as tuples

    def __len__(self) -> int:
        return len(self._parent)

    def child(self, parent: int, label: int) -> int:
        """The id of stack ``parent`` (-1: none) with ``label`` pushed on it (a new id where new)."""
        key = (parent + 1) * self.width + label
        sid = self._pairs.get(key)
        if sid is None:
            sid = self._pairs[key] = len(self._parent)
            self._parent.append(parent)
            self._label.append(label)
        return sid

    def __getitem__(self, sid: int) -> tuple:
        sid = int(sid)
        if not 0 <= sid < len(self._parent):
            raise IndexError(sid)
        chain = []
        s = sid
        while s >= 0 and s not in self._tuples:
            chain.append(self._label[s])
            s = self._parent[s]
        out = (self._tuples[s] if s >= 0 else ()) + tuple(reversed(chain))
        self._tuples[sid] = out
        return out


@dataclass
class Stacks:
    """Interned label stacks (:class:`StackLabels`).

    * ``q_sid[q]``: stack id of query q (-1: nothing open).
    * ``q_chain(q_idx, depth)``: range index at nesting ``depth`` (0 = outermost) of the stacks of
      queries ``q_idx`` (the range instance, for op ids).
    * ``r_sid[r]`` / ``r_parent[r]``: stack id of range r (its own label innermost) and its parent
      range index (-1 at top level), as they were when r started; for registering forward ops.
    * ``restacked``: ranges the crossing sweep stacked again after a range under them ended (its work
      beyond one push per range).
    """

    stack_labels: StackLabels
    q_sid: np.ndarray
    r_sid: np.ndarray
    r_parent: np.ndarray
    _q_inner: np.ndarray
    _r_depth: np.ndarray
    _crossing: list  # (ranges, queries) of each thread whose ranges cross: q_chain sweeps it again
    _r_start: np.ndarray
    _r_end: np.ndarray
    _q_time: np.ndarray
    restacked: int = 0

    def q_chain(self, q_idx: np.ndarray, depth: np.ndarray) -> np.ndarray:
        q_idx = np.asarray(q_idx, dtype=np.int64)
        depth = np.asarray(depth, dtype=np.int64)
        out = self._q_inner[q_idx].copy()
        # nested threads: walk up from the innermost range to the wanted depth, one numpy step per level
        while True:
            ok = out >= 0
            d = np.where(ok, self._r_depth[np.where(ok, out, 0)], -1)
            step = ok & (d > depth)
            if not step.any():
                break
            out[step] = self.r_parent[out[step]]
        # crossing threads: their open ranges at each query, swept again (no chain is kept per query)
        for g, qs in self._crossing:
            sel = np.flatnonzero(np.isin(q_idx, qs))
            if len(sel):
                out[sel] = _open_at(g, q_idx[sel], depth[sel], self._r_start, self._r_end, self._q_time)
        return out


def _open_at(g, qs, depth, r_start, r_end, q_time) -> list[int]:
    """The range open ``depth`` deep (0: outermost; -1: none) at each query of ``qs`` on the thread of
    ranges ``g`` ((start, -end) order): the ranges begun by then, less those ended, in start order."""
    starts, ends, rows = r_start[g].tolist(), r_end[g].tolist(), g.tolist()
    order = np.argsort(q_time[qs], kind="stable")
    out = [-1] * len(qs)
    active: list[int] = []
    heap: list[tuple[int, int]] = []
    i, n = 0, len(rows)
    for j, t, d in zip(order.tolist(), q_time[qs][order].tolist(), depth[order].tolist(), strict=True):
        while i < n and starts[i] <= t:
            active.append(i)
            heapq.heappush(heap, (ends[i], i))
            i += 1
        while heap and heap[0][0] <= t:
            del active[bisect.bisect_left(active, heapq.heappop(heap)[1])]
        if d < len(active):
            out[j] = rows[active[d]]
    return out


def _depth(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """How many ranges are open under each (0: none) when it starts, whether or not they nest: the
    ranges before it in start order less those ended by its start (``s`` ascending, every ``e > s``)."""
    return np.arange(len(s), dtype=np.int64) - np.searchsorted(np.sort(e, kind="stable"), s, side="right")


def _nested(s: np.ndarray, e: np.ndarray, depth: np.ndarray):
    """Parent (positions within this thread) of each range if the ranges nest properly, else None."""
    n = len(s)
    parent = np.full(n, -1, dtype=np.int64)
    has = depth > 0
    if has.any():
        key = depth * (n + 1) + np.arange(n)
        order = np.argsort(key, kind="stable")
        skey = key[order]
        want = (depth[has] - 1) * (n + 1) + np.flatnonzero(has)
        pos = np.searchsorted(skey, want, side="left") - 1
        if (pos < 0).any():
            return None
        p = order[pos]
        if (depth[p] != depth[has] - 1).any():
            return None
        parent[has] = p
        if (e[has] > e[p]).any() or (s[has] < s[p]).any():
            return None
    return parent


def open_stacks(r_thread, r_start, r_end, r_label, q_thread, q_time, thread_name=str) -> Stacks:
    """Sweep ranges against queries (all numpy arrays; threads and labels are ints). ``thread_name``: a
    thread's key as a limit's error line names it."""
    r_thread, r_start, r_end, r_label, q_thread, q_time = (np.asarray(x, dtype=np.int64) for x in (
        r_thread, r_start, r_end, r_label, q_thread, q_time))
    nr, nq = len(r_start), len(q_time)
    r_depth = np.full(nr, -1, dtype=np.int64)
    r_parent = np.full(nr, -1, dtype=np.int64)
    q_inner = np.full(nq, -1, dtype=np.int64)
    fallback: list[tuple[np.ndarray, np.ndarray]] = []
    max_depth = limits.get("depth")

    valid = r_end > r_start
    order = np.lexsort((-r_end, r_start, r_thread))
    order = order[valid[order]]
    groups = np.split(order, np.flatnonzero(np.diff(r_thread[order])) + 1) if len(order) else []  # per thread
    q_order = np.argsort(q_thread, kind="stable")
    q_th_sorted = q_thread[q_order]
    for g in groups:
        th = r_thread[g[0]]
        lo, hi = np.searchsorted(q_th_sorted, [th, th + 1])
        qs = q_order[lo:hi]
        s, e = r_start[g], r_end[g]
        depth = _depth(s, e)
        if int(depth.max()) >= max_depth:
            # a query walks up its ranges one level at a time, and a record lists them all: bounded first,
            # whether they nest or cross
            raise limits.exceeded(f"ranges nest {int(depth.max()) + 1:,} deep on thread {thread_name(int(th))}",
                                  "depth", int(depth.max()) + 1)
        parent = _nested(s, e, depth)
        if parent is None:
            fallback.append((g, qs))
            continue
        r_depth[g] = depth
        r_parent[g] = np.where(parent >= 0, g[np.maximum(parent, 0)], -1)
        if not len(qs):
            continue
        t = q_time[qs]
        cand = np.searchsorted(s, t, side="right") - 1
        while True:
            live = cand >= 0
            closed = live.copy()
            closed[live] = e[cand[live]] <= t[live]
            if not closed.any():
                break
            cand[closed] = parent[cand[closed]]
        q_inner[qs] = np.where(cand >= 0, g[np.maximum(cand, 0)], -1)

    # intern label stacks level by level (nested ranges)
    width = int(r_label.max()) + 1 if nr else 1
    stack_labels = StackLabels(width)
    r_sid = np.full(nr, -1, dtype=np.int64)
    by_depth = np.argsort(r_depth, kind="stable")
    depth_sorted = r_depth[by_depth]
    for d in range((int(r_depth.max()) + 1) if nr else 0):
        lo, hi = np.searchsorted(depth_sorted, [d, d + 1])
        at = by_depth[lo:hi]  # (one sort, not a scan of every range per depth)
        if not len(at):
            continue
        psid = r_sid[r_parent[at]] if d else np.full(len(at), -1, dtype=np.int64)
        uniq, inv = np.unique((psid + 1) * width + r_label[at], return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for k, key in enumerate(uniq.tolist()):
            ids[k] = stack_labels.child(key // width - 1, key % width)
        r_sid[at] = ids[inv.reshape(-1)]
    q_sid = np.where(q_inner >= 0, r_sid[np.maximum(q_inner, 0)], -1) if nr else np.full(nq, -1, np.int64)

    # crossing (non-nesting) threads: an active-set sweep in Python
    restacked = 0
    for g, qs in fallback:
        restacked += _sweep_general(g, qs, r_start, r_end, r_label, q_time, r_sid, r_parent, q_sid,
                                    stack_labels, thread_name(int(r_thread[g[0]])))
    return Stacks(stack_labels, q_sid, r_sid, r_parent, q_inner, r_depth, fallback, r_start, r_end, q_time,
                  restacked)


def _sweep_general(g, qs, r_start, r_end, r_label, q_time, r_sid, r_parent, q_sid, stack_labels: StackLabels,
                   thread: str) -> int:
    """The open ranges of one thread whose ranges cross (``g``: its ranges in (start, -end) order; ``qs``:
    its queries), by events in time order: a range's start (before a query at the same time: start <=
    t), a query, and between them the ends (a heap). The open ranges are a stack in start order, each
    with the stack id of the stack up to it (a push or a pop from the top is O(1)); a range that ends
    under others stacks those above it again, the only work beyond one push per range, bounded by the
    ``cross`` limit as the stack is by ``depth`` (see :mod:`pyprof.parse.limits`). Returns the re-pushes."""
    starts = r_start[g].tolist()
    ends = r_end[g].tolist()
    labs = r_label[g].tolist()
    rows = g.tolist()
    qs = qs[np.argsort(q_time[qs], kind="stable")]
    per = limits.get("cross")
    budget = per * (len(rows) + len(qs))
    active: list[int] = []  # positions into g, ascending (start order)
    sids: list[int] = []  # stack id of active[:k + 1]
    heap: list[tuple[int, int]] = []  # (end, position) of every open range
    child = stack_labels.child
    restacked = 0

    def close(t: int) -> None:
        """Take off every range that ended by ``t``; stack again those that were above one of them."""
        nonlocal restacked
        gone = []
        while heap and heap[0][0] <= t:
            gone.append(heapq.heappop(heap)[1])
        if not gone:
            return
        gone.sort()
        k = bisect.bisect_left(active, gone[0])
        if len(active) - k == len(gone):  # all from the top
            del active[k:], sids[k:]
            return
        dead = set(gone)
        keep = [a for a in active[k:] if a not in dead]
        del active[k:], sids[k:]
        restacked += len(keep)
        if restacked > budget:
            raise limits.exceeded(f"ranges on thread {thread} cross so often that more than {per:,} ranges are "
                                  "stacked again per range and launch", "cross", per * 2)
        for a in keep:
            sids.append(child(sids[-1] if sids else -1, labs[a]))
            active.append(a)

    r_sids, r_parents, q_sids, q_at = [], [], [], []
    i = 0
    n = len(rows)
    for qi, t in zip(qs.tolist() + [None], q_time[qs].tolist() + [None], strict=True):
        while i < n and (t is None or starts[i] <= t):
            close(starts[i])
            r_parents.append(rows[active[-1]] if active else -1)
            sids.append(child(sids[-1] if sids else -1, labs[i]))  # (no deeper than the depth limit: checked)
            active.append(i)
            heapq.heappush(heap, (ends[i], i))
            r_sids.append(sids[-1])
            i += 1
        if qi is None:
            break
        close(t)
        if active:
            q_at.append(qi)
            q_sids.append(sids[-1])
    r_sid[g] = r_sids
    r_parent[g] = r_parents
    q_sid[q_at] = q_sids
    return restacked
