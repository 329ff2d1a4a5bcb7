"""Check that pyprof's conclusions hold on a real machine: the "done when" of the judgement work (#40).

Runs, each with ``pyprof run`` on the CPU, in WORKDIR:

* ``a``, ``b``: the same training script twice, unchanged;
* ``busy``: the same script while busy loops hold every usable CPU;
* ``x4``: the script with one layer (``mid``) doing 4x the work (its linear applied four times);

then ``pyprof diff --fail-above 10`` of ``a`` against each, and ``pyprof prof`` of ``a`` before and after a
``pyprof calibrate`` made under load. Prints one line per check with its outcome, and exits 1 if one
fails. The script is small on purpose (a few ms a step): that is where noise is largest.

    python scripts/judge_check.py [--workdir DIR] [--script examples/lenet.py] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = """
import os
import torch
from torch import nn
import pyprof

REPEAT = int(os.environ.get("JUDGE_REPEAT", "1"))


class Mid(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(512, 512)

    def forward(self, x):
        for _ in range(REPEAT):  # the work of this layer, times REPEAT, at the same shapes
            x = torch.relu(self.lin(x))
        return x


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), Mid(), nn.Linear(512, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for _ in range(10):
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    pyprof.step()
"""


def pyprof(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyprof", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


class Busy:
    """Busy loops on every usable CPU for the duration of a ``with``."""

    def __enter__(self):
        n = len(os.sched_getaffinity(0))
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def run(work: Path, name: str, script: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    out = work / name
    res = pyprof("run", "-o", str(out), "-w", "200", str(script), env=env)
    if res.returncode != 0:
        sys.exit(f"judge_check: pyprof run {name} failed:\n{res.stderr[-2000:]}")
    return res


def last(text: str, prefix: str) -> str:
    return next((line for line in reversed(text.splitlines()) if line.startswith(prefix)), "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--script", type=Path, default=None, help="the unchanged script (default: a 4-layer MLP)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="pyprof-judge-"))
    work.mkdir(parents=True, exist_ok=True)
    script = work / "train.py"
    script.write_text(TRAIN)
    unchanged = args.script or script
    print(f"judge_check: {unchanged} in {work}; load average {os.getloadavg()[0]:.2f} on "
          f"{len(os.sched_getaffinity(0))} CPUs at the start")
    results = []

    run(work, "a", unchanged)
    run(work, "b", unchanged)
    with Busy():
        busy = run(work, "busy", unchanged)
    run(work, "x4", script, {"JUDGE_REPEAT": "4"})
    if unchanged != script:
        run(work, "a_mlp", script)
    base_mlp = work / ("a_mlp" if unchanged != script else "a")

    d = pyprof("diff", str(work / "a"), str(work / "b"), "--fail-above", "10")
    results.append(("two runs of one unchanged script: diff does not exit 1", d.returncode != 1,
                    f"exit {d.returncode}; {last(d.stdout, 'verdict')}"))
    warned = "timings may not hold" in busy.stderr and "other processes used" in busy.stderr
    results.append(("the run under busy loops warned about the load", warned,
                    last(busy.stderr, "pyprof: warning: timings")[:160]))
    d = pyprof("diff", str(work / "a"), str(work / "busy"), "--fail-above", "10")
    results.append(("against the busy run: not exit 1, names the load", d.returncode != 1 and "under load" in d.stderr,
                    f"exit {d.returncode}; {last(d.stderr, 'pyprof: inconclusive')[:160]}"))
    d = pyprof("diff", str(base_mlp), str(work / "x4"), "--fail-above", "10", "--by", "layer")
    named = "layer mid" in d.stderr or "layer 2" in d.stderr
    results.append(("one layer doing 4x the work: exit 1 naming it", d.returncode == 1 and named,
                    f"exit {d.returncode}; {last(d.stderr, 'pyprof: regression')[:160]}"))

    if d.returncode == 3:  # (a side under load: what the steps show all the same, for the record)
        d = pyprof("diff", str(base_mlp), str(work / "x4"), "--fail-above", "10", "--by", "layer", "--ignore-load")
        print(f"     (with --ignore-load: exit {d.returncode}; {last(d.stderr, 'pyprof: regression')[:150]})")
    before = pyprof("prof", "--summary", "op", "-w", "200", str(work / "a"))
    with Busy():
        cal = pyprof("calibrate", "--device", "cpu", "--budget", "0.3", "--repeat", "1")
    after = pyprof("prof", "--summary", "op", "-w", "200", str(work / "a"))
    results.append(("prof of a finished run prints the same after a calibrate under load",
                    before.stdout == after.stdout and before.returncode == after.returncode == 0,
                    last(cal.stdout, "saved to")[:160]))

    steps = pyprof("prof", "--summary", "step", "--csv", str(work / "a"))
    rows = [r.split(",")[0] for r in steps.stdout.splitlines()[1:]]
    results.append(("prof --summary step lists every profiled step", rows[:-1] == [str(n) for n in range(2, 7)],
                    f"steps {' '.join(rows)}"))

    failed = 0
    for what, ok, detail in results:
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
    print(f"judge_check: {len(results) - failed} of {len(results)} held; load average {os.getloadavg()[0]:.2f} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
