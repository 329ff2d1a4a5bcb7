"""Work done by a forked child into a temporary file: JSON lines appended after the parent's own.

For outputs whose lines cost much more to make than to copy: a big torch.profiler CPU trace's later
records, planned in the child too (:mod:`pyprof.parse.kineto.split_lines`); where lines are cheap to
make, the extra copy costs more than the second core gains. While the parent makes and writes its own lines, the child
makes the rest into a temporary file; the parent then appends the file by ``sendfile`` (a copy inside
the kernel, not through Python). If the child failed, ``redo`` makes its lines in the parent: the
same bytes, on one core. The child is reaped and the file removed when the part is used, closed or
dropped. (:mod:`pyprof.parse.kineto.split_scan` uses the same fork and file for its child's scan.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import weakref
from collections.abc import Callable, Iterator
from typing import cast

from pyprof import process

#: bytes per chunk when the file is read back (an output without a file descriptor)
READ_BYTES = 16 << 20


def can_fork() -> bool:
    """May the reader fork a worker, and would it gain? :func:`pyprof.process.can_fork` with a second
    core (the child shares the parent's prepared records without copying)."""
    return process.can_fork(cpus=2)


def start(child: Callable[[int], None], redo: Callable[[], Iterator[bytes]] | None = None) -> ForkedLines:
    """Fork (:func:`pyprof.process.fork`); the child runs ``child(fd)``, which writes its output to file
    descriptor ``fd`` (and may do more: see split_lines). ``redo`` makes the child's lines here when it
    failed (None: the caller reads :attr:`ForkedLines.path` itself, after :meth:`ForkedLines.finished`)."""
    fd, path = tempfile.mkstemp(prefix="pyprof-part-", suffix=".part")
    pid = process.fork(lambda: child(fd))
    os.close(fd)
    return ForkedLines(pid, path, redo)


def write_fd(fd: int, chunks: Iterator[bytes]) -> None:
    """Write ``chunks`` to ``fd`` and close it (a child's job)."""
    with os.fdopen(fd, "wb", buffering=0) as fh:
        for chunk in chunks:
            fh.write(chunk)


class ForkedLines:
    """A forked child's lines: :meth:`copy_into` a file, or :meth:`chunks`."""

    def __init__(self, pid: int, path: str, redo: Callable[[], Iterator[bytes]] | None):
        self.pid, self.path, self.redo = pid, path, redo
        self._finalizer = weakref.finalize(self, _cleanup, pid, path)

    def close(self) -> None:
        """Kill and reap the child if it still runs, and remove its file."""
        self._finalizer()

    def finished(self) -> bool:
        """Wait for the child; True when it succeeded and its file holds its output."""
        code = process.reap(self.pid)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, 0, self.path)
        return code == 0 and os.path.getsize(self.path) > 0

    def chunks(self) -> Iterator[bytes]:
        """The child's lines: its file read back, or made here if it failed."""
        try:
            if self.finished():
                with open(self.path, "rb") as fh:
                    while chunk := fh.read(READ_BYTES):
                        yield chunk
            else:
                yield from cast("Callable[[], Iterator[bytes]]", self.redo)()  # chunks() needs a redo
        finally:
            self._finalizer()

    def copy_into(self, out) -> None:
        """Append the child's lines to the binary file object ``out``: by ``sendfile`` from its file
        where ``out`` has a descriptor that takes it, else in chunks; made here if it failed."""
        try:
            if not self.finished():
                for chunk in cast("Callable[[], Iterator[bytes]]", self.redo)():  # as does copy_into()
                    out.write(chunk)
                return
            out.flush()
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                sent = 0
                try:
                    dst = out.fileno()
                    while sent < size:
                        n = os.sendfile(dst, fh.fileno(), sent, size - sent)
                        if n == 0:
                            break
                        sent += n
                except (OSError, AttributeError, ValueError):  # not a descriptor sendfile writes to
                    pass
                fh.seek(sent)
                while chunk := fh.read(READ_BYTES):
                    out.write(chunk)
        finally:
            self._finalizer()


def _cleanup(pid: int, path: str) -> None:
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.unlink(path)
