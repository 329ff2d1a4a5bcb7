"""Parquet is a record file like any other: ``pyprof prof`` (with -c, --csv, --summary), ``report`` and
``diff`` read a ``.parquet`` file and a dataset folder as they read the same records' JSON lines;
several ``pyprof run`` outputs (all ``trace.json``) parse into one dataset; ``pyprof.load(prof=True)``
gives prof's columns; a failed multi-file parse leaves no empty folder; an export or trace handed to
a record reader is parsed first, with one line saying so.

Real data: a torch.profiler trace of the corpus (skipped where absent), the committed GPU fixture, and
a small Nsight export of the corpus."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

try:
    from conftest import CORPUS, corpus_file, read_record_file, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS, corpus_file, read_record_file, run_main

import pyprof  # noqa: E402
from pyprof.prof.table import build_file  # noqa: E402
from pyprof.scale.readback import read_records  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "kineto" / "gpu_synthetic.json"
TRACE = "AMD-AGI__TraceLens__gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A real trace parsed twice: JSON lines and Parquet."""
    trace = CORPUS / "kineto" / TRACE
    if not trace.is_file():
        pytest.skip(f"corpus trace {TRACE} not found under {CORPUS}")
    d = tmp_path_factory.mktemp("pair")
    for out in ("t.dict", "t.parquet"):
        code = _main(["parse", "-q", trace, "-o", d / out])
        assert code == 0
    return d / "t.dict", d / "t.parquet"


def _main(argv):
    from pyprof.cli.main import main

    try:
        main([str(a) for a in argv])
    except SystemExit as exc:
        return exc.code
    return 0


def test_parquet_reads_back_as_the_same_records(pair):
    lines, parquet = pair
    want = read_record_file(lines)
    assert read_records(parquet) == want


@pytest.mark.parametrize("opts", [["--summary", "op"], ["-c", "idx,op,kernel,sil,flops,bytes,gap", "--csv"],
                                  ["--summary", "layer", "--json"]])
def test_prof_of_parquet_equals_prof_of_its_json_lines(pair, capsys, opts):
    lines, parquet = pair
    a = run_main(capsys, ["prof", "-q", *opts, lines])
    b = run_main(capsys, ["prof", "-q", *opts, parquet])
    assert a[0] == 0 and a == b


def test_report_and_diff_read_parquet(pair, tmp_path, capsys):
    pytest.importorskip("plotly")
    lines, parquet = pair
    code, _, err = run_main(capsys, ["report", "-q", parquet, "-o", tmp_path / "r.html", "--baseline", lines])
    assert code == 0, err
    assert (tmp_path / "r.html").stat().st_size > 0
    by_lines = run_main(capsys, ["diff", "--csv", lines, lines])
    by_parquet = run_main(capsys, ["diff", "--csv", parquet, parquet])
    assert by_lines[0] == 0 and by_lines[1] == by_parquet[1]


def test_run_outputs_named_alike_parse_into_one_dataset(tmp_path, capsys):
    """Two `pyprof run` folders, each with its trace.json: one dataset of two files, told apart."""
    for run in ("run1", "run2"):
        (tmp_path / run).mkdir()
        shutil.copyfile(FIXTURE, tmp_path / run / "trace.json")
    ds = tmp_path / "ds.parquet"
    code, _, err = run_main(capsys, ["parse", "-q", tmp_path / "run1" / "trace.json", tmp_path / "run2" / "trace.json",
                                     "-o", f"{ds}/"])
    assert code == 0, err
    assert sorted(p.name for p in ds.iterdir()) == ["run1-trace.parquet", "run2-trace.parquet"]
    df = pyprof.load(ds)
    n = len(read_records(ds / "run1-trace.parquet"))
    assert len(df) == 2 * n
    assert sorted(set(df["file"])) == ["run1-trace.json", "run2-trace.json"]
    code, out, err = run_main(capsys, ["prof", "--summary", "op", "--csv", ds])  # a dataset, per kernel
    assert code == 0, err
    one = run_main(capsys, ["prof", "--summary", "op", "--csv", ds / "run1-trace.parquet"])[1]
    col = one.splitlines()[0].split(",").index("Kernels")
    counts = {r.split(",")[0]: int(r.split(",")[col]) for r in one.splitlines()[1:] if r}
    col = out.splitlines()[0].split(",").index("Kernels")
    both = {r.split(",")[0]: int(r.split(",")[col]) for r in out.splitlines()[1:] if r}
    assert both == {k: 2 * v for k, v in counts.items()}
    devices = [run_main(capsys, ["prof", "--list-gpus", p])[1].split("# Devices of ")[1].split("\n", 1)[1]
               for p in (ds, ds / "run1-trace.parquet")]
    assert devices[0] == devices[1] and devices[0].strip()  # each device's peaks line once, not per file


def test_a_failed_parse_leaves_no_empty_folder(tmp_path, capsys):
    bad = tmp_path / "empty.json"
    bad.write_bytes(b"")
    for out, inputs in ((tmp_path / "ds.parquet", [FIXTURE, FIXTURE]), (tmp_path / "out", [bad, bad.with_name("x")]),
                        (tmp_path / "ds2.parquet", [bad])):
        code, _, err = run_main(capsys, ["parse", "-q", *inputs, "-o", f"{out}/"])
        assert code == 2 and err.startswith("pyprof: error: ")
        assert not out.exists()


def test_load_gives_prof_columns(tmp_path):
    lines = tmp_path / "g.dict"
    assert _main(["parse", "-q", FIXTURE, "-o", lines]) == 0
    assert _main(["parse", "-q", FIXTURE, "-o", tmp_path / "g.parquet"]) == 0
    table = build_file(lines)
    for src in (lines, tmp_path / "g.parquet"):
        df = pyprof.load(src, prof=True)
        assert list(df.columns[:3]) == ["rank", "host", "file"]
        for col in ("flops", "bytes", "gap", "op", "sil"):
            assert df[col].tolist() == pytest.approx(table[col].tolist(), nan_ok=True) \
                if df[col].dtype.kind == "f" else df[col].tolist() == table[col].tolist()
    assert df["flops"].notna().any()
    assert list(pyprof.load(lines, prof=True, columns=["op", "flops"]).columns) == ["op", "flops"]


def test_prof_of_a_trace_or_export_parses_it_first(tmp_path, capsys):
    lines = tmp_path / "g.dict"
    assert _main(["parse", "-q", FIXTURE, "-o", lines]) == 0
    want = run_main(capsys, ["prof", "-q", "--summary", "op", lines])
    code, out, err = run_main(capsys, ["prof", "--summary", "op", FIXTURE])
    assert code == 0 and out == want[1]
    said = [line for line in err.splitlines() if "parsed it first" in line]
    assert len(said) == 1 and str(FIXTURE) in said[0]
    export = corpus_file("Faraz-Nasir__CUDA---Recap__report1")
    parsed = tmp_path / "k.dict"
    assert _main(["parse", "-q", export, "-o", parsed]) == 0
    want = run_main(capsys, ["prof", "-q", "-c", "idx,kernel,sil", parsed])
    code, out, err = run_main(capsys, ["prof", "-c", "idx,kernel,sil", export])
    assert code == 0 and out == want[1] and "parsed it first" in err


def test_a_run_output_folder_stands_for_its_records(tmp_path, capsys):
    out = tmp_path / "pyprof-out"
    out.mkdir()
    assert _main(["parse", "-q", FIXTURE, "-o", out / "records.dict"]) == 0
    want = run_main(capsys, ["prof", "-q", "--summary", "op", out / "records.dict"])
    assert want[0] == 0 and run_main(capsys, ["prof", "-q", "--summary", "op", out]) == want
    code, stdout, err = run_main(capsys, ["diff", out, out / "records.dict"])
    assert code == 0 and "(0%, p=" in stdout.splitlines()[2], err


def test_a_bad_record_in_parquet_is_named_by_its_row_or_skipped(pair, tmp_path, capsys):
    """A record whose field has the wrong type stops prof with its file and row, as a record file's line
    does; under --skip-bad it is left out and counted."""
    import pyarrow.parquet as pq

    _, parquet = pair
    table = pq.read_table(parquet)
    col = table.column("dir").to_pylist()
    col[2] = "sideways"  # not one of dir's documented values
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("dir"), "dir", [col]), bad)
    code, _, stderr = run_main(capsys, ["prof", "--summary", "op", str(bad)])
    assert code == 2 and f"{bad} row 3:" in stderr and '"dir"' in stderr
    code, stdout, stderr = run_main(capsys, ["prof", "--csv", "-c", "idx,op", "--skip-bad", str(bad)])
    assert code == 0 and "skipped 1 record" in stderr
    assert len(stdout.splitlines()) == table.num_rows  # the header, and every record but the bad one
