"""Kineto records as dicts or JSON lines: what ``pyprof parse`` writes.

:meth:`pyprof.parse.kineto.KinetoSource.prepared` resolves every kernel's op instance first (the
decoding); :class:`KinetoPrepared` then turns the kernels into records, and :class:`KinetoStats`
counts them for ``pyprof parse``'s summary line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from pyprof.process import collector_paused
from pyprof.records import dumps, nulled

_CHUNK = 2048  # lines per yielded chunk of bytes


class PlanSource(Protocol):
    """What this module reads of a source (:class:`~.source.KinetoSource` is one): the record dict of a
    plan entry. A public interface, so that it neither reaches into the source's own
    attributes nor imports its module (which imports it: no circle, even for the type checker)."""

    stats: Any

    def record(self, entry: tuple, self_t: list[int] | None) -> dict[str, Any]: ...

    def prepared(self) -> KinetoPrepared: ...


@dataclass
class KinetoStats:
    """Counts for ``pyprof parse``'s summary line, filled while :meth:`KinetoSource.records` runs:
    ``attributed`` records have an op (or a backward node) from the ranges open at their launch."""

    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    nulled: dict = field(default_factory=dict)  # fields written as null where their check refused them


class KinetoPrepared:
    """A trace's kernels, decoded, in output order (``n`` of them); ``stats`` is complete."""

    def __init__(self, src: PlanSource, entries: list[tuple], self_t: list[int] | None):
        self.src = src
        self.entries = entries
        self.self_t = self_t
        self.stats = entry_stats(entries)
        self.nulled = self.stats.nulled
        self.n = len(entries)

    def records(self) -> Iterator[dict[str, Any]]:
        record, self_t = self.src.record, self.self_t
        with collector_paused():
            for e in self.entries:
                yield record(e, self_t)

    def lines(self) -> Iterator[bytes]:
        """The records as JSON lines, :data:`_CHUNK` at a time."""
        lines = map(dumps, self.records())
        while chunk := list(islice(lines, _CHUNK)):
            yield b"".join(chunk)

    def close(self) -> None:
        """Nothing to release: the trace was read whole when the source was opened."""


def entry_stats(entries: list[tuple]) -> KinetoStats:
    """Kernels, copies and attributed kernels among plan entries, which are checked first: every field
    of a GPU record's own and of an op instance's decoded fields that its check refuses is written as
    null (:func:`pyprof.records.nulled`: the entries are changed), counted per record in ``nulled``."""
    stats = KinetoStats()
    _checked(entries, stats.nulled)
    for _, ctx, _, pre in entries:
        if pre is not None and pre["kind"] != "kernel":
            stats.copies += 1
        else:
            stats.kernels += 1
            f = ctx[0]
            if f["op"] is not None or f["bwdNode"] is not None:
                stats.attributed += 1
    return stats


def _checked(entries: list[tuple], counts: dict[str, int]) -> None:
    """:func:`pyprof.records.nulled` of the GPU records' own fields and of each distinct instance's
    fields, at once (column by column); an entry whose values were nulled is replaced."""
    ctxs: dict[int, tuple] = {}
    pres: list[dict] = []
    for _, ctx, _, pre in entries:
        ctxs.setdefault(id(ctx), ctx)
        if pre is not None:
            pres.append(pre)
    fields = [c[0] for c in ctxs.values()]
    bad_ctx = nulled(fields, {})
    bad_pre = nulled(pres, counts)
    if not bad_ctx and not bad_pre:
        return
    keys = list(ctxs)
    fixed = {keys[i]: ((fields[i], *ctxs[keys[i]][1:]), names) for i, names in bad_ctx.items()}
    checked = iter(pres)  # (nulled replaced the refused ones in place)
    for i, (node, ctx, n, pre) in enumerate(entries):
        got = fixed.get(id(ctx))
        if got is not None:
            ctx = got[0]
            for name in got[1]:
                counts[name] = counts.get(name, 0) + 1
        entries[i] = (node, ctx, n, pre if pre is None else next(checked))


class LazyRecords:
    """What :meth:`KinetoSource.records` returns: an iterator of record dicts that prepares the source
    on first use, and whose :meth:`prepared` lets :func:`pyprof.records.write_records` write the same
    records as JSON lines without the dicts."""

    def __init__(self, src: PlanSource):
        self._src = src
        self._prep: KinetoPrepared | None = None
        self._it: Iterator[dict[str, Any]] | None = None
        src.stats = KinetoStats()

    def prepared(self) -> KinetoPrepared:
        if self._prep is None:
            self._prep = self._src.prepared()
        return self._prep

    def __iter__(self) -> LazyRecords:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            self._it = self.prepared().records()
        return next(self._it)
