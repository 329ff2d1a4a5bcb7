"""Peaks are evidence with a date: the calibration file keeps each figure's best, and a record file keeps
the peaks it was priced with, so a later calibration (under load or not) never changes an older run's
numbers unless the user asks to re-price."""

from __future__ import annotations

import orjson
import pytest

from pyprof import peaks
from tests.conftest import REPO, run_main

TRACE = REPO / "tests" / "fixtures" / "kineto" / "cpu_compiled_mlp.trace.json.gz"  # a real CPU trace


def _entry(path):
    return orjson.loads(path.read_bytes())["devices"]["cpu"]


def test_a_lower_measurement_never_lowers_a_saved_peak(tmp_path):
    cal = tmp_path / "c.json"
    quiet = {"threads": 2, "torch": "2.13.0", "busy_others": 0.01}
    busy = {"threads": 2, "torch": "2.13.0", "busy_others": 0.61}
    peaks.save("cpu", {"float32": 2e11, "bfloat16": 4e11}, 4e10, cal, quiet, floor=1000.0,
               bw_levels=[[1 << 20, 1.5e11]])
    path, kept = peaks.save("cpu", {"float32": 6e10, "bfloat16": 5e11}, 1.3e10, cal, busy, floor=3000.0,
                            bw_levels=[[1 << 20, 9e10]])
    e = _entry(path)
    assert e["flops"] == {"float32": 2e11, "bfloat16": 5e11}  # each figure's best: bf16 measured better now
    assert e["bw"] == 4e10 and e["floor"] == 1000.0 and e["bw_levels"] == [[1 << 20, 1.5e11]]
    assert set(kept) == {"float32", "bw", "floor", f"bw at {1 << 20} bytes"}
    assert set(e["kept"]) == set(kept)
    assert e["measured"]["busy_others"] == 0.01  # the quieter measurement describes what was kept


def test_another_setup_or_replace_starts_over(tmp_path):
    cal = tmp_path / "c.json"
    peaks.save("cpu", {"float32": 2e11}, 4e10, cal, {"threads": 2})
    peaks.save("cpu", {"float32": 1e11}, 2e10, cal, {"threads": 1})  # one thread: another peak
    assert _entry(cal)["flops"]["float32"] == 1e11 and "kept" not in _entry(cal)
    peaks.save("cpu", {"float32": 3e11}, 5e10, cal, {"threads": 1})
    peaks.save("cpu", {"float32": 9e10}, 1e10, cal, {"threads": 1}, replace=True)
    assert _entry(cal)["flops"]["float32"] == 9e10


def _prof(capsys, path, *extra):
    code, out, err = run_main(capsys, ["prof", "--summary", "op", "-w", "200", *extra, path])
    assert code == 0, err
    return out


@pytest.mark.parametrize("how", ["parse", "run-folder"])
def test_prof_of_a_finished_run_prints_the_same_after_a_later_calibration(tmp_path, capsys, monkeypatch, how):
    """The issue's case: peaks calibrated, a run parsed and priced; then a calibration made under load
    (here: saved with --replace, as a lower figure would be without the maxima) must not change it."""
    cal = tmp_path / "c.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    peaks.save("cpu", {"float32": 2e11}, 4e10, cal, {"threads": 2}, floor=800.0)
    folder = tmp_path / "run"
    folder.mkdir()
    out = folder / "records.dict"
    assert run_main(capsys, ["parse", "-q", TRACE, "-o", out])[0] == 0
    target = folder if how == "run-folder" else out
    before = _prof(capsys, target)
    peaks.save("cpu", {"float32": 5e10}, 1.2e10, cal, {"threads": 2}, floor=3000.0, replace=True)
    assert _prof(capsys, target) == before
    assert "pinned in the record file" in before
    repriced = _prof(capsys, target, "--reprice")
    assert repriced != before and "pinned" not in repriced


def test_parse_pins_no_calibration_for_good(tmp_path, capsys, monkeypatch):
    """A file parsed with no calibration saved stays priced without one: a calibration saved later is
    used only with --reprice."""
    cal = tmp_path / "c.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    out = tmp_path / "r.dict"
    assert run_main(capsys, ["parse", "-q", TRACE, "-o", out])[0] == 0
    assert orjson.loads(out.read_bytes().split(b"\n", 1)[0])["peaks"] == {"file": str(cal), "devices": {}}
    before = _prof(capsys, out)
    peaks.save("cpu", {"float32": 2e11}, 4e10, cal, {"threads": 2})
    assert _prof(capsys, out) == before
    assert "calibrated" in _prof(capsys, out, "--reprice")


@pytest.mark.parametrize("flops, bw", [({"float32": float("inf")}, 4e10), ({"float32": 2e11}, float("nan")),
                                       ({"float32": 0.0}, 4e10)])
def test_a_peak_read_would_refuse_is_never_saved(tmp_path, flops, bw):
    """An infinite, NaN or zero peak fails the save in one line, and leaves the file as it was: saved, every
    later command would refuse the whole calibration file."""
    from pyprof.errors import UsageError

    cal = tmp_path / "c.json"
    peaks.save("cpu", {"float32": 2e11}, 4e10, cal, {"threads": 2}, floor=1000.0)
    before = cal.read_bytes()
    with pytest.raises(UsageError, match="nothing was saved|calibration of cpu"):
        peaks.save("cpu", flops, bw, cal, {"threads": 2}, floor=1000.0)
    assert cal.read_bytes() == before
    assert peaks.read(cal)["devices"]["cpu"]["flops"] == {"float32": 2e11}
