"""pyprof's Python API (:mod:`pyprof.api`, docs/api.md): the doc's notebook cells run as written, and every
function answers as its command does."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, read_record_file, run_main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LENET = FIXTURES / "gpu" / "h200_lenet.trace.json.gz"


def _cells() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """The doc's cells run in one namespace, in a fresh folder, as a notebook would run them."""
    pytest.importorskip("torch")
    import os

    folder = tmp_path_factory.mktemp("notebook")
    here = os.getcwd()
    os.chdir(folder)
    ns: dict = {}
    try:
        for cell in _cells():
            exec(compile(cell, "docs/api.md", "exec"), ns)  # noqa: S102 - the doc's own example
    finally:
        os.chdir(here)
    return folder, ns


@pytest.mark.torch
def test_the_doc_example_gives_the_clis_answers(notebook, capsys):
    """p.summary() is ``pyprof prof --summary`` of the folder p.save() wrote, figure for figure; its layers
    are the model's modules; the HTML view shows the same table."""
    folder, ns = notebook
    assert len(_cells()) == 3
    p, model = ns["p"], ns["model"]
    assert p.steps == 6
    by_layer = ns["by_layer"]
    assert isinstance(by_layer, pd.DataFrame) and {n for n, _ in model.named_children()} <= set(by_layer["key"])
    for by in ("op", "layer", "step"):
        code, out, err = run_main(capsys, ["prof", "--summary", by, "--csv", folder / "run1"])
        assert code == 0, err
        cli = pd.read_csv(io.StringIO(out))
        mine = p.summary(by)
        assert len(cli) == len(mine) and list(cli.iloc[:, 0].astype(str)) == list(mine.iloc[:, 0].astype(str))
        # (the CSV prints a ratio to 2 decimals, or 4 digits: spread to within that)
        for i, col, rel in ((1, "time", 1e-6), (2, "spread", 5e-3)) if by != "step" else ((2, "sil", 1e-6),):
            assert cli.iloc[:, i].tolist() == pytest.approx(mine[col].tolist(), rel=rel, abs=0.006, nan_ok=True)
    steps = ns["steps"]
    assert list(steps["step"]) == ["2", "3", "4", "median"]  # wait 1, warmup 1: steps 2-4 recorded
    html = ns["html"]
    assert html.startswith("<div>") and "Summary by op" in html and "linear" in html and "Steps:" in html


@pytest.mark.torch
def test_the_doc_example_functions(notebook):
    from test_export_perfetto import _strict, check_schema

    folder, ns = notebook
    records = read_record_file(folder / "run1" / "records.dict")
    assert len(ns["records"]) == len(records)  # pyprof.load of the trace: parsed first
    assert ns["done"].written == len(read_record_file(folder / "run1.dict")) == len(records)
    assert ns["same"].attrs["verdict"] == "no regression" and set(ns["same"]["verdict"]) == {"same"}
    assert list(ns["ops"]["key"])[:1] == [ns["p"].summary("op")["key"].iloc[0]]
    kinds = check_schema(_strict(folder / "run1.perfetto.json"))
    assert sum(e["cat"] == "cpu_op" for e in kinds["X"]) == len(records)


@pytest.mark.torch
def test_profile_misuse_and_failure(tmp_path):
    import torch

    import pyprof
    from pyprof.errors import UsageError

    p = pyprof.profile()
    with pytest.raises(UsageError, match="nothing profiled yet"):
        p.summary()
    assert "nothing profiled" in p._repr_html_()
    with pytest.raises(ZeroDivisionError):  # the block's own error, as it was; init() undone
        with pyprof.profile():
            torch.ones(2).relu()
            raise ZeroDivisionError("in the block")
    assert not pyprof.is_initialized()
    with pytest.raises(UsageError, match="fewer than wait \\+ warmup \\+ 1 = 3"):
        with pyprof.profile(wait=1, warmup=1):
            torch.ones(2) + 1
            pyprof.step()
    with pytest.raises(UsageError, match="--active must be at least 1"):
        pyprof.profile(active=0)
    with pyprof.profile(tmp_path / "out", wait=1, warmup=1, active=1) as p:
        for _ in range(3):
            torch.ones(8).relu()
            pyprof.step()
    assert (tmp_path / "out" / "records.dict").is_file() and len(p.table) > 0
    p.save(tmp_path / "kept")
    with pytest.raises(UsageError, match="already holds a run's records"):
        p.save(tmp_path / "kept")


def test_the_commands_are_their_subpackages():
    """pyprof.parse, .prof and .report are the subpackages (their modules reachable as before) and callable."""
    import pyprof
    import pyprof.prof.fastread as fr
    from pyprof.parse import open_source

    assert pyprof.parse.open_source is open_source and fr.__name__ == "pyprof.prof.fastread"
    assert all(callable(getattr(pyprof, n)) for n in ("parse", "prof", "report", "diff", "export", "profile", "load"))
    df = pyprof.prof(LENET)
    assert len(df) == 177 and "flops" in df and df.attrs["warnings"][0].endswith("keeps the records for the next command)")
    s = pyprof.prof(LENET, by="kernel")
    assert s["kernels"].sum() == 177
    with pytest.raises(Exception, match="unknown summary"):
        pyprof.prof(LENET, by="nope")


def test_load_takes_every_input(tmp_path, capsys):
    import pyprof

    (tmp_path / "run").mkdir()
    code, _, err = run_main(capsys, ["parse", LENET, "-o", tmp_path / "run" / "records.dict"])
    assert code == 0, err
    want = pyprof.load(tmp_path / "run" / "records.dict")
    for src in (tmp_path / "run", LENET):
        got = pyprof.load(src)
        assert got.drop(columns="file").equals(want.drop(columns="file")), src
    assert pyprof.load(LENET)["file"].iloc[0] == LENET.name
    assert pyprof.load(LENET, prof=True)["flops"].sum() == pytest.approx(pyprof.prof(LENET)["flops"].sum())
