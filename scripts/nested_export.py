#!/usr/bin/env python3
"""Write a synthetic Nsight Systems export of many nested NVTX ranges, and optionally time its parse:
``nested_export.py OUT --ranges N --depth D [--kernels K] [--parse]``.

The ranges form N / D stacks on the main thread, one after another: each stack is D push/pop ranges
each inside the one before (D open at once), with K kernels launched inside its innermost range. So
``--ranges 1000000 --depth 1000000`` is one nesting a million deep (the issue's hostile export), and
``--ranges 1000000 --depth 1000`` a million ranges that a real capture could hold (depth under
pyprof's limit). Rows are written as nsys writes them (a push/pop range when it is popped: in order of
their end); the export is written by :func:`tests.nsys_synth.write_nested`. ``--cross`` adds to each
stack a range that opens before it and ends halfway up it (issue #45's export: nested ranges crossing
a real one, which send the thread to the crossing sweep; :func:`tests.test_hostile_generated.write_crossing`).

``--parse`` then runs ``pyprof parse OUT -o OUT.dict`` in a child and prints its wall time, peak
resident memory (``ru_maxrss`` of the child), exit status and last line of stderr: how the parser
scales with the range count and the depth (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path: str, *extra: str) -> dict:
    """``pyprof parse path -o path.dict`` in a child: wall seconds, peak RSS (MiB), exit status, the last
    line of stderr."""
    env = dict(os.environ, PYTHONPATH=REPO)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pyprof", "parse", path, "-o", path + ".dict", *extra],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return {"wall_s": round(wall, 2), "peak_mib": round(peak), "exit": r.returncode, "stderr": last[:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--ranges", type=int, required=True, help="NVTX ranges in all")
    ap.add_argument("--depth", type=int, required=True, help="ranges open at once in each stack")
    ap.add_argument("--kernels", type=int, default=1, help="kernels inside each stack's innermost range")
    ap.add_argument("--cross", action="store_true", help="cross each stack with one more range (one kernel a stack)")
    ap.add_argument("--parse", action="store_true", help="then time `pyprof parse` on it (in a child)")
    a = ap.parse_args()
    sys.path.insert(0, REPO)
    from tests.nsys_synth import write_nested
    from tests.test_hostile_generated import write_crossing

    t = time.perf_counter()
    if a.cross:
        write_crossing(a.out, a.ranges, a.depth)
        counts = {"ranges": a.ranges + -(-a.ranges // a.depth), "depth": a.depth, "kernels": -(-a.ranges // a.depth)}
    else:
        counts = write_nested(a.out, a.ranges, a.depth, a.kernels)
    print(f"{a.out}: {counts} ({time.perf_counter() - t:.1f} s, {os.path.getsize(a.out) >> 20} MiB)")
    if a.parse:
        print(parse(a.out))


if __name__ == "__main__":
    main()
