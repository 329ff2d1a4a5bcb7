"""The HTML report (``pyprof report``, ``pyprof run --report``) and the comparison of two profiles
(``pyprof diff``).

One module per chart or table (docs/design.md, Layout); the data behind every chart is plain Python
(lists, dicts, DataFrames) that tests check without a browser, and only :mod:`~pyprof.report.figures`
and :mod:`~pyprof.report.page` know the plotting library (Plotly, the ``report`` extra).

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
