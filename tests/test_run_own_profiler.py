"""A script that opens its own profilers under ``pyprof run``: they run inside pyprof's session (one
Kineto session per process; two crashed it, issue #45), the script runs on with empty results from
them, its ``record_function`` ranges land in pyprof's trace, its profiler's ``step()`` marks
iterations, the run says so in one line, and every patched torch class is restored afterwards.
The many-run crash check is ``scripts/own_profiler_runs.py``; here it runs twice."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import orjson
import pytest

torch = pytest.importorskip("torch")

import torch.autograd.profiler as legacy  # noqa: E402

from pyprof.runner import RunOptions, run_script  # noqa: E402
from tests.conftest import REPO  # noqa: E402

SCRIPT = """
import sys
import torch
import pyprof
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

pyprof.init()
net = nn.Linear(16, 4)
x = torch.randn(8, 16)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
             on_trace_ready=lambda p: sys.exit("on_trace_ready called")) as prof:
    for i in range(6):
        with record_function("my_step"):
            net(x).sum()
        prof.step()
with torch.autograd.profiler.profile() as old, torch.autograd.profiler.emit_nvtx(), \\
        torch.autograd.profiler.emit_itt():
    net(x)
prof.export_chrome_trace(sys.argv[1] + "/own.json")
old.export_chrome_trace(sys.argv[1] + "/old.json")
with open(sys.argv[1] + "/seen.txt", "w") as fh:
    fh.write(repr((len(prof.key_averages()), len(prof.events()), prof.key_averages().table(), len(old.key_averages()),
                   old.table(), len(old.function_events), old.self_cpu_time_total)))
"""

CLASSES = (torch.profiler.profile, legacy.profile, legacy.emit_nvtx, legacy.emit_itt)


def _members():
    return [{n: inspect.getattr_static(c, n) for n in dir(c)} for c in CLASSES]


def test_the_scripts_profilers_run_inside_pyprofs_session(tmp_path):
    before = _members()
    script = tmp_path / "own.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = run_script(script, [str(tmp_path)], tmp_path / "out", RunOptions(active=3))
    assert _members() == before  # every patch undone
    assert (result.steps, result.step_source) == (6, "the script's profiler.step()")
    [line] = result.notes
    assert "torch.profiler.profile" in line and "torch.autograd.profiler.profile" in line and "emit_nvtx" in line
    assert str(result.trace) in line
    assert eval((tmp_path / "seen.txt").read_text()) == (0, 0, "", 0, "", 0, 0.0)
    assert orjson.loads((tmp_path / "own.json").read_bytes()) == orjson.loads((tmp_path / "old.json").read_bytes()) == []
    events = orjson.loads(result.trace.read_bytes())["traceEvents"]
    mine = [e for e in events if e.get("name") == "my_step"]
    assert len(mine) == 3  # the script's ranges, in pyprof's three recorded steps


def test_pyprofs_own_profiler_is_untouched_by_the_patches(tmp_path):
    """The first run's patches do not leak into a later profiler of this process."""
    script = tmp_path / "own.py"
    script.write_text(textwrap.dedent(SCRIPT))
    run_script(script, [str(tmp_path)], tmp_path / "out", RunOptions(active=3))
    with torch.profiler.profile() as prof:
        torch.randn(4, 4) @ torch.randn(4, 4)
    assert any(e.key == "aten::mm" for e in prof.key_averages())


def test_a_script_with_its_own_profiler_survives_repeated_runs():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "own_profiler_runs.py"), "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "runs: 2, clean 2, signal deaths 0, other failures 0" in proc.stdout
