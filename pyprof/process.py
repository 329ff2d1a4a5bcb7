"""Whether pyprof may change process-wide state: fork workers, pause or freeze the garbage collector.

Library functions (``pyprof.parse``, ``pyprof.prof``) never do either on their own: a process that has
run threads (a user's training script, CUDA, a DataLoader) can deadlock in a forked child, and the
collector's settings belong to whoever owns the interpreter. The CLI owns its process, so ``pyprof
parse`` and ``pyprof prof`` call :func:`own` before they work, and the library then takes its faster
paths (forked readers and workers on big inputs, the collector paused while millions of acyclic records
are made). ``pyprof run`` does not: its process has just run the user's script.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

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


def workers(asked: int | None, tasks: int) -> int:
    """How many worker processes for ``tasks`` tasks: ``asked`` (None or 0: one per CPU), never more
    than the tasks, at least one."""
    return max(1, min(asked or os.cpu_count() or 1, tasks))


def pool(n: int, spawn: bool = False) -> ProcessPoolExecutor | None:
    """Every pool of worker processes pyprof starts: ``n`` processes, forked where
    :func:`can_fork` (they inherit this process's imports and data), else with ``spawn`` fresh
    interpreters (the arguments are pickled: nothing of a caller's threads is inherited), else None.
    None too where processes cannot be made here. On None the caller does the work in this process.
    Each worker owns its process (:func:`own`): pyprof made it for its own work."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not (can_fork() or spawn):
        return None
    try:
        ctx = multiprocessing.get_context("fork" if can_fork() else "spawn")
        return ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker)
    except (OSError, NotImplementedError, ValueError):
        return None


def _worker() -> None:
    """A pool worker's start: it owns its process, and Ctrl-C (sent to the whole process group) ends it
    quietly: the process that started it says what happened, in one line (no traceback per worker)."""
    own()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fork(child: Callable[[], object]) -> int:
    """Fork a child that runs ``child()`` and exits: status 0 if it returned, 1 if it raised (it never
    returns into the caller's code). The child's pid, in this process. Only where :func:`can_fork`."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child()
            code = 0
        finally:
            os._exit(code)
    return pid


def reap(pid: int, timeout: float | None = None) -> int | None:
    """Wait for a child from :func:`fork` to end, at most ``timeout`` seconds (None: as long as it takes),
    then terminate it (SIGTERM) and wait for that. Its exit status (0: it returned), or None where it
    was reaped already."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() >= cast(float, deadline):  # (not None: waitpid blocked otherwise)
                os.kill(pid, signal.SIGTERM)
                return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            time.sleep(0.01)
    except ChildProcessError:
        return None


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
