"""What ``pyprof run`` shows and where it writes: torch's Kineto ``USDT ... profiler_start/stop`` lines
are not shown (everything the script itself prints is), checked in a fresh process (Kineto reads its
log level once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tests.conftest import REPO  # noqa: E402

NOISY = """
import os, sys, torch, pyprof
print("script stdout")
print("script stderr", file=sys.stderr, flush=True)
os.write(2, b"script raw fd 2\\n")
print("KINETO_LOG_LEVEL seen by the script:", os.environ.get("KINETO_LOG_LEVEL"))
net = torch.nn.Linear(8, 8)
for _ in range(6):
    net(torch.randn(4, 8)).sum()
    pyprof.step()
"""


def _pyprof_run(tmp_path, env_extra=None):
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env.update(PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "pyprof", "run", "--no-calibrate", "-o", str(tmp_path / "out"),
                           str(script)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)


def test_kineto_usdt_lines_are_not_shown_and_the_scripts_output_is(tmp_path):
    proc = _pyprof_run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "USDT" not in proc.stderr and "profiler_start" not in proc.stderr and "profiler_stop" not in proc.stderr
    assert "script stdout" in proc.stdout and "KINETO_LOG_LEVEL seen by the script: None" in proc.stdout
    assert "script stderr" in proc.stderr and "script raw fd 2" in proc.stderr
    assert "steps counted at pyprof.step()" in proc.stdout


def _kineto_prints_usdt_lines() -> bool:
    """Whether this torch's Kineto prints its ``USDT ... profiler_start`` line at all (torch 2.4's does not)."""
    code = "import torch\nwith torch.profiler.profile(): torch.ones(1) + 1\n"
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    return "profiler_start" in proc.stderr


def test_a_log_level_the_user_sets_is_kept(tmp_path):
    proc = _pyprof_run(tmp_path, {"KINETO_LOG_LEVEL": "5"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "KINETO_LOG_LEVEL seen by the script: 5" in proc.stdout
    assert "profiler_start" in proc.stderr or not _kineto_prints_usdt_lines()  # shown as the user asked


def test_two_runs_without_o_keep_both_runs(tmp_path, capsys, monkeypatch):
    from pyprof.cli.main import main
    from tests.conftest import read_record_file

    monkeypatch.chdir(tmp_path)
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    errs = []
    for _ in range(2):
        with pytest.raises(SystemExit) as info:
            main(["run", "--no-calibrate", str(script)])
            raise SystemExit(0)
        out = capsys.readouterr()
        assert info.value.code == 0, out.err
        errs.append(out.err)
    first, second = tmp_path / "pyprof-out", tmp_path / "pyprof-out-2"
    assert read_record_file(first / "records.dict") and read_record_file(second / "records.dict")
    assert (first / "trace.json").read_bytes() != (second / "trace.json").read_bytes()
    assert "pyprof-out" not in errs[0].split("wrote")[0]  # the first run: no word on its folder
    [line] = [line for line in errs[1].splitlines() if "holds an earlier run" in line]
    assert "./pyprof-out-2" in line and "-o DIR" in line


def test_the_default_folder_is_the_first_holding_no_run(tmp_path, monkeypatch):
    from pyprof.runner import RUN_OUTPUTS, new_run_folder

    monkeypatch.chdir(tmp_path)
    assert str(new_run_folder()) == "pyprof-out" and (tmp_path / "pyprof-out").is_dir()
    assert str(new_run_folder()) == "pyprof-out"  # made, but still empty (a run that failed): reused
    (tmp_path / "pyprof-out" / "notes.txt").write_text("mine")
    assert str(new_run_folder()) == "pyprof-out"  # the user's own file is no run
    for name in RUN_OUTPUTS:
        (tmp_path / "pyprof-out" / name).write_text("")
        assert str(new_run_folder()) == "pyprof-out-2", name  # any one of a run's outputs
        (tmp_path / "pyprof-out" / name).unlink()
    (tmp_path / "pyprof-out" / "records.dict").write_text("")
    (tmp_path / "pyprof-out-2").rmdir()
    (tmp_path / "pyprof-out-2").write_text("a file, not a folder")
    assert str(new_run_folder()) == "pyprof-out-3"
