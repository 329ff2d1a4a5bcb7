"""Write an output file all-or-nothing: a failed run never leaves a partial file behind.

``with atomic_output(path) as fh:`` writes to a temporary file beside ``path`` and renames it into
place only when the block ends without an exception. ``path`` of ``None`` or ``"-"`` means stdout,
which cannot be rolled back; callers validate their input before writing the first byte. An existing
``path`` that is not a regular file (``/dev/null``, a FIFO) is written in place, never replaced. The
file gets the permissions ``open()`` would give it (``0o666`` less the umask), not the temporary
file's private ``0o600``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import IO


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike | None, mode: str = "w") -> Iterator[IO]:
    if path is None or str(path) == "-":
        yield sys.stdout.buffer if "b" in mode else sys.stdout
        return
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        # /dev/null, /dev/stdout, a FIFO: write straight to it. Never rename over it (as root that would
        # replace the device node itself with a regular file).
        with open(path, mode) as fh:
            yield fh
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".pyprof-", suffix=".part", dir=directory)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask: from /proc on Linux, else by setting it and setting it back (the only
    portable way to ask, though another thread creating a file in between would see 0o022)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
