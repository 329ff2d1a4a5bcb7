#!/usr/bin/env python3
"""Time ``pyprof parse`` on every corpus export and on tiled, marker-dense exports of ~0.1M, 0.3M, 1M kernels.

Each tiled export is read once before it is timed (see :func:`warm`). Each parse runs in a child process (``python -m pyprof parse FILE -o OUT -q``); the figures are the
child's wall time, its CPU time (user + sys, children included) and its peak memory (``ru_maxrss``
from ``os.wait4``). Prints kernels/s by wall clock and by CPU time (the CPU figure is what the code
costs when the 2 cores are shared with other work), the output size, and the growth of time per
kernel from 0.1M to 1M kernels (1.0 = linear).

Baseline: NVIDIA PyProf (PyPI ``nvidia-pyprof``) is not installed here -- its package is also named
``pyprof`` and would shadow this one -- so the quoted figure is used: 5.3 s for the 328 kernels and
1,956 ranges of mmagic net.sqlite, growing with kernels x ranges.

    python scripts/bench_parse.py                  # corpus + 0.1M/0.3M/1M tiles of mmagic and DLProf
    python scripts/bench_parse.py --sizes 100000   # only the 0.1M tiles
    python scripts/bench_parse.py --no-corpus --sources dlprof
    python scripts/bench_parse.py --no-corpus --sizes 1000000 --sources mmagic --repeat 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCES = {  # marker-dense files to tile: name -> (corpus path, kernels in the file)
    "mmagic": ("nsys/yyhtbs-yye__mmagic_vsr_v2__net.sqlite", 328),
    "dlprof": ("nsys/MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite", 59),
}
PYPROF_MMAGIC_S = 5.3  # NVIDIA PyProf's parser on mmagic net.sqlite (quoted)


def run_parse(path: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pyprof", "parse", str(path), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    # CPU of the child and of its own children (reader/writer workers)
    cpu = ru.ru_utime + ru.ru_stime
    code = os.waitstatus_to_exitcode(status)
    summary = [ln for ln in err.splitlines() if ln.startswith("pyprof parse:")]
    kernels = None
    if summary:
        try:
            kernels = int(summary[-1].split(": ", 2)[2].split(" kernels")[0])
        except (IndexError, ValueError):
            kernels = None
    size = out.stat().st_size if out.exists() else 0
    return {"wall": wall, "cpu": cpu, "rss_mb": ru.ru_maxrss / 1024, "code": code, "kernels": kernels,
            "out_mb": size / 1e6, "err": err}


def warm(path: Path) -> None:
    """Read the export once, so the timed parses measure parsing, not this machine's disk (a fresh
    export, as nsys has just written it, is in the page cache too)."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def count_rows(path: Path, table: str) -> int:
    import sqlite3

    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--sources", nargs="*", default=list(SOURCES), choices=list(SOURCES))
    ap.add_argument("--no-corpus", action="store_true")
    ap.add_argument("--workdir", default=None, help="where tiled exports and outputs go (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="parse each tiled export this many times; the row is the median run by wall time, and "
                         "the fastest and slowest are printed beside it (the machine is shared: one run can be "
                         "15%% off)")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="pyprof-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"# machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")

    if not a.no_corpus:
        print("\n# corpus files (kernels, wall s, CPU s, peak MB)")
        print(f"{'file':70s} {'kernels':>8s} {'wall_s':>7s} {'cpu_s':>6s} {'peak_MB':>8s}")
        for path in sorted(CORPUS.glob("*/*.sqlite")):
            out = work / "corpus.dict"
            r = run_parse(path, out)
            k = "-" if r["code"] else str(r["kernels"])
            print(f"{path.name[:70]:70s} {k:>8s} {r['wall']:7.2f} {r['cpu']:6.2f} {r['rss_mb']:8.0f}"
                  + ("  (no kernels: exit 2)" if r["code"] == 2 else "" if r["code"] == 0 else f"  exit {r['code']}"))
            out.unlink(missing_ok=True)

    print("\n# tiled exports (scripts/scale_export.py)")
    print(f"{'export':22s} {'kernels':>9s} {'nvtx':>9s} {'wall_s':>7s} {'cpu_s':>7s} {'k/s wall':>9s} "
          f"{'k/s cpu':>9s} {'peak_MB':>8s} {'out_MB':>8s}")
    per_kernel: dict[str, dict[int, float]] = {}
    for name in a.sources:
        rel, base_k = SOURCES[name]
        src = CORPUS / rel
        if not src.exists():
            print(f"{name}: corpus file missing, skipped")
            continue
        if name == "mmagic":
            r = run_parse(src, work / "mm.dict")
            (work / "mm.dict").unlink(missing_ok=True)
            print(f"# mmagic net.sqlite itself: {r['wall']:.2f} s wall (incl. ~0.5 s interpreter start), "
                  f"NVIDIA PyProf quoted at {PYPROF_MMAGIC_S} s: {PYPROF_MMAGIC_S / r['wall']:.0f}x faster")
        for size in a.sizes:
            factor = max(1, round(size / base_k))
            tiled = work / f"{name}-{factor}.sqlite"
            if not tiled.exists():
                subprocess.run([sys.executable, str(REPO / "scripts" / "scale_export.py"), str(src), str(tiled),
                                "--factor", str(factor)], check=True, stderr=subprocess.DEVNULL)
            nvtx = count_rows(tiled, "NVTX_EVENTS")
            warm(tiled)
            out = work / f"{name}-{factor}.dict"
            runs = []
            for _ in range(max(1, a.repeat)):
                runs.append(run_parse(tiled, out))
                out.unlink(missing_ok=True)
                if runs[-1]["code"] != 0:
                    break
            r = runs[-1]
            if r["code"] != 0:
                print(f"{name}: parse failed: {r['err'].strip()}")
                continue
            runs.sort(key=lambda x: x["wall"])
            r = runs[len(runs) // 2]
            k = r["kernels"]
            per_kernel.setdefault(name, {})[k] = r["wall"] / k
            print(f"{name + ' x' + str(factor):22s} {k:9d} {nvtx:9d} {r['wall']:7.2f} {r['cpu']:7.2f} "
                  f"{k / r['wall']:9.0f} {k / r['cpu']:9.0f} {r['rss_mb']:8.0f} {r['out_mb']:8.0f}")
            if len(runs) > 1:
                print(f"{'':22s} median of {len(runs)} runs; fastest {runs[0]['wall']:.2f} s "
                      f"({k / runs[0]['wall']:,.0f} k/s), slowest {runs[-1]['wall']:.2f} s "
                      f"({k / runs[-1]['wall']:,.0f} k/s)")
            if name == "mmagic":
                # conservative: PyProf's quoted per-kernel rate held constant (it really grows with
                # kernels x ranges, which would make the ratio far larger)
                pyprof_s = PYPROF_MMAGIC_S * k / 328
                print(f"{'':22s} NVIDIA PyProf at its quoted 62 kernels/s (5.3 s / 328 kernels), linear: "
                      f"~{pyprof_s:,.0f} s -> {pyprof_s / r['wall']:,.0f}x faster by wall clock")
    for name, d in per_kernel.items():
        ks = sorted(d)
        if len(ks) >= 2:
            print(f"# {name}: wall time per kernel at {ks[-1]:,} vs {ks[0]:,} kernels: "
                  f"{d[ks[-1]] / d[ks[0]]:.2f}x (1.0 = linear; n log n over this range ~{_nlogn(ks[0], ks[-1]):.2f}x)")
    print(f"# load average at end {os.getloadavg()[0]:.1f}; work files in {work}")
    return 0


def _nlogn(a: int, b: int) -> float:
    import math

    return math.log(b) / math.log(a)


if __name__ == "__main__":
    sys.exit(main())
