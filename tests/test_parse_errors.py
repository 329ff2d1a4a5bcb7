"""Bad input: one line on stderr naming the problem and what to do, exit status 2, no partial output,
never a traceback. Corpus files are copied to tmp_path before being mutated."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import REPO, corpus_copy, corpus_file, read_record_file, run_main

DLPROF = "MohanadOdema__DLProf"


def run_cli(capsys, *args):
    return run_main(capsys, ["parse", *args])



def _assert_user_error(code, err, *words):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("pyprof: error: ")
    assert ";" in lines[0]  # what is wrong; what to do
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in err


def test_missing_path(tmp_path, capsys):
    out = tmp_path / "o.dict"
    code, _, err = run_cli(capsys, tmp_path / "nope.sqlite", "-o", out)
    _assert_user_error(code, err, "no such file")
    assert not out.exists()


def test_not_sqlite(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello, not a database\n")
    code, _, err = run_cli(capsys, f, "-o", tmp_path / "o.dict")
    _assert_user_error(code, err, "not an SQLite database")
    assert not (tmp_path / "o.dict").exists()


def test_empty_file(tmp_path, capsys):
    f = tmp_path / "empty.sqlite"
    f.write_bytes(b"")
    code, _, err = run_cli(capsys, f)
    _assert_user_error(code, err, "empty")


def test_sqlite_that_is_not_an_export(tmp_path, capsys):
    f = tmp_path / "other.sqlite"
    with sqlite3.connect(f) as c:
        c.execute("CREATE TABLE foo (a INTEGER)")
        c.execute("INSERT INTO foo VALUES (1)")
    code, _, err = run_cli(capsys, f, "-o", tmp_path / "o.dict")
    _assert_user_error(code, err, "not an Nsight Systems or nvprof export")
    assert not (tmp_path / "o.dict").exists()


@pytest.mark.corpus
def test_export_without_kernels(tmp_path, capsys):
    code, _, err = run_cli(capsys, corpus_file("AIYoungcino__ysyx"), "-o", tmp_path / "o.dict")
    _assert_user_error(code, err, "no CUDA kernels")
    assert not (tmp_path / "o.dict").exists()


@pytest.mark.corpus
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_truncated_database(tmp_path, capsys, keep):
    f = corpus_copy(tmp_path, "jsun-012__assignment2-systems")
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * keep)])
    out = tmp_path / "o.dict"
    code, _, err = run_cli(capsys, f, "-o", out)
    _assert_user_error(code, err, "truncated or corrupt")
    assert not out.exists()
    assert not list(tmp_path.glob(".pyprof-*"))  # no temporary file left behind


@pytest.mark.corpus
def test_corrupt_schema_page(tmp_path, capsys):
    f = corpus_copy(tmp_path, DLPROF)
    data = bytearray(f.read_bytes())
    data[100:4096] = b"\xde\xad\xbe\xef" * ((4096 - 100) // 4)
    f.write_bytes(bytes(data))
    code, _, err = run_cli(capsys, f, "-o", tmp_path / "o.dict")
    _assert_user_error(code, err)
    assert not (tmp_path / "o.dict").exists()


@pytest.mark.corpus
def test_no_traceback_from_the_script(tmp_path):
    """`python parse/parse.py` on a truncated file: one line, status 2, nothing on stdout."""
    f = corpus_copy(tmp_path, DLPROF)
    f.write_bytes(f.read_bytes()[:20000])
    p = subprocess.run([sys.executable, str(REPO / "parse" / "parse.py"), str(f)], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.corpus
def test_export_without_nvtx_warns(tmp_path, capsys):
    f = corpus_copy(tmp_path, DLPROF)
    with sqlite3.connect(f) as c:
        c.execute("DROP TABLE NVTX_EVENTS")
    out = tmp_path / "o.dict"
    code, _, err = run_cli(capsys, f, "-o", out)
    assert code == 0
    assert "warning" in err and "no NVTX" in err
    recs = read_record_file(out)
    assert sum(r["kind"] == "kernel" for r in recs) == 59
    assert all(r["ranges"] == [] and r["op"] is None for r in recs)


@pytest.mark.corpus
def test_null_columns_and_dropped_tables(tmp_path, capsys):
    f = corpus_copy(tmp_path, DLPROF)
    with sqlite3.connect(f) as c:
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):  # drop NOT NULL constraints
            c.execute(f"CREATE TABLE tmp AS SELECT * FROM {t}")
            c.execute(f"DROP TABLE {t}")
            c.execute(f"ALTER TABLE tmp RENAME TO {t}")
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = NULL, gridX = NULL, deviceId = NULL "
                  "WHERE rowid % 2 = 0")
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE rowid % 3 = 0")
        for t in ("PROCESSES", "TARGET_INFO_GPU", "EXPORT_META_DATA", "CUPTI_ACTIVITY_KIND_MEMSET"):
            c.execute(f"DROP TABLE {t}")
    out = tmp_path / "o.dict"
    code, _, err = run_cli(capsys, f, "-o", out)
    assert code == 0, err
    recs = read_record_file(out)
    kernels = [r for r in recs if r["kind"] == "kernel"]
    assert len(kernels) == 59
    assert any(r["kShortName"] is None and r["grid"] is None and r["device"] is None for r in kernels)
    assert any(r["apiName"] is None and r["ranges"] == [] for r in kernels)
    assert all(r["gpu"] is None for r in recs)
    # without the metadata table the version comes from the install path in StringIds (it is 2022.1.3.3)
    assert "nsys 2022.1.3 (from install path)" in err


@pytest.mark.corpus
def test_garbage_marker_text(tmp_path, capsys):
    f = corpus_copy(tmp_path, DLPROF)
    with sqlite3.connect(f) as c:
        n_bad_new = c.execute("UPDATE NVTX_EVENTS SET text = '{\"pyprof\":1,\"k\":\"op\",\"ns\":' WHERE text LIKE "
                              "'aten::relu%'").rowcount
        n_bad_old = c.execute("UPDATE NVTX_EVENTS SET text = '{''mod'': ''torch'', ''op'': broken' WHERE text LIKE "
                              "'{''mod'': ''torch.nn.functional'', ''op'': ''relu''%'").rowcount
        c.execute("UPDATE NVTX_EVENTS SET text = 'x' || char(0) || '\\ud800 garbage' WHERE text = 'aten::empty'")
    assert n_bad_new and n_bad_old
    out = tmp_path / "o.dict"
    code, _, err = run_cli(capsys, f, "-o", out)
    assert code == 0, err
    assert f"{n_bad_new + n_bad_old} malformed" in err
    recs = read_record_file(out)
    assert sum(r["kind"] == "kernel" for r in recs) == 59
    raw = [r for r in recs if any(x["text"].startswith('{"pyprof":1,"k":"op","ns":') for x in r["ranges"])]
    assert raw  # kernels under a broken marker are still written, with the raw text


@pytest.mark.corpus
def test_many_inputs_one_bad(tmp_path, capsys):
    good = corpus_file(DLPROF)
    bad = tmp_path / "bad.sqlite"
    bad.write_text("nope")
    outdir = tmp_path / "out"
    code, _, err = run_cli(capsys, good, bad, "-o", f"{outdir}/", "-j", "2")
    assert code == 2
    assert (outdir / (good.name[: -len(".sqlite")] + ".dict")).exists()
    assert not (outdir / "bad.dict").exists()
    assert "Traceback" not in err
