"""`pyprof parse` and `python parse/parse.py`: help, stdout/-o, summary line, -q, many files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import CORPUS, REPO, corpus_file, corpus_files, read_record_file, record_lines, run_main

FIXTURES = REPO / "tests" / "fixtures"

pytestmark = pytest.mark.corpus


def run_cli(capsys, *args):
    return run_main(capsys, ["parse", *args])


def test_help_teaches(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for s in ("Examples:", "pyprof parse net.sqlite -o net.dict", "rank*.sqlite -o out/", "parse/parse.py",
              "docs/records.md"):
        assert s in out


def test_stdout_and_summary(capsys):
    path = corpus_file("hpcgroup__pipit")
    code, out, err = run_cli(capsys, path)
    assert code == 0
    recs = record_lines(out)
    assert sum(r["kind"] == "kernel" for r in recs) == 5
    assert "5 kernels" in err and "100.0% attributed" in err and "nsys 2022.2.1.31" in err
    code, out2, err = run_cli(capsys, path, "-q")
    assert code == 0 and err == "" and out2 == out
    # the CUDA-backtrace duplicate runtime rows (eventClass 67) are not used
    assert all(r["apiName"].endswith(("_v7000", "_v3020")) for r in recs if r["kind"] == "kernel")
    # the MPI domain of the registered-string ranges is named
    assert any(x["domain"] == "MPI" for r in recs for x in r["ranges"]) or all(
        x["domain"] is None for r in recs for x in r["ranges"])


def test_script_spelling_matches_cli(tmp_path):
    path = corpus_file("josiahdavis__profiling-lm")
    p = subprocess.run([sys.executable, str(REPO / "parse" / "parse.py"), str(path)], capture_output=True)
    assert p.returncode == 0
    out = tmp_path / "net.dict"
    q = subprocess.run([sys.executable, "-m", "pyprof", "parse", str(path), "-o", str(out)], capture_output=True,
                       cwd=REPO)
    assert q.returncode == 0, q.stderr
    assert out.read_bytes() == p.stdout
    assert b"nvprof v12" in q.stderr


def test_many_files_in_parallel(tmp_path, capsys):
    files = [corpus_file("hpcgroup__pipit"), corpus_file("josiahdavis__profiling-lm"),
             corpus_file("MohanadOdema__DLProf")]
    code, _, err = run_cli(capsys, *files, "-o", tmp_path / "out", "-j", "2")
    assert code == 0, err
    outs = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert outs == sorted(f.name.rsplit(".sqlite", 1)[0] + ".dict" for f in files)
    assert err.count("pyprof parse:") == 3
    # each output equals the single-file parse
    for f in files:
        code, single, _ = run_cli(capsys, f, "-q")
        assert (tmp_path / "out" / (f.name.rsplit(".sqlite", 1)[0] + ".dict")).read_text() == single


def test_many_files_one_broken_is_named_and_the_others_written(tmp_path, capsys):
    good = corpus_file("hpcgroup__pipit")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database")
    code, _, err = run_cli(capsys, good, broken, "-o", tmp_path / "out", "-j", "1")
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith(f"pyprof: error: 1 of 2 inputs could not be parsed: {broken};"), err
    assert "Traceback" not in err and err.count("pyprof parse:") == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [good.name.rsplit(".sqlite", 1)[0] + ".dict"]


def test_many_files_need_a_folder(capsys, tmp_path):
    a, b = corpus_file("hpcgroup__pipit"), corpus_file("MohanadOdema__DLProf")
    code, _, err = run_cli(capsys, a, b)
    assert code == 2 and "output folder" in err


def test_threaded_writer_equals_sequential(tmp_path, monkeypatch):
    from pyprof.parse import run

    path = corpus_file("zx3xyy__assignment2-systems")
    monkeypatch.setattr(run, "THREADED_MIN", 10**12)
    seq = tmp_path / "seq.dict"
    run.parse_file(str(path), str(seq))
    monkeypatch.setattr(run, "THREADED_MIN", 1)
    par = tmp_path / "par.dict"
    run.parse_file(str(path), str(par))
    assert par.read_bytes() == seq.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["par.dict", "seq.dict"]


def test_threaded_writer_failure_reaches_the_caller(monkeypatch):
    """A write error in the writer thread is raised in the caller, and nothing hangs."""
    from pyprof.parse import run

    class Prep:
        n = 10**6

        def lines(self):
            for _ in range(100):
                yield b"x" * 1000

    class Full:
        def __init__(self):
            self.calls = 0

        def write(self, data):
            self.calls += 1
            if self.calls == 3:
                raise OSError(28, "No space left on device")

    monkeypatch.setattr(run, "THREADED_MIN", 1)
    fh = Full()
    with pytest.raises(OSError, match="No space left"):
        run.write_lines(Prep(), fh)
    assert fh.calls == 3


def test_odd_characters_in_the_path(tmp_path, capsys):
    folder = tmp_path / "a b#c?d"
    folder.mkdir()
    f = folder / "x%20y.sqlite"
    f.write_bytes(corpus_file("hpcgroup__pipit").read_bytes())
    code, out, err = run_cli(capsys, f)
    assert code == 0, err
    assert len(record_lines(out)) == 20


def test_outputs_of_inputs_named_alike_take_as_many_folders_as_needed(tmp_path):
    from pyprof.errors import UsageError
    from pyprof.parse.run import output_names

    paths = [str(tmp_path / "a" / "x" / "trace.json"), str(tmp_path / "b" / "x" / "trace.json"),
             str(tmp_path / "c" / "net.sqlite")]
    names = [o.rsplit("/", 1)[-1] for o in output_names(paths, "out")]
    assert names == ["a-x-trace.dict", "b-x-trace.dict", "net.dict"]  # unique names keep their own
    with pytest.raises(UsageError, match="given twice"):
        output_names([paths[0], paths[0]], "out")


def test_parse_returns_what_it_wrote(tmp_path):
    """Result.written is the number of records written, whichever reader wrote them (the streamed
    readers of traces and exports had left it 0)."""
    from pyprof.parse.run import parse_file

    srcs = [FIXTURES / "gpu" / "h200_lenet.trace.json.gz", FIXTURES / "kineto" / "cpu_compiled_mlp.trace.json.gz", FIXTURES / "kineto" / "gpu_synthetic.json"]
    srcs += corpus_files("nsys")[:1] + corpus_files("nvprof")[:1] + sorted((CORPUS / "kineto").glob("*bert*"))[:1]
    for i, src in enumerate(srcs):
        out = tmp_path / f"{i}.dict"
        res = parse_file(str(src), str(out))
        n = len(read_record_file(out))
        assert res.written == n and (n == 0 or res.written > 0), src
