#!/usr/bin/env python3
"""Each fast path against its slower twin, by the whole command a user runs (issue #43 item 3).

A fast path is switched off by a patch applied before the CLI starts (the twin then computes the same
output on the same input); each pair runs ``--runs`` times, alternating, each in a fresh process.
Printed per twin: wall and CPU (user + system of the command and every process it forked and reaped,
from ``os.wait4``), medians, their ratios, and whether both wrote the same bytes; and the command's own
CPU (its forked children left out), whose ratio bounds what a forked path can gain in wall time on an
idle machine. CPU is the figure to trust on a shared machine; the load average is printed before and
after. The table of docs/benchmarks.md ("Fast paths and their twins") was made with it.

    python scripts/bench_twins.py --nsys TILE.sqlite --kineto TILED.json --records FILE.dict --runs 3
    python scripts/bench_twins.py --records FILE.dict --only prof-fastread prof-parallel

Inputs: ``--nsys`` a tiled Nsight export (``scripts/scale_export.py``, as bench_parse.py makes them),
``--kineto`` a tiled torch.profiler trace (``bench_kineto.py --keep DIR``), ``--records`` a record file
(``bench_prof.py --keep FILE``). ``--code DIR`` runs another checkout's pyprof (default: this one): the
pairs whose fast path has since been removed (parse-column-ok, prof-column-ok, kineto-*, prof-decoder) run
against a checkout of 4d5896b. Run it from a copy of the code that is not being edited meanwhile.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_LINES = """
from pyprof.records import dumps
def _records_lines(self, lo=0, hi=None):
    buf = []
    for r in self.records():
        buf.append(dumps(r))
        if len(buf) == 2048:
            yield b"".join(buf)
            buf = []
    yield b"".join(buf)
"""
_NO_FORK = "from pyprof.parse.kineto import fork; fork.can_fork = lambda: False\n"

#: name -> (input, command arguments after the input, patch that switches the fast path off, the patch
#: the fast side runs too (the baseline a twin is compared against), what the fast path is)
TWINS = {
    "nsys-arrow": ("nsys", ["parse"], "from pyprof.parse import fetch\nfetch.arrow_available = lambda: False\n"
                   "fetch.read_ints_arrow = lambda *a, **k: None\n", "", "parse/fetch.py ADBC reader vs sqlite3"),
    "nsys-nvtx-fork": ("nsys", ["parse"], "from pyprof.parse import nsys\n_r = nsys.NsysSource._ranges\n"
                       "nsys.NsysSource._ranges = lambda self, s, c, p, col: _r(self, s, c, False, col)\n", "",
                       "parse/nsys.py forked NVTX reader vs NVTX read in the parent (API calls forked instead)"),
    "nsys-forks": ("nsys", ["parse"], "from pyprof.parse import fetch\nfetch.PARALLEL_MIN_ROWS = 1 << 62\n", "",
                   "parse/nsys.py + fetch.py every forked reader vs one process"),
    "nsys-lines": ("nsys", ["parse"], _LINES + "from pyprof.parse import assemble\n"
                   "assemble.Streamed.lines = _records_lines\n", "", "assemble.Streamed.lines vs records()+dumps"),
    "parse-column-ok": ("nsys", ["parse"], "from pyprof import records\n"
                        "records.Check.column_ok = lambda self, col: all(map(self.ok, col))\n", "",
                        "records.Check.column_ok vs Check.ok per value (parse)"),
    "kineto-fork": ("kineto", ["parse"], _NO_FORK, "", "kineto fork.py + split_scan + split_lines vs one process"),
    "kineto-split-scan": ("kineto", ["parse"], "from pyprof.parse.kineto import source\n"
                          "source.scan_in_two = lambda t, h: None\n", "", "kineto split_scan vs one-pass scan"),
    "kineto-split-lines": ("kineto", ["parse"], "from pyprof.parse.kineto import split_lines\n"
                           "split_lines.FORK_MIN = 1 << 62\n", "", "kineto split_lines vs lines in one process"),
    "kineto-lines": ("kineto", ["parse"], _NO_FORK + _LINES + "from pyprof.parse.kineto import lines\n"
                     "lines.KinetoPrepared.lines = _records_lines\n", _NO_FORK,
                     "kineto lines.py spliced lines vs records()+dumps (both without the fork)"),
    "prof-fastread": ("records", ["prof", "--csv"], "from pyprof.prof import load\nload.is_legacy = lambda p: True\n",
                      "", "prof/fastread.py vs load.iter_records + fastread.record_columns"),
    "prof-parallel": ("records", ["prof", "--csv"], "from pyprof.prof import table\n"
                      "table._parallel_columns = lambda p, w: None\n", "",
                      "table._parallel_columns vs fastread in one process"),
    "prof-column-ok": ("records", ["prof", "--csv"], "from pyprof import records\n"
                       "records.Check.column_ok = lambda self, col: all(map(self.ok, col))\n", "",
                       "records.Check.column_ok vs Check.ok per value (prof)"),
    "prof-decoder": ("records", ["prof", "--csv"], "from pyprof.prof import load\n"
                     "load.is_legacy = lambda p: True\n"
                     "def _w(self, line):\n    self.heavy_ok = True\n    return self._whole(line)\n"
                     "load._Decoder.__call__ = _w\n", "from pyprof.prof import load\nload.is_legacy = lambda p: True\n",
                     "load._Decoder vs orjson.loads per line (both on the line reader)"),
}

# the command's own CPU (without its forked children's) goes to $BENCH_SELF at exit: where a fast path forks,
# the parent's CPU bounds the wall time it can reach with free cores (its children run beside it)
RUN = ("import atexit, os, resource, sys\n_pid = os.getpid()\n"
       "def _self():\n    if os.getpid() == _pid:\n        r = resource.getrusage(resource.RUSAGE_SELF)\n"
       "        open(os.environ['BENCH_SELF'], 'w').write(str(r.ru_utime + r.ru_stime))\n"
       "atexit.register(_self)\n{patch}from pyprof.cli.main import main\nsys.argv = ['pyprof', *sys.argv[1:]]\n"
       "main()\n")


def once(code: Path, patch: str, args: list[str], out: Path) -> tuple[float, float, str, float]:
    """(wall s, CPU s, sha256 of the output, CPU s of the command's own process) of one run."""
    out.unlink(missing_ok=True)
    own = out.with_suffix(".self")
    env = {**os.environ, "PYTHONPATH": str(code), "BENCH_SELF": str(own)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", RUN.format(patch=patch), *args, "-o", str(out), "-q"],
                            env=env, cwd=str(code), stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {args}")
    h = hashlib.sha256(out.read_bytes()).hexdigest()
    return wall, ru.ru_utime + ru.ru_stime, h, float(own.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nsys", type=Path)
    ap.add_argument("--kineto", type=Path)
    ap.add_argument("--records", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=list(TWINS))
    ap.add_argument("--code", type=Path, default=REPO)
    a = ap.parse_args()
    inputs = {"nsys": a.nsys, "kineto": a.kineto, "records": a.records}
    print(f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kind, cmd, twin, base, what) in TWINS.items():
            if (a.only and name not in a.only) or inputs[kind] is None:
                continue
            args = [*cmd, str(inputs[kind].resolve())]
            runs: dict[str, list] = {"fast": [], "twin": []}
            for i in range(a.runs):
                for side in (("fast", "twin") if i % 2 == 0 else ("twin", "fast")):
                    runs[side].append(once(a.code.resolve(), twin if side == "twin" else base, args,
                                           Path(tmp) / f"{side}.out"))
            med = {s: [statistics.median(r[k] for r in v) for k in (0, 1, 3)] for s, v in runs.items()}
            same = len({r[2] for v in runs.values() for r in v}) == 1
            print(f"{name:18s} {what}\n  pyprof {' '.join(args)} -o OUT -q; load {os.getloadavg()[0]:.1f}\n"
                  f"  fast: wall {med['fast'][0]:6.2f} s  CPU {med['fast'][1]:6.2f} s   "
                  f"twin: wall {med['twin'][0]:6.2f} s  CPU {med['twin'][1]:6.2f} s   "
                  f"speed-up: wall {med['twin'][0] / med['fast'][0]:.2f}x  CPU {med['twin'][1] / med['fast'][1]:.2f}x  "
                  f"output {'byte-identical' if same else 'DIFFERS'}  (medians of {a.runs})\n"
                  f"  own process CPU (children left out): fast {med['fast'][2]:6.2f} s  twin {med['twin'][2]:6.2f} s; "
                  f"with free cores: wall speed-up ~{med['twin'][2] / med['fast'][2]:.2f}x "
                  f"(own CPU ratio, the parent the critical path), at most {med['twin'][1] / med['fast'][2]:.2f}x", flush=True)


if __name__ == "__main__":
    main()
