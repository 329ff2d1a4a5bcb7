"""One exception hierarchy for pyprof, turned into exit codes in one place (``pyprof.cli.main``).

Every error a user can cause (a missing file, a foreign or truncated database, a malformed marker
they asked us to read, a bad option) is a :class:`PyprofError` carrying a one-line message that names
the problem *and* what to do. The CLI prints ``pyprof: error: <message>`` on stderr and exits with
``exit_code``; it never shows a traceback for these. Anything else is a bug in pyprof.
"""

from __future__ import annotations


class PyprofError(Exception):
    """A user-facing error: ``str(err)`` is one line saying what is wrong and what to do."""

    exit_code = 2

    def __init__(self, problem: str, hint: str | None = None):
        self.problem = problem
        self.hint = hint
        super().__init__(f"{problem}; {hint}" if hint else problem)


class InputError(PyprofError):
    """The input file is missing, unreadable, of the wrong kind, truncated or corrupt."""


class NoKernelsError(InputError):
    """The input is a valid export but holds no kernel (no CUDA trace, or nothing ran)."""


class OutputError(PyprofError):
    """An output cannot be written: its folder is missing or read-only, the disk is full, the path names
    a folder. Nothing partial is left behind."""


class UsageError(PyprofError):
    """The command line or an API call asked for something that cannot be done."""


class RecordError(InputError):
    """A record whose field has the wrong type or an impossible value (``"layer": 5``, a negative or NaN
    duration): ``name``, ``line`` and ``field`` say where, so a caller can report or skip it."""

    def __init__(self, problem: str, hint: str | None = None, *, name: str = "", line: int = 0, field: str = ""):
        super().__init__(problem, hint)
        self.name = name
        self.line = line
        self.field = field
