"""Benchmark ``pyprof prof`` on a 1M-kernel record file; prints kernels/s per stage and peak memory.

The records are real: a PyTorch corpus export (default: the nvprof PyProf-marker file of
``josiahdavis/profiling-lm``, 189 records with ops and arguments) is parsed with ``pyprof parse`` and its
records are tiled to N (default 1,000,000), each copy with fresh ``opId``s, later timestamps and a
perturbed duration, so op shapes repeat as they do in a real training loop. Without the corpus a
synthetic generator stands in (and says so).

    python scripts/bench_prof.py [--n 1000000] [--source NAME] [--keep FILE]

Stages timed: read+build (JSON lines streamed into columns; costs, tensor cores, roofline), render (CSV of the
default columns to /dev/null) and a summary by op; the target is >= 100k kernels/s end to end.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))


def seed_records(source: str) -> tuple[list[dict], str]:
    matches = sorted(CORPUS.glob(f"*/*{source}*.sqlite")) if CORPUS.is_dir() else []
    if matches:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "seed.dict"
            subprocess.run([sys.executable, "-m", "pyprof.cli.main", "parse", str(matches[0]), "-o", str(out)],
                           check=True, capture_output=True)
            return [orjson.loads(line) for line in out.open("rb")], f"parsed {matches[0].name}"
    return synthetic(), "synthetic (corpus absent)"


def synthetic() -> list[dict]:
    recs = []
    shapes = [(64, 512, 1024), (64, 1024, 1024), (64, 1024, 4096)]
    for i in range(300):
        m, k, n = shapes[i % 3]
        op, kern = [("linear", "ampere_sgemm_128x64_tn"), ("relu", "vectorized_elementwise_kernel"),
                    ("add", "elementwise_kernel")][i % 3]
        args = [{"name": "input", "type": "tensor", "shape": [m, k], "dtype": "float32"}]
        if op == "linear":
            args.append({"name": "weight", "type": "tensor", "shape": [n, k], "dtype": "float32"})
        recs.append({"kind": "kernel", "source": "nsys", "kShortName": kern, "kLongName": kern, "kDuration": 5000 + i,
                     "start": i * 10000, "end": i * 10000 + 5000, "tid": 1, "device": 0, "gpu": "NVIDIA A100-SXM4-40GB",
                     "stream": 7, "grid": [64, 1, 1], "block": [256, 1, 1], "ranges": [], "layer": ["model", "model.fc"],
                     "trace": ["train.py:10:forward"], "mod": "torch.nn.functional", "op": op, "args": args,
                     "opId": i, "seqId": [i], "altSeqId": [], "dir": "fprop", "subSeqId": 0})
    return recs


def tile(seed: list[dict], n: int, fh) -> None:
    """Write ``n`` records: copies of ``seed`` with fresh opIds, shifted times, perturbed durations."""
    span = max((r.get("end") or 0) for r in seed) - min((r.get("start") or 0) for r in seed) + 1
    max_op = max((r.get("opId") or 0) for r in seed) + 1
    buf: list[bytes] = []
    written = rep = 0
    while written < n:
        for r in seed:
            if written >= n:
                break
            c = dict(r)
            if c.get("opId") is not None:
                c["opId"] += rep * max_op
            if c.get("start") is not None:
                c["start"] += rep * span
                c["end"] = (c.get("end") or c["start"]) + rep * span
            c["kDuration"] = int(c["kDuration"] * (1 + ((rep * 7919) % 13) / 100))
            buf.append(orjson.dumps(c))
            written += 1
            if len(buf) >= 100_000:
                fh.write(b"\n".join(buf) + b"\n")
                buf = []
        rep += 1
    if buf:
        fh.write(b"\n".join(buf) + b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--source", default="josiahdavis__profiling-lm")
    ap.add_argument("--keep", help="write the tiled record file here (default: a temp file, removed)")
    ap.add_argument("--make", help=argparse.SUPPRESS)  # internal: only write the tiled file
    args = ap.parse_args()

    if args.make:  # run in a child, so that the measuring process stays small (max RSS is inherited)
        seed, how = seed_records(args.source)
        with open(args.make, "wb") as fh:
            tile(seed, args.n, fh)
        print(f"records: {args.n:,} tiled from {len(seed)} ({how}); "
              f"file {os.path.getsize(args.make) / 1e6:.0f} MB", flush=True)
        return

    workdir = None if args.keep else Path(tempfile.mkdtemp(prefix="pyprof-bench-"))
    path = Path(args.keep) if args.keep else workdir / "tiled.dict"
    subprocess.run([sys.executable, __file__, "--make", str(path), "--n", str(args.n), "--source", args.source],
                   check=True)
    n = args.n
    # 1. end to end: the real command in a fresh process (interpreter and imports included)
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "pyprof.cli.main", "prof", "--csv", "-q", str(path)],
                             stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own resource usage
    child.returncode = os.waitstatus_to_exitcode(status)
    t1 = time.perf_counter()
    if child.returncode:
        sys.exit(f"pyprof prof failed with exit code {child.returncode}")
    peak = usage.ru_maxrss / 1024
    print(f"{'pyprof prof --csv':>24}: {t1 - t0:6.2f} s  {n / (t1 - t0):>10,.0f} kernels/s   "
          "(whole command: start-up, read, build, CSV)")
    cpu = usage.ru_utime + usage.ru_stime
    print(f"{'CPU time of it':>24}: {cpu:6.2f} s  {n / cpu:>10,.0f} kernels per CPU-second "
          "(what a machine to itself would give)")
    print(f"{'peak memory':>24}: {peak:,.0f} MB max RSS of that command")
    # 2. in this process, stage by stage: where the time goes
    from pyprof.prof import columns, render
    from pyprof.prof.load import iter_records
    from pyprof.prof.summary import summarize
    from pyprof.prof.table import build, build_file

    def timed(fn):
        t = time.perf_counter()
        result = fn()
        return result, time.perf_counter() - t

    def drain():
        for _ in iter_records(path):  # decode and check every line, keep nothing
            pass

    workers = min(os.cpu_count() or 1, 8)  # what `pyprof prof -j N` does
    _, t_read = timed(drain)
    df, t_build1 = timed(lambda: build(iter_records(path)))
    del df
    df, t_file1 = timed(lambda: build_file(path, workers=1))  # what `pyprof prof FILE` does
    del df
    df, t_buildn = timed(lambda: build_file(path, workers=workers))
    print(f"{'distinct op calls costed':>24}: {df.attrs.get('n_costed')}; flops known for "
          f"{df['flops'].notna().mean() * 100:.1f}% of rows, gap for {df['gap'].notna().mean() * 100:.1f}%")
    _, t_csv = timed(lambda: render.write(df, columns.DEFAULT, io.StringIO(), "csv"))
    _, t_sum = timed(lambda: summarize(df, "op"))
    for label, dt in (("read (JSON decode only)", t_read), ("read + build, 1 process (records API)", t_build1),
                      ("build without the read", t_build1 - t_read),
                      ("build_file, 1 process", t_file1),
                      (f"read + build, {workers} processes", t_buildn),
                      ("render CSV", t_csv), ("summary by op", t_sum)):
        print(f"{label:>38}: {dt:6.2f} s  {n / dt:>10,.0f} kernels/s")
    load = os.getloadavg()[0]
    print(f"{'load average (1 min)':>24}: {load:.1f} on {os.cpu_count()} CPUs (other work slows every figure)")
    if workdir is not None:
        path.unlink()
        workdir.rmdir()


if __name__ == "__main__":
    main()
