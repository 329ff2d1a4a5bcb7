"""Write an output file all-or-nothing: a failed run never leaves a partial file behind.

``with atomic_output(path) as fh:`` writes to a temporary file beside ``path`` and renames it into
place only when the block ends without an exception. ``path`` of ``None`` or ``"-"`` means stdout,
which cannot be rolled back; callers validate their input before writing the first byte. An existing
``path`` that is not a regular file (``/dev/null``, a FIFO) is written in place, never replaced.
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
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
