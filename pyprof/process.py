"""Whether pyprof may change process-wide state: fork workers, pause or freeze the garbage collector.

Library functions (``pyprof.parse``, ``pyprof.prof``) never do either on their own: a process that has
run threads (a user's training script, CUDA, a DataLoader) can deadlock in a forked child, and the
collector's settings belong to whoever owns the interpreter. The CLI owns its process, so ``pyprof
parse`` and ``pyprof prof`` call :func:`own` before they work, and the library then takes its faster
paths (a forked second core for big traces, the collector paused while millions of acyclic records
are made). ``pyprof run`` does not: its process has just run the user's script.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

_owned = False


def own(on: bool = True) -> None:
    """Declare that the caller owns this process (the CLI does), or no longer does."""
    global _owned
    _owned = bool(on)


def owned() -> bool:
    """Does the caller own this process (see :func:`own`)?"""
    return _owned


def can_fork() -> bool:
    """May a library function fork a worker now? Only in an owned process on a platform with fork."""
    return _owned and hasattr(os, "fork")


@contextlib.contextmanager
def owning() -> Iterator[None]:
    """:func:`own` for the duration of a block (benchmarks and tests of the forked paths)."""
    was = _owned
    own(True)
    try:
        yield
    finally:
        own(was)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off while a block builds millions of acyclic objects (its collections would
    dominate the run time), in an owned process only; elsewhere the block runs as is. On the way out
    the objects made meanwhile go to the oldest generation (a freeze and unfreeze) so the first
    collection does not walk every one of them."""
    if not _owned or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.enable()
