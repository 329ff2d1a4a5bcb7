"""Benchmark: instructions pyprof.init() adds per op, counted by Valgrind (callgrind).

Time on a shared machine moves by more than the per-op cost being measured; the number of
instructions executed hardly does (a few percent, with Python's hash seed). Each workload of
bench_init.py runs in a child process under ``valgrind --tool=callgrind --instr-atstart=no``, and
only the timed loop is counted (``callgrind_control -i on`` once imports and caches are warm, off
after the loop). Instructions are not time: they leave out cache misses (bench_init.py measures time).

States as in bench_init.py: A no init(); B init(), no consumer; C init(lazy=False), payloads built;
E as under an NVTX tool. Needs ``valgrind`` and ``callgrind_control`` on PATH (a one-line error
otherwise). ``--states C --workloads stream`` is a one-minute check.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import sys
sys.path.insert(0, {here!r})
import torch
import bench_init as bi
from pyprof.annotate.recorder import Recorder

workload, state, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
fn = {{"stream": bi.op_stream, "mlp": bi.tiny_mlp}}[workload]()
with torch.no_grad():
    n_ops, n_mods = bi.count_ranges(lambda: fn(1))
    setup, run, teardown = bi._state(state, fn)
    setup()
    fn(3)  # warm every cache
    print("READY", n_ops, n_mods, flush=True)
    sys.stdin.readline()
    fn(n)
    print("DONE", flush=True)
    sys.stdin.readline()
    teardown()
"""

WORKLOADS = {  # name: (label, loop iterations counted)
    "stream": ("op stream (add, mul, relu), 2000 iterations", 2000),
    "mlp": ("tiny MLP, no_grad, 500 iterations", 500),
}


def count(workload: str, state: str, n: int) -> tuple[int, int, int]:
    """(instructions in the loop, op ranges per iteration, module ranges per iteration)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={Path(tmp) / 'cg.out'}", sys.executable, "-c",
               CHILD.format(here=str(HERE)), workload, state, str(n)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = p.stdout.readline().split()
        if not ready or ready[0] != "READY":
            p.kill()
            raise SystemExit(f"bench_init_instructions: the child failed: {p.stderr.read()[-2000:]}")
        subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True)
        p.stdin.write("go\n")
        p.stdin.flush()
        p.stdout.readline()  # DONE
        subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], check=True, capture_output=True)
        p.stdin.write("end\n")
        p.stdin.flush()
        _, err = p.communicate(timeout=600)
    m = re.search(r"Collected : (\d+)", err)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"bench_init_instructions: valgrind failed: {err[-2000:]}")
    return int(m.group(1)), int(ready[1]), int(ready[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", default="ABCE", help="states to count (A is the baseline; default ABCE)")
    ap.add_argument("--workloads", default="stream,mlp", help="of: stream, mlp")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_init_instructions: {tool} not found; install Valgrind (apt install valgrind)")
    states = "A" + args.states.replace("A", "")
    labels = {"A": "no init", "B": "init, no consumer", "C": "init, payloads built", "E": "init, NVTX tool path"}
    from pyprof.annotate import fastpath
    print(f"C accelerator {'on' if fastpath.extension() is not None else 'off'}; instructions counted by callgrind")
    for w in args.workloads.split(","):
        label, n = WORKLOADS[w]
        base = None
        for s in states:
            total, n_ops, n_mods = count(w, s, n)
            if base is None:
                base = total
                print(f"{label} ({n_ops} ops and {n_mods} module ranges per iteration)")
            ops = n_ops * n
            print(f"  {s} {labels[s]:22s} {total / n:14,.0f} per iteration  {total / ops:10,.0f} per op"
                  f"  added {(total - base) / ops:9,.0f} per op ({total / base:5.3f}x)")


if __name__ == "__main__":
    main()
