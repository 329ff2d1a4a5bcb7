"""Saved calibrations record how they were taken, and `pyprof run` says in one line when one may not
fit: old, of unknown age, taken under load or unstable, or with another thread count.

Every calibration file here is crafted in tmp_path (PYPROF_CALIBRATION or the path argument), and
the measurement is replaced by a crafted one: nothing depends on this machine's speed or load."""

from __future__ import annotations

import datetime as dt
import sys

import orjson
import pytest

from pyprof import calibrate
from pyprof.calibrate import Calibration, condition_problems, problems, saved_warning
from pyprof.peaks import CPU_DEVICE
from pyprof.peaks import entry as calibration_entry
from pyprof.peaks import save as save_calibration
from pyprof.prof.devices import load_calibration

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
QUIET = {"torch": "2.13.0", "threads": 4, "cpus": 4, "loadavg": [0.1, 0.1, 0.1], "busy_others": 0.02,
         "spread": {"float32": 0.01, "bw": 0.02}, "seconds": 1.0}


def write(path, saved="2026-05-25T12:00:00+00:00", measured=QUIET, **extra):
    entry = {"flops": {"float32": 1e11}, "bw": 1e10, **extra}
    if saved is not None:
        entry["saved"] = saved
    if measured is not None:
        entry["measured"] = measured
    path.write_bytes(orjson.dumps({"version": 1, "devices": {CPU_DEVICE: entry}}))
    return path


def test_a_recent_quiet_calibration_with_the_same_threads_fits(tmp_path):
    path = write(tmp_path / "c.json")
    assert saved_warning(threads=4, path=path, now=NOW) is None


@pytest.mark.parametrize("saved, measured, threads, expected", [
    ("2026-04-01T12:00:00+00:00", QUIET, 4, "61 days old"),
    (None, QUIET, 4, "of unknown age"),
    ("not a date", QUIET, 4, "of unknown age"),
    ("2026-05-25T12:00:00+00:00", dict(QUIET, busy_others=0.6), 4, "taken under load (other processes used 60% of 4 CPUs)"),
    # no /proc/stat share recorded: judged by the load average per CPU
    ("2026-05-25T12:00:00+00:00", dict(QUIET, busy_others=None, loadavg=[3.0, 1, 1]), 4,
     "taken under load (load average 3.0 on 4 CPUs)"),
    ("2026-05-25T12:00:00+00:00", dict(QUIET, spread={"float32": 0.01, "bw": 0.3}), 4, "unstable (best copy runs 30% apart)"),
    ("2026-05-25T12:00:00+00:00", QUIET, 2, "taken with 4 threads (this run uses 2)"),
])
def test_each_rule_names_its_problem_and_the_fix(tmp_path, saved, measured, threads, expected):
    line = saved_warning(threads=threads, path=write(tmp_path / "c.json", saved, measured), now=NOW)
    assert line is not None and "\n" not in line
    assert expected in line and "run `pyprof calibrate`" in line and str(tmp_path / "c.json") in line


def test_all_problems_share_one_line():
    found = problems(dict(QUIET, busy_others=0.5, spread={"float32": 0.2}, threads=8), "2025-01-01T00:00:00+00:00",
                     threads=2, now=NOW)
    assert found == ["516 days old", "taken under load (other processes used 50% of 4 CPUs)",
                     "unstable (best float32 GEMM runs 20% apart)", "taken with 8 threads (this run uses 2)"]


def test_the_thresholds_are_not_crossed_by_ordinary_noise():
    ok = dict(QUIET, busy_others=0.25, loadavg=[2.0, 1, 1], spread={"float32": 0.05})
    assert condition_problems(ok, threads=4) == []  # load average alone is not judged when the share is known
    assert condition_problems(dict(ok, busy_others=None), threads=4) == []  # 2.0 on 4 CPUs = 0.5 per CPU
    assert problems(ok, "2026-05-02T12:00:00+00:00", 4, now=NOW) == []  # 30 days: not yet old


def test_an_old_file_without_these_fields_keeps_loading_and_says_so_once(tmp_path, monkeypatch, capsys):
    path = tmp_path / "old.json"
    path.write_bytes(orjson.dumps({"version": 1, "devices": {CPU_DEVICE: {"flops": {"float32": 1e11}, "bw": 1e10}}}))
    monkeypatch.setenv("PYPROF_CALIBRATION", str(path))
    assert load_calibration()[CPU_DEVICE].bw == 1e10
    line = saved_warning(threads=4)
    assert "of unknown age" in line and "unknown load and thread count" in line

    pytest.importorskip("torch")  # pyprof run's calibration asks torch for its thread count
    _calibrate_cpu_once()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pyprof: warning: saved CPU peaks") and "of unknown age" in err
    assert orjson.loads(path.read_bytes())["devices"][CPU_DEVICE] == {"flops": {"float32": 1e11}, "bw": 1e10}


def test_malformed_conditions_are_not_judged_and_do_not_crash(tmp_path):
    odd = {"threads": "four", "cpus": None, "loadavg": "high", "busy_others": "x", "spread": {"float32": "wide"}}
    assert saved_warning(threads=4, path=write(tmp_path / "c.json", measured=odd), now=NOW) is None
    assert saved_warning(threads=4, path=tmp_path / "none.json") is None


def test_run_warns_about_a_saved_calibration_taken_with_other_threads(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    other = torch.get_num_threads() + 1
    today = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    path = write(tmp_path / "c.json", saved=today, measured=dict(QUIET, threads=other))
    monkeypatch.setenv("PYPROF_CALIBRATION", str(path))
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("a saved calibration is measured again"))
    _calibrate_cpu_once()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"taken with {other} threads (this run uses {torch.get_num_threads()})" in err and "pyprof calibrate" in err
    write(path, saved=today, measured=dict(QUIET, threads=torch.get_num_threads()))
    _calibrate_cpu_once()
    assert capsys.readouterr().err == ""


def _calibrate_cpu_once() -> None:
    """What ``pyprof run`` does before it writes its records: :func:`pyprof.calibrate.ensure_cpu_peaks`."""
    calibrate.ensure_cpu_peaks(lambda line: print(line, file=sys.stderr))


def _busy_calibration(*args, **kwargs):
    cal = Calibration(CPU_DEVICE, "crafted CPU, 2 threads", {"float32": 3e10, "bfloat16": 3e8}, 5e9, seconds=0.9,
                      spread={"float32": 0.02, "bw": 0.01}, torch="2.13.0", threads=2)
    cal.load = {"cpus": 2, "loadavg": [2.5, 2.0, 1.0], "busy_others": 0.7}
    return cal


def test_quick_calibration_saves_its_conditions_and_warns_when_taken_under_load(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    path = tmp_path / "c.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(path))
    monkeypatch.setattr(calibrate, "measure", _busy_calibration)
    _calibrate_cpu_once()
    err = capsys.readouterr().err.splitlines()
    # in human units: bfloat16's 0.3 GFLOP/s is no "0 GFLOP/s"
    assert err[0].startswith("pyprof: no saved CPU peaks: measured float32 30.0 GFLOP/s, bfloat16 300 MFLOP/s, "
                             "copy 5.00 GB/s in 0.9 s")
    assert err[1] == ("pyprof: warning: the CPU peaks just saved may be off: taken under load (other processes "
                      "used 70% of 2 CPUs); run `pyprof calibrate` on a quiet machine to replace them")
    entry = calibration_entry(CPU_DEVICE)
    assert entry["measured"] == {"torch": "2.13.0", "threads": 2, "cpus": 2, "loadavg": [2.5, 2.0, 1.0],
                                 "busy_others": 0.7, "spread": {"float32": 0.02, "bw": 0.01}, "seconds": 0.9}
    saved = dt.datetime.fromisoformat(entry["saved"])
    assert abs((dt.datetime.now(dt.timezone.utc) - saved).total_seconds()) < 60


def test_calibrate_command_prints_and_saves_the_conditions(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from tests.conftest import run_main

    monkeypatch.setattr(calibrate, "measure", _busy_calibration)
    path = tmp_path / "c.json"
    code, out, err = run_main(capsys, ["calibrate", "-o", path])
    assert code == 0, err
    assert ("taken with torch 2.13.0, 2 threads; other processes used 70% of 2 CPUs (load average 2.50); "
            "best runs spread up to 2.0%") in out
    assert err.count("\n") == 1 and "taken under load" in err and "run `pyprof calibrate` again" in err
    assert calibration_entry(CPU_DEVICE, path)["measured"]["busy_others"] == 0.7


def test_save_without_conditions_writes_no_measured_block(tmp_path):
    path, _ = save_calibration("cpu", {"float32": 1e11}, 1e10, tmp_path / "c.json")
    assert "measured" not in calibration_entry("cpu", path)
    assert calibration_entry("NVIDIA H100", path) is None
