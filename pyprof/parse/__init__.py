"""Exports (Nsight Systems / nvprof SQLite, torch.profiler traces) -> one kernel record per kernel.

``open_source(path).records()`` is the API; ``pyprof parse`` (``pyprof/cli/parse_cmd.py``) the command.
No torch import anywhere in this package.
"""

from pyprof.parse.source import Source, open_source

__all__ = ["Source", "open_source", "parse_to"]


def parse_to(path, out):
    """Parse ``path`` and write its records to ``out`` (a path, or None/"-" for stdout); returns the
    :class:`pyprof.parse.run.Result` (counts, exporter version, warnings)."""
    from pyprof.parse.run import parse_file

    return parse_file(path, out)
