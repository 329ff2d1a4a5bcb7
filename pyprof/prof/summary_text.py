"""A summary as ``pyprof prof --summary`` and ``pyprof run`` print it: what it is over, the table, the
fix-this-first list, the latency line and where the peaks came from (raw CSV/JSON: the table alone).

One function for both commands, so that what a user reads after ``pyprof run`` is what ``pyprof prof
--summary`` of the same run folder prints.
"""

from __future__ import annotations

import textwrap
from typing import IO

import pandas as pd

from pyprof.prof import render, steps
from pyprof.prof.summary import (
    FORMATS,
    HEADERS,
    SUMMARY_DROP,
    SUMMARY_NAMES,
    fix_first,
    latency_line,
    summarize,
)

STEP_NAMES = tuple(c[0] for c in steps.STEP_COLUMNS)


def comment(text: str, width: int) -> str:
    """``# text`` as lines, wrapped within ``width`` characters (0: one line)."""
    if width <= 0:
        return f"# {text}\n"
    return "".join(f"{ln}\n" for ln in textwrap.wrap(text, max(width, 20), initial_indent="# ",
                                                      subsequent_indent="#   ", break_long_words=True))


def over(df: pd.DataFrame) -> str:
    """What the per-step figures are taken over: ``3 profiled steps`` or the whole file."""
    n = len(df.attrs.get("steps") or ())
    if steps.table(df.attrs.get("header")).size:
        return f"{n} profiled step{'s' if n != 1 else ''}"
    return "the whole file as one step (it marks no ProfilerStep#N)"


def write(df: pd.DataFrame, by: str, fh: IO[str], style: str, width: int = 0, top: int | None = None,
          sort: str = "time", first_rows: int | None = None) -> pd.DataFrame:
    """Write the ``by`` summary of prof's table ``df`` to ``fh`` in ``style`` (``aligned``, ``space``,
    ``csv``, ``json``) within ``width`` (aligned); ``top`` rows (None: all); ``sort`` by ``time`` or
    ``excess``; ``first_rows`` of fix-this-first (default ``top`` or 10). Returns the summary."""
    human = style in ("space", "aligned")
    fit = width if style == "aligned" else 0

    def title(text: str) -> None:  # prose: wrapped within the width, never cut
        if human:
            lines = textwrap.wrap(text, max(width, 20), subsequent_indent="  ") if style == "aligned" and width > 0 \
                else [text]
            fh.write("\n" + "\n".join(lines) + "\n")

    if by == "step":
        s = steps.summary(df)
        heads = {c[0]: c[1] for c in steps.STEP_COLUMNS}
        fmts = {c[0]: c[2] for c in steps.STEP_COLUMNS}
        title(f"Steps: {over(df)}")
        render.write(s, STEP_NAMES, fh, style, fit, heads, fmts)
        line = steps.spread_line(s)
        if human and line:
            fh.write("\n" + comment(line, fit))
        return s
    s = summarize(df, by)
    if sort == "excess":  # groups without a known ideal time go last
        s = s.sort_values("excess", ascending=False, na_position="last", kind="stable")
    shown = s.head(top) if top else s
    headers = dict(HEADERS, key=by.capitalize(), time="Time/step")
    title(f"Summary by {by} (top {len(shown)} of {len(s)}): time per step, the median of {over(df)}; calls and "
          "kernels in all")
    render.write(shown, SUMMARY_NAMES, fh, style, fit, headers, FORMATS, drop=SUMMARY_DROP)
    if not human:
        return s
    if sort == "time":
        first = fix_first(s, first_rows or top or 10)
        if len(first):
            title(f"# fix this first: top {len(first)} {by}s by time above the roofline (per step; kernels at "
                  "the latency floor left out)")
            render.write(first, SUMMARY_NAMES, fh, style, fit, headers, FORMATS, drop=SUMMARY_DROP)
    lat = latency_line(s, by)
    tail = ([lat] if lat else []) + [f"peaks: {line}" for line in df.attrs.get("peaks", [])]
    if tail:
        fh.write("\n" + "".join(comment(line, fit) for line in tail))
    return s
