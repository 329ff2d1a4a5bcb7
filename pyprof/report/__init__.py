"""The HTML report (``pyprof report``, ``pyprof run --report``) and the comparison of two profiles
(``pyprof diff``).

One module per job; the data behind every chart is plain Python (lists, dicts, DataFrames) that tests
check without a browser, and only :mod:`~pyprof.report.figures` and :mod:`~pyprof.report.page` know
the plotting library (Plotly, the ``report`` extra)::

    profile.py    records -> prof's per-kernel table, the devices and their peaks, the environment
    instances.py  op instances (kernels sharing opId and direction): time, FLOPs, bytes, kernels
    roofline.py   the roofline chart's points (instances, or groups of them) and roofs (device peaks)
    layers.py     time by layer: the module tree, split forward / backward / optimizer
    tables.py     fix-this-first, per-op and per-kernel tables (prof's summaries)
    timeline.py   one step's kernels by stream or thread, coloured by layer
    breakdown.py  GPU time: busy, idle, exposed communication, exposed memcpy
    shapes.py     each op by unique arguments (GEMMs by M/N/K/dtype): count, time and FLOP/s spread
    diff.py       two profiles side by side per op, layer and kernel, with deltas
    figures.py    Plotly figures of the data above
    page.py       the self-contained page: data, figures, tables, inlined plotly.js, styles and scripts

Dependencies point one way: ``cli -> report -> prof``; nothing in ``prof`` or ``parse`` imports this.
"""

from __future__ import annotations

from pyprof.errors import UsageError

INSTALL = "pip install 'pyprof-torch[report]'"


def require_plotly() -> None:
    """Raise a one-line :class:`~pyprof.errors.UsageError` (exit 2) naming the install command where
    Plotly, which draws the page, is not installed."""
    try:
        import plotly.graph_objects  # noqa: F401
    except ImportError:
        raise UsageError("the HTML report needs Plotly, which is not installed", INSTALL) from None
