"""torch.profiler (Kineto) chrome traces as a pyprof source: :class:`KinetoSource`.

The reader, from the file to the records:

* :mod:`~pyprof.parse.kineto.schema`: the trace format as data (categories, argument spellings, dtypes);
* :mod:`~pyprof.parse.kineto.events`: the typed structs an event is decoded into (msgspec);
* :mod:`~pyprof.parse.kineto.load`: the file read into metadata and chunks of events;
* :mod:`~pyprof.parse.kineto.index`: the events scanned into flat arrays and their ranges nested;
* :mod:`~pyprof.parse.kineto.args`: an op's recorded inputs as pyprof argument dicts;
* :mod:`~pyprof.parse.kineto.source`: :class:`KinetoSource`, every kernel's op instance decoded and linked;
* :mod:`~pyprof.parse.kineto.lines`: the planned records as JSON lines (or dicts).
"""

from pyprof.parse.kineto.lines import KinetoStats
from pyprof.parse.kineto.source import KinetoSource

__all__ = ["KinetoSource", "KinetoStats"]
