"""Every shipped example runs under plain ``pyprof run EXAMPLE``, with no pyprof option, and profiles a
steady state: each marks its iterations with pyprof.step(), enough of them for the default schedule
(--wait 1 --warmup 1 --active 5), and each run yields records of the example's own ops in the
recorded steps only."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from pyprof.cli.main import main  # noqa: E402
from pyprof.peaks import CPU_DEVICE  # noqa: E402
from pyprof.peaks import save as save_calibration  # noqa: E402
from tests.conftest import REPO, read_record_file  # noqa: E402

EXAMPLES = sorted((REPO / "examples").rglob("*.py"))
#: script arguments (not pyprof options) that keep an example short on a busy CI machine
SCRIPT_ARGS = {"lenet.py": ["--batch", "4"]}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "examples")))
def test_example_runs_under_plain_pyprof_run(example, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output folder, ./pyprof-out
    cal = tmp_path / "calibration.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    save_calibration(CPU_DEVICE, {"float32": 1e11}, 1e10, cal)  # CPU peaks saved: no measurement in the test
    with pytest.raises(SystemExit) as info:
        main(["run", str(example), *SCRIPT_ARGS.get(example.name, [])])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert info.value.code == 0, out.err
    recs = read_record_file(tmp_path / "pyprof-out" / "records.dict")
    assert recs and any(r.get("op") for r in recs)  # the example's ops, attributed by its markers
    assert "Summary by op" in out.out
    assert "steps counted at pyprof.step()" in out.out and "no iteration marked" not in out.err
    steps = {rg["text"] for r in recs for rg in r.get("ranges") or () if rg["text"].startswith("ProfilerStep#")}
    assert steps == {f"ProfilerStep#{n}" for n in range(2, 7)}  # the five --active steps
