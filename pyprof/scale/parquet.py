"""Kernel records as Parquet: typed columns following the record contract (docs/records.md).

One column per field of :data:`pyprof.records.FIELDS`, after three of the dataset: ``rank`` (int64),
``host`` and ``file`` (the input's base name); :func:`column_kinds` maps each field's documented type to
a column:

=====================================  ==============================================================
record type                            Parquet column
=====================================  ==============================================================
``str``, ``str|null``                  string (dictionary-encoded: kernel names, ops repeat)
``int``, ``int|null``                  int64
``list[int]``, ``list[str]`` (+null)   list<int64>, list<string>
``list[{text, domain}]`` (``ranges``)  list<struct<text: string, domain: string>>
``list[arg]``, ``list`` (``args``,     string: the value as compact JSON text (``json_extract`` in DuckDB,
``atenSizes``)                         ``json.loads`` in Python): their items mix types no column can hold
=====================================  ==============================================================

Files are zstd-compressed in row groups of :data:`ROW_GROUP` records (the last one shorter): a
reader streams them, DuckDB spreads them over its threads, and the writer holds one group in memory,
not a file. The file's key-value metadata ``pyprof`` (:func:`metadata`, read back by :func:`file_version`)
holds the rank and host, the record format's version and the records' source. Given the same input and
index, the bytes are the same on any machine with the same pyarrow and DuckDB, whatever their threads: a
cluster's outputs equal a local run's.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from pyprof.records import (
    FIELDS,
    FORMAT_VERSION,
    HEADER_FACTS,
    HEADER_KEY,
    UNVERSIONED,
    check_version,
    pyprof_version,
    read_header,
)
from pyprof.scale.extra import require
from pyprof.scale.identity import Identity

#: records per row group (and per conversion batch)
ROW_GROUP = 65536
COMPRESSION = "zstd"
#: the dataset's own columns, before the record's
DATASET_COLUMNS = ("rank", "host", "file")
SUFFIX = ".parquet"

_BASE_KINDS = {
    "str": "string", "int": "int64", "list[int]": "list<int64>", "list[str]": "list<string>",
    "list[{text, domain}]": "ranges", "list[arg]": "json", "list": "json",
    "props": "json",
}


def is_parquet(path: str) -> bool:
    """A Parquet file (by its magic bytes) or a folder (a dataset of ``pyprof parse --format parquet``);
    a path that is not there or cannot be read is not (the caller's own read says why)."""
    if os.path.isdir(path):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def column_kinds() -> dict[str, str]:
    """Record field -> column kind (``string``, ``int64``, ``list<int64>``, ``list<string>``,
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
    require("pyarrow")
    import pyarrow as pa

    types = {
        "string": pa.string(), "int64": pa.int64(), "json": pa.string(),
        "list<int64>": pa.list_(pa.int64()), "list<string>": pa.list_(pa.string()),
        "ranges": pa.list_(pa.struct([("text", pa.string()), ("domain", pa.string())])),
    }
    fields = [pa.field("rank", pa.int64(), nullable=False), pa.field("host", pa.string()),
              pa.field("file", pa.string(), nullable=False)]
    fields += [pa.field(name, types[kind]) for name, kind in KINDS.items()]
    return pa.schema(fields, metadata=metadata)


_DUCKDB = {"string": "VARCHAR", "int64": "BIGINT", "json": "JSON", "list<int64>": "BIGINT[]",
           "list<string>": "VARCHAR[]", "ranges": "STRUCT(text VARCHAR, domain VARCHAR)[]"}


def columns_of(records: list[dict[str, Any]]) -> dict[str, list]:
    """The record fields of ``records`` as Python lists, one per field, in the column representation
    (JSON text for ``json`` fields); missing fields are null. Needs no pyarrow."""
    out: dict[str, list] = {}
    for name, kind in KINDS.items():
        values = [r.get(name) for r in records]
        if kind == "json":
            values = [None if v is None else orjson.dumps(v).decode() for v in values]
        out[name] = values
    return out


def metadata(ident: Identity, source: str | None = None, header: dict[str, Any] | None = None) -> dict[bytes, bytes]:
    """The file's key-value metadata: ``pyprof`` -> JSON of the rank, host, where each was read, the
    input's name, the record format's version, the pyprof version and the records' source, then the
    facts of its record file's header line (steps, conditions, peaks: :func:`pyprof.records.header`)."""
    facts = {"rank": ident.rank, "rankFrom": ident.rank_from, "host": ident.host, "hostFrom": ident.host_from,
             "file": ident.file, "format": FORMAT_VERSION, "pyprof": pyprof_version(), "source": source,
             "records": "docs/records.md"}
    facts.update({k: header[k] for k in HEADER_FACTS if header and header.get(k) is not None})
    return {b"pyprof": orjson.dumps(facts)}


def _facts(path: str, schema=None) -> dict[str, Any]:
    """The ``pyprof`` metadata of the Parquet file ``path`` (its ``schema``, where read already); {} where
    it has none, or none that reads."""
    if schema is None:
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    raw = (schema.metadata or {}).get(b"pyprof")
    try:
        facts = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {}
    return facts if facts.__class__ is dict else {}


def file_header(path: str) -> dict[str, Any]:
    """The record-file header facts a Parquet file keeps in its metadata (steps, conditions, peaks)."""
    facts = _facts(path)
    return {k: facts[k] for k in HEADER_FACTS if k in facts}


def file_version(path: str, schema=None) -> int:
    """The record format of the Parquet file ``path`` (its ``schema``, where read already), from its
    ``pyprof`` metadata: :data:`~pyprof.records.UNVERSIONED` where that has no ``format`` (files written
    before it); an :class:`~pyprof.errors.InputError` for a version this pyprof does not read."""
    facts = _facts(path, schema)
    if "format" not in facts:
        return UNVERSIONED
    return check_version({"pyprofRecords": facts["format"], "pyprof": facts.get("pyprof")}, path)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote_id(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def convert(records_path: str, out: str, ident: Identity, threads: int | None = None) -> int:
    """A JSON-lines record file (``pyprof parse``'s output) to the Parquet file ``out`` (all or nothing),
    with the dataset columns of ``ident``; the number of records written.

    DuckDB reads the lines (its JSON reader, in C++, is about five times faster than ``orjson.loads``
    of each line, which is where a Python conversion spent a third of its time), typed by the columns
    of :data:`KINDS`; ``args`` and ``atenSizes`` come back as the same JSON values in compact text
    (a float may be spelled differently from the record file: ``1e+16`` as ``10000000000000000.0``).
    pyarrow writes the file, :data:`ROW_GROUP` rows at a time, so memory holds one row group.
    ``threads``: DuckDB's (default: every core; a task among others on a worker: 1)."""
    require("pyarrow", "duckdb")
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pyprof.atomic import atomic_output

    head = read_header(records_path)  # (an InputError for a newer version)
    schema = arrow_schema(metadata(ident, head.get("source"), head))
    plain = schema.remove_metadata()
    con = duckdb.connect(config={"threads": int(threads)} if threads else {})
    con.execute("SET enable_progress_bar = false")  # its bar would go to stdout
    try:
        with atomic_output(out, "wb") as fh, pq.ParquetWriter(fh, schema, compression=COMPRESSION) as writer:
            if os.path.getsize(records_path) == 0:
                return 0
            # the header line is a row whose only value is the header's key: left out
            columns = "{" + ", ".join(f"{_quote(n)}: {_quote(_DUCKDB[k])}" for n, k in KINDS.items()) \
                + f", {_quote(HEADER_KEY)}: 'BIGINT'}}"
            select = ", ".join(f'"{n}"::VARCHAR AS "{n}"' if k == "json" else f'"{n}"' for n, k in KINDS.items())
            rel = con.sql(
                f"SELECT {int(ident.rank)}::BIGINT AS rank, "
                f"{'NULL' if ident.host is None else _quote(ident.host)}::VARCHAR AS host, "
                f"{_quote(ident.file)}::VARCHAR AS file, {select} FROM read_json({_quote(glob_literal(records_path))}, "
                f"format = 'newline_delimited', columns = {columns}, maximum_object_size = {1 << 30}) WHERE {_quote_id(HEADER_KEY)} IS NULL")
            reader = rel.to_arrow_reader(ROW_GROUP) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(ROW_GROUP)
            n = 0
            pending = None
            for batch in reader:  # whatever DuckDB's batches: groups of ROW_GROUP rows in one chunk
                table = pa.Table.from_batches([batch]).cast(plain)
                pending = table if pending is None else pa.concat_tables([pending, table])
                while pending.num_rows >= ROW_GROUP:
                    writer.write_table(pending.slice(0, ROW_GROUP).combine_chunks(), row_group_size=ROW_GROUP)
                    n += ROW_GROUP
                    pending = pending.slice(ROW_GROUP)
            if pending is not None and pending.num_rows:
                writer.write_table(pending.combine_chunks(), row_group_size=ROW_GROUP)
                n += pending.num_rows
            _check_end(records_path, n)  # (before the Parquet file is put in place)
            return n
    finally:
        con.close()


def _check_end(path: str, n: int) -> None:
    """The record file ``path``, of ``n`` records, refused where its header announces an end line that
    is not its last line or counts other records (:class:`pyprof.records.RecordEnds`)."""
    from pyprof.records import RecordEnds, is_end, read_line

    ends, tail = RecordEnds(), read_line(path, last=True)
    ends.header(read_line(path), 0)
    if is_end(tail):
        ends.end(tail, n, path)
    ends.finish(n).check(path)


def parse_to_parquet(path: str, out: str, index: int = 0, threads: int | None = None, label: str | None = None):
    """Parse the export ``path`` into the Parquet file ``out`` (all or nothing), its rank and host read by
    :func:`~pyprof.scale.identity.identify` (``index``: its place among the inputs). Returns the
    :class:`pyprof.parse.run.Result` of :func:`pyprof.parse.run.parse_file`, which does the parse: its
    JSON lines go to a temporary file (in ``$TMPDIR``; about 1.5 KB a record), then :func:`convert`
    makes the Parquet. So the records are those of ``pyprof parse -o x.dict``, and bad input raises
    the same :class:`~pyprof.errors.PyprofError`. ``label``: the ``file`` column, where not the input's
    base name (inputs of the same name in one dataset)."""
    import dataclasses
    import tempfile

    from pyprof.parse.run import parse_file
    from pyprof.scale.identity import identify

    require("pyarrow", "duckdb")
    with tempfile.TemporaryDirectory(prefix="pyprof-parquet-") as tmp:
        lines = os.path.join(tmp, "records.dict")
        res = parse_file(path, lines)
        ident = identify(path, index)
        if label:
            ident = dataclasses.replace(ident, file=label)
        res.written = convert(lines, out, ident, threads)
    res.out = out
    return res


def glob_literal(path: str) -> str:
    """``path`` as a DuckDB file pattern that matches only itself: DuckDB expands ``*``, ``?`` and
    ``[...]`` in every path it reads, so a folder named ``ranks[1]`` or ``run*`` would read other
    folders' files too; each such character is put in a class of its own (``[[]``, ``[*]``)."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in path)


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
