"""A dataset queried with DuckDB: :func:`dataset`, the per-rank summary (:func:`rank_summary`, columns
:data:`RANK_COLUMNS`) and the straggler table (:func:`stragglers`, :data:`STRAGGLER_COLUMNS`, sorted by
``excess``: what the other ranks wait for in a synchronous step).

DuckDB, not pandas (docs/benchmarks.md, "Many ranks"): it reads only the columns a query names, a row
group at a time on every core, so a summary of 512 ranks' half a billion records never has to fit in
memory, and on a dataset that does fit it was faster and smaller than pandas reading the same columns.
"""

from __future__ import annotations

import contextlib
import os
from typing import IO, Any

from pyprof.errors import InputError, PyprofError, UsageError
from pyprof.scale.extra import require
from pyprof.scale.parquet import SUFFIX, _quote, file_version, glob_literal, parquet_files

#: name, header, units kind (:mod:`pyprof.prof.units`, or ``int``/``str``), meaning
RANK_COLUMNS = (
    ("rank", "Rank", "int", "Rank (from the export, else the file name, else the input's index)."),
    ("host", "Host", "str", "Host name, where the export records it."),
    ("files", "Files", "int", "Input files of this rank."),
    ("kernels", "Kernels", "int", "Kernel records."),
    ("copies", "Copies", "int", "memcpy/memset records."),
    ("time", "Time", "dur", "Total silicon time of its records."),
    ("span", "Span", "dur", "Last end - first start of its records."),
    ("vs_median", "vs median", "num", "Time / the median rank's time."),
    ("attributed", "Attributed", "pct", "Share of its records with a known op."),
    ("top_op", "Top op", "str", "Its op (or unattributed kernel) with the most time."),
)
STRAGGLER_COLUMNS = (
    ("key", "Op", "str", "Op (the kernel's name where no op is known)."),
    ("ranks", "Ranks", "int", "Ranks that ran it."),
    ("median", "Median", "dur", "Median over those ranks of its time per rank."),
    ("slowest", "Slowest", "dur", "Its time on the slowest rank."),
    ("slowest_rank", "On rank", "int", "The slowest rank (the lowest of equals)."),
    ("fastest", "Fastest", "dur", "Its time on the fastest rank."),
    ("ratio", "Slowest/med", "num", "Slowest / median."),
    ("excess", "Excess", "dur", "Slowest - median: the wait it causes in a synchronous step."),
)

_KEY = "coalesce(op, kShortName, '-')"


def _files(path: str | os.PathLike) -> list[str]:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or folder", "give a .parquet file or a dataset folder "
                         "(`pyprof parse --format parquet FILES -o DIR`)")
    files = parquet_files(path)
    if not files:
        raise InputError(f"{path}: no {SUFFIX} file in this folder",
                         "write one with `pyprof parse --format parquet FILES -o DIR`")
    require("pyarrow")
    for f in files:  # a record format this pyprof reads (its tables use no field whose type changed)
        with contextlib.suppress(OSError, ValueError):  # (an unreadable file: DuckDB's read names it)
            file_version(f)
    return files


def dataset(path: str | os.PathLike, connection: Any = None):
    """A DuckDB relation over the Parquet file ``path`` or every Parquet file of the folder ``path``
    (on ``connection``, default DuckDB's default connection): ``rel.aggregate(...)``, ``rel.df()``, or
    ``duckdb.sql("SELECT op, sum(kDuration) FROM rel GROUP BY op")`` by the variable's name."""
    require("duckdb")
    import duckdb

    con = connection if connection is not None else duckdb
    return con.read_parquet([glob_literal(f) for f in _files(path)])


def _connect(threads: int | None = None):
    require("duckdb")
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # its bar would go to stdout
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


#: the columns :func:`_groups` reads
_READ = ("rank", "file", "host", "op", "kShortName", "kDuration", "kind", "start", "end")


def _groups(con, path) -> str:
    """One scan of the dataset into a temporary table of its totals per (rank, file, op): every figure
    of both tables comes from it, so the Parquet files are read once. Returns the table's name. Each
    file's footer is checked first (:func:`pyprof.scale.readback.check_columns`, where pyarrow is
    installed), so that a foreign or wrong-typed file is named with its column, not in SQL terms."""
    from pyprof.scale.readback import check_columns

    files = _files(path)
    check_columns(files, _READ)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pyprof_groups AS
        SELECT rank, file, min(host) AS host, {_KEY} AS key, sum(kDuration)::BIGINT AS t, count(*) AS n,
               count(*) FILTER (WHERE kind = 'kernel') AS kernels, count(op) AS attributed,
               min(start) AS first, max("end") AS last
        FROM read_parquet([{', '.join(_quote(glob_literal(f)) for f in files)}]) GROUP BY ALL
    """)
    return "pyprof_groups"


def _rank_summary(con, groups: str):
    return con.execute(f"""
        WITH per_op AS (SELECT rank, key, sum(t) AS t FROM {groups} GROUP BY ALL),
        top AS (SELECT rank, first(key ORDER BY t DESC, key) AS top_op FROM per_op GROUP BY rank),
        ranks AS (
            SELECT rank, min(host) AS host, count(DISTINCT file) AS files, sum(kernels)::BIGINT AS kernels,
                   (sum(n) - sum(kernels))::BIGINT AS copies, sum(t)::BIGINT AS time,
                   max(last) - min(first) AS span, 100.0 * sum(attributed) / sum(n) AS attributed
            FROM {groups} GROUP BY rank
        )
        SELECT r.rank, r.host, r.files, r.kernels, r.copies, r.time, r.span,
               r.time / nullif(median(r.time) OVER (), 0) AS vs_median, r.attributed, t.top_op
        FROM ranks r JOIN top t USING (rank) ORDER BY r.rank
    """).df()


def _stragglers(con, groups: str, top: int | None):
    limit = f"LIMIT {int(top)}" if top else ""
    return con.execute(f"""
        WITH per AS (SELECT key, rank, sum(t)::BIGINT AS t FROM {groups} GROUP BY ALL)
        SELECT key, count(*) AS ranks, median(t) AS median, max(t) AS slowest,
               first(rank ORDER BY t DESC, rank) AS slowest_rank, min(t) AS fastest,
               max(t) / nullif(median(t), 0) AS ratio, max(t) - median(t) AS excess
        FROM per GROUP BY key ORDER BY excess DESC, slowest DESC, key {limit}
    """).df()


def rank_summary(path: str | os.PathLike, connection: Any = None):
    """The per-rank summary of a dataset (columns :data:`RANK_COLUMNS`) as a DataFrame, by rank."""
    con = connection if connection is not None else _connect()
    return _rank_summary(con, _groups(con, path))


def stragglers(path: str | os.PathLike, top: int | None = 10, connection: Any = None):
    """The straggler table of a dataset (columns :data:`STRAGGLER_COLUMNS`) as a DataFrame: the ``top``
    ops by excess (None: all)."""
    con = connection if connection is not None else _connect()
    return _stragglers(con, _groups(con, path), top)


def tables(path: str | os.PathLike, top: int | None = 10, threads: int | None = None):
    """Both tables of ``pyprof prof DIR`` from one scan of the dataset: ``(rank_summary, stragglers)``."""
    con = _connect(threads)
    try:
        groups = _groups(con, path)
        return _rank_summary(con, groups), _stragglers(con, groups, top)
    finally:
        con.close()


def _human(df, spec) -> tuple[list[list[str]], list[str], list[bool]]:
    from pyprof.prof import units

    cols, heads, numeric = [], [], []
    for name, head, kind, _ in spec:
        values = df[name].tolist()
        if kind == "str":
            cols.append(["-" if v is None or v != v or v == "" else str(v) for v in values])
        elif kind == "int":
            cols.append(["n/a" if v is None or v != v else str(int(v)) for v in values])
        else:
            cols.append(units.column(values, kind))
        heads.append(head)
        numeric.append(kind != "str")
    return cols, heads, numeric


def write_tables(path: str, fh: IO[str], style: str = "aligned", width: int = 0, top: int | None = 10,
                 threads: int | None = None) -> None:
    """``pyprof prof DIR``: the per-rank summary and the straggler table of a dataset, in ``style``
    (``aligned``: human units within ``width`` characters, 0: no limit; ``csv``; ``json``: JSON lines
    with a ``table`` field)."""
    try:
        ranks, slow = tables(path, top, threads)
    except PyprofError:
        raise
    except Exception as exc:  # a foreign, truncated or wrong-typed Parquet file: DuckDB's words, one line
        if not type(exc).__module__.startswith(("duckdb", "_duckdb")):
            raise
        reason = " ".join(str(exc).split())[:300]
        raise InputError(f"{path}: cannot read it as a pyprof record dataset ({type(exc).__name__}: {reason})",
                         "give Parquet that `pyprof parse --format parquet` wrote (whole files)") from None
    shown: tuple[tuple[str, Any, tuple[tuple[str, str, str, str], ...]], ...] = (
        ("per rank", ranks, RANK_COLUMNS), ("stragglers", slow, STRAGGLER_COLUMNS))
    if style == "json":
        import orjson

        for title, df, spec in shown:
            for row in df[[c[0] for c in spec]].itertuples(index=False):
                rec = {"table": title, **{c[0]: _plain(v) for c, v in zip(spec, row, strict=True)}}
                fh.write(orjson.dumps(rec).decode() + "\n")
        return
    if style == "csv":
        import csv

        from pyprof.prof.render import csv_safe, printable

        def cell(v):  # an op or host name is text in a spreadsheet (no formula), with no control character
            v = _plain(v)
            return "" if v is None else csv_safe(printable([v]))[0] if isinstance(v, str) else v

        w = csv.writer(fh, lineterminator="\n")
        for i, (title, df, spec) in enumerate(shown):
            fh.write(("\n" if i else "") + f"# {title}\n")
            w.writerow([c[0] for c in spec])
            for row in df[[c[0] for c in spec]].itertuples(index=False):
                w.writerow([cell(v) for v in row])
        return
    from pyprof.prof.render import fit_line, write_aligned

    n = len(ranks)
    fh.write(fit_line(f"Per rank ({n} rank{'s' if n != 1 else ''}, {int(ranks['files'].sum())} files)", width) + "\n")
    cols, heads, numeric = _human(ranks, RANK_COLUMNS)
    write_aligned(cols, heads, numeric, fh, width, drop=[6, 4, 2, 1])
    what = f"top {len(slow)} ops" if top else f"{len(slow)} ops"
    fh.write("\n" + fit_line(f"Stragglers: {what} by excess (slowest rank - median rank)", width) + "\n")
    if n < 2:
        fh.write("(one rank: nothing to compare)\n")
        return
    cols, heads, numeric = _human(slow, STRAGGLER_COLUMNS)
    write_aligned(cols, heads, numeric, fh, width, drop=[5, 1])


def _plain(v):
    """A cell as a JSON/CSV value: NaN and NA as None, numpy scalars as Python's."""
    try:
        if v != v:
            return None
    except (TypeError, ValueError):
        return None
    return v.item() if hasattr(v, "item") else v


def prof_dataset(path: str, output: str, as_csv: bool, as_json: bool, width: int, top: int | None,
                 threads: int | None, unused: dict[str, object]) -> None:
    """``pyprof prof DIR`` / ``pyprof prof x.parquet``: :func:`write_tables` to ``output`` (``-``: stdout)
    within ``width`` (0: no limit). ``unused``: the options given that apply to a record file only (option
    -> value), refused."""
    import sys

    from pyprof.atomic import atomic_output

    given = [name for name, value in unused.items() if value]
    if given:
        raise UsageError(f"{given[0]} applies to a record file; a dataset prints its per-rank summary and "
                         "straggler table", "drop it, or pyprof prof one rank's record file")
    if as_csv and as_json:
        raise UsageError("--csv and --json are exclusive", "choose one output style")
    style = "csv" if as_csv else "json" if as_json else "aligned"
    with atomic_output(output) as fh:
        write_tables(path, fh, style, width, top or 10, threads)
        if fh is sys.stdout:
            fh.flush()
