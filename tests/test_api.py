"""pyprof's Python API (:mod:`pyprof.api`, docs/api.md): the doc's notebook cells run as written, and every
function answers as its command does."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LENET = FIXTURES / "gpu" / "h200_lenet.trace.json.gz"


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
    assert pyprof.load(LENET, prof=True)["flops"].sum() == pytest.approx(pyprof.load(tmp_path / "run", prof=True)["flops"].sum())
