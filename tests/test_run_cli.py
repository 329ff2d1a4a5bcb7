"""``pyprof run`` end to end through the CLI entry point: output files, summary, findings, and how
failing or step-less scripts are reported (exit status and one-line errors)."""

from __future__ import annotations

import textwrap

import orjson
import pytest

pytest.importorskip("torch")

from pyprof.cli.main import main  # noqa: E402
from tests.conftest import REPO, read_record_file  # noqa: E402

TRAIN = """
import sys
import torch
import pyprof
from torch import nn

with open(sys.argv[1], "w") as fh:
    fh.write(__name__ + " " + " ".join(sys.argv[1:]))
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(16, 32)
for i in range(int(sys.argv[2])):
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    opt.step()
    if i == {fail_at}:
        1 / 0
"""


def _script(tmp_path, fail_at=-1, body=TRAIN):
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(body.replace("{fail_at}", str(fail_at))))
    return p


def _run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
        raise SystemExit(0)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def _gap(summary, op):
    """The Gap cell of ``op``'s row in a summary table (right-aligned under its header, which the
    terminal's width may or may not leave last)."""
    lines = summary.splitlines()
    header = next(line for line in lines if line.startswith("Op ") and " Gap" in line)
    row = next(line for line in lines if line.startswith(op + " "))
    return row[:header.index(" Gap") + 4].split()[-1]


def test_run_writes_trace_records_env_and_prints_summary_and_findings(tmp_path, capsys):
    script = _script(tmp_path)
    out = tmp_path / "out"
    seen = tmp_path / "argv.txt"
    code, stdout, stderr = _run(["run", "-o", str(out), "--active", "2", str(script), str(seen), "5"], capsys)
    assert code == 0, stderr
    assert seen.read_text() == f"__main__ {seen} 5"  # run as __main__ with sys.argv = [script, *args]
    for name in ("trace.json", "records.dict", "env.json"):
        assert (out / name).is_file()
    recs = read_record_file(out / "records.dict")
    assert {r["dir"] for r in recs} >= {"fprop", "bprop", "optim"}
    linear = [r for r in recs if r["op"] == "linear" and r["dir"] == "fprop"]
    assert {r["layer"][-1] for r in linear} == {"0", "2"}  # nn.Sequential children
    assert "steps counted at optimizer.step()" in stdout
    assert "Summary by op" in stdout and "linear" in stdout
    assert "CPU findings" in stdout and "intra-op threads" in stdout and "Hottest ops" in stdout
    env = orjson.loads((out / "env.json").read_bytes())
    assert env["intra_op_threads"] >= 1 and env["logical_cpus"] >= 1


def test_failing_script_prints_its_traceback_and_exits_1(tmp_path, capsys):
    script = _script(tmp_path, fail_at=2)
    out = tmp_path / "out"
    code, _, stderr = _run(["run", "-o", str(out), str(script), str(tmp_path / "a.txt"), "5"], capsys)
    assert code == 1
    assert "Traceback (most recent call last)" in stderr
    assert f'File "{script}", line 17' in stderr and "ZeroDivisionError" in stderr
    assert "runner.py" not in stderr and "runpy" not in stderr  # pyprof's frames are not the user's
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("pyprof: error: train.py failed with ZeroDivisionError") or \
        last.startswith("pyprof: error: train.py failed: ZeroDivisionError")
    assert not (out / "records.dict").exists()


def test_sys_exit_nonzero_is_a_failure(tmp_path, capsys):
    script = _script(tmp_path, body="import sys\nsys.exit(3)\n")
    code, _, stderr = _run(["run", "-o", str(tmp_path / "o"), str(script)], capsys)
    assert code == 1 and "exited with status 3" in stderr


def test_script_without_iterations_is_profiled_whole_with_one_line_saying_so(tmp_path, capsys):
    script = _script(tmp_path, body="import torch\nfor _ in range(3):\n    torch.randn(8, 8) @ torch.randn(8, 8)\n")
    out = tmp_path / "o"
    code, stdout, stderr = _run(["run", "-o", str(out), "--no-calibrate", str(script)], capsys)
    assert code == 0, stderr
    [line] = [line for line in stderr.splitlines() if "no iteration marked" in line and "whole script" in line]
    assert "first-call costs (allocation, library initialisation, warm-up) are included" in line
    assert "pyprof.step()" in line
    assert "whole script" in stdout
    recs = read_record_file(out / "records.dict")
    mm = [r for r in recs if r["op"] in ("matmul", "__matmul__", "mm")]
    assert len({r["opId"] for r in mm}) == 3  # all three, not a window of them


def test_an_explicit_step_source_that_never_steps_is_a_one_line_error(tmp_path, capsys):
    script = _script(tmp_path, body="import torch\ntorch.randn(8, 8) @ torch.randn(8, 8)\n")
    code, _, stderr = _run(["run", "-o", str(tmp_path / "o"), "--steps-from", "pyprof", str(script)], capsys)
    assert code == 2
    assert stderr.count("\n") == 1 and "marked no iteration" in stderr and "--steps-from all" in stderr


def test_with_iterations_the_first_window_is_dropped_and_only_active_steps_kept(tmp_path, capsys):
    """The step-0 window recorded in case no iteration comes is not the trace once one does: the
    records hold the --active steps only (ProfilerStep#2 and #3 after --wait 1 --warmup 1)."""
    script = _script(tmp_path)
    out = tmp_path / "o"
    code, stdout, stderr = _run(["run", "-o", str(out), "--active", "2", "--no-calibrate", str(script),
                                 str(tmp_path / "a"), "6"], capsys)
    assert code == 0, stderr
    assert "no iteration marked" not in stderr and "6 steps counted" in stdout
    recs = read_record_file(out / "records.dict")
    steps = {rg["text"] for r in recs for rg in r.get("ranges") or () if rg["text"].startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3"}


def test_steps_from_all_profiles_a_script_without_iterations(tmp_path, capsys):
    script = _script(tmp_path, body="import torch\nfor _ in range(3):\n    torch.randn(64, 64) @ torch.randn(64, 64)\n")
    out = tmp_path / "o"
    code, stdout, stderr = _run(["run", "-o", str(out), "--steps-from", "all", str(script)], capsys)
    assert code == 0, stderr
    recs = read_record_file(out / "records.dict")
    mm = [r for r in recs if r["op"] in ("matmul", "__matmul__", "mm")]
    assert len({r["opId"] for r in mm}) == 3


def test_too_few_steps_for_the_schedule(tmp_path, capsys):
    script = _script(tmp_path)
    code, _, stderr = _run(["run", "-o", str(tmp_path / "o"), "--wait", "3", str(script), str(tmp_path / "a"), "2"],
                           capsys)
    assert code == 2 and "fewer than" in stderr


def test_missing_script(tmp_path, capsys):
    code, _, stderr = _run(["run", str(tmp_path / "nope.py")], capsys)
    assert code == 2 and "no such script" in stderr


def test_examples_lenet_runs_and_reports_its_convolutions(tmp_path, capsys):
    """The README's first command: its own time is a benchmark's to show (the closing line prints it)."""
    code, stdout, stderr = _run(["run", "-o", str(tmp_path / "o"), str(REPO / "examples" / "lenet.py")], capsys)
    assert code == 0, stderr
    assert "conv2d" in stdout


def test_without_markers_ops_come_from_aten_with_shapes_and_python_frames(tmp_path, capsys):
    script = _script(tmp_path)
    out = tmp_path / "o"
    code, stdout, stderr = _run(["run", "-o", str(out), "--no-init", "--with-stack", "--active", "1", str(script),
                                 str(tmp_path / "a"), "4"], capsys)
    assert code == 0, stderr
    recs = read_record_file(out / "records.dict")
    lin = [r for r in recs if r["op"] == "linear" and r["dir"] == "fprop"]
    assert lin and {r["mod"] for r in lin} == {"aten"}
    # no pyprof module paths: the layers are torch.profiler's nn.Module ranges (class and instance index)
    assert {tuple(r["layer"]) for r in lin} == {("Sequential_0", "Linear_0"), ("Sequential_0", "Linear_1")}
    shapes = sorted({tuple(tuple(a["shape"]) for a in r["args"] if a["type"] == "tensor") for r in lin})
    assert shapes == [((16, 32), (64, 32), (64,)), ((16, 64), (8, 64), (8,))]
    assert all(r["trace"] and r["trace"][0].startswith("train.py:") for r in lin)
    bwd = [r for r in recs if r["dir"] == "bprop" and r["op"] == "linear"]
    assert bwd and all(r["args"] for r in bwd)  # linked to the forward aten::linear


def test_first_run_measures_cpu_peaks_once_so_gaps_are_not_blank(tmp_path, capsys, monkeypatch):
    cal = tmp_path / "cal.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    script = _script(tmp_path)
    code, stdout, stderr = _run(["run", "-o", str(tmp_path / "o1"), "--active", "1", str(script),
                                 str(tmp_path / "a.txt"), "4"], capsys)
    assert code == 0, stderr
    assert "no saved CPU peaks: measured" in stderr and cal.is_file()
    assert "no peak FLOP/s or bandwidth known" not in stderr
    # the summary's Gap column holds numbers now: the linear row has a finite gap >= 1
    assert float(_gap(stdout, "linear")) >= 1.0
    before = cal.read_bytes()
    code, _, stderr = _run(["run", "-o", str(tmp_path / "o2"), "--active", "1", str(script),
                            str(tmp_path / "a.txt"), "4"], capsys)
    assert code == 0 and "measured" not in stderr and cal.read_bytes() == before  # saved peaks are reused


def test_no_calibrate_leaves_the_roofline_unknown_not_zero(tmp_path, capsys, monkeypatch):
    cal = tmp_path / "cal.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    script = _script(tmp_path)
    code, stdout, stderr = _run(["run", "-o", str(tmp_path / "o"), "--active", "1", "--no-calibrate", str(script),
                                 str(tmp_path / "a.txt"), "4"], capsys)
    assert code == 0, stderr
    assert not cal.exists() and "no peak FLOP/s or bandwidth known" in stderr
    assert _gap(stdout, "linear") == "n/a"


COMPILED = """
import torch
import pyprof
from torch import nn

net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
run = torch.compile(net)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(16, 32)
eager = net(x).detach()
for i in range(4):
    opt.zero_grad()
    y = run(x)
    y.pow(2).mean().backward()
    opt.step()
    pyprof.step()
print("compiled ok", float((run(x) - net(x)).abs().max()))
"""


def test_a_script_using_torch_compile_runs(tmp_path, capsys):
    """A compiled module under ``pyprof run`` (whose own global module hook made TorchDynamo trace
    pyprof's module stack and fail) trains, gives the eager results, and its GEMMs are priced."""
    import torch._dynamo

    # the script runs in this process, as a user's would in a fresh one: an nn.Sequential compiled by an
    # earlier test shares Sequential.forward's code object, whose cache would make this compile a recompile
    torch._dynamo.reset()
    script = _script(tmp_path, body=COMPILED)
    out = tmp_path / "out"
    code, stdout, stderr = _run(["run", "-o", str(out), "--no-calibrate", "--top", "30", str(script)], capsys)
    assert code == 0, stderr
    assert "compiled ok 0.0" in stdout
    recs = read_record_file(out / "records.dict")
    region = [r for r in recs if r["kShortName"].startswith("Torch-Compiled Region")]
    assert region and all(r["op"] == r["kShortName"] and r["mod"] == "torch.compile" for r in region)
    assert {r["op"] for r in recs if r["dir"] == "fprop"} & {"addmm", "mm", "linear"}
    # no recompile: torch names each compiled region by its frame and recompile count ("0/0"), except
    # torch 2.4, which names none; the summary by op shows the name (every op of it: the run's own lists
    # the top 10 by time, an order a loaded machine can change)
    names = {r["kShortName"] for r in region}
    assert names in ({"Torch-Compiled Region: 0/0"}, {"Torch-Compiled Region"}), names
    code, summary, stderr = _run(["prof", "--summary", "op", "--top", "1000", "-w", "200", str(out)], capsys)
    assert code == 0 and min(names) in summary, stderr
