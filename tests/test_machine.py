"""pyprof.machine: the CPU time of this process and of the processes it started (a script's DataLoader
workers are not "other processes" in a run's load figure), from a crafted /proc and from a real child."""

from __future__ import annotations

import os
import subprocess
import sys

from pyprof import machine


def _fake_proc(tmp_path, table):
    """A /proc holding ``table``: pid -> (ppid, utime, stime), each stat line with a name holding ") ("."""
    for pid, (ppid, utime, stime) in table.items():
        (tmp_path / str(pid)).mkdir()
        rest = ["S", ppid, *([0] * 9), utime, stime, 0, 0]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (a) (b) " + " ".join(map(str, rest)) + "\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "stat").write_text("cpu 1 2 3\n")
    return str(tmp_path)


def test_descendants_ticks_walk_the_tree_from_this_process(tmp_path):
    me = os.getpid()
    proc = _fake_proc(tmp_path, {
        me: (1, 1000, 1000),          # this process: counted by os.times, not here
        900001: (me, 10, 5),          # a child
        900002: (900001, 100, 0),     # its child
        900003: (1, 7, 7),            # someone else's
        900004: (900003, 50, 50),     # and theirs
    })
    assert machine._descendants_ticks(proc) == 10 + 5 + 100
    assert machine._descendants_ticks(str(tmp_path / "missing")) == 0


def test_own_cpu_seconds_count_a_live_child():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time, sys\nt = time.process_time()\n"
         "while time.process_time() - t < 0.5: pass\nprint(flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        before = machine.own_cpu_seconds()
        child.stdout.readline()  # the child has burnt 0.5 s of its own CPU time, and lives on
        assert machine.own_cpu_seconds() - before >= 0.4
    finally:
        child.communicate("", timeout=30)
