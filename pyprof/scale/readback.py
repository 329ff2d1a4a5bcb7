"""Parquet back to records: the record dicts a ``.parquet`` file or a dataset folder holds, so that
``pyprof prof``, ``report`` and ``diff`` read Parquet as they read a JSON-lines record file.

Each column returns to its field's record type (:data:`pyprof.scale.parquet.KINDS`: ``args`` and
``atenSizes`` from their JSON text); the dataset's own columns (``rank``, ``host``, ``file``) are left out.
The records are checked as prof checks a record file's (:func:`pyprof.prof.load.prof_checks`), bad ones
stopping the read or skipped under :func:`pyprof.prof.load.skipping_bad`; a file of format 1 (docs/records.md)
has each ``tid`` turned into its integer. A dataset is read file by file (:func:`file_records`): each file
is one input of ``pyprof parse`` (one rank), its op instances (``opId``) numbered within it, so prof builds
each file's table on its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import orjson

from pyprof.errors import InputError, RecordError
from pyprof.records import UNVERSIONED, thread_id
from pyprof.scale.extra import require
from pyprof.scale.parquet import KINDS, SUFFIX, file_version, parquet_files

HINT = "give a .parquet file or a dataset folder that `pyprof parse --format parquet` wrote"


def _records(path: str) -> list[dict[str, Any]]:
    """The records of one Parquet file, their fields restored to their record types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        missing = [n for n in ("kShortName", "kDuration") if n not in schema.names]
        if missing:
            raise InputError(f"{path}: a Parquet file without the record column {missing[0]!r}, not a record dataset",
                             HINT)
        version = file_version(path, schema)
        names = [n for n in KINDS if n in schema.names]
        rows = pq.read_table(path, columns=names).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a readable Parquet record file ({first})", HINT) from None
    json_fields = [n for n in names if KINDS[n] == "json"]
    loads = orjson.loads
    for rec in rows:
        for n in json_fields:
            v = rec[n]
            if v is not None:
                try:
                    rec[n] = loads(v)
                except orjson.JSONDecodeError:
                    pass  # left as its text: the record check names the field
        if version == UNVERSIONED and "tid" in rec:  # format 1: the thread id as text
            rec["tid"] = thread_id(rec["tid"])
    return rows


def _column_ok(arrow_type, want: str) -> bool:
    """Whether a column of ``arrow_type`` holds what pyprof's column kind ``want`` needs (a narrower
    integer, a float where an integer is written (as a record's number may be), a large or
    dictionary-encoded string, a null column do)."""
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if t.is_null(arrow_type):
        return True
    if want == "int64":
        return t.is_integer(arrow_type) or t.is_floating(arrow_type)
    if want in ("string", "text", "json"):
        return t.is_string(arrow_type) or t.is_large_string(arrow_type)
    return True  # lists: read back and checked record by record (:func:`_checked`)


def check_columns(files: list[str], names: tuple[str, ...]) -> None:
    """An :class:`InputError` naming the first of ``files`` whose footer lacks one of the columns
    ``names`` or holds it with another type than pyprof writes (``kDuration`` as text), or that is no
    readable Parquet: what DuckDB would otherwise refuse in its own words (a binder error) once the
    query runs. Reads footers only; without pyarrow, checks nothing (DuckDB's words stay the message)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the scale extra brings pyarrow with DuckDB
        return

    kinds = {"rank": "int64", "host": "string", "file": "string", **KINDS}
    for f in files:
        try:
            schema = pq.read_schema(f)
        except (pa.ArrowException, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"{f}: not a readable Parquet record file ({first})", HINT) from None
        for name in names:
            if name not in schema.names:
                raise InputError(f"{f}: a Parquet file without the record column {name!r}, not a record dataset",
                                 HINT)
            have = schema.field(name).type
            if not _column_ok(have, kinds[name]):
                raise InputError(f"{f}: column {name!r} holds {have}, not {kinds[name]} as in pyprof's records; "
                                 "not a record dataset", HINT)


def _checked(path: str, recs: list[dict[str, Any]], ranges: bool = False) -> list[dict[str, Any]]:
    """``recs`` less those with a bad field (skipped under ``--skip-bad``), else a RecordError
    (``ranges``: that field checked too, as the readers that walk it need)."""
    from pyprof.prof.load import BAD_HINT, good_records, policy, prof_checks

    skip = policy()

    def reject(row: int, bad, rec: dict[str, Any]) -> None:
        problem = bad.problem(rec.get(bad.name))
        if not skip.skip:
            raise RecordError(f"{path} row {row}: {problem}", BAD_HINT, name=path, line=row, field=bad.name)
        skip.add(1, (path, 0, row, problem))

    return good_records(recs, range(1, len(recs) + 1), prof_checks(ranges), reject)


def file_records(path: str | os.PathLike, keep_ranges: bool = False) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``(file, records)`` for each Parquet file of ``path`` (a file, or a dataset folder), in order;
    an :class:`InputError` where there is none, none is readable, or they hold no record.
    ``keep_ranges``: for the readers that walk ``ranges`` (report, diff, advise), which is then
    checked as the other fields are."""
    require("pyarrow")
    path = os.fspath(path)
    files = parquet_files(path)
    if not files:
        raise InputError(f"{path}: no {SUFFIX} file in this folder", HINT)
    n = 0
    for f in files:
        recs = _checked(f, _records(f), keep_ranges)
        n += len(recs)
        yield f, recs
    if n == 0:
        raise InputError(f"{path} holds no records", HINT)


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of a Parquet file or dataset folder, file after file."""
    return [rec for _, recs in file_records(path) for rec in recs]
