"""Plan and write a big CPU trace's records on two cores: a forked child takes the later ones.

Once the index is nested, the rest of a CPU trace's parse is per op instance and per record:
decoding the forward ops the backward pass links to and each record's op instance
(:meth:`KinetoSource.plan_part`) and splicing its JSON line
(:mod:`pyprof.parse.kineto.lines`), most of the time of a big trace. :func:`plan_in_two`
cuts the op ranges (in start order) where no range is open across the cut on any thread
(:func:`split_point`), so that no op instance, whose ``subSeqId`` numbers its records, has records
on both sides; then it forks. Each process registers the forward ops its own backward instances can
link to and plans its ranges (:meth:`KinetoSource.plan_part`); the child sends its counts through
a pipe (the summary line and the warnings need them before the first line is written) and writes
its lines to a temporary file (:mod:`pyprof.parse.kineto.fork`), which :meth:`Tail.copy_into`
appends after the parent's own lines.

Nothing is lost when the child fails: the parent then plans and writes the child's part itself
(the same bytes, on one core). A trace without such a cut, or too small to gain, takes one process, as
does any trace in a process pyprof does not own (:func:`pyprof.parse.kineto.fork.can_fork`).
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Iterator
from itertools import accumulate

from pyprof.parse.kineto import fork
from pyprof.parse.kineto.index import Index
from pyprof.parse.kineto.lines import KinetoPrepared, KinetoStats, PlanSource, entry_stats

#: CPU records from which the later part goes to a forked child (below, the fork costs more than it gains)
FORK_MIN = 100_000
#: the parent's share of the records (it also appends the child's lines to the output)
FIRST_SHARE = 0.5


def split_point(ix: Index, nodes: list[int]) -> int | None:
    """An index ``i`` of ``nodes`` (op ranges in start order) in the middle half, nearest
    :data:`FIRST_SHARE` of them, such that every range open at ``nodes[:i]`` (the outermost of each
    one's chain, on any thread) ends before ``nodes[i]`` starts; None if there is none. Two records
    of one op instance both lie inside its range, which is in their chains, so the instance cannot
    straddle such a cut."""
    n = len(nodes)
    lo, hi = max(n // 4, 1), (3 * n) // 4
    if hi <= lo:
        return None
    chain, end, start = ix.chain, ix.end, ix.start
    reach = list(accumulate((end[chain[r][0]] for r in nodes[:hi]), max))
    mid = min(max(int(n * FIRST_SHARE), lo), hi - 1)
    for d in range(max(mid - lo, hi - mid)):
        for i in (mid + d, mid - d - 1):
            if lo <= i < hi and reach[i - 1] <= start[nodes[i]]:
                return i
    return None


def plan_in_two(src: PlanSource, nodes: list[int], self_t: list[int]) -> tuple[list[int], Tail | None]:
    """(the nodes this process plans, the child's :class:`Tail` or None). The caller plans its nodes,
    then calls :meth:`Tail.collect` before it reports counts or warnings."""
    if len(nodes) < FORK_MIN or not fork.can_fork():
        return nodes, None
    cut = split_point(src.index, nodes)
    if cut is None:
        return nodes, None
    later = nodes[cut:]
    rfd, wfd = os.pipe()
    tail = Tail(src, later, self_t, rfd)

    def child(fd: int) -> None:
        os.close(rfd)
        _child(src, later, self_t, wfd, fd)

    tail.part = fork.start(child, tail.redo)
    os.close(wfd)
    return nodes[:cut], tail


def _child(src: PlanSource, nodes: list[int], self_t: list[int], wfd: int, fd: int) -> None:
    unlinked, malformed = src.problem_counts()
    entries = src.plan_part(nodes)
    prep = KinetoPrepared(src, entries, self_t)
    st = prep.stats
    now_unlinked, now_malformed = src.problem_counts()
    msg = marshal.dumps((len(entries), st.kernels, st.copies, st.attributed, now_unlinked - unlinked,
                         now_malformed - malformed, st.nulled))
    with os.fdopen(wfd, "wb") as pipe:
        pipe.write(msg)
    fork.write_fd(fd, prep.lines())


class Tail:
    """The forked child's part of the records: counts once :meth:`collect` returns, lines from
    :meth:`chunks` or :meth:`copy_into` (:class:`pyprof.parse.fork.ForkedLines`)."""

    def __init__(self, src: PlanSource, nodes: list[int], self_t: list[int], rfd: int):
        self.src, self.nodes, self.self_t = src, nodes, self_t
        self._rfd = rfd
        self.n = 0
        self.stats = KinetoStats()
        self.entries: list[tuple] | None = None  # planned here (the child failed)
        self.part: fork.ForkedLines | None = None

    def collect(self) -> None:
        """Wait for the child's counts and add its warnings' counts to the source's; if it sent none,
        plan its part here."""
        with os.fdopen(self._rfd, "rb") as pipe:
            data = pipe.read()
        try:
            n, kernels, copies, attributed, unlinked, malformed, nulls = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            assert self.part is not None  # (set once the child started: plan_in_two)
            self.part.close()
            self.entries = self.src.plan_part(self.nodes)
            self.n = len(self.entries)
            self.stats = entry_stats(self.entries)
            return
        self.n = n
        self.stats = KinetoStats(kernels=kernels, copies=copies, attributed=attributed, nulled=nulls)
        self.src.add_problem_counts(unlinked, malformed)

    def redo(self) -> Iterator[bytes]:
        """The child's lines, made here (it failed; the caches were cleared, so its instances are
        decoded again; the counts it sent are already reported)."""
        if self.entries is None:
            self.entries = self.src.plan_part(self.nodes)
        return KinetoPrepared(self.src, self.entries, self.self_t).lines()

    def chunks(self) -> Iterator[bytes]:
        """The child's lines (after the parent's own)."""
        if self.entries is not None:
            return self.redo()
        assert self.part is not None
        return self.part.chunks()

    def copy_into(self, out) -> None:
        """Append the child's lines to the binary file object ``out`` (after the parent's own)."""
        if self.entries is not None:
            for chunk in self.redo():
                out.write(chunk)
        else:
            assert self.part is not None
            self.part.copy_into(out)
