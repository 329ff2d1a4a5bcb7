"""torch.profiler (Kineto) chrome traces as a pyprof source: :class:`KinetoSource`. Its modules, from
the file to the records, are mapped in docs/design.md ("kineto/")."""

from pyprof.parse.kineto.lines import KinetoStats
from pyprof.parse.kineto.source import KinetoSource

__all__ = ["KinetoSource", "KinetoStats"]
