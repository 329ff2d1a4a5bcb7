"""``pyprof.load``: records as a pandas DataFrame, from any input ``pyprof prof`` takes
(:mod:`pyprof.cli.inputs`): a JSON-lines record file, a ``pyprof run`` folder, a Parquet file or dataset
folder, or an export or trace (parsed first, into a temporary file), with the same columns and dtypes
whichever it read.

Columns: ``rank``, ``host``, ``file`` (for a record file: the rank in its name, else 0; no host; its
name), then every record field: integers as pandas' nullable ``Int64`` (``start`` of an nvprof export,
~1.5e18 ns, would lose digits as a float), text as ``str``, lists as Python lists, ``args`` and
``atenSizes`` as JSON text (see :mod:`pyprof.scale.parquet`). A record file needs only pandas; Parquet
needs pyarrow (the ``scale`` extra). ``prof=True`` gives prof's columns (FLOPs, bytes, roofline gap)
instead of the record fields.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

from pyprof.errors import InputError, UsageError
from pyprof.scale.extra import require
from pyprof.scale.identity import NAME_RANK
from pyprof.scale.parquet import (
    DATASET_COLUMNS,
    KINDS,
    SUFFIX,
    columns_of,
    file_version,
    is_parquet,
    parquet_files,
)


def _series(name: str, values: list) -> pd.Series:
    kind = KINDS.get(name, "int64" if name == "rank" else "string")
    if kind == "int64":
        return pd.Series(pd.array(values, dtype="Int64"), name=name)
    if kind in ("string", "json"):
        return pd.Series(values, dtype="str", name=name)
    return pd.Series(values, dtype=object, name=name)


def _selected(columns: Sequence[str] | None) -> list[str]:
    names = [*DATASET_COLUMNS, *KINDS]
    if columns is None:
        return names
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise UsageError(f"no column {unknown[0]!r} in a record dataset", "columns: " + ", ".join(names))
    return list(columns)


def _from_lines(path: str, names: list[str], name: str) -> pd.DataFrame:
    """A JSON-lines (or PyProf) record file, read and checked as prof reads it
    (:func:`pyprof.prof.load.read_records`, ``ranges`` kept)."""
    from pyprof.prof.load import read_records

    records = read_records(path, keep_ranges=True)
    cols = columns_of(records)
    cols.update(_file_columns(name, len(records)))
    return pd.DataFrame({c: _series(c, cols[c]) for c in names})


def _file_columns(name: str, n: int) -> dict[str, list]:
    """``rank``, ``host`` and ``file`` of ``n`` records of the file ``name`` (the rank in its name, else 0)."""
    m = NAME_RANK.search(os.path.basename(name))
    return {"rank": [int(m.group(1)) if m else 0] * n, "host": [None] * n, "file": [os.path.basename(name)] * n}


def _file_table(path: str, names: list[str]):
    """The columns ``names`` of one Parquet file, by its record format (:func:`file_version`): format 1's
    ``tid`` (text) as integers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pyprof.records import UNVERSIONED, thread_id

    version = file_version(path)
    table = pq.read_table(path, columns=names)
    if version == UNVERSIONED and "tid" in names and not pa.types.is_integer(table.schema.field("tid").type):
        tids = pa.array([thread_id(v) for v in table.column("tid").to_pylist()], pa.int64())
        table = table.set_column(table.schema.get_field_index("tid"), "tid", tids)
    return table


def _from_parquet(path: str, names: list[str]) -> pd.DataFrame:
    require("pyarrow")
    import pyarrow as pa

    files = parquet_files(path)
    if not files:
        raise InputError(f"{path}: no {SUFFIX} file in this folder", "give a folder `pyprof parse --format parquet` wrote")
    try:
        table = pa.concat_tables([_file_table(f, names) for f in files])
    except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise InputError(f"{path}: cannot read it as pyprof records ({type(exc).__name__}: {reason})",
                         "give Parquet that `pyprof parse --format parquet` wrote (whole files)") from None
    out = {}
    for name in names:
        col = table.column(name)
        if pa.types.is_list(col.type):
            out[name] = pd.Series(col.to_pylist(), dtype=object, name=name)
        elif pa.types.is_integer(col.type):
            out[name] = col.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get).rename(name)
        else:  # a column of nulls only would come back as object
            out[name] = col.to_pandas().astype("str").rename(name)
    return pd.DataFrame(out)


def _prof_table(path: str, columns: Sequence[str] | None, name: str) -> pd.DataFrame:
    """``rank``, ``host``, ``file``, then prof's table of the records (``pyprof prof``'s columns, row ``i``
    the ``i``-th record), built per file of a dataset (each file numbers its op instances itself)."""
    from pyprof.prof.table import build, build_file

    parts = []
    if is_parquet(path):
        import pyarrow.parquet as pq

        from pyprof.scale.readback import file_records

        for f, recs in file_records(path):
            parts.append((pq.read_table(f, columns=list(DATASET_COLUMNS)).to_pydict(), build(recs)))
    else:
        table = build_file(path)
        parts.append((_file_columns(name, len(table)), table))
    frames = []
    for ds, table in parts:
        head = pd.DataFrame({name: _series(name, ds[name]) for name in DATASET_COLUMNS})
        frames.append(pd.concat([head, table.reset_index(drop=True)], axis=1))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df.attrs["warnings"] = list(dict.fromkeys(w for _, t in parts for w in t.attrs.get("warnings", [])))
    if columns is not None:
        unknown = [c for c in columns if c not in df.columns]
        if unknown:
            raise UsageError(f"no column {unknown[0]!r} in prof's table", "columns: " + ", ".join(df.columns))
        df = df[list(columns)]
    return df


def load(path: str | os.PathLike, columns: Sequence[str] | None = None, prof: bool = False) -> pd.DataFrame:
    """Records as a DataFrame (see the module's text); ``columns``: only these (a Parquet read then
    reads only them). ``prof``: instead of the record fields, prof's table of them (``flops``, ``bytes``,
    ``gap``... as ``pyprof prof`` computes them; docs/prof.md), after ``rank``, ``host`` and ``file``.
    ``df.attrs["warnings"]`` holds prof's warnings, and the parser's for an export."""
    from pyprof.cli import inputs

    src = str(inputs.resolve(os.fspath(path)))
    if not os.path.exists(src):
        raise InputError(f"{src}: no such file or folder", "give a record file, a run folder, Parquet or an export")
    if inputs.kind(src) != inputs.EXPORT:
        return _load(src, columns, prof, src)
    import tempfile

    from pyprof.parse.run import parse_file

    with tempfile.TemporaryDirectory(prefix="pyprof-load-") as tmp:
        lines = os.path.join(tmp, "records.dict")
        res = parse_file(src, lines)
        df = _load(lines, columns, prof, src)
    df.attrs["warnings"] = [*res.warnings, *df.attrs.get("warnings", [])]
    return df


def _load(path: str, columns: Sequence[str] | None, prof: bool, name: str) -> pd.DataFrame:
    if prof:
        return _prof_table(path, columns, name)
    names = _selected(columns)
    df = _from_parquet(path, names) if is_parquet(path) else _from_lines(path, names, name)
    return df.reset_index(drop=True)
