"""`pyprof prof DIR` / `pyprof prof x.parquet`: the per-rank summary and the straggler table (DuckDB),
checked against the same figures computed by hand with pandas."""

from __future__ import annotations

import json

import pytest

import pyprof
from tests.conftest import run_main
from tests.scale_exports import job, rank_export

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four ranks on two hosts, rank 2 the straggler, parsed to a Parquet dataset folder."""
    from pyprof.cli.main import main

    tmp = tmp_path_factory.mktemp("ranks")
    files = job(tmp / "in")
    try:
        main(["parse", "-q", "-j", "1", "--format", "parquet", *map(str, files), "-o", str(tmp / "ranks")])
    except SystemExit as exc:  # pragma: no cover - the failure shows in the tests
        assert exc.code == 0
    return tmp / "ranks"


def test_rank_summary_and_stragglers_by_hand(dataset):
    import pyprof
    from pyprof.scale.query import rank_summary, stragglers

    df = pyprof.load(dataset)
    ranks = rank_summary(dataset)
    assert ranks["rank"].tolist() == [0, 1, 2, 3]
    assert ranks["host"].tolist() == ["node0", "node0", "node1", "node1"]
    time = df.groupby("rank")["kDuration"].sum()
    assert ranks["time"].tolist() == time.tolist()
    assert ranks["kernels"].tolist() == df[df.kind == "kernel"].groupby("rank").size().tolist()
    assert ranks["vs_median"].tolist() == pytest.approx((time / time.median()).tolist())
    assert ranks["top_op"].tolist() == ["linear"] * 4
    assert ranks["attributed"].tolist() == pytest.approx([100.0 * 24 / 25] * 4)

    key = df["op"].fillna(df["kShortName"])
    per = df.assign(key=key).groupby(["key", "rank"])["kDuration"].sum().unstack()
    slow = stragglers(dataset, top=None)
    assert set(slow["key"]) == set(per.index)
    first = slow.iloc[0]
    assert first["key"] == "linear" and first["slowest_rank"] == 2 and first["ranks"] == 4
    assert first["median"] == per.loc["linear"].median() and first["slowest"] == per.loc["linear"].max()
    assert first["ratio"] == pytest.approx(2.0) and first["excess"] == per.loc["linear"].max() - per.loc["linear"].median()
    assert slow["excess"].tolist() == sorted(slow["excess"].tolist(), reverse=True)


def test_prof_prints_the_tables(dataset, capsys):
    code, out, err = run_main(capsys, ["prof", dataset, "-w", "120"])
    assert code == 0, err
    assert "Per rank (4 ranks, 4 files)" in out and "Stragglers: top 3 ops by excess" in out
    lines = out.splitlines()
    head = lines.index("Per rank (4 ranks, 4 files)") + 1
    assert lines[head].split()[:3] == ["Rank", "Host", "Files"]
    assert lines[head + 3].split()[:2] == ["2", "node1"]
    slow = lines[lines.index(next(x for x in lines if x.startswith("Stragglers"))) + 2].split()
    assert slow[0] == "linear" and "2.00" in slow and "2" in slow
    assert max(len(x) for x in lines) <= 120

    code, out, _ = run_main(capsys, ["prof", dataset, "--csv", "--top", "1"])
    assert code == 0
    assert out.startswith("# per rank\nrank,host,files,kernels,copies,time,span,vs_median,attributed,top_op\n")
    assert "\n# stragglers\nkey,ranks,median,slowest,slowest_rank,fastest,ratio,excess\nlinear,4," in out
    code, out, _ = run_main(capsys, ["prof", dataset, "--json"])
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["rank"] for r in rows if r["table"] == "per rank"] == [0, 1, 2, 3]
    assert rows[4]["table"] == "stragglers" and rows[4]["key"] == "linear" and rows[4]["slowest_rank"] == 2


def test_prof_of_one_parquet_file(dataset, capsys, tmp_path):
    code, out, err = run_main(capsys, ["prof", dataset / "job_1.parquet", "-o", tmp_path / "t.txt"])
    assert code == 0 and out == "", err
    text = (tmp_path / "t.txt").read_text()
    assert "Per rank (1 rank, 1 files)" in text and "(one rank: nothing to compare)" in text


def test_record_file_options_give_prof_table_of_the_dataset(dataset, capsys):
    code, out, err = run_main(capsys, ["prof", dataset, "--summary", "op", "--csv"])
    assert code == 0, err
    rows = out.splitlines()
    col = rows[0].split(",").index("Kernels")
    n = sum(int(row.split(",")[col]) for row in rows[1:] if row)
    assert n == len(pyprof.load(dataset))  # every record of every rank, once
    code, out, err = run_main(capsys, ["prof", dataset.parent])  # the files of its sub-folders too
    assert code == 0 and "Per rank (4 ranks, 4 files)" in out, err


def test_prof_of_an_empty_folder(tmp_path, capsys):
    code, _, err = run_main(capsys, ["prof", tmp_path])
    assert code == 2 and "no .parquet file in this folder" in err


def test_one_rank_export_stays_one_line_per_rank(tmp_path, capsys):
    src = rank_export(tmp_path / "a.sqlite", rank=9, host="h")
    code, _, err = run_main(capsys, ["parse", "-q", src, "-o", tmp_path / "a.parquet"])
    assert code == 0, err
    code, out, _ = run_main(capsys, ["prof", "--csv", tmp_path / "a.parquet"])
    assert out.splitlines()[2].startswith("9,h,1,25,0,")
