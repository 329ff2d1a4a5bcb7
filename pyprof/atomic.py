"""Write an output file all-or-nothing: a failed run never leaves a partial file behind.

``with atomic_output(path) as fh:`` writes to a temporary file beside ``path`` and renames it into
place only when the block ends without an exception. ``path`` of ``None`` or ``"-"`` means stdout,
which cannot be rolled back; callers validate their input before writing the first byte. An existing
``path`` that is not a regular file (``/dev/null``, a FIFO) is written in place, never replaced.

What the user named stays what it was: a symlink is written through (its target is replaced, the
link kept); a file with other hard links is written in place once the temporary file is complete (so
every name of it sees the new content); an existing file keeps its permission bits (a private ``0600``
file stays private); a new file gets the permissions ``open()`` would give it (``0o666`` less the
umask), not the temporary file's private ``0o600``. Every OS failure of the output (a missing or
read-only folder, a full disk, a path that names a folder) is one :class:`~pyprof.errors.OutputError`
line. Meanwhile SIGTERM and SIGHUP, where they would end the process outright, raise
:class:`Interrupted` (as Ctrl-C raises ``KeyboardInterrupt``): the temporary file goes on the way out.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

from pyprof.errors import OutputError

#: errors of a write that are the output's, not the input's (a full disk, a quota, a read-only mount)
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


class Interrupted(BaseException):  # (as KeyboardInterrupt: no ``except Exception`` takes it)
    """A signal that ends pyprof (``args[0]``: its number) met while an output was being written."""


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` within the block where their action is the default
    (a handler someone set stays), in the main thread (the only one that may set them)."""
    main = threading.current_thread() is threading.main_thread()
    sigs = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
            if main and s is not None and signal.getsignal(s) == signal.SIG_DFL]
    saved = [(s, signal.signal(s, _raise)) for s in sigs]
    try:
        yield
    finally:
        for sig, old in saved:
            signal.signal(sig, old)


def output_error(path: str, exc: OSError) -> OutputError:
    """The one line for an OS failure writing ``path``."""
    reason = exc.strerror or type(exc).__name__
    if isinstance(exc, IsADirectoryError) or (os.path.isdir(path) and not isinstance(exc, FileNotFoundError)):
        return OutputError(f"cannot write {path}: it is a folder", "name a file inside it")
    where = os.path.dirname(os.path.abspath(path))
    if isinstance(exc, FileNotFoundError):
        return OutputError(f"cannot write {path}: the folder {where} does not exist", "create it first")
    return OutputError(f"cannot write {path}: {reason}",
                       "free some space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
                       "choose a writable place for the output")


@contextlib.contextmanager
def _straight(path: str, shown: str, mode: str) -> Iterator[IO]:
    """/dev/null, /dev/stdout, a FIFO: written straight to. Never renamed over (as root that would replace
    the device node itself with a regular file)."""
    try:
        with open(path, mode) as fh:
            yield fh
    except OSError as exc:
        if exc.errno in _WRITE_ERRNOS or exc.filename == path:
            raise output_error(shown, exc) from None
        raise


def _put_in_place(tmp: str, path: str, st, shown: str) -> None:
    """The written temporary file ``tmp`` made ``path`` (``st``: its stat before, or None)."""
    try:
        if st is not None and st.st_nlink > 1:
            _copy_into(tmp, path)  # (its other names keep seeing it)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        raise output_error(shown, exc) from None


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike | None, mode: str = "w") -> Iterator[IO]:
    if path is None or str(path) == "-":
        yield sys.stdout.buffer if "b" in mode else sys.stdout
        return
    shown = os.fspath(path)
    # a symlink is written through: its target is the file replaced (the link stays a link)
    path = os.path.realpath(shown) if os.path.islink(shown) else shown
    if os.path.isdir(path):
        raise OutputError(f"cannot write {shown}: it is a folder", "name a file inside it")
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with _straight(path, shown, mode) as fh:
            yield fh
        return
    directory = os.path.dirname(os.path.abspath(path))
    with _signals_raise():
        try:
            fd, tmp = tempfile.mkstemp(prefix=".pyprof-", suffix=".part", dir=directory)
        except OSError as exc:
            raise output_error(shown, exc) from None
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            try:
                with os.fdopen(fd, mode) as fh:
                    yield fh
            except OSError as exc:
                if exc.errno in _WRITE_ERRNOS and not exc.filename:
                    raise output_error(shown, exc) from None
                raise
            _put_in_place(tmp, path, st, shown)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _copy_into(src: str, dst: str) -> None:
    """The bytes of ``src`` as the whole content of the existing file ``dst`` (its inode kept)."""
    with open(src, "rb") as fin, open(dst, "r+b") as fout:
        fout.truncate(0)
        shutil.copyfileobj(fin, fout, 16 << 20)


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
