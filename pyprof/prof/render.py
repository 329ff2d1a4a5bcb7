"""Print a table (per-kernel or summary) as space-separated text, aligned columns, CSV or JSON lines.

Formatting is per column kind (:class:`pyprof.prof.columns.Column.fmt`): unknown numbers print ``n/a``,
unknown text ``-``; text never holds a space in the default space-separated form (spaces become ``_``,
as PyProf did for kernel names), so ``awk``/``cut`` see one field per column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from typing import IO

import orjson
import pandas as pd

from pyprof.prof.columns import BY_NAME

NA_NUM = "n/a"
NA_TEXT = "-"
CHUNK = 50_000
FLEX = ("kernel", "params", "longkernel", "layer", "trace", "module", "note", "op", "mod", "key", "gpu")


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NA_NUM
    a = abs(v)
    if a >= 100 or a == 0:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _int(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NA_TEXT
    return str(int(v))


def _sci(v) -> str:  # FLOPs and bytes: whole numbers, n/a when unknown
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NA_NUM
    return f"{v:.0f}"


def _str(v) -> str:
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return NA_TEXT
    return str(v)


def _joiner(sep: str):
    def fmt(v) -> str:
        if not v:
            return NA_TEXT
        if isinstance(v, (list, tuple)):
            return sep.join(map(str, v))
        return str(v)

    return fmt


FORMATTERS = {
    "int": _int, "str": _str, "list": _joiner(","), "list:": _joiner(":"), "list;": _joiner(";"),
    "dims": _joiner(","), "float": _num, "sci": _sci, "tc": _str,
}


def format_column(series: pd.Series, fmt: str) -> list[str]:
    if fmt == "int" and series.dtype.kind in "iu":
        return [str(v) for v in series.tolist()]
    f = FORMATTERS[fmt]
    return [f(v) for v in series.tolist()]


def formatted(df: pd.DataFrame, names: Sequence[str], fmts: dict[str, str] | None = None) -> list[list[str]]:
    """Each selected column as a list of strings."""
    out = []
    for name in names:
        fmt = (fmts or {}).get(name) or BY_NAME[name].fmt
        if name == "sil":
            out.append([_sci(v) for v in df[name].tolist()])
        else:
            out.append(format_column(df[name], fmt))
    return out


def write(df: pd.DataFrame, names: Sequence[str], fh: IO[str], style: str = "space", width: int = 0,
          headers: dict[str, str] | None = None, fmts: dict[str, str] | None = None) -> None:
    """Write ``df[names]`` to ``fh`` in ``style``: ``space``, ``aligned`` (``width`` columns), ``csv``, ``json``."""
    heads = [(headers or {}).get(n) or BY_NAME[n].header for n in names]
    if style == "json":
        _write_json(df, names, fh)
        return
    cols = formatted(df, names, fmts)
    n = len(df)
    if style == "csv":
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(heads)
        for start in range(0, n, CHUNK):
            w.writerows(zip(*(c[start:start + CHUNK] for c in cols), strict=True))
        return
    if style == "space":
        cols = [[s.replace(" ", "_") for s in c] for c in cols]
        fh.write(" ".join(h.replace(" ", "_") for h in heads) + "\n")
        for start in range(0, n, CHUNK):
            rows = zip(*(c[start:start + CHUNK] for c in cols), strict=True)
            fh.write("\n".join(" ".join(r) for r in rows) + "\n")
        return
    _write_aligned(cols, heads, names, fh, width, fmts)


def _write_aligned(cols, heads, names, fh, width, fmts) -> None:
    widths = [max([len(h)] + [len(s) for s in c]) for h, c in zip(heads, cols, strict=True)]
    total = sum(widths) + len(widths) - 1
    if width and total > width:
        flex = sorted((i for i, n in enumerate(names) if n in FLEX), key=lambda i: -widths[i])
        excess = total - width
        while excess > 0 and flex:
            i = max(flex, key=lambda k: widths[k])
            floor = max(len(heads[i]), 8)
            if widths[i] <= floor:
                flex.remove(i)
                continue
            cut = min(excess, widths[i] - floor, max(1, widths[i] // 4))
            widths[i] -= cut
            excess -= cut
    numeric = [((fmts or {}).get(n) or (BY_NAME[n].fmt if n in BY_NAME else "str")) in ("int", "float", "sci")
               or n == "sil" for n in names]

    def cell(s: str, w: int, right: bool) -> str:
        if len(s) > w:
            s = s[: max(w - 1, 0)] + "~"
        return s.rjust(w) if right else s.ljust(w)

    fh.write(" ".join(cell(h, w, r) for h, w, r in zip(heads, widths, numeric, strict=True)).rstrip() + "\n")
    n = len(cols[0]) if cols else 0
    for start in range(0, n, CHUNK):
        rows = zip(*(c[start:start + CHUNK] for c in cols), strict=True)
        fh.write("\n".join(" ".join(cell(s, w, r) for s, w, r in zip(row, widths, numeric, strict=True)).rstrip()
                           for row in rows) + "\n")


def _clean(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _write_json(df: pd.DataFrame, names: Sequence[str], fh: IO[str]) -> None:
    lists = [df[n].tolist() for n in names]
    for start in range(0, len(df), CHUNK):
        chunk = zip(*(c[start:start + CHUNK] for c in lists), strict=True)
        fh.write("".join(orjson.dumps({k: _clean(v) for k, v in zip(names, row, strict=True)},
                                      option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n" for row in chunk))
