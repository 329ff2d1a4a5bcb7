"""Run a script that opens its own profilers under ``pyprof run`` many times and tally how each run ended.

Two Kineto sessions in one process crashed it (issue #45: SIGSEGV in about 1 run of 10 with a plain
``torch.profiler.profile``; every run with the script below, which also steps its profiler and opens
the autograd profiler). ``pyprof run`` now runs the script's profilers inside its own session. Usage::

    python scripts/own_profiler_runs.py [RUNS]      # default 50; exit status 1 on any signal death

Each run is a fresh ``python -m pyprof run --no-calibrate`` process (seconds each on a CPU); the
tally line counts clean exits, signal deaths and other failures, with the last lines of the first
failure's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import torch
import pyprof
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

pyprof.init()
net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(32, 64)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=1, warmup=1, active=2)) as prof:
    for i in range(6):
        with record_function("train_step"):
            opt.zero_grad()
            net(x).sum().backward()
            opt.step()
        prof.step()
print(prof.key_averages().table(row_limit=3))
prof.export_chrome_trace("own_trace.json")
with torch.autograd.profiler.profile() as legacy:
    net(x)
print("own profiler script done:", len(legacy.key_averages()), "averages")
"""


def tally(runs: int, repo: Path) -> tuple[int, int, int, str]:
    """(clean, signal deaths, other failures, the first failure's output tail) over ``runs`` runs."""
    ok = signals = other = 0
    first = ""
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="pyprof-own-") as tmp:
        script = Path(tmp) / "own_profiler.py"
        script.write_text(SCRIPT)
        for _ in range(runs):
            proc = subprocess.run([sys.executable, "-m", "pyprof", "run", "--no-calibrate", "-o", str(Path(tmp) / "out"),
                                   str(script)], capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
            if proc.returncode == 0 and "own profiler script done: 0 averages" in proc.stdout:
                ok += 1
                continue
            if proc.returncode < 0:
                signals += 1
            else:
                other += 1
            first = first or f"exit status {proc.returncode}:\n" + (proc.stdout + proc.stderr)[-1500:]
    return ok, signals, other, first


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 50
    ok, signals, other, first = tally(runs, Path(__file__).resolve().parent.parent)
    print(f"own-profiler runs: {runs}, clean {ok}, signal deaths {signals}, other failures {other}")
    if first:
        print(first)
    return 1 if signals or other else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
