"""Print a table (per-kernel or summary) as space-separated text, aligned columns, CSV or JSON lines.

Formatting is per column kind (:class:`pyprof.prof.columns.Column.fmt`): unknown numbers print ``n/a``,
unknown text ``-``; text never holds a space in the default space-separated form (spaces become ``_``,
as PyProf did for kernel names), so ``awk``/``cut`` see one field per column.

CSV, JSON lines and the space-separated form are for machines: raw ns, FLOPs and bytes. The aligned
form is the one a person reads, so it prints human units (:mod:`pyprof.prof.units`, headers without the
raw unit) and keeps every line within ``width`` whatever it is (:func:`fit_widths`), with a last line
saying which columns were left out and what width would show them all.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd

from pyprof.prof import units
from pyprof.prof.columns import BY_NAME

NA_NUM = "n/a"
NA_TEXT = "-"
CHUNK = 50_000
FLEX = ("kernel", "params", "longkernel", "layer", "trace", "module", "note", "op", "mod", "key", "gpu")


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
    return _whole(_floats(series))


def _whole(a: np.ndarray) -> list[str]:
    """Each float as a whole number, however large (``inf`` as such; through int64 where that holds it);
    ``n/a`` for NaN."""
    nan = np.isnan(a)
    if len(a) and np.nanmax(np.abs(np.where(nan, 0.0, a))) >= 9e18:  # beyond int64: the slow way
        return [NA_NUM if math.isnan(v) else f"{v:.0f}" for v in a.tolist()]
    out = list(map(str, np.rint(np.where(nan, 0.0, a)).astype(np.int64).tolist()))
    for i in np.flatnonzero(nan).tolist():
        out[i] = NA_NUM
    return out


def col_num(series: pd.Series) -> list[str]:
    """Rates and ratios: 3 significant figures or so, whole from 100 up (however large: a long duration over
    a tiny ideal time); ``n/a`` when unknown."""
    a = _floats(series)
    nan = np.isnan(a)
    absa = np.abs(np.where(nan, 0.0, a))
    big = ~nan & ((absa >= 100) | (absa == 0))
    out = np.full(len(a), NA_NUM, dtype=object)
    out[big] = _whole(a[big]) if big.any() else []
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


def col_str(series: pd.Series) -> list[str]:
    values = series.tolist()
    try:  # each distinct value formatted once (text columns repeat a few names)
        distinct: dict[Any, Any] = dict.fromkeys(values)
    except TypeError:  # an unhashable cell
        return [_str(v) for v in values]
    for v in distinct:
        distinct[v] = _str(v)
    return list(map(distinct.__getitem__, values))


_CSV_SPECIAL = (",", '"', "\n", "\r")


def _csv_cells(col: list[str]) -> list[str]:
    """A column of text cells as csv.writer writes them (QUOTE_MINIMAL), each distinct cell quoted once."""
    joined = "".join(col)
    if not any(c in joined for c in _CSV_SPECIAL):
        return col
    distinct: dict[str, Any] = dict.fromkeys(col)
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


# Columns printed in human units in the aligned (human) form: name -> (units kind, scale to the base
# unit, header). Per-kernel and summary columns share names where they mean the same quantity.
HUMAN: dict[str, tuple[str, float, str]] = {
    "sil": ("dur", 1.0, "Sil"), "time": ("dur", 1.0, "Time/step"), "ideal": ("dur", 1.0, "Ideal"),
    "excess": ("dur", 1.0, "Excess"), "share": ("pct", 1.0, "Share"),
    "flops": ("flop", 1.0, "FLOPs"), "bytes": ("byte", 1.0, "Bytes"),
    "tflops": ("flops", 1e12, "FLOP/s"), "gbps": ("bps", 1e9, "B/s"),
    "gap": ("num", 1.0, "Gap"), "ai": ("num", 1.0, "AI"), "spread": ("pct", 1.0, "Spread"),
    "wall": ("dur", 1.0, "Wall"), "samples": ("num", 1.0, "Samples/s"),
}
HUMAN_KINDS = frozenset(units.FORMATS)


def human_column(series: pd.Series, kind: str, scale: float = 1.0) -> list[str]:
    """A numeric column as human-unit text (``kind``: a key of :data:`pyprof.prof.units.FORMATS`)."""
    a = _floats(series)
    return units.column((a * scale).tolist() if scale != 1.0 else a.tolist(), kind)


#: a CSV cell a spreadsheet would run as a formula starts with one of these (and is no plain number)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(col: list[str]) -> list[str]:
    """A column of text with every control character written as its escape (:mod:`pyprof.terminal`): an op
    or kernel name holding escape sequences must not drive the terminal (checked at C speed first)."""
    from pyprof.terminal import CONTROL, escaped

    return [escaped(v) for v in col] if CONTROL.search("".join(col)) else col


def _cut_names(col: list[str]) -> list[str]:
    """A column of a human table with each name past :data:`pyprof.terminal.NAME_MAX` characters cut,
    saying by how much: a table piped to a pager keeps every column, but no 10 MB op name."""
    from pyprof.terminal import NAME_MAX, cut_names

    return [cut_names(v) for v in col] if any(len(v) > NAME_MAX for v in col) else col


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def csv_safe(col: list[str]) -> list[str]:
    """A column of CSV cells with every would-be formula (``=HYPERLINK(...)``, ``+cmd``, ``@SUM``) led by
    ``'``, so that a spreadsheet shows it as text; numbers (``-5``) and the lone ``-`` of an empty
    cell are left as they are."""
    if not any(v.startswith(_FORMULA_START) for v in col):
        return col
    return ["'" + v if v.startswith(_FORMULA_START) and len(v) > 1 and not _is_number(v) else v for v in col]


def formatted(df: pd.DataFrame, names: Sequence[str], fmts: dict[str, str] | None = None,
              human: bool = False) -> list[list[str]]:
    """Each selected column as a list of strings; with ``human``, the columns of :data:`HUMAN` (and
    those whose ``fmts`` entry is a units kind) in human units."""
    out = []
    for name in names:
        fmt = (fmts or {}).get(name)
        if human and (fmt in HUMAN_KINDS or name in HUMAN and fmt != "str"):  # "str": formatted already
            kind, scale = (fmt, 1.0) if fmt in HUMAN_KINDS else HUMAN[name][:2]
            out.append(human_column(df[name], kind, scale))
            continue
        fmt = fmt or BY_NAME[name].fmt
        out.append(printable(FORMATTERS["sci" if name == "sil" else fmt](df[name])))
    return out


PARALLEL_MIN_ROWS = 200_000  # below this, starting processes costs more than formatting saves


def write(df: pd.DataFrame, names: Sequence[str], fh: IO[str], style: str = "space", width: int = 0,
          headers: dict[str, str] | None = None, fmts: dict[str, str] | None = None, workers: int = 1,
          drop: Sequence[str] = ()) -> None:
    """Write ``df[names]`` to ``fh`` in ``style``: ``space``, ``aligned`` (human units, every line at most
    ``width`` characters; 0: no limit), ``csv``, ``json``. ``drop``: in the aligned form, the columns to
    leave out first (in this order) when the table cannot fit ``width`` otherwise.

    With ``workers`` > 1, a long table in a chunked style (csv, space, json) is formatted on that many
    forked processes, chunk by chunk, and written in order: the same text. Both that and pausing the
    cyclic garbage collector meanwhile (formatting creates millions of strings, and each full collection
    would walk every object of the table; they hold no cycles) happen only in a process pyprof owns
    (:mod:`pyprof.process`: ``pyprof prof``); a library caller's process is formatted in, as it is."""
    from pyprof.process import collector_paused

    with collector_paused():
        _write(df, names, fh, style, width, headers, fmts, workers, drop)


def _human_header(name: str, headers: dict[str, str] | None, fmts: dict[str, str] | None) -> str:
    if name in HUMAN and (fmts or {}).get(name) != "str":
        return HUMAN[name][2]
    return (headers or {}).get(name) or BY_NAME[name].header


def _write(df, names, fh, style, width, headers, fmts, workers=1, drop=()) -> None:
    if style not in ("csv", "space", "json"):  # aligned: widths need every row first
        heads = [_human_header(n, headers, fmts) for n in names]
        numeric = [_is_numeric(n, fmts) for n in names]
        write_aligned(formatted(df, names, fmts, human=True), heads, numeric, fh, width,
                      flex=[n in FLEX for n in names], drop=[names.index(n) for n in drop if n in names])
        return
    heads = [(headers or {}).get(n) or BY_NAME[n].header for n in names]
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
    if style == "csv":
        cols = [csv_safe(c) for c in cols]
        if len(cols) == 1:  # csv.writer quotes a lone empty cell
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(zip(*cols, strict=True))
            return buf.getvalue()
        cols = [_csv_cells(c) for c in cols]  # csv.writer's output, joined at C speed
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
    from pyprof import process

    _SHARED["job"] = (df, names, style, fmts)
    pool = process.pool(workers)
    if pool is None:
        _SHARED.clear()
        return None
    return _ordered(pool, spans, 2 * workers)


def _ordered(pool, spans, ahead: int):
    """Yield the pool's chunk texts in order, at most ``ahead`` chunks in flight (memory stays bounded),
    then close the pool. A chunk the pool cannot give (a process died) is formatted here instead."""
    import collections
    import itertools
    from concurrent.futures.process import BrokenProcessPool

    todo = iter(spans)
    try:
        pending = collections.deque((span, _submit(pool, span)) for span in itertools.islice(todo, ahead))
        while pending:
            span, future = pending.popleft()
            try:
                text = future.result() if future is not None else None
            except BrokenProcessPool:  # its process died
                text = None
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, _submit(pool, nxt)))
            yield _span_text(span) if text is None else text
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


def _is_numeric(name: str, fmts: dict[str, str] | None) -> bool:
    """Right-aligned: numbers (and their human-unit text)."""
    fmt = (fmts or {}).get(name)
    if fmt == "str":
        return False
    if name in HUMAN or fmt in HUMAN_KINDS:
        return True
    return (fmt or (BY_NAME[name].fmt if name in BY_NAME else "str")) in ("int", "float", "sci")


SOFT_FLOOR = 24  # text columns are cut to this before any column is left out
HARD_FLOOR = 4  # and to this (headers cut too) before columns are left out from the right


def fit_widths(natural: list[int], heads: list[str], flex: list[bool], width: int,
               drop: Sequence[int | Sequence[int]] = ()) -> tuple[list[int], list[int]]:
    """Column widths that keep a line of ``natural``-wide columns (one space between) within ``width``,
    and the indices of the columns left out (width 0). In order, until it fits: cut the widest text
    (``flex``) columns down to :data:`SOFT_FLOOR` (never below their header); leave out the ``drop``
    columns, one at a time (an entry that is a tuple of indices: together); cut text columns to :data:`HARD_FLOOR`; leave out columns from the right
    (never the first); cut the first. The columns left out are listed in the order they were."""
    n = len(natural)
    out: list[int] = []

    def shrink(widths: list[int], kept: list[int], floor_of) -> int:
        """Cut kept flex columns, widest first, toward their floor; the excess left."""
        excess = sum(widths[i] for i in kept) + len(kept) - 1 - width
        cand = [i for i in kept if flex[i]]
        while excess > 0 and cand:
            i = max(cand, key=lambda k: widths[k])
            floor = floor_of(i)
            if widths[i] <= floor:
                cand.remove(i)
                continue
            cut = min(excess, widths[i] - floor, max(1, widths[i] // 4))
            widths[i] -= cut
            excess -= cut
        return excess

    def attempt(kept: list[int], floor_of) -> list[int] | None:
        widths = list(natural)
        return widths if shrink(widths, kept, floor_of) <= 0 else None

    if not width or sum(natural) + n - 1 <= width:
        return list(natural), out
    soft = lambda i: max(len(heads[i]), min(natural[i], SOFT_FLOOR))  # noqa: E731
    hard = lambda i: min(natural[i], HARD_FLOOR)  # noqa: E731
    kept = list(range(n))
    pending = [[i for i in (g if isinstance(g, (tuple, list)) else (g,)) if 0 < i < n] for g in drop]
    pending = [g for g in pending if g]
    while True:
        widths = attempt(kept, soft)
        if widths is not None or not pending:
            break
        for i in pending.pop(0):
            if i in kept:
                kept.remove(i)
                out.append(i)
    if widths is None:
        widths = attempt(kept, hard)
    while widths is None and len(kept) > 1:
        i = kept.pop()
        out.append(i)
        widths = attempt(kept, hard)
    if widths is None:  # one column, still too wide: cut it
        widths = list(natural)
        widths[kept[0]] = max(width, 1)
    for i in out:
        widths[i] = 0
    return widths, out


def fit_line(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (``~`` marks the cut; 0: as it is): titles of human tables."""
    return text if not width or len(text) <= width else text[: max(width - 1, 0)] + "~"


def write_aligned(cols: list[list[str]], heads: list[str], numeric: list[bool], fh: IO[str], width: int = 0,
                  flex: list[bool] | None = None, drop: Sequence[int | Sequence[int]] = ()) -> None:
    """Columns of text as an aligned table: a header line, numbers right-aligned, every line at most
    ``width`` characters (0: no limit; see :func:`fit_widths`), and a last line naming the columns left
    out, if any. Also used by ``pyprof diff``."""
    cols = [_cut_names(printable(c)) for c in cols]  # names reach the terminal as text (diff, per-rank summary)
    natural = [max([len(h)] + [len(s) for s in c]) for h, c in zip(heads, cols, strict=True)]
    flex = flex if flex is not None else [not r for r in numeric]
    widths, left_out = fit_widths(natural, heads, flex, width, drop)
    shown = [i for i in range(len(cols)) if i not in left_out]

    def cell(s: str, w: int, right: bool) -> str:
        if len(s) > w:
            s = s[: max(w - 1, 0)] + "~"
        return s.rjust(w) if right else s.ljust(w)

    fh.write(" ".join(cell(heads[i], widths[i], numeric[i]) for i in shown).rstrip() + "\n")
    n = len(cols[0]) if cols else 0
    for start in range(0, n, CHUNK):
        rows = zip(*(cols[i][start:start + CHUNK] for i in shown), strict=True)
        fh.write("\n".join(" ".join(cell(s, widths[i], numeric[i]) for s, i in zip(row, shown, strict=True)).rstrip()
                           for row in rows) + "\n")
    if left_out:
        full = sum(natural) + len(natural) - 1
        note = f"(left out to fit -w {width}: {', '.join(heads[i] for i in left_out)}; -w {full} shows all)"
        fh.write(fit_line(note, width) + "\n")


def _clean(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def _json_text(df: pd.DataFrame, names: Sequence[str], start: int, stop: int) -> str:
    """Rows ``[start, stop)`` as JSON lines, raw values (NaN as null)."""
    lists = [df[n].iloc[start:stop].tolist() for n in names]
    return "".join(orjson.dumps({k: _clean(v) for k, v in zip(names, row, strict=True)},
                                option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n" for row in zip(*lists, strict=True))

