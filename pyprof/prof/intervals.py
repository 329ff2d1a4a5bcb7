"""Unions of time intervals ``[start, end)``: the busy time of a device or thread, and how much of a span
other work covered. One merge rule for all of them: intervals that overlap or touch join one run."""

from __future__ import annotations

import numpy as np


def merged(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals as disjoint runs ``(run starts, run ends)``, in start order."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    if not len(starts):
        return starts[:0], ends[:0]
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # an interval starts a new run where it begins after everything before it ended
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    run_end = e[new].copy()
    np.maximum.at(run_end, np.cumsum(new) - 1, e)
    return s[new], run_end


def union_length(starts, ends):
    """Total length the intervals cover (in their own type: integer ns stay exact)."""
    s, e = merged(starts, ends)
    return (e - s).sum() if len(s) else 0


class Cover:
    """The union of intervals, merged once; :meth:`covered` is how much of ``[a, b)`` it covers."""

    def __init__(self, starts, ends):
        self.s, self.e = merged(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
        # covered length before each run starts
        self.before = np.concatenate(([0], np.cumsum(self.e - self.s)))

    def _upto(self, t: int) -> int:
        """Covered length of (-inf, t)."""
        i = int(np.searchsorted(self.s, t, side="right"))  # runs starting at or before t
        if i == 0:
            return 0
        return int(self.before[i - 1] + min(t, self.e[i - 1]) - self.s[i - 1])

    def covered(self, a: int, b: int) -> float:
        return float(self._upto(b) - self._upto(a)) if b > a and len(self.s) else 0.0
