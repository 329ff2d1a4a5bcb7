"""`pyprof parse --cluster`: Dask workers write the same bytes as the local run; a failing file is named
and the others are kept (exit 2 at the end)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import CORPUS, run_main
from tests.scale_exports import job

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

# small corpus exports of three readers, where the corpus is present
CORPUS_PICKS = ("nsys/hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                "nsys/NVIDIA__Fuser__report1.sqlite",
                "nvprof/josiahdavis__profiling-lm__net.sql.sqlite",
                "kineto/pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz")


def _inputs(tmp_path):
    files = job(tmp_path / "in")
    if CORPUS.is_dir():
        files += [CORPUS / p for p in CORPUS_PICKS if (CORPUS / p).exists()]
    return files


def _same_outputs(a, b):
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    return names


def test_local_cluster_writes_what_the_local_run_writes(tmp_path, capsys):
    """local:2 (two worker processes): the same JSON lines as `pyprof parse FILES -o DIR`; a bad file among
    them is named at the end, exit 2, and every other output is written."""
    files = _inputs(tmp_path)
    bad = tmp_path / "in" / "broken.sqlite"
    bad.write_bytes(b"not an export")
    code, _, err = run_main(capsys, ["parse", "-q", *files, "-o", tmp_path / "local"])
    assert code == 0, err
    code, _, err = run_main(capsys, ["parse", "--cluster", "local:2", *files[:2], bad, *files[2:],
                                     "-o", tmp_path / "dask"])
    assert code == 2
    assert err.count("pyprof: error:") == 2 and "broken.sqlite: not an SQLite database or a JSON trace" in err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith(f"pyprof: error: 1 of {len(files) + 1} inputs could not be parsed: {bad};")
    assert len(_same_outputs(tmp_path / "local", tmp_path / "dask")) == len(files)


@pytest.fixture
def scheduler():
    """A running scheduler with two in-process workers, as `dask scheduler` + `dask worker` would be."""
    import logging

    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
        yield cluster.scheduler_address


def test_existing_scheduler_parquet(tmp_path, capsys, scheduler):
    """tcp://HOST:PORT: a Parquet dataset with the bytes of the local run, then its per-rank tables."""
    assert scheduler.startswith("tcp://")
    files = _inputs(tmp_path)
    code, _, err = run_main(capsys, ["parse", "-q", "--format", "parquet", *files, "-o", tmp_path / "local"])
    assert code == 0, err
    code, _, err = run_main(capsys, ["parse", "--cluster", scheduler, "--format", "parquet", *files,
                                     "-o", tmp_path / "dask"])
    assert code == 0, err
    assert err.count("-> ") == len(files)  # a summary line per file
    assert len(_same_outputs(tmp_path / "local", tmp_path / "dask")) == len(files)
    code, out, err = run_main(capsys, ["prof", tmp_path / "dask"])
    assert code == 0 and "Stragglers" in out, err


def test_a_bug_on_one_file_fails_that_file(tmp_path, monkeypatch):
    """An exception that is no bad-input error (a pyprof bug, a lost worker) fails its file, by name."""
    from pyprof.parse import run
    from pyprof.scale.cluster import Done, parse_cluster

    files = [str(p) for p in job(tmp_path / "in", ranks=3)]
    real = run._worker

    def flaky(path, out):
        if path.endswith("job_1.sqlite"):
            raise RuntimeError("boom")
        return real(path, out)

    monkeypatch.setattr(run, "_worker", flaky)  # workers are threads of this process here
    seen: list[Done] = []
    results = list(parse_cluster(files, str(tmp_path / "out"), "local:2", processes=False, on_done=seen.append))
    errors = {r.path: r.error for r in results if r.error}
    assert errors == {files[1]: f"{files[1]}: RuntimeError: boom"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["job_0.dict", "job_2.dict"]
    assert len(seen) == 2 and all(d.peak_rss > 0 for d in seen)


@pytest.mark.parametrize("address, message", [("nothing", "not a scheduler address"),
                                              ("local:two", "must be a whole number of workers")])
def test_bad_addresses(tmp_path, capsys, address, message):
    src = job(tmp_path / "in", ranks=1)[0]
    code, _, err = run_main(capsys, ["parse", "--cluster", address, src, "-o", tmp_path / "out"])
    assert code == 2 and message in err


def test_outputs_of_inputs_named_alike_are_told_apart_and_the_same_input_twice_refused(tmp_path, capsys):
    from pyprof.scale.cluster import output_names

    a = job(tmp_path / "a", ranks=1)[0]
    b = tmp_path / "b" / a.name
    b.parent.mkdir()
    shutil.copyfile(a, b)
    stem = a.name[: -len(".sqlite")]
    outs = output_names([str(a), str(b)], str(tmp_path / "out"), "parquet")
    assert [Path(o).name for o in outs] == [f"a-{stem}.parquet", f"b-{stem}.parquet"]
    code, _, err = run_main(capsys, ["parse", "--cluster", "local:1", a, a, "-o", tmp_path / "out"])
    assert code == 2 and "given twice" in err and not (tmp_path / "out").exists()


