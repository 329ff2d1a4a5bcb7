"""What ``pyprof prof``, ``report`` and ``diff`` accept as records: a record file (parse's or run's
JSON lines, or PyProf's), stdin, a Parquet file or dataset folder (``pyprof parse --format parquet``),
or an export not parsed yet (an Nsight/nvprof SQLite file or a torch.profiler trace), which is parsed
first with one line on stderr saying so. A ``pyprof run`` output folder stands for its ``records.dict``.

A Parquet dataset holds one file per input (rank); each file's op instances are numbered within it, so
prof's table is built per file and the tables joined in file order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, overload

Say = Callable[[str], None]

STDIN, RECORDS, PARQUET, EXPORT = "stdin", "records", "parquet", "export"


RUN_RECORDS = "records.dict"  # what `pyprof run` writes in its output folder


@overload
def resolve(path: str | os.PathLike) -> str: ...
@overload
def resolve(path: None) -> None: ...
def resolve(path: str | os.PathLike | None) -> str | None:
    """``path``, or the ``records.dict`` in it where it is a ``pyprof run`` output folder (one holding
    that file and no Parquet)."""
    if path is None or str(path) == "-":
        return None if path is None else "-"
    path = os.fspath(path)
    inner = os.path.join(path, RUN_RECORDS)
    if os.path.isdir(path) and os.path.isfile(inner):
        from pyprof.scale.parquet import parquet_files

        if not parquet_files(path):
            return inner
    return path


def kind(path: str | os.PathLike | None) -> str:
    """Which of :data:`STDIN`, :data:`RECORDS`, :data:`PARQUET`, :data:`EXPORT` ``path`` is (a missing
    or unreadable path is :data:`RECORDS`: the record reader names the problem)."""
    if path is None or str(path) == "-":
        return STDIN
    from pyprof.parse.source import is_export
    from pyprof.scale.parquet import is_parquet

    path = os.fspath(path)
    if is_parquet(path):
        return PARQUET
    return EXPORT if is_export(path) else RECORDS


def _parsed(path: str, warnings: list[str], say: Say) -> None:
    """Once an export parsed: the line saying so (said only then: where it cannot be parsed, the parser's
    one error line says why), then the parser's warnings."""
    say(f"pyprof: {path} is an export, not a record file: parsed it first "
        f"(`pyprof parse {path} -o records.dict` keeps the records for the next command)")
    for w in warnings:
        say(f"pyprof: warning: {w}")


def _parse(path: str, say: Say) -> list[dict[str, Any]]:
    from pyprof.parse.source import open_source

    source = open_source(path)
    records = list(source.records())
    _parsed(path, source.warnings, say)
    if not records:
        from pyprof.errors import NoKernelsError

        raise NoKernelsError(f"{path}: no kernel records", "profile with CUDA (or a CPU trace with ops) to get some")
    return records


def _joined(tables: list):
    """Per-file prof tables as one: rows in file order, ``idx`` numbered through, the list attributes
    (``warnings``, ``peaks``) of all, each line once."""
    import pandas as pd

    if len(tables) == 1:
        return tables[0]
    df = pd.concat(tables, ignore_index=True)
    if "idx" in df.columns:
        df["idx"] = range(1, len(df) + 1)
    df.attrs = {"header": tables[0].attrs.get("header", {}),
                "steps": sorted(set().union(*(t.attrs.get("steps") or () for t in tables)))}
    for key in ("warnings", "peaks"):
        lines: list[str] = []
        for t in tables:
            lines += [w for w in t.attrs.get(key, []) if w not in lines]
        df.attrs[key] = lines
    return df


def table(path: str | None, say: Say, gpu: str | None = None, peak_flops: float | None = None,
          peak_bw: float | None = None, workers: int | None = None, reprice: bool = False):
    """prof's per-kernel table of any record source (see the module docstring)."""
    from pyprof.prof.table import build, build_file

    path = resolve(path)
    k = kind(path)
    if k == PARQUET and path is not None:  # (kind: None is STDIN)
        from pyprof.scale.parquet import file_header
        from pyprof.scale.readback import file_records

        return _joined([build(recs, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw,
                              header={k: v for k, v in file_header(f).items() if not (reprice and k == "peaks")})
                        for f, recs in file_records(path)])
    if k == EXPORT and path is not None:
        import tempfile

        from pyprof.parse.run import parse_file

        with tempfile.TemporaryDirectory(prefix="pyprof-prof-") as tmp:
            lines = os.path.join(tmp, "records.dict")
            res = parse_file(path, lines)
            _parsed(path, res.warnings, say)
            return build_file(lines, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, workers=workers)
    return build_file(path, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, workers=workers, reprice=reprice)


def record_sets(path: str | None, say: Say) -> list[tuple[str, list[dict[str, Any]]]]:
    """The records of any record source, whole (``ranges`` kept), as ``(rank, records)`` pairs: one per
    file of a Parquet dataset (its name less ``.parquet``: a rank's), else one named ``-``."""
    from pyprof.prof.load import iter_records

    path = resolve(path)
    k = kind(path)
    if k == PARQUET and path is not None:  # (kind: None is STDIN)
        from pyprof.scale.readback import file_records

        return [(os.path.basename(f).removesuffix(".parquet"), recs)
                for f, recs in file_records(path, keep_ranges=True)]
    if k == EXPORT and path is not None:
        return [("-", _parse(path, say))]
    return [("-", list(iter_records(path, keep_ranges=True)))]


def profile(path: str, say: Say, gpu: str | None = None, peak_flops: float | None = None,
            peak_bw: float | None = None, env: dict[str, Any] | None = None):
    """The report's :class:`~pyprof.report.profile.Profile` of any record source, its records with their
    ``ranges`` (steps)."""
    from pyprof.report import profile as prof_mod

    path = resolve(path)
    k = kind(path)
    if k == PARQUET and path is not None:  # (kind: None is STDIN)
        from pyprof.prof.table import build
        from pyprof.scale.readback import file_records

        parts = list(file_records(path, keep_ranges=True))
        records = [r for _, recs in parts for r in recs]
        df = _joined([build(recs, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw) for _, recs in parts])
        return prof_mod.from_records(records, os.fspath(path), gpu, peak_flops, peak_bw, env, df=df)
    if k == EXPORT and path is not None:
        return prof_mod.from_records(_parse(path, say), os.fspath(path), gpu, peak_flops, peak_bw, env)
    return prof_mod.load(path, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, env=env)
