"""Read a big Kineto trace on two cores: a forked child parses and classifies the second half.

Parsing the JSON and classifying the events (:func:`pyprof.parse.kineto.index.scan`) is a large
share of a CPU trace's parse time, and the events are independent. :func:`scan_in_two` forks once
the first piece is parsed (the first piece fixes the trace's event types and key spellings,
:mod:`pyprof.parse.kineto.events`, so both processes read alike): the child scans the events after
the cut into its own index and hands its columns back through its temporary file
(:mod:`pyprof.parse.kineto.fork`; ``marshal``: the columns are plain lists, tuples and scalars);
the parent scans the events before the cut meanwhile and appends the child's rows after its own,
renumbered, so the index is the one a single pass builds.

Only in a process pyprof owns (:func:`pyprof.parse.kineto.fork.can_fork`); elsewhere the trace is
scanned in one pass.

Nothing is trusted that was not checked: the cut (:meth:`pyprof.parse.kineto.load.Trace.halves`)
is an event boundary only if the first half parses up to it, so when the first half fails, or the
child fails, the work is redone in this process in one pass (which then reports any real error).
"""

from __future__ import annotations

import marshal
import os

from pyprof.errors import InputError
from pyprof.parse.kineto import fork
from pyprof.parse.kineto.index import Index, chain_first, scan
from pyprof.parse.kineto.load import Trace

_COLUMNS = ("name", "role", "start", "end", "pid", "tid", "args", "seq", "bwd", "launches", "gpu")


def scan_in_two(trace: Trace, halves: tuple) -> Index | None:
    """The scanned (not yet nested) index of ``trace``, or None to do it in one pass instead."""
    if not fork.can_fork():
        return None
    first_half, second_half = halves
    try:
        it = first_half()
        first = next(it, None)
    except InputError:
        trace.repaired = 0
        return None
    if first is None:
        return None
    repaired0 = trace.repaired

    def child(fd: int) -> None:  # the second half, marshalled into the child's file
        part = Index()
        dropped = trace.types.dropped if trace.types is not None else {}
        dropped.clear()  # (the first half's are the parent's to count)
        try:
            scan(part, second_half(), trace)
            payload = ([getattr(part, c) for c in _COLUMNS], part.skipped, part.n_events,
                       trace.repaired - repaired0, sorted(part.steps), part.comms, part.fwd_thread, dict(dropped))
        except InputError:
            payload = None
        with os.fdopen(fd, "wb") as fh:
            fh.write(marshal.dumps(payload))

    proc = fork.start(child)
    try:
        ix = Index()
        try:
            scan(ix, chain_first(first, it), trace)
        except InputError:  # the cut was not between two events: one pass will say what is wrong
            trace.repaired = 0  # the one pass counts again
            return None
        payload = None
        if proc.finished():
            with open(proc.path, "rb") as fh:
                payload = marshal.loads(fh.read())
    finally:
        proc.close()  # (kills the child if this process's half failed; removes the file)
    if payload is None:  # the child failed: scan the second half here (raising its error, if any)
        scan(ix, second_half(), trace)
        return ix
    _append(ix, *payload)
    trace.repaired += payload[3]
    return ix


def _append(ix: Index, columns: list, skipped: int, n_events: int, _repaired: int, steps: list,
            comms: dict, fwd_thread: dict, dropped: dict) -> None:
    """Append a later part's rows to ``ix``: range and launch ids shift by ``ix``'s counts."""
    off, loff = len(ix.name), len(ix.launches)
    ix.steps.update(r + off for r in steps)
    ix.comms.update((r + off, c) for r, c in comms.items())
    ix.fwd_thread.update((r + off, t) for r, t in fwd_thread.items())
    for c, values in zip(_COLUMNS, columns, strict=True):
        getattr(ix, c).extend(values)
    threads = ix.threads
    pids, tids = columns[4], columns[5]
    for i in range(len(pids)):
        key = (pids[i], tids[i])
        lst = threads.get(key)
        if lst is None:
            threads[key] = [off + i]
        else:
            lst.append(off + i)
    lt = ix.launch_threads
    for i, launch in enumerate(columns[9]):
        lt.setdefault((launch[0], launch[1]), []).append(loff + i)
    ix.skipped += skipped
    ix.n_events += n_events
    for reason, n in dropped.items():
        ix.dropped[reason] = ix.dropped.get(reason, 0) + n
