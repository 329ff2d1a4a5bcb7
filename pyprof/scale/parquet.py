"""Kernel records as Parquet: typed columns following the record contract (docs/records.md).

One column per field of :data:`pyprof.records.FIELDS`, after three of the dataset: ``rank`` (int64),
``host`` and ``file`` (the input's base name); :func:`column_kinds` maps each field's documented type to
a column:

=====================================  ==============================================================
record type                            Parquet column
=====================================  ==============================================================
``str``, ``str|null``                  string (dictionary-encoded: kernel names, ops repeat)
``int``, ``int|null``                  int64
``int|str|null`` (``tid``)             string: an integer thread id in decimal, a Kineto name as is
``list[int]``, ``list[str]`` (+null)   list<int64>, list<string>
``list[{text, domain}]`` (``ranges``)  list<struct<text: string, domain: string>>
``list[arg]``, ``list`` (``args``,     string: the value as compact JSON text (``json_extract`` in DuckDB,
``atenSizes``)                         ``json.loads`` in Python): their items mix types no column can hold
=====================================  ==============================================================

Files are zstd-compressed, written :data:`ROW_GROUP` records at a time (a row group each: a reader
streams them, and DuckDB spreads them over its threads), so writing holds one group of records in
memory, not a file's. The file's key-value metadata ``pyprof`` holds, as JSON, the rank and host and
where each was read (:mod:`pyprof.scale.identity`), and the pyprof version. Given the same input
and index, the bytes are the same on any machine with the same pyarrow: a cluster's outputs equal a
local run's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from pyprof.records import FIELDS
from pyprof.scale.extra import require
from pyprof.scale.identity import Identity

#: records per row group (and per conversion batch)
ROW_GROUP = 65536
COMPRESSION = "zstd"
#: the dataset's own columns, before the record's
DATASET_COLUMNS = ("rank", "host", "file")
SUFFIX = ".parquet"

_BASE_KINDS = {
    "str": "string", "int": "int64", "int|str": "text", "list[int]": "list<int64>", "list[str]": "list<string>",
    "list[{text, domain}]": "ranges", "list[arg]": "json", "list": "json",
}


def column_kinds() -> dict[str, str]:
    """Record field -> column kind (``string``, ``int64``, ``text``, ``list<int64>``, ``list<string>``,
    ``ranges``, ``json``), from the type column of :data:`pyprof.records.FIELDS`; a type without a
    column is a ``ValueError`` (a new field's type needs a line here)."""
    kinds = {}
    for f in FIELDS:
        base = "|".join(t for t in f.type.split("|") if t != "null")
        if base not in _BASE_KINDS:
            raise ValueError(f"record field {f.name}: no Parquet column for type {f.type!r}")
        kinds[f.name] = _BASE_KINDS[base]
    return kinds


KINDS = column_kinds()


def arrow_schema(metadata: dict[bytes, bytes] | None = None):
    """The Arrow schema of a dataset file: :data:`DATASET_COLUMNS`, then every record field."""
    pa = _pa()
    types = {
        "string": pa.string(), "int64": pa.int64(), "text": pa.string(), "json": pa.string(),
        "list<int64>": pa.list_(pa.int64()), "list<string>": pa.list_(pa.string()),
        "ranges": pa.list_(pa.struct([("text", pa.string()), ("domain", pa.string())])),
    }
    fields = [pa.field("rank", pa.int64(), nullable=False), pa.field("host", pa.string()),
              pa.field("file", pa.string(), nullable=False)]
    fields += [pa.field(name, types[kind]) for name, kind in KINDS.items()]
    return pa.schema(fields, metadata=metadata)


def _pa():
    require("pyarrow")
    import pyarrow as pa

    return pa


def _json_text(v: Any) -> str | None:
    return None if v is None else orjson.dumps(v).decode()


def _text(v: Any) -> str | None:
    return v if v is None or v.__class__ is str else str(v)


def columns_of(records: list[dict[str, Any]]) -> dict[str, list]:
    """The record fields of ``records`` as Python lists, one per field, in the column representation
    (JSON text for ``json`` fields, ``tid`` as text); missing fields are null. Needs no pyarrow."""
    out: dict[str, list] = {}
    for name, kind in KINDS.items():
        values = [r.get(name) for r in records]
        if kind == "json":
            values = [_json_text(v) for v in values]
        elif kind == "text":
            values = [_text(v) for v in values]
        out[name] = values
    return out


def record_table(records: list[dict[str, Any]], ident: Identity, schema=None):
    """An Arrow table of ``records`` with the dataset columns of ``ident``."""
    pa = _pa()
    schema = schema if schema is not None else arrow_schema()
    n = len(records)
    cols = columns_of(records)
    arrays = [pa.array([ident.rank] * n, pa.int64()), pa.array([ident.host] * n, pa.string()),
              pa.array([ident.file] * n, pa.string())]
    arrays += [pa.array(cols[f.name], schema.field(f.name).type) for f in FIELDS]
    return pa.Table.from_arrays(arrays, schema=schema)


def metadata(ident: Identity) -> dict[bytes, bytes]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("pyprof-torch")
    except PackageNotFoundError:  # a source checkout that is not installed
        v = "unknown"
    facts = {"rank": ident.rank, "rankFrom": ident.rank_from, "host": ident.host, "hostFrom": ident.host_from,
             "file": ident.file, "pyprof": v, "records": "docs/records.md"}
    return {b"pyprof": orjson.dumps(facts)}


def batches(records: Iterable[dict[str, Any]], size: int = ROW_GROUP) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for r in records:
        batch.append(r)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def records_of_lines(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Record dicts from chunks of JSON lines (a chunk may end inside a line)."""
    loads = orjson.loads
    rest = b""
    for chunk in chunks:
        if rest:
            chunk = rest + chunk
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.strip():
                yield loads(line)
    if rest.strip():
        yield loads(rest)


def write_table_stream(records: Iterable[dict[str, Any]], fh, ident: Identity) -> int:
    """Write ``records`` to the open binary file ``fh`` as one Parquet file, a row group per
    :data:`ROW_GROUP` records; the number written. Zero records still make a valid (empty) file."""
    require("pyarrow")
    import pyarrow.parquet as pq

    schema = arrow_schema(metadata(ident))
    n = 0
    with pq.ParquetWriter(fh, schema, compression=COMPRESSION, write_page_index=False) as writer:
        for batch in batches(records):
            writer.write_table(record_table(batch, ident, schema), row_group_size=ROW_GROUP)
            n += len(batch)
    return n


def source_records(source) -> Iterator[dict[str, Any]]:
    """Every record of an open source: through its JSON lines where it has them (what ``pyprof parse``
    writes, so the Parquet and the JSON lines cannot differ), else its ``records()``."""
    if hasattr(source, "prepared"):
        # never split: a dataset task runs in a worker that may hold threads (Dask), and the lines are the same
        yield from records_of_lines(source.prepared(split=False).lines())
    else:
        yield from source.records()


def output_name(path: str, out_dir: str) -> str:
    """``out_dir/<input name without its extension>.parquet``."""
    from pyprof.parse.run import output_name as dict_name

    return dict_name(path, out_dir)[: -len(".dict")] + SUFFIX


def parse_to_parquet(path: str, out: str, index: int = 0):
    """Parse the export ``path`` into the Parquet file ``out`` (all or nothing), its rank and host read by
    :func:`~pyprof.scale.identity.identify` (``index``: its place among the inputs). Returns a
    :class:`pyprof.parse.run.Result`; raises :class:`~pyprof.errors.PyprofError` on bad input, as
    :func:`pyprof.parse.run.parse_file` does (a damaged export is one line, a sound one's failure a bug)."""
    from pyprof.errors import PyprofError
    from pyprof.parse.db import damaged, integrity_problem

    require("pyarrow")
    try:
        return _parse_to_parquet(path, out, index)
    except (PyprofError, OSError):
        raise
    except Exception as exc:
        problem = integrity_problem(path)
        if problem is None:
            raise
        raise damaged(path, problem) from exc


def _parse_to_parquet(path: str, out: str, index: int):
    from pyprof.atomic import atomic_output
    from pyprof.parse.run import Result
    from pyprof.parse.source import open_source
    from pyprof.scale.identity import identify

    source = open_source(path)
    ident = identify(path, index)
    res = Result(path=path, out=out, kind=source.kind, version=getattr(source, "version", ""))
    records = source_records(source)
    first = next(records, None)  # every read and check happens here, before the output is opened

    def all_records():
        if first is not None:
            yield first
            yield from records

    with atomic_output(out, "wb") as fh:
        res.written = write_table_stream(all_records(), fh, ident)
        fh.flush()
    stats = getattr(source, "stats", None)
    if stats is not None:
        res.kernels, res.copies, res.attributed = stats.kernels, stats.copies, stats.attributed
    else:
        res.kernels = res.written
    res.warnings = list(source.warnings)
    return res


def convert(records_path: str, out: str, ident: Identity) -> int:
    """A JSON-lines record file (``pyprof parse``'s output) to the Parquet file ``out``; records written."""
    from pyprof.atomic import atomic_output

    def chunks():
        with open(records_path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                yield chunk

    with atomic_output(out, "wb") as fh:
        return write_table_stream(records_of_lines(chunks()), fh, ident)


def parquet_files(path: str) -> list[str]:
    """The Parquet files of a dataset: ``path`` itself, or the ``*.parquet`` files under the folder
    ``path`` (sorted; hidden and ``_``-prefixed names, such as temporary files, left out)."""
    if not os.path.isdir(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.join(root, f) for f in sorted(files)
                  if f.endswith(SUFFIX) and not f.startswith((".", "_"))]
    return found
