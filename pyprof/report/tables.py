"""The report's tables of prof's summaries: fix-this-first (the ops with most time above the roofline),
per op, per layer and per kernel (:func:`pyprof.prof.summary.summarize`), and how each column is shown
(human units on the page, raw numbers kept for sorting)."""

from __future__ import annotations

import pandas as pd

from pyprof.prof.summary import fix_first, summarize

# name, header, units kind (pyprof.prof.units; "int"/"str" as they are), scale to the base unit
SUMMARY = (
    ("key", "", "str", 1.0), ("time", "Time/step", "dur", 1.0), ("spread", "Spread", "pct", 1.0),
    ("share", "Share", "pct", 1.0), ("calls", "Calls", "int", 1.0), ("kernels", "Kernels", "int", 1.0),
    ("flops", "FLOPs/step", "flop", 1.0), ("bytes", "Bytes/step", "byte", 1.0),
    ("tflops", "FLOP/s", "flops", 1e12), ("gbps", "Bandwidth", "bps", 1e9), ("ideal", "Ideal/step", "dur", 1.0),
    ("excess", "Above roofline", "dur", 1.0), ("gap", "Gap", "num", 1.0), ("bound", "Bound", "str", 1.0),
)
FIX_FIRST_ROWS = 10
MAX_ROWS = 500  # a table longer than this shows its largest rows and says how many are left out


def fix_this_first(df: pd.DataFrame, n: int = FIX_FIRST_ROWS) -> pd.DataFrame:
    """The ``n`` ops with the most time above the roofline (``excess``), largest first."""
    return fix_first(summarize(df, "op"), n)
