"""The ``pyprof`` command line: a click group, one module per subcommand (``*_cmd.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def owns_process(command: Callable[..., Any]) -> Callable[..., Any]:
    """For a subcommand that owns its process (``parse``, ``prof``): while it runs, pyprof may fork
    workers and pause the cyclic collector (:func:`pyprof.process.own`). Given back when the command
    returns, so that a caller running the CLI in its own process (the tests) gets its process back as it
    was. ``pyprof run`` does not own its process: the user's script has just run threads in it."""
    from pyprof import process

    @functools.wraps(command)
    def owning(*args: Any, **kwargs: Any) -> Any:
        with process.owning():
            return command(*args, **kwargs)

    return owning


def stderr_say(quiet: bool = False) -> Callable[[str], None]:
    """A subcommand's ``say``: one line on stderr (progress, warnings: names in them as
    :func:`pyprof.terminal.shown` makes them fit a terminal); nothing under ``-q``. Every ``say`` of one
    command (click's context) says a line once: the same warning of both inputs of ``diff``, or of one
    export parsed for the table and again for the advice."""
    import click

    from pyprof.terminal import shown

    if quiet:
        return lambda line: None
    ctx = click.get_current_context(silent=True)
    said: set[str] = ctx.meta.setdefault("pyprof.said", set()) if ctx is not None else set()

    def say(line: str) -> None:
        if line not in said:
            said.add(line)
            click.echo(shown(line), err=True)

    return say


def terminal_width(output: str | None = "-") -> int:
    """The width a human table fits by default: ``$COLUMNS`` where set, else the terminal's where the
    table goes to stdout and stdout is one; else 0, no limit: piped or written to a file, every column
    is kept (``pyprof prof --summary op x.dict | less`` shows FLOPs, bytes and bandwidth)."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if output in (None, "-") and sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return 0
