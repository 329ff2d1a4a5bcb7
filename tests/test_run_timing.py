"""``pyprof run``'s last line: how long the script, its profiled steps, the trace export, the parse and
prof took (wall seconds; no thresholds: only that the line is there and its figures are positive)."""

from __future__ import annotations

import re
import textwrap

import pytest

pytest.importorskip("torch")

from pyprof.cli.main import main  # noqa: E402
from pyprof.runner import RunOptions, run_script  # noqa: E402

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


SLEEPY = """
import time, torch
from torch import nn
net = nn.Linear(4, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(7):
    time.sleep(0.1)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("opts, recorded, outside", [
    ({}, 3, 4),                          # --wait 1 --warmup 1 --active 3: iterations 2-4 of 0-6
    ({"wait": 0, "warmup": 0, "active": 2}, 2, 5),  # from the script's start
    ({"active": 9}, 5, 2),               # the script ends during the active steps: to its end
])
def test_profiled_seconds_span_the_recorded_steps(tmp_path, opts, recorded, outside):
    """Each iteration sleeps 0.1 s: the profiled span holds the recorded ones' sleeps, not the others'."""
    script = tmp_path / "sleepy.py"
    script.write_text(textwrap.dedent(SLEEPY))
    result = run_script(script, [], tmp_path / "out", RunOptions(**{"active": 3, **opts}))
    profiled = result.times["profiled"]
    assert profiled == result.conditions["profiled_s"]
    assert 0.1 * recorded <= profiled <= result.times["script"] - 0.1 * outside + 0.05
