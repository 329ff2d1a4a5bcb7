"""The record format's version (:data:`pyprof.records.FORMAT_VERSION`): every record file pyprof writes
starts with a header line naming it, the pyprof that wrote it and the source; Parquet holds the same in
its metadata; every reader takes the version from there. A file of format 1 (no header: pyprof before
it) still reads, its ``tid`` texts as integers; a newer version is one line and exit 2 for every command.

Real data: corpus exports and traces (Nsight, nvprof, and a torch.profiler trace whose thread ids are
decimal text), skipped where the corpus is absent; the committed GPU trace fixture."""

from __future__ import annotations

import gzip
import io
import shutil

import orjson
import pandas as pd
import pytest

from pyprof.errors import InputError
from pyprof.parse.run import parse_file
from pyprof.prof.fastread import read_columns
from pyprof.prof.load import iter_records, split_ranges
from pyprof.prof.table import build_file
from pyprof.records import END_COUNT, END_FLAG, FORMAT_VERSION, HEADER_KEY, pyprof_version, write_records
from tests.conftest import CORPUS, REPO, corpus_file, read_record_file, run_main

GPU_TRACE = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"
TEXT_TIDS = "pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz"  # tids as decimal text


def _records_of(trace) -> list[dict]:
    from pyprof.parse import open_source

    return list(open_source(str(trace)).records())


def _first(path) -> dict:
    with open(path, "rb") as fh:
        return orjson.loads(fh.readline())


def _format1(v2, v1) -> None:
    """``v2`` as pyprof wrote it before the header (format 1): no header line, and each ``tid`` as the
    decimal text the trace gave (what that pyprof kept of a torch.profiler trace's text ids)."""
    with open(v2, "rb") as src, open(v1, "wb") as dst:
        src.readline()
        for line in src:
            rec = orjson.loads(line)
            if END_COUNT in rec:  # (the end line: none in format 1)
                continue
            if rec["tid"] is not None:
                rec["tid"] = str(rec["tid"])
            dst.write(orjson.dumps(rec) + b"\n")


@pytest.fixture(scope="module")
def text_tids(tmp_path_factory):
    """A real torch.profiler trace with decimal-text thread ids, parsed (format 2) and as format 1."""
    trace = CORPUS / "kineto" / TEXT_TIDS
    if not trace.is_file():
        pytest.skip(f"corpus trace {TEXT_TIDS} not found under {CORPUS}")
    d = tmp_path_factory.mktemp("tids")
    parse_file(str(trace), str(d / "v2.dict"))
    _format1(d / "v2.dict", d / "v1.dict")
    return d / "v2.dict", d / "v1.dict"


@pytest.mark.parametrize("name, source", [("hpcgroup__pipit", "nsys"), ("eganhila__mandelbrot", "nvprof"),
                                          (None, "kineto")])
def test_every_parse_output_starts_with_the_header(tmp_path, name, source):
    src = GPU_TRACE if name is None else corpus_file(name)
    out = tmp_path / "out.dict"
    parse_file(str(src), str(out))
    head = _first(out)
    facts = {k: head.pop(k) for k in ("steps", "peaks") if k in head}
    assert head == {HEADER_KEY: FORMAT_VERSION, "pyprof": pyprof_version(), "source": source, END_FLAG: True}
    assert set(facts.get("peaks", {})) <= {"file", "devices"}  # the calibration it will be priced with
    assert all(len(s) == 3 and s[1] <= s[2] for s in facts.get("steps", []))
    assert "kShortName" not in head and "kDuration" not in head  # an older reader refuses it: no kernel
    recs = read_record_file(out)
    assert recs and {r["source"] for r in recs} == {source}
    assert all(r["tid"] is None or type(r["tid"]) is int for r in recs)


def test_write_records_starts_with_the_header_on_any_stream():
    recs = _records_of(GPU_TRACE)
    for fh in (io.BytesIO(), io.StringIO()):
        assert write_records(recs, fh) == len(recs)
        data = fh.getvalue()
        data = data.encode() if isinstance(data, str) else data
        head, _, body = data.partition(b"\n")
        assert orjson.loads(head) == {HEADER_KEY: FORMAT_VERSION, "pyprof": pyprof_version(), "source": "kineto",
                                      END_FLAG: True}
        *lines, end = body.splitlines()
        assert [orjson.loads(x) for x in lines] == recs
        assert orjson.loads(end) == {HEADER_KEY: FORMAT_VERSION, END_COUNT: len(recs)}
    empty = io.BytesIO()
    assert write_records([], empty, source="nsys") == 0
    head, end = empty.getvalue().splitlines()
    assert orjson.loads(head)["source"] == "nsys" and orjson.loads(end)[END_COUNT] == 0


def test_text_thread_ids_are_integers_now(text_tids):
    """The trace spells its CPU thread ids as decimal text: the records hold them as integers."""
    events = orjson.loads(gzip.decompress((CORPUS / "kineto" / TEXT_TIDS).read_bytes()))["traceEvents"]
    text = {e["tid"] for e in events if e.get("cat") == "Runtime"}
    assert text and all(isinstance(t, str) and t.isdigit() for t in text)
    v2, _ = text_tids
    tids = {r["tid"] for r in read_record_file(v2)} - {None}
    assert tids == {int(t) for t in text}


def test_every_record_has_every_field_of_its_kind(text_tids):
    """A kernel launched outside every CPU range (this trace's 102 kernels of the autograd thread) still
    carries ``ranges``, as an empty list: one record shape, whichever writer built the line."""
    v2, _ = text_tids
    recs = read_record_file(v2)
    shapes = {(r["kind"], frozenset(r)) for r in recs}
    assert len({kind for kind, _ in shapes}) == len(shapes)
    bare = [r for r in recs if r["pid"] is not None and r["op"] is None and not r["ranges"]]
    assert bare  # the case is in the trace


def test_a_format1_file_reads_as_the_same_records_and_table(text_tids):
    v2, v1 = text_tids
    want = list(iter_records(v2, keep_ranges=True))
    assert list(iter_records(v1, keep_ranges=True)) == want
    # (the same table, but for the steps, which only a header names: format 1 is one step)
    v1_df, v2_df = build_file(v1, workers=1), build_file(v2, workers=1)
    assert set(v1_df["step"]) == {0} and len(set(v2_df["step"])) > 1
    pd.testing.assert_frame_equal(v1_df.drop(columns="step"), v2_df.drop(columns="step"))
    # read in parts, as prof's worker processes read a big file: the part without the header line
    # takes the version from the file's first line
    for path in (v1, v2):
        parts = [read_columns(path, a, b, allow_empty=True) for a, b in split_ranges(path, 3)]
        tids = {t for p in parts for t in p.arrays()["tid"]} - {None}
        assert tids and all(type(t) is int for t in tids)


def test_pyprof_load_reads_both_formats(text_tids):
    import pyprof

    v2, v1 = text_tids
    a, b = pyprof.load(v2), pyprof.load(v1)
    assert len(a) == len(read_record_file(v2))
    pd.testing.assert_series_equal(a["tid"], b["tid"])
    assert str(a["tid"].dtype) == "Int64"


def test_the_current_format_holds_tid_as_an_integer_only(tmp_path, capsys):
    """Format 2: a ``tid`` text is a bad field (one type per field), named in one line; the same record
    in a format 1 file (no header) reads, its text as the integer."""
    recs = _records_of(GPU_TRACE)
    recs[0]["tid"] = "77"
    v2 = tmp_path / "v2.dict"
    with open(v2, "wb") as fh:
        write_records(recs, fh)
    code, out, err = run_main(capsys, ["prof", v2])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert 'line 2: field "tid" is "77", expected an integer' in err
    v1 = tmp_path / "v1.dict"
    v1.write_bytes(v2.read_bytes().split(b"\n", 1)[1])
    assert next(iter_records(v1))["tid"] == 77


def _newer(tmp_path, version=FORMAT_VERSION + 1):
    """A record file from a future pyprof: its header names a newer format."""
    src = tmp_path / "cur.dict"
    parse_file(str(GPU_TRACE), str(src))
    path = tmp_path / "new.dict"
    head = {HEADER_KEY: version, "pyprof": "99.0", "source": "kineto"}
    path.write_bytes(orjson.dumps(head) + b"\n" + src.read_bytes().split(b"\n", 1)[1])
    return path, src


@pytest.mark.parametrize("command", ["prof", "prof-parallel", "report", "diff", "advise"])
def test_a_newer_format_is_one_line_and_exit_2_for_every_command(tmp_path, capsys, command):
    if command == "report":
        pytest.importorskip("plotly")  # the report extra
    path, cur = _newer(tmp_path)
    html = tmp_path / "r.html"
    argv = {"prof": ["prof", path], "prof-parallel": ["prof", "-j", "2", path],
            "report": ["report", path, "-o", html], "diff": ["diff", cur, path], "advise": ["advise", path]}[command]
    code, out, err = run_main(capsys, argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"record format version {FORMAT_VERSION + 1} (written by pyprof 99.0) is newer" in err
    assert "upgrade pyprof" in err and "Traceback" not in err
    assert not html.exists()


def test_a_newer_or_broken_header_for_the_library_readers(tmp_path):
    import pyprof

    path, _ = _newer(tmp_path)
    for read in (lambda p: list(iter_records(p)), pyprof.load, lambda p: build_file(p, workers=1)):
        with pytest.raises(InputError, match="is newer than this pyprof"):
            read(path)
    odd, _ = _newer(tmp_path, "2")
    with pytest.raises(InputError, match="record format version '2' is not one pyprof knows"):
        list(iter_records(odd))


def test_files_appended_to_each_other_keep_reading(tmp_path, capsys):
    """``cat a.dict b.dict``: the second header line is checked and skipped, not read as a record."""
    one = tmp_path / "one.dict"
    parse_file(str(GPU_TRACE), str(one))
    both = tmp_path / "both.dict"
    both.write_bytes(one.read_bytes() * 2)
    assert list(iter_records(both)) == list(iter_records(one)) * 2


def test_parquet_carries_the_format_and_reads_format1(tmp_path, capsys, text_tids):
    """Parquet's ``pyprof`` metadata: the header's facts; ``tid`` an int64 column. A Parquet file of
    format 1 (no ``format`` in its metadata, ``tid`` text) reads back with integer thread ids; a newer
    one is one line, exit 2."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("duckdb")
    import pyprof
    from pyprof.scale.readback import read_records

    trace = tmp_path / TEXT_TIDS
    shutil.copyfile(CORPUS / "kineto" / TEXT_TIDS, trace)
    out = tmp_path / "t.parquet"
    code, _, err = run_main(capsys, ["parse", "-q", trace, "-o", out])
    assert code == 0, err
    schema = pq.read_schema(out)
    facts = orjson.loads(schema.metadata[b"pyprof"])
    assert (facts["format"], facts["pyprof"], facts["source"]) == (FORMAT_VERSION, pyprof_version(), "kineto")
    assert schema.field("tid").type == pa.int64()
    v2, _ = text_tids

    def key(recs):  # (a record of this trace lacks "ranges" in its JSON line: Parquet has it empty)
        return [(r["kShortName"], r["start"], r["pid"], r["tid"]) for r in recs]

    want = key(read_record_file(v2))
    assert key(read_records(out)) == want

    table = pq.read_table(out)
    tid = pa.array([None if t is None else str(t) for t in table.column("tid").to_pylist()], pa.string())
    table = table.set_column(table.schema.get_field_index("tid"), "tid", tid)
    old = {k: v for k, v in facts.items() if k not in ("format", "source")}
    old_path = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata({b"pyprof": orjson.dumps(old)}), old_path)
    assert key(read_records(old_path)) == want
    pd.testing.assert_series_equal(pyprof.load(old_path)["tid"], pyprof.load(out)["tid"])

    new_path = tmp_path / "new.parquet"
    pq.write_table(pq.read_table(out).replace_schema_metadata(
        {b"pyprof": orjson.dumps({**facts, "format": FORMAT_VERSION + 1})}), new_path)
    code, stdout, err = run_main(capsys, ["prof", new_path])
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert f"record format version {FORMAT_VERSION + 1}" in err
    with pytest.raises(InputError, match="is newer than this pyprof"):
        pyprof.load(new_path)
