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


PARALLEL_MIN_ROWS = 200_000  # below this, starting processes costs more than formatting saves


def write(df: pd.DataFrame, names: Sequence[str], fh: IO[str], style: str = "space", width: int = 0,
          headers: dict[str, str] | None = None, fmts: dict[str, str] | None = None, workers: int = 1) -> None:
    """Write ``df[names]`` to ``fh`` in ``style``: ``space``, ``aligned`` (``width`` columns), ``csv``, ``json``.

    With ``workers`` > 1, a long table in a chunked style (csv, space, json) is formatted on that many
    forked processes, chunk by chunk, and written in order: the same text. Both that and pausing the
    cyclic garbage collector meanwhile (formatting creates millions of strings, and each full collection
    would walk every object of the table; they hold no cycles) happen only in a process pyprof owns
    (:mod:`pyprof.process`: ``pyprof prof``); a library caller's process is formatted in, as it is."""
    from pyprof.process import collector_paused

    with collector_paused():
        _write(df, names, fh, style, width, headers, fmts, workers)


def _write(df, names, fh, style, width, headers, fmts, workers=1) -> None:
    heads = [(headers or {}).get(n) or BY_NAME[n].header for n in names]
    if style not in ("csv", "space", "json"):  # aligned: widths need every row first
        _write_aligned(formatted(df, names, fmts), heads, names, fh, width, fmts)
        return
    if style == "csv":
        csv.writer(fh, lineterminator="\n").writerow(heads)
    elif style == "space":
        fh.write(" ".join(h.replace(" ", "_") for h in heads) + "\n")
    # formatted chunk by chunk: memory stays flat however long the table
    for text in _bodies(df, names, style, fmts, workers):
        fh.write(text)


def _chunk_text(df: pd.DataFrame, names: Sequence[str], style: str, fmts, start: int, stop: int) -> str:
    """Rows ``[start, stop)`` of the table as text in ``style`` (csv, space or json), without a header."""
    if style == "json":
        return _json_text(df, names, start, stop)
    cols = formatted(df.iloc[start:stop], names, fmts)
    if style == "csv" and len(cols) == 1:  # csv.writer quotes a lone empty cell
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(zip(*cols, strict=True))
        return buf.getvalue()
    if style == "csv":  # csv.writer's output, joined at C speed
        cols = [_csv_cells(c) for c in cols]
        return "\n".join(map(",".join, zip(*cols, strict=True))) + "\n"
    rows = zip(*([s.replace(" ", "_") for s in c] for c in cols), strict=True)
    return "\n".join(" ".join(r) for r in rows) + "\n"


def _bodies(df: pd.DataFrame, names: Sequence[str], style: str, fmts, workers: int):
    """The text of each chunk of rows, in order; on ``workers`` processes for a long table."""
    spans = [(start, min(start + CHUNK, len(df))) for start in range(0, len(df), CHUNK)]
    if workers > 1 and len(df) >= PARALLEL_MIN_ROWS:
        texts = _parallel_chunks(df, names, style, fmts, spans, workers)
        if texts is not None:
            yield from texts
            return
    for start, stop in spans:
        yield _chunk_text(df, names, style, fmts, start, stop)


_SHARED: dict = {}  # the table being written, inherited by forked formatting processes


def _format_span(span: tuple[int, int]) -> str:
    """Worker: one chunk of the table set in :data:`_SHARED` before the fork (a forked child of an owned
    process: its collector is pyprof's to turn off)."""
    import gc

    gc.disable()
    return _span_text(span)


def _span_text(span: tuple[int, int]) -> str:
    df, names, style, fmts = _SHARED["job"]
    return _chunk_text(df, names, style, fmts, span[0], span[1])


def _parallel_chunks(df, names, style, fmts, spans, workers):
    """Chunk texts formatted by forked processes (they inherit the table, nothing is sent to them), in
    order; None where processes cannot be started or this process is not pyprof's to fork
    (:func:`pyprof.process.can_fork`; then the caller formats in this process)."""
    import concurrent.futures
    import multiprocessing

    from pyprof import process

    if not process.can_fork():
        return None
    ctx = multiprocessing.get_context("fork")
    _SHARED["job"] = (df, names, style, fmts)
    try:
        pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx)
    except (OSError, NotImplementedError):
        _SHARED.clear()
        return None
    return _ordered(pool, spans, 2 * workers)


def _ordered(pool, spans, ahead: int):
    """Yield the pool's chunk texts in order, at most ``ahead`` chunks in flight (memory stays bounded),
    then close the pool. A chunk the pool cannot give (a process died) is formatted here instead."""
    import collections

    pending: collections.deque = collections.deque()
    todo = iter(spans)
    try:
        for span in todo:
            pending.append((span, _submit(pool, span)))
            if len(pending) >= ahead:
                break
        while pending:
            span, future = pending.popleft()
            text = _result(future)
            if text is None:
                text = _span_text(span)
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, _submit(pool, nxt)))
            yield text
    finally:
        pool.shutdown(cancel_futures=True)
        _SHARED.clear()


def _submit(pool, span):
    """The future of one chunk, or None when the pool is broken (a process died)."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return pool.submit(_format_span, span)
    except (BrokenProcessPool, RuntimeError):
        return None


def _result(future) -> str | None:
    """A chunk's text, or None when its process died (the caller formats it itself)."""
    from concurrent.futures.process import BrokenProcessPool

    if future is None:
        return None
    try:
        return future.result()
    except BrokenProcessPool:
        return None


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


def _json_text(df: pd.DataFrame, names: Sequence[str], start: int, stop: int) -> str:
    """Rows ``[start, stop)`` as JSON lines, raw values (NaN as null)."""
    lists = [df[n].iloc[start:stop].tolist() for n in names]
    return "".join(orjson.dumps({k: _clean(v) for k, v in zip(names, row, strict=True)},
                                option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n" for row in zip(*lists, strict=True))
