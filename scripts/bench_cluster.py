#!/usr/bin/env python3
"""Parse N tiled exports on a Dask LocalCluster (``pyprof parse --cluster``), then query the dataset.

Builds one tiled export of ``--kernels`` kernels (``scripts/scale_export.py`` over a corpus export,
mmagic by default: inline NVTX text, ~6 ranges a kernel) and gives it ``--files`` names
(``rank000.sqlite`` ...; hard links, so the disk holds it once: the figures measure parsing, not the
disk, as the file is read once before the clock starts). Then:

1. starts a LocalCluster of ``--workers`` single-threaded worker processes (its start-up timed apart),
   and parses every file on it (:func:`pyprof.scale.cluster.parse_cluster`, the code of ``pyprof
   parse --cluster``) in ``--format`` (parquet, jsonl or both): wall time, kernels/s, and the peak
   resident memory of each worker process (``ru_maxrss`` after its last task);
2. parses one file alone in this process's child, for the per-worker rate without Dask;
3. widens the Parquet output to ``--query-ranks`` ranks (its files repeated, rank 5 made 30% slower)
   and computes ``pyprof prof DIR``'s two tables on it with DuckDB (:mod:`pyprof.scale.query`) and
   with pandas (the needed columns read by pyarrow, then group-bys), each in a child process: time
   and peak memory, and checks that both agree.

Defaults follow issue #21 (16 tiled 1M-kernel exports, 2 workers); on a small machine shrink them:

    python scripts/bench_cluster.py                          # 16 x 1M kernels, 2 workers
    python scripts/bench_cluster.py --files 8 --kernels 250000
    python scripts/bench_cluster.py --files 4 --kernels 50000 --format both
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCES = {"mmagic": "nsys/yyhtbs-yye__mmagic_vsr_v2__net.sqlite",
           "dlprof": "nsys/MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite"}

PANDAS_TABLES = r"""
import sys, time
import pandas as pd
from pyprof.scale.parquet import parquet_files
t0 = time.perf_counter()
cols = ["rank", "host", "file", "kind", "kDuration", "start", "end", "op", "kShortName"]
df = pd.read_parquet(parquet_files(sys.argv[1]), columns=cols)
df["key"] = df["op"].fillna(df["kShortName"]).fillna("-")
g = df.groupby("rank")
ranks = pd.DataFrame({"host": g["host"].min(), "files": g["file"].nunique(),
                      "kernels": g["kind"].apply(lambda k: (k == "kernel").sum()),
                      "time": g["kDuration"].sum(), "span": g["end"].max() - g["start"].min(),
                      "attributed": 100.0 * g["op"].count() / g.size()})
ranks["vs_median"] = ranks["time"] / ranks["time"].median()
per = df.groupby(["key", "rank"])["kDuration"].sum().reset_index()
ranks["top_op"] = per.sort_values(["kDuration", "key"], ascending=[False, True]).groupby("rank")["key"].first()
s = per.groupby("key")["kDuration"]
slow = pd.DataFrame({"ranks": s.size(), "median": s.median(), "slowest": s.max(), "fastest": s.min()})
slow["excess"] = slow["slowest"] - slow["median"]
slow = slow.reset_index().sort_values(["excess", "slowest", "key"], ascending=[False, False, True]).set_index("key")
print(f"{time.perf_counter() - t0:.3f} {int(ranks['time'].sum())} {slow.index[0]}")
"""

DUCKDB_TABLES = r"""
import sys, time
from pyprof.scale.query import tables
t0 = time.perf_counter()
ranks, slow = tables(sys.argv[1], 10)
print(f"{time.perf_counter() - t0:.3f} {int(ranks['time'].sum())} {slow['key'].iloc[0]}")
"""


def count(path: Path, table: str) -> int:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        c.close()


def build(source: Path, kernels: int, files: int, work: Path) -> tuple[list[Path], int]:
    sys.path.insert(0, str(REPO / "scripts"))
    from scale_export import tile

    base = count(source, "CUPTI_ACTIVITY_KIND_KERNEL")
    factor = max(1, math.ceil(kernels / base))
    tiled = work / "tile.sqlite"
    t0 = time.perf_counter()
    tile(str(source), str(tiled), factor)
    n = count(tiled, "CUPTI_ACTIVITY_KIND_KERNEL")
    print(f"tiled {source.name} x{factor}: {n} kernels, {tiled.stat().st_size / 1e9:.2f} GB "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    paths = []
    for i in range(files):
        p = work / f"rank{i:03d}.sqlite"
        os.link(tiled, p)
        paths.append(p)
    with open(tiled, "rb") as fh:  # in the page cache, as a just-written export is
        while fh.read(1 << 24):
            pass
    return paths, n


def child(code: str, *args: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO)
    _, status, ru = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child failed:\n{err}")
    return {"wall": time.perf_counter() - t0, "rss_gb": ru.ru_maxrss / 1024 / 1024, "out": out.split(),
            "cpu": ru.ru_utime + ru.ru_stime}


def widen(dataset: Path, out: Path, ranks: int) -> int:
    """A dataset of ``ranks`` ranks from the files of ``dataset`` (taken in turn, their rank and file
    rewritten; rank 5's durations 30% longer, a straggler), for the query figures; its records."""
    import duckdb

    files = sorted(dataset.glob("*.parquet"))
    out.mkdir()
    con = duckdb.connect()
    for i in range(ranks):
        src = str(files[i % len(files)]).replace("'", "''")
        slow = 1.3 if i == 5 else 1.0
        con.execute(f"COPY (SELECT * REPLACE ({i}::BIGINT AS rank, 'rank{i:03d}.sqlite' AS file, "
                    f"(kDuration * {slow})::BIGINT AS kDuration) FROM read_parquet('{src}')) "
                    f"TO '{out}/rank{i:03d}.parquet' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 65536)")
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/*.parquet')").fetchall()[0][0]
    con.close()
    return n


def on_cluster(paths: list[Path], out: Path, fmt: str, workers: int) -> dict:
    import logging

    from distributed import LocalCluster

    from pyprof.scale.cluster import parse_cluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster:
        start = time.perf_counter() - t0
        peaks: dict[str, int] = {}

        def done(d):
            peaks[d.worker] = max(peaks.get(d.worker, 0), d.peak_rss)

        t0 = time.perf_counter()
        results = list(parse_cluster([str(p) for p in paths], str(out), cluster.scheduler_address, fmt,
                                     progress=False, on_done=done))
        wall = time.perf_counter() - t0
    failed = [r for r in results if r.error]
    if failed:
        raise SystemExit(f"{len(failed)} files failed: {failed[0].error}")
    kernels = sum(r.kernels for r in results)
    records = sum(r.kernels + r.copies for r in results)
    size = sum(f.stat().st_size for f in out.iterdir())
    return {"format": fmt, "start": start, "wall": wall, "kernels": kernels, "records": records,
            "rate": kernels / wall, "peaks_gb": sorted(v / 1e9 for v in peaks.values()), "out_gb": size / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=16, help="exports (ranks), default 16")
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels per export, default 1M")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster workers, default 2")
    ap.add_argument("--format", choices=["parquet", "jsonl", "both"], default="parquet")
    ap.add_argument("--source", choices=sorted(SOURCES), default="mmagic")
    ap.add_argument("--query-ranks", type=int, default=64,
                    help="ranks of the dataset the two query engines are timed on (the Parquet output's files "
                         "repeated), default 64")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    source = CORPUS / SOURCES[args.source]
    if not source.exists():
        raise SystemExit(f"{source} not found (set PYPROF_CORPUS)")
    work = Path(args.dir or tempfile.mkdtemp(prefix="pyprof-bench-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    figures: dict = {"files": args.files, "kernels_per_file": None, "workers": args.workers, "runs": []}
    try:
        paths, n = build(source, args.kernels, args.files, work)
        figures["kernels_per_file"] = n
        alone = child("import sys\nfrom pyprof.scale.parquet import parse_to_parquet\n"
                      "r = parse_to_parquet(sys.argv[1], sys.argv[2], 0, threads=1)\nprint(r.kernels)",
                      str(paths[0]), str(work / "alone.parquet"))
        figures["alone"] = {"wall": alone["wall"], "rate": int(alone["out"][0]) / alone["wall"],
                            "rss_gb": alone["rss_gb"], "cpu": alone["cpu"]}
        print(f"one file alone, parquet: {alone['wall']:.1f} s, {int(alone['out'][0]) / alone['wall']:,.0f} "
              f"kernels/s, peak {alone['rss_gb']:.2f} GB", flush=True)
        for fmt in (["parquet", "jsonl"] if args.format == "both" else [args.format]):
            out = work / f"out-{fmt}"
            run = on_cluster(paths, out, fmt, args.workers)
            figures["runs"].append(run)
            print(f"cluster {fmt}: {args.files} files x {n} kernels on {args.workers} workers: {run['wall']:.1f} s "
                  f"(+{run['start']:.1f} s start), {run['rate']:,.0f} kernels/s, worker peaks "
                  f"{', '.join(f'{g:.2f}' for g in run['peaks_gb'])} GB, output {run['out_gb']:.2f} GB", flush=True)
            if fmt == "parquet":
                wide = widen(out, work / "wide", args.query_ranks)
                figures["query_records"] = wide
                q = {name: child(code, str(work / "wide")) for name, code in (("duckdb", DUCKDB_TABLES),
                                                                              ("pandas", PANDAS_TABLES))}
                if q["duckdb"]["out"][1:] != q["pandas"]["out"][1:]:
                    raise SystemExit(f"DuckDB and pandas disagree: {q['duckdb']['out']} vs {q['pandas']['out']}")
                figures["query"] = {k: {"query_s": float(v["out"][0]), "wall": v["wall"], "rss_gb": v["rss_gb"]}
                                    for k, v in q.items()}
                print(f"prof tables of {args.query_ranks} ranks, {wide:,} records:")
                for k, v in q.items():
                    print(f"  by {k}: {float(v['out'][0]):.2f} s query, {v['wall']:.2f} s with start-up, "
                          f"peak {v['rss_gb']:.2f} GB", flush=True)
            shutil.rmtree(out)
            shutil.rmtree(work / "wide", ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
