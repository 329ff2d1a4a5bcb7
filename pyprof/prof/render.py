"""Print a table (per-kernel or summary) as space-separated text, aligned columns, CSV or JSON lines.

Formatting is per column kind (:class:`pyprof.prof.columns.Column.fmt`): unknown numbers print ``n/a``,
unknown text ``-``; text never holds a space in the default space-separated form (spaces become ``_``,
as PyProf did for kernel names), so ``awk``/``cut`` see one field per column.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import IO

import numpy as np
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


def _str(v) -> str:
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return NA_TEXT
    return str(v)


def _floats(series: pd.Series) -> np.ndarray:
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)


def col_sci(series: pd.Series) -> list[str]:
    """Whole numbers (FLOPs, bytes, ns); ``n/a`` when unknown."""
    a = _floats(series)
    nan = np.isnan(a)
    if len(a) and np.nanmax(np.abs(np.where(nan, 0.0, a))) >= 9e18:  # beyond int64: the slow way
        return [NA_NUM if math.isnan(v) else f"{v:.0f}" for v in a.tolist()]
    out = list(map(str, np.rint(np.where(nan, 0.0, a)).astype(np.int64).tolist()))
    for i in np.flatnonzero(nan).tolist():
        out[i] = NA_NUM
    return out


def col_num(series: pd.Series) -> list[str]:
    """Rates and ratios: 3 significant figures or so; ``n/a`` when unknown."""
    a = _floats(series)
    nan = np.isnan(a)
    absa = np.abs(np.where(nan, 0.0, a))
    big = ~nan & ((absa >= 100) | (absa == 0))
    out = np.full(len(a), NA_NUM, dtype=object)
    out[big] = [str(v) for v in np.rint(a[big]).astype(np.int64).tolist()] if big.any() else []
    mid = ~nan & (absa >= 1) & (absa < 100)
    out[mid] = [f"{v:.2f}" for v in a[mid].tolist()] if mid.any() else []
    small = ~nan & (absa > 0) & (absa < 1)
    out[small] = [f"{v:.3g}" for v in a[small].tolist()] if small.any() else []
    return out.tolist()


def col_int(series: pd.Series) -> list[str]:
    values = series.tolist()
    if set(map(type, values)) <= {int}:  # the common case, at C speed
        return list(map(str, values))
    return [str(v) if v.__class__ is int else _int(v) for v in values]


def _one_str(v) -> str:
    return v if v.__class__ is str and v else _str(v)


def col_str(series: pd.Series) -> list[str]:
    values = series.tolist()
    try:  # each distinct value formatted once (text columns repeat a few names)
        distinct = dict.fromkeys(values)
    except TypeError:  # an unhashable cell
        return [_one_str(v) for v in values]
    for v in distinct:
        distinct[v] = _one_str(v)
    return list(map(distinct.__getitem__, values))


_CSV_SPECIAL = (",", '"', "\n", "\r")


def _csv_cells(col: list[str]) -> list[str]:
    """A column of text cells as csv.writer writes them (QUOTE_MINIMAL), each distinct cell quoted once."""
    joined = "".join(col)
    if not any(c in joined for c in _CSV_SPECIAL):
        return col
    distinct = dict.fromkeys(col)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for v in distinct:
        if any(c in v for c in _CSV_SPECIAL):
            buf.seek(0)
            buf.truncate()
            w.writerow([v, ""])
            distinct[v] = buf.getvalue()[:-2]
        else:
            distinct[v] = v
    return list(map(distinct.__getitem__, col))


def _joiner(sep: str):
    def fmt(series: pd.Series) -> list[str]:
        return [sep.join(map(str, v)) if v.__class__ in (list, tuple) and v else _str(v) if v else NA_TEXT
                for v in series.tolist()]

    return fmt


FORMATTERS = {
    "int": col_int, "str": col_str, "list": _joiner(","), "list:": _joiner(":"), "list;": _joiner(";"),
    "dims": _joiner(","), "float": col_num, "sci": col_sci, "tc": col_str,
}


def format_column(series: pd.Series, fmt: str) -> list[str]:
    return FORMATTERS[fmt](series)


def formatted(df: pd.DataFrame, names: Sequence[str], fmts: dict[str, str] | None = None) -> list[list[str]]:
    """Each selected column as a list of strings."""
    out = []
    for name in names:
        fmt = (fmts or {}).get(name) or BY_NAME[name].fmt
        out.append(format_column(df[name], "sci" if name == "sil" else fmt))
    return out


def write(df: pd.DataFrame, names: Sequence[str], fh: IO[str], style: str = "space", width: int = 0,
          headers: dict[str, str] | None = None, fmts: dict[str, str] | None = None) -> None:
    """Write ``df[names]`` to ``fh`` in ``style``: ``space``, ``aligned`` (``width`` columns), ``csv``, ``json``.

    The cyclic garbage collector is paused meanwhile: formatting creates millions of strings, and each
    full collection would walk every object of the table (they hold no cycles)."""
    from pyprof.prof.table import _gc_paused

    with _gc_paused():
        _write(df, names, fh, style, width, headers, fmts)


def _write(df, names, fh, style, width, headers, fmts) -> None:
    heads = [(headers or {}).get(n) or BY_NAME[n].header for n in names]
    if style == "json":
        _write_json(df, names, fh)
        return
    n = len(df)
    if style in ("csv", "space"):  # formatted chunk by chunk: memory stays flat however long the table
        if style == "csv":
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(heads)
        else:
            fh.write(" ".join(h.replace(" ", "_") for h in heads) + "\n")
        for start in range(0, n, CHUNK):
            cols = formatted(df.iloc[start:start + CHUNK], names, fmts)
            if style == "csv" and len(cols) == 1:
                w.writerows(zip(*cols, strict=True))
            elif style == "csv":  # csv.writer's output, joined at C speed
                cols = [_csv_cells(c) for c in cols]
                fh.write("\n".join(map(",".join, zip(*cols, strict=True))) + "\n")
            else:
                rows = zip(*([s.replace(" ", "_") for s in c] for c in cols), strict=True)
                fh.write("\n".join(" ".join(r) for r in rows) + "\n")
        return
    _write_aligned(formatted(df, names, fmts), heads, names, fh, width, fmts)


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
