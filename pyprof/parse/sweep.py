"""Which NVTX ranges are open on a thread at a time: a per-thread sweep, O((R + K) log R).

Input: ranges (thread, start, end, label) and queries (thread, time) -- the queries are kernels'
API-call starts. A range is open at ``t`` when ``start <= t < end``. Output: for every query the
*stack* of open ranges (outermost first), interned so that queries under the same sequence of labels
share one stack id (and one decode downstream).

Push/pop ranges on one thread nest properly; for those the sweep is vectorised with numpy:
ranges sorted by (start, -end), depth from a searchsorted over sorted ends, the parent of each range
from a searchsorted over (depth, position), the innermost open range of a query from a searchsorted
over starts plus a walk up the parents (one numpy step per nesting level), and label stacks interned
level by level. Threads whose ranges overlap without nesting (start/end ranges, nvprof) fall back to
a plain Python active-set sweep, still one pass per thread, never a query per kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyprof.parse import limits


class StackLabels:
    """The interned label stacks: ``stack_labels[sid]`` is a tuple of label ids (outermost first).

    A stack of a nested thread is stored as (its parent's stack id, its own label) and made into its
    tuple only when asked for (then kept): the consumers ask only for the stacks kernels are launched
    under, and a tuple per stack would cost the square of the nesting depth (8 GB for one stack
    40,000 deep). The stacks of overlapping threads (:func:`_sweep_general`) are stored as tuples."""

    def __init__(self) -> None:
        self._parent: list[int] = []
        self._label: list[int] = []
        self._pairs: dict[tuple[int, int], int] = {}  # (parent stack id, label) -> stack id
        self._tuples: dict[int, tuple] = {}  # stacks stored or already made as tuples
        self._index: dict[tuple, int] = {}  # stacks stored as tuples -> stack id

    def __len__(self) -> int:
        return len(self._parent)

    def child(self, parent: int, label: int) -> int:
        """The id of stack ``parent`` (-1: none) with ``label`` pushed on it (a new id where new)."""
        sid = self._pairs.get((parent, label))
        if sid is None:
            sid = self._pairs[(parent, label)] = len(self._parent)
            self._parent.append(parent)
            self._label.append(label)
        return sid

    def intern(self, labels: tuple) -> int:
        """The id of the stack ``labels`` (the one a nested thread made, where it did)."""
        sid = self._index.get(labels)
        if sid is not None:
            return sid
        ps = -1
        for lab in labels:
            ps = self._pairs.get((ps, lab), -2)
            if ps == -2:
                break
        if labels and ps >= 0:
            return ps
        sid = self._index[labels] = len(self._parent)
        self._parent.append(-2)  # (never walked: the tuple is kept)
        self._label.append(-1)
        self._tuples[sid] = labels
        return sid

    def __getitem__(self, sid: int) -> tuple:
        sid = int(sid)
        if not 0 <= sid < len(self._parent):
            raise IndexError(sid)
        done = self._tuples.get(sid)
        if done is not None:
            return done
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
    """Interned label stacks. ``stack_labels[sid]`` is a tuple of label ids (outermost first):
    :class:`StackLabels`.

    * ``q_sid[q]``: stack id of query q (-1: nothing open).
    * ``q_chain(q_idx, depth)``: range index at nesting ``depth`` (0 = outermost) of the stacks of
      queries ``q_idx`` (the range instance, for op ids).
    * ``r_sid[r]`` / ``r_parent[r]``: stack id of range r (its own label innermost) and its parent
      range index (-1 at top level); for registering forward ops.
    """

    stack_labels: StackLabels
    q_sid: np.ndarray
    r_sid: np.ndarray
    r_parent: np.ndarray
    _q_inner: np.ndarray
    _r_depth: np.ndarray
    _q_tuples: dict

    def q_chain(self, q_idx: np.ndarray, depth: np.ndarray) -> np.ndarray:
        q_idx = np.asarray(q_idx, dtype=np.int64)
        depth = np.asarray(depth, dtype=np.int64)
        out = self._q_inner[q_idx].copy()
        # nested threads: walk up from the innermost range to the wanted depth
        while True:
            ok = out >= 0
            d = np.where(ok, self._r_depth[np.where(ok, out, 0)], -1)
            step = ok & (d > depth)
            if not step.any():
                break
            out[step] = self.r_parent[out[step]]
        # fallback threads stored explicit tuples
        for j, q in enumerate(q_idx.tolist()):
            t = self._q_tuples.get(q)
            if t is not None:
                out[j] = t[depth[j]] if depth[j] < len(t) else -1
        return out


def _nested(s: np.ndarray, e: np.ndarray):
    """Depth and parent (positions within this thread) if the ranges nest properly, else None."""
    n = len(s)
    es = np.sort(e, kind="stable")
    depth = np.arange(n, dtype=np.int64) - np.searchsorted(es, s, side="right")
    parent = np.full(n, -1, dtype=np.int64)
    if n and depth.min() < 0:
        return None
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
    return depth, parent


def open_stacks(r_thread, r_start, r_end, r_label, q_thread, q_time) -> Stacks:
    """Sweep ranges against queries (all numpy arrays; threads and labels are ints)."""
    r_thread = np.asarray(r_thread, dtype=np.int64)
    r_start = np.asarray(r_start, dtype=np.int64)
    r_end = np.asarray(r_end, dtype=np.int64)
    r_label = np.asarray(r_label, dtype=np.int64)
    q_thread = np.asarray(q_thread, dtype=np.int64)
    q_time = np.asarray(q_time, dtype=np.int64)
    nr, nq = len(r_start), len(q_time)
    r_depth = np.full(nr, -1, dtype=np.int64)
    r_parent = np.full(nr, -1, dtype=np.int64)
    q_inner = np.full(nq, -1, dtype=np.int64)
    fallback: list[tuple[np.ndarray, np.ndarray]] = []
    max_depth = limits.get("depth")

    valid = r_end > r_start
    order = np.lexsort((-r_end, r_start, r_thread))
    order = order[valid[order]]
    if len(order):
        th_sorted = r_thread[order]
        bounds = np.flatnonzero(np.diff(th_sorted)) + 1
        groups = np.split(order, bounds)
    else:
        groups = []
    q_order = np.argsort(q_thread, kind="stable")
    q_th_sorted = q_thread[q_order]
    for g in groups:
        th = r_thread[g[0]]
        lo, hi = np.searchsorted(q_th_sorted, [th, th + 1])
        qs = q_order[lo:hi]
        s, e = r_start[g], r_end[g]
        nested = _nested(s, e)
        if nested is None:
            fallback.append((g, qs))
            continue
        depth, parent = nested
        if len(depth) and int(depth.max()) >= max_depth:
            # a query walks up its ranges one level at a time, and a record lists them all: bounded first
            raise limits.exceeded(f"ranges nest {int(depth.max()) + 1:,} deep on one thread", "depth",
                                  int(depth.max()) + 1)
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
    stack_labels = StackLabels()
    r_sid = np.full(nr, -1, dtype=np.int64)
    by_depth = np.argsort(r_depth, kind="stable")
    depth_sorted = r_depth[by_depth]
    for d in range((int(r_depth.max()) + 1) if nr else 0):
        lo, hi = np.searchsorted(depth_sorted, [d, d + 1])
        at = by_depth[lo:hi]  # (one sort, not a scan of every range per depth)
        if not len(at):
            continue
        psid = r_sid[r_parent[at]] if d else np.full(len(at), -1, dtype=np.int64)
        width = int(r_label.max()) + 1
        uniq, inv = np.unique((psid + 1) * width + r_label[at], return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for k, key in enumerate(uniq.tolist()):
            ids[k] = stack_labels.child(key // width - 1, key % width)
        r_sid[at] = ids[inv.reshape(-1)]
    q_sid = np.where(q_inner >= 0, r_sid[np.maximum(q_inner, 0)], -1) if nr else np.full(nq, -1, np.int64)

    # overlapping (non-nesting) threads: an active-set sweep in Python
    q_tuples: dict[int, tuple] = {}
    for g, qs in fallback:
        _sweep_general(g, qs, r_start, r_end, r_label, q_time, r_sid, r_parent, q_sid, q_tuples, stack_labels)
    return Stacks(stack_labels, q_sid, r_sid, r_parent, q_inner, r_depth, q_tuples)


def _sweep_general(g, qs, r_start, r_end, r_label, q_time, r_sid, r_parent, q_sid, q_tuples,
                   stack_labels: StackLabels):
    def intern(rs: tuple) -> int:
        return stack_labels.intern(tuple(int(r_label[r]) for r in rs))

    starts = r_start[g].tolist()
    ends = r_end[g].tolist()
    rows = g.tolist()
    qs = qs[np.argsort(q_time[qs], kind="stable")]
    qtimes = q_time[qs].tolist()
    # events: range starts (as their own query, stack incl. itself) and kernel queries, by time;
    # at equal times ranges open before the query sees them (start <= t).
    active: list[int] = []  # positions into g, in (start, -end) order
    i = 0
    for qi, t in zip(qs.tolist() + [None], qtimes + [None], strict=False):
        while i < len(rows) and (t is None or starts[i] <= t):
            s_i = starts[i]
            active = [a for a in active if ends[a] > s_i]
            active.append(i)
            chain = tuple(rows[a] for a in active)
            r_sid[rows[i]] = intern(chain)
            r_parent[rows[i]] = rows[active[-2]] if len(active) > 1 else -1
            i += 1
        if qi is None:
            break
        active = [a for a in active if ends[a] > t]
        if active:
            chain = tuple(rows[a] for a in active)
            q_sid[qi] = intern(chain)
            q_tuples[qi] = chain
