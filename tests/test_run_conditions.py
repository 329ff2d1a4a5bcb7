"""``RunResult.conditions``: what a run's profiled steps ran under (other processes' CPU share, load,
threads, torch, when, device, their wall time, the batch size). The batch size and the time span are
checked against the script's own figures; the other processes' share against CPU time that busy
loops started for the run took, as read by the profiled script itself over the same interval."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from pyprof.runner import RunOptions, run_script  # noqa: E402
from tests.conftest import REPO  # noqa: E402

#: batch size per iteration: under --wait 1 --warmup 1 --active 3 the recorded ones are 8, 8, 4
BATCHES = [32, 32, 8, 8, 4, 32, 32]

TRAIN = f"""
import torch
from torch import nn
net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for n in {BATCHES}:
    opt.zero_grad()
    net(torch.randn(n, 32)).sum().backward()
    opt.step()
"""

KEYS = {"busy_others", "loadavg", "cpus", "threads", "torch", "when", "device", "profiled_s", "batch"}


def _run(tmp_path, body: str, **opts):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return run_script(script, [], tmp_path / "out", RunOptions(**{"active": 3, **opts}))


def test_conditions_of_the_profiled_steps(tmp_path):
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    result = _run(tmp_path, TRAIN)
    c = result.conditions
    assert set(c) == KEYS
    assert c["batch"] == 8  # the most common over the recorded steps, not over the script (32)
    assert c["threads"] == torch.get_num_threads() and c["torch"] == torch.__version__ and c["device"] == "cpu"
    assert c["cpus"] == len(os.sched_getaffinity(0))
    assert c["loadavg"] is None or len(c["loadavg"]) == 3
    assert c["busy_others"] is None or 0.0 <= c["busy_others"] <= 1.0
    assert c["profiled_s"] == pytest.approx(result.times["profiled"], abs=1e-6) and c["profiled_s"] > 0
    when = dt.datetime.fromisoformat(c["when"])
    assert when.utcoffset() == dt.timedelta(0) and before <= when <= dt.datetime.now(dt.timezone.utc)


def test_no_batch_where_the_model_takes_no_tensor_argument(tmp_path):
    kwargs_only = TRAIN.replace("net(torch.randn(n, 32))", "net(input=torch.randn(n, 32))")
    assert _run(tmp_path, kwargs_only).conditions["batch"] is None
    scalar = TRAIN.replace("net(torch.randn(n, 32))", "(nn.Identity()(torch.tensor(1.0)) * net(torch.randn(n, 32)))")
    assert _run(tmp_path, scalar).conditions["batch"] is None  # the first module call's tensor has no dimension


def test_a_whole_script_profile_has_its_conditions(tmp_path):
    result = _run(tmp_path, "import torch, time\nx = torch.randn(64, 64) @ torch.randn(64, 64)\ntime.sleep(0.05)\n")
    assert result.whole and set(result.conditions) == KEYS
    assert result.conditions["profiled_s"] >= 0.05 and result.conditions["batch"] is None


#: the profiled script: sleeps while the busy loops run, and reports the share of the usable CPUs'
#: time the loops (pids in argv) took over its own run, from their /proc/PID/stat
SLEEPER = """
import os, sys, time
def ticks():
    total = 0
    for pid in sys.argv[2:]:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        total += int(f[11]) + int(f[12])
    return total
t0, k0 = time.perf_counter(), ticks()
time.sleep(1.5)
share = (ticks() - k0) / os.sysconf("SC_CLK_TCK") / (time.perf_counter() - t0) / len(os.sched_getaffinity(0))
with open(sys.argv[1], "w") as fh:
    fh.write(str(share))
"""

DRIVER = """
import json, sys
from pyprof.runner import RunOptions, run_script
r = run_script(sys.argv[1], sys.argv[3:], sys.argv[2], RunOptions(step_on="all"))
print(json.dumps(r.conditions))
"""


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")
def test_busy_loops_in_other_processes_show_in_busy_others(tmp_path):
    """Busy loops on every usable CPU, started beside (not by) the profiled process: busy_others holds
    at least the share of the CPUs' time the script saw them take (the rest of the machine's load
    only adds to it), whatever else this shared machine is running. (A comparison with a quiet run
    would fail here: with other work running, a "quiet" run read 0.7 to 0.8.)"""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        out = subprocess.run([sys.executable, "-c", DRIVER, str(script), str(tmp_path / "out"),
                              str(tmp_path / "share"), *(str(p.pid) for p in loops)],
                             capture_output=True, text=True, timeout=300, env=env)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    assert out.returncode == 0, out.stderr[-2000:]
    busy = json.loads(out.stdout.strip().splitlines()[-1])["busy_others"]
    share = float((tmp_path / "share").read_text())
    assert share > 0.05  # the loops ran (on this shared 2-core machine, under a load of 8, they got 0.2)
    assert busy >= 0.85 * share, (busy, share)
