"""Exports (Nsight Systems / nvprof SQLite, torch.profiler traces) -> one kernel record per kernel.

``open_source(path).records()`` is the API; ``pyprof parse`` (``pyprof/cli/parse_cmd.py``) the command,
``pyprof.parse(path, out)`` the command from Python (:func:`pyprof.api.parse`).
No torch import anywhere in this package.
"""

from pyprof.parse.source import Source, open_source

__all__ = ["Source", "open_source"]
