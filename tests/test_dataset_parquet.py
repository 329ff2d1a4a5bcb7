"""`pyprof parse --format parquet`: typed columns, the same records as the JSON lines, rank/host/file.

DuckDB reads every Parquet file here with the row count, total duration and kernels per op of the JSON
lines of the same export; `pyprof.load` gives the same DataFrame from both.
"""

from __future__ import annotations

import gzip
import json
import shutil

import orjson
import pytest

from tests.conftest import CORPUS, REPO, run_main
from tests.scale_exports import job, jsonl_totals, parquet_totals, rank_export

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

import pyarrow.parquet as pq  # noqa: E402

KINETO_GPU = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"
KINETO_CPU = REPO / "tests" / "fixtures" / "kineto" / "cpu_unescaped_markers.json.gz"


def test_every_record_field_has_a_column():
    from pyprof.records import FIELDS
    from pyprof.scale.parquet import DATASET_COLUMNS, KINDS, arrow_schema

    schema = arrow_schema()
    assert schema.names == [*DATASET_COLUMNS, *(f.name for f in FIELDS)]
    assert KINDS["args"] == "json" and KINDS["atenSizes"] == "json" and KINDS["tid"] == "int64"
    assert str(schema.field("ranges").type) == "list<item: struct<text: string, domain: string>>"
    assert str(schema.field("grid").type) == "list<item: int64>" and str(schema.field("layer").type) == "list<item: string>"
    assert str(schema.field("kDuration").type) == "int64" and str(schema.field("kShortName").type) == "string"


def test_a_new_type_needs_a_column(monkeypatch):
    from pyprof import records
    from pyprof.scale import parquet

    monkeypatch.setattr(parquet, "FIELDS", (*records.FIELDS, records.Field("x", "dict|null", "")))
    with pytest.raises(ValueError, match="no Parquet column for type 'dict|null'"):
        parquet.column_kinds()


def _same_frames(a, b):
    """pyprof.load of a Parquet file and of the JSON lines: equal, the JSON-text columns as values."""
    import pandas as pd

    for name in ("args", "atenSizes"):
        a, b = a.assign(**{name: a[name].map(_json)}), b.assign(**{name: b[name].map(_json)})
    pd.testing.assert_frame_equal(a, b)


def _json(text):
    return None if not isinstance(text, str) else json.loads(text)


def test_one_export_to_parquet_and_back(tmp_path, capsys):
    src = rank_export(tmp_path / "net.sqlite", rank=3, host="gpu-node-7")
    code, _, err = run_main(capsys, ["parse", src, "-o", tmp_path / "net.dict"])
    assert code == 0, err
    code, _, err = run_main(capsys, ["parse", src, "-o", tmp_path / "net.parquet"])  # the format from the name
    assert code == 0, err
    pf = pq.ParquetFile(tmp_path / "net.parquet")
    assert pf.metadata.row_group(0).column(0).compression == "ZSTD"
    facts = orjson.loads(pf.schema_arrow.metadata[b"pyprof"])
    assert facts["rank"] == 3 and facts["rankFrom"] == "env SLURM_PROCID" and facts["host"] == "gpu-node-7"
    assert parquet_totals(tmp_path / "net.parquet") == jsonl_totals(tmp_path / "net.dict")
    table = pq.read_table(tmp_path / "net.parquet")
    assert set(table.column("rank").to_pylist()) == {3} and set(table.column("host").to_pylist()) == {"gpu-node-7"}
    assert set(table.column("file").to_pylist()) == {"net.sqlite"}

    import pyprof

    from_parquet = pyprof.load(tmp_path / "net.parquet")
    from_lines = pyprof.load(tmp_path / "net.dict")
    assert str(from_parquet["kDuration"].dtype) == "Int64" and from_parquet["grid"].iloc[0] == [1, 1, 1]
    assert from_lines["rank"].unique().tolist() == [0] and from_lines["file"].iloc[0] == "net.dict"
    _same_frames(from_parquet.drop(columns=["rank", "host", "file"]), from_lines.drop(columns=["rank", "host", "file"]))
    # a float spelled 1e+16 in the record file is the same value in the Parquet's JSON text
    args = [json.loads(a) for a in from_parquet["args"].dropna()]
    assert any(x.get("value") == 1e16 for a in args for x in a)
    only = pyprof.load(tmp_path / "net.parquet", columns=["rank", "op", "kDuration"])
    assert list(only.columns) == ["rank", "op", "kDuration"] and len(only) == len(from_parquet)


def test_several_inputs_make_a_dataset_folder(tmp_path, capsys):
    files = job(tmp_path / "in")
    plain = rank_export(tmp_path / "in" / "trainer-rank7.sqlite", None)  # no environment: the name says 7
    other = rank_export(tmp_path / "in" / "other.sqlite", None)  # nothing says: its index, 5
    inputs = [*files, plain, other]
    code, _, err = run_main(capsys, ["parse", *inputs, "-o", tmp_path / "ranks.parquet", "-j", "2"])
    assert code == 0, err
    out = tmp_path / "ranks.parquet"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.stem + ".parquet" for p in inputs)
    code, _, err = run_main(capsys, ["parse", *inputs, "-o", tmp_path / "lines", "-j", "2"])
    assert code == 0, err
    for p in inputs:
        assert parquet_totals(out / (p.stem + ".parquet")) == jsonl_totals(tmp_path / "lines" / (p.stem + ".dict"))

    import duckdb

    rows = duckdb.connect().execute(
        f"SELECT file, rank, host FROM read_parquet('{out}/*.parquet') GROUP BY ALL ORDER BY rank").fetchall()
    assert rows == [("job_0.sqlite", 0, "node0"), ("job_1.sqlite", 1, "node0"), ("job_2.sqlite", 2, "node1"),
                    ("job_3.sqlite", 3, "node1"), ("other.sqlite", 5, None), ("trainer-rank7.sqlite", 7, None)]
    # the whole folder: the sum of its files
    n = sum(jsonl_totals(tmp_path / "lines" / (p.stem + ".dict"))[0] for p in inputs)
    assert parquet_totals(out)[0] == n
    import pyprof

    assert len(pyprof.load(out)) == n
    rel = pyprof.dataset(out)
    assert rel.aggregate("count(*)").fetchall() == [(n,)]


def test_rank_from_the_export_or_the_name():
    from pyprof.scale.identity import NAME_RANK

    found = {name: (m.group(1) if (m := NAME_RANK.search(name)) else None)
             for name in ("rank3.sqlite", "job-rank_12.sqlite", "Rank.4.json", "ranks.sqlite", "frank3.sqlite",
                          "node0_rank-15.nsys.sqlite")}
    assert found == {"rank3.sqlite": "3", "job-rank_12.sqlite": "12", "Rank.4.json": "4", "ranks.sqlite": None,
                     "frank3.sqlite": None, "node0_rank-15.nsys.sqlite": "15"}


def test_kineto_traces_keep_their_rank_and_tids(tmp_path, capsys):
    """A torch.profiler trace: distributedInfo's rank; thread ids as integers in both forms."""
    trace = json.loads(KINETO_GPU.read_text())
    trace["distributedInfo"]["rank"] = 6
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(trace))
    cpu = tmp_path / KINETO_CPU.name
    shutil.copyfile(KINETO_CPU, cpu)
    for src in (gpu, cpu):
        stem = src.name.split(".")[0]
        code, _, err = run_main(capsys, ["parse", src, "-q", "-o", tmp_path / f"{stem}.dict"])
        assert code == 0, err
        code, _, err = run_main(capsys, ["parse", src, "-q", "-o", tmp_path / f"{stem}.parquet"])
        assert code == 0, err
        assert parquet_totals(tmp_path / f"{stem}.parquet") == jsonl_totals(tmp_path / f"{stem}.dict")
    import pyprof

    assert set(pyprof.load(tmp_path / "gpu.parquet")["rank"]) == {6}
    with gzip.open(cpu) as fh:
        assert b"distributedInfo" not in fh.read()
    assert set(pyprof.load(tmp_path / "cpu_unescaped_markers.parquet")["rank"]) == {0}  # its index
    a = pyprof.load(tmp_path / "gpu.parquet").drop(columns=["rank", "host", "file"])
    b = pyprof.load(tmp_path / "gpu.dict").drop(columns=["rank", "host", "file"])
    _same_frames(a, b)
    assert str(a["tid"].dtype) == "Int64" and a["tid"].notna().any()


def test_row_groups_and_the_same_bytes_on_any_threads(tmp_path, monkeypatch):
    """Groups of ROW_GROUP records, the last shorter, whatever DuckDB's threads and batches."""
    from pyprof.parse.run import parse_file
    from pyprof.scale import parquet
    from pyprof.scale.identity import identify

    src = rank_export(tmp_path / "net.sqlite", rank=1, steps=40)
    parse_file(str(src), str(tmp_path / "net.dict"))
    monkeypatch.setattr(parquet, "ROW_GROUP", 16)
    ident = identify(str(src), 0)
    assert parquet.convert(str(tmp_path / "net.dict"), str(tmp_path / "a.parquet"), ident, threads=1) == 81
    parquet.convert(str(tmp_path / "net.dict"), str(tmp_path / "b.parquet"), ident, threads=2)
    meta = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [16] * 5 + [1]
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


CORPUS_PICKS = ("nsys/hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                "nsys/RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report5.sqlite",
                "nsys/Athrun0109__CS336_assignment2__result.sqlite",
                "nvprof/", "kineto/pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz")


@pytest.mark.corpus
@pytest.mark.parametrize("pick", CORPUS_PICKS)
def test_corpus_exports_read_the_same_by_duckdb(tmp_path, capsys, pick):
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    if pick.endswith("/"):
        found = sorted((CORPUS / pick).glob("*.sql*"))
        src = found[0] if found else None
    else:
        src = CORPUS / pick
    if src is None or not src.exists():
        pytest.skip(f"{pick} not in the corpus")
    code, _, err = run_main(capsys, ["parse", src, "-q", "-o", tmp_path / "x.dict"])
    assert code == 0, err
    code, _, err = run_main(capsys, ["parse", src, "-q", "-o", tmp_path / "x.parquet"])
    assert code == 0, err
    assert parquet_totals(tmp_path / "x.parquet") == jsonl_totals(tmp_path / "x.dict")
    if "RajaATAli" in pick:  # the capture's environment: SLURM_PROCID="0", HOSTNAME
        facts = orjson.loads(pq.ParquetFile(tmp_path / "x.parquet").schema_arrow.metadata[b"pyprof"])
        assert (facts["rank"], facts["rankFrom"]) == (0, "env SLURM_PROCID")
        assert facts["host"] == "queue0-dy-queue0-compute-resource-0-1"


def test_parquet_needs_an_output_file(tmp_path, capsys):
    src = rank_export(tmp_path / "net.sqlite", rank=0)
    code, out, err = run_main(capsys, ["parse", src, "--format", "parquet"])
    assert code == 2 and out == "" and "add -o x.parquet" in err
    (tmp_path / "afile").write_text("")
    code, _, err = run_main(capsys, ["parse", src, src, "-o", tmp_path / "afile", "--format", "parquet"])
    assert code == 2 and "2 inputs need an output folder" in err
