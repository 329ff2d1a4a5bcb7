"""``pyprof run``'s last line: how long the script, its profiled steps, the trace export, the parse and
prof took (wall seconds; no thresholds: only that the line is there and its figures are positive)."""

from __future__ import annotations

import re
import textwrap

import pytest

pytest.importorskip("torch")

from pyprof.cli.main import main  # noqa: E402
from pyprof.runner import RunOptions, _profiled_seconds  # noqa: E402

SCRIPT = """
import torch
from torch import nn

net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(8, 16)
for _ in range(5):
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    opt.step()
"""

LINE = re.compile(r"^pyprof run: script (\S+) s, profiled steps (\S+) s, trace export (\S+) s, "
                  r"parse (\S+) s, prof (\S+) s$")


@pytest.mark.parametrize("extra", [[], ["--steps-from", "all"]])
def test_run_ends_with_a_timing_line_of_positive_figures(tmp_path, capsys, extra):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    with pytest.raises(SystemExit) as info:
        main(["run", "-o", str(tmp_path / "out"), "--no-calibrate", *extra, str(script)])
        raise SystemExit(0)
    out = capsys.readouterr()
    assert info.value.code == 0, out.err
    last = out.out.rstrip("\n").splitlines()[-1]
    m = LINE.match(last)
    assert m, last
    script_s, profiled, export, parse, prof = map(float, m.groups())
    assert min(script_s, profiled, export, parse, prof) > 0
    assert profiled <= script_s


def test_profiled_seconds_span_the_recorded_steps():
    stamps = [10.0, 11.0, 12.5, 14.0, 16.0, 20.0]  # before each profiler step
    # wait 1 + warmup 1: recording starts at the 2nd step and ends at the 5th (after 3 active steps)
    assert _profiled_seconds(RunOptions(wait=1, warmup=1, active=3), stamps, 9.0, 21.0) == 16.0 - 11.0
    # nothing skipped: from the script's start
    assert _profiled_seconds(RunOptions(wait=0, warmup=0, active=2), stamps, 9.0, 21.0) == 11.0 - 9.0
    # the script ended during the active steps: to its end
    assert _profiled_seconds(RunOptions(wait=1, warmup=1, active=9), stamps, 9.0, 21.0) == 21.0 - 11.0
    # the whole script profiled
    assert _profiled_seconds(RunOptions(step_on="all"), [], 9.0, 21.0) == 12.0
