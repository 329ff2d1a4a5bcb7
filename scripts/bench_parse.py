#!/usr/bin/env python3
"""Time ``pyprof parse`` on Nsight Systems exports shaped like users': tiles of a real export whose NVTX
messages stay inline (one ``text`` per range, as pyprof's own ranges are stored), and the corpus.

Each tiled export (``scripts/scale_export.py``; ``--intern-text`` for the registered-string case) is
read once before it is timed (:func:`warm`: a fresh export, as nsys has just written it, is in the page
cache too), then parsed ``--repeat`` times (default 3) in a child process, exactly as a user runs it::

    python -m pyprof parse TILE -o OUT -q

For each export it prints the command, the median run by wall time (with the fastest and slowest), the
CPU time (user + system, the parse's processes together: the figure to trust when the 2 cores are
shared with other work), kernels/s by each, and peak memory two ways: the largest process
(``ru_maxrss`` from ``os.wait4``: the parse forks an NVTX reader) and all its processes together
(their resident sets summed, sampled every 0.1 s). ``--baseline DIR`` times another checkout (run with
``PYTHONPATH=DIR``) alternately with this one in the same sitting, and checks that both write the same
bytes.

    python scripts/bench_parse.py                               # corpus + mmagic tiles of 0.1M, 1M kernels
    python scripts/bench_parse.py --no-corpus --sizes 1000000 --baseline /tmp/pre19
    python scripts/bench_parse.py --no-corpus --sizes 100000 1000000 5000000 --workdir /tmp/tiles
    python scripts/bench_parse.py --no-corpus --intern-text --sizes 1000000
    python scripts/bench_parse.py --no-corpus --every-table --sizes 328000    # every table at its real ratio
    python scripts/bench_parse.py --no-corpus --every-table --sizes 328000  # (fast paths' twins: bench_twins.py)

NVIDIA PyProf (PyPI ``nvidia-pyprof``) is not installed here -- its package is also named ``pyprof`` and
would shadow this one -- so its quoted figure is used: 5.3 s for the 328 kernels and 1,956 ranges of
mmagic net.sqlite.
"""

from __future__ import annotations

import argparse
import filecmp
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCES = {  # exports to tile, NVTX messages inline: name -> (corpus path, kernels, NVTX range rows in the file)
    "mmagic": ("nsys/yyhtbs-yye__mmagic_vsr_v2__net.sqlite", 328, 1956),
    "dlprof": ("nsys/MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite", 59, 166),
}
PYPROF_MMAGIC_S = 5.3  # NVIDIA PyProf's parser on mmagic net.sqlite (quoted)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    kids: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        x = todo.pop()
        out.append(x)
        todo += kids.get(x, [])
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_parse(path: Path, out: Path, pythonpath: str | None = None) -> dict:
    """One ``pyprof parse`` in a child process: wall, CPU (user + sys of it and its children), peak RSS
    of the largest process and of all of them together."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "pyprof", "parse", str(path), "-o", str(out), "-q"]
    peak = [0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/" if pythonpath else REPO,
                            env=env)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            if os.path.exists("/proc"):
                peak[0] = max(peak[0], sum(_rss_kb(p) for p in _tree(proc.pid)))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime, "sys": ru.ru_stime,
            "rss_mb": ru.ru_maxrss / 1024, "sum_mb": peak[0] / 1024, "code": os.waitstatus_to_exitcode(status),
            "err": err, "out_mb": out.stat().st_size / 1e6 if out.exists() else 0.0, "cmd": shlex.join(cmd)}


def warm(path: Path) -> None:
    """Read the export once, so the timed parses measure parsing, not this machine's disk (a fresh
    export, as nsys has just written it, is in the page cache too)."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def count_rows(path: Path, table: str, where: str = "") -> int:
    import sqlite3

    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute(f"SELECT COUNT(*) FROM {table} {where}").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        c.close()


def _median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]


def bench_tile(path: Path, work: Path, repeat: int, baseline: str | None) -> dict[str, dict]:
    """Parse ``path`` ``repeat`` times with this checkout (and the baseline, alternately); returns the
    median run of each, with every run's figures."""
    kernels = count_rows(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    warm(path)
    which = [("new", None)] + ([("baseline", baseline)] if baseline else [])
    runs: dict[str, list[dict]] = {name: [] for name, _ in which}
    outs = {name: work / f"{path.stem}.{name}.dict" for name, _ in which}
    for i in range(repeat):
        for name, pp in (which if i % 2 == 0 else which[::-1]):
            outs[name].unlink(missing_ok=True)  # (a fresh file each run, as a user's first parse writes)
            r = run_parse(path, outs[name], pp)
            if r["code"] != 0:
                raise SystemExit(f"{name}: parse of {path} failed: {r['err'].strip()}")
            runs[name].append(r)
    if baseline:
        same = outs["new"].exists() and outs["baseline"].exists() and filecmp.cmp(outs["new"], outs["baseline"],
                                                                                  shallow=False)
        print(f"  outputs of new and baseline {'are byte-identical' if same else 'DIFFER'}")
    for o in outs.values():
        o.unlink(missing_ok=True)
    res = {}
    for name, rs in runs.items():
        m = _median(rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        res[name] = {**m, "kernels": kernels, "cpu_med": cpu, "runs": rs}
    return res


#: ``pyprof parse`` as the CLI runs it, with the Arrow reader switched off as if the ``fast`` extra were absent
#: (argv[1] "sqlite3") or not, printing the CPU seconds of the reading the two readers share: this process's
#: kernels, copies and API calls (``NsysSource._activities``) and its share of NVTX_EVENTS (``_Nvtx.read``), and
#: every child's (the forked NVTX reader's share)
def _line(name: str, r: dict) -> str:
    k = r["kernels"]
    walls = sorted(x["wall"] for x in r["runs"])
    return (f"  {name:8s} wall {r['wall']:6.2f} s (median of {len(walls)}; {walls[0]:.2f}..{walls[-1]:.2f})  "
            f"{k / r['wall']:9,.0f} kernels/s   CPU {r['cpu_med']:6.2f} s (user {r['user']:.2f} + sys {r['sys']:.2f})  "
            f"{k / r['cpu_med']:9,.0f} kernels/CPU-s   peak RSS {r['rss_mb']:5.0f} MB largest process, "
            f"{r['sum_mb']:5.0f} MB all together")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000],
                    help="kernels in each tiled export, at least (default: 0.1M and 1M)")
    ap.add_argument("--ranges-per-kernel", type=float, default=6.0,
                    help="NVTX ranges per kernel, at least: the tile is made big enough for both (default 6: a 1M "
                         "tile of mmagic holds 1,006,304 kernels and 6,001,008 ranges)")
    ap.add_argument("--sources", nargs="*", default=["mmagic"], choices=list(SOURCES))
    ap.add_argument("--intern-text", action="store_true",
                    help="tile with the messages moved into StringIds (registered strings) instead of inline")
    ap.add_argument("--every-table", action="store_true",
                    help="tile every event table of the source (scale_export.py --every-table: runtime API, "
                         "memcpy, sync, OS runtime, ... each at its real ratio to the kernels), as many tiles as "
                         "the kernels asked for need (--ranges-per-kernel is not applied)")
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--workdir", default=None, help="where tiled exports and outputs go (default: a temp dir); "
                                                    "tiles already there are reused")
    ap.add_argument("--repeat", type=int, default=3, help="parses of each tiled export (the median is shown)")
    ap.add_argument("--baseline", type=lambda p: str(Path(p).resolve()), default=None, metavar="DIR",
                    help="another checkout of pyprof (e.g. git worktree add /tmp/old HEAD~5), timed alternately "
                         "with this one on each tiled export")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="pyprof-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"# machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")

    if not a.no_corpus:
        print("\n# corpus files, one parse each (kernels, wall s, CPU s, peak MB of the largest process)")
        print(f"{'file':70s} {'kernels':>8s} {'wall_s':>7s} {'cpu_s':>6s} {'peak_MB':>8s}")
        for path in sorted(CORPUS.glob("*/*.sqlite")):
            out = work / "corpus.dict"
            r = run_parse(path, out)
            k = str(count_rows(path, "CUPTI_ACTIVITY_KIND_KERNEL") or count_rows(path, "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"))
            k = "-" if r["code"] else k
            print(f"{path.name[:70]:70s} {k:>8s} {r['wall']:7.2f} {r['cpu']:6.2f} {r['rss_mb']:8.0f}"
                  + ("  (no kernels: exit 2)" if r["code"] == 2 else "" if r["code"] == 0 else f"  exit {r['code']}"))
            out.unlink(missing_ok=True)

    kind = "registered strings (--intern-text)" if a.intern_text else "inline text, one message per range"
    kind += "; every event table at its real ratio (--every-table)" if a.every_table else ""
    print(f"\n# tiled exports (scripts/scale_export.py), NVTX messages: {kind}")
    per_kernel: dict[str, dict[int, float]] = {}
    for name in a.sources:
        rel, base_k, base_r = SOURCES[name]
        src = CORPUS / rel
        if not src.exists():
            print(f"{name}: corpus file missing, skipped")
            continue
        for size in a.sizes:
            factor = max(1, -(-size // base_k))
            if not a.every_table:
                factor = max(factor, math.ceil(size * a.ranges_per_kernel / base_r))
            tiled = work / (f"{name}-{factor}{'-interned' if a.intern_text else ''}"
                            f"{'-every' if a.every_table else ''}.sqlite")
            if not tiled.exists():
                subprocess.run([sys.executable, str(REPO / "scripts" / "scale_export.py"), str(src), str(tiled),
                                "--factor", str(factor), *(["--intern-text"] if a.intern_text else []),
                                *(["--every-table"] if a.every_table else [])],
                               check=True, stderr=subprocess.DEVNULL)
            ranges = count_rows(tiled, "NVTX_EVENTS", "WHERE eventType IN (59, 60)")
            print(f"\n{name} x{factor}: {tiled} ({tiled.stat().st_size / 1e9:.2f} GB, {ranges:,} NVTX ranges)")
            res = bench_tile(tiled, work, max(1, a.repeat), a.baseline)
            print(f"  command: {res['new']['cmd']}")
            k = res["new"]["kernels"]
            print(f"  {k:,} kernels, output {res['new']['out_mb']:,.0f} MB")
            for which, r in res.items():
                print(_line(which, r))
            if a.baseline:
                n, b = res["new"], res["baseline"]
                print(f"  new / baseline: {b['wall'] / n['wall']:.1f}x by wall time, {b['cpu_med'] / n['cpu_med']:.1f}x "
                      f"by CPU time, {b['rss_mb'] / n['rss_mb']:.1f}x less peak memory (largest process)")
            per_kernel.setdefault(name, {})[k] = res["new"]["wall"] / k
            if name == "mmagic":
                pyprof_s = PYPROF_MMAGIC_S * k / 328
                print(f"  NVIDIA PyProf at its quoted 62 kernels/s (5.3 s / 328 kernels), linear: ~{pyprof_s:,.0f} s "
                      f"-> {pyprof_s / res['new']['wall']:,.0f}x faster by wall clock")
    for name, d in per_kernel.items():
        ks = sorted(d)
        if len(ks) >= 2:
            print(f"\n# {name}: wall time per kernel, " + ", ".join(f"{k:,}: {d[k] * 1e6:.2f} us" for k in ks)
                  + f" ({d[ks[-1]] / d[ks[0]]:.2f}x from the smallest to the largest; 1.0 = linear)")
    print(f"# load average at end {os.getloadavg()[0]:.1f}; work files in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
