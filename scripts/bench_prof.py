"""Benchmark ``pyprof prof`` on a 1M-kernel record file; prints kernels/s per stage and peak memory.

The records are real: a PyTorch corpus export (default: the nvprof PyProf-marker file of
``josiahdavis/profiling-lm``, 189 records with ops and arguments) is parsed with ``pyprof parse`` and its
records are tiled to N (default 1,000,000), each copy with fresh ``opId``s, later timestamps and a
perturbed duration, so op shapes repeat as they do in a real training loop. Without the corpus a
synthetic generator stands in (and says so). Other seeds: ``--kineto`` records the marker-dense
torch.profiler trace of ``scripts/bench_kineto.py`` (``pyprof run --with-stack`` of a small Transformer's
training steps, every op also a pyprof range) and tiles its CPU records; ``--seed FILE`` tiles the
records of any file (a record file, or a trace or export ``pyprof parse`` reads).

    python scripts/bench_prof.py [--n 1000000] [--source NAME | --kineto | --seed FILE] [--keep FILE] [--runs R]
                                 [-j N] [--no-stages] [--code DIR ...]
    python scripts/bench_prof.py --file FILE    time an existing record file

``--code DIR`` (repeatable) runs the command with another checkout's pyprof (``PYTHONPATH=DIR``); with
several, the runs alternate between them, so old and new code are timed in the same sitting.

First, and the figure that counts: the command users run, ``pyprof prof --csv -q -o OUT FILE``, in a fresh
process (start-up, read, build, CSV written to a file), with its wall time, CPU time (its decoding and
formatting processes included) and peak memory. The tiled file is flushed to disk before, so the kernel's
write-back of it does not run during the timing. Then, in this process, stage by stage: read+build (JSON
lines into columns; costs, tensor cores, roofline), render (CSV of the default columns) and a summary by
op. The target is >= 100k kernels/s end to end.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
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
        return records_of(matches[0]), f"parsed {matches[0].name}"
    return synthetic(), "synthetic (corpus absent)"


def records_of(path: Path) -> list[dict]:
    """The records of a record file, or of what ``pyprof parse`` makes of a trace or export."""
    if path.suffix == ".dict":
        from pyprof.records import is_header

        return [r for r in map(orjson.loads, filter(bytes.strip, path.open("rb"))) if not is_header(r)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seed.dict"
        subprocess.run([sys.executable, "-m", "pyprof.cli.main", "parse", str(path), "-o", str(out)],
                       check=True, capture_output=True)
        return records_of(out)


def kineto_seed() -> tuple[list[dict], str]:
    """The records of bench_kineto.py's marker-dense trace, recorded here (as ``pyprof run`` records it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_kineto", REPO / "scripts" / "bench_kineto.py")
    bench_kineto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_kineto)
    with tempfile.TemporaryDirectory() as tmp:
        trace = bench_kineto.record(Path(tmp), "dense")
        return records_of(trace), f"parsed the marker-dense trace ({bench_kineto.INPUTS['dense'][2]})"


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
    """Write a record file of ``n`` records (its header line first, its end line last): copies of ``seed``
    with fresh opIds, shifted times, perturbed durations."""
    from pyprof.records import end_line, header_line

    fh.write(header_line(seed[0].get("source") if seed else None))
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
    fh.write(end_line(n))


def make(path: str, n: int, source: str, seed_file: str | None = None, kineto: bool = False) -> None:
    """Write the tiled record file and flush it to disk, so that the timed run does not share the
    machine with the kernel writing back gigabytes of dirty pages (it did: about 20% slower)."""
    if kineto:
        seed, how = kineto_seed()
    elif seed_file:
        seed, how = records_of(Path(seed_file)), f"records of {seed_file}"
    else:
        seed, how = seed_records(source)
    with open(path, "wb") as fh:
        tile(seed, n, fh)
        fh.flush()
        os.fsync(fh.fileno())
    print(f"records: {n:,} tiled from {len(seed)} ({how}); "
          f"file {os.path.getsize(path) / 1e6:.0f} MB", flush=True)


def count_records(path: Path) -> int:
    """Non-blank lines of a record file less its header and end lines (what prof turns into rows)."""
    from pyprof.records import HEADER_PREFIX

    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            n += bool(line.strip()) and not line.startswith(HEADER_PREFIX)
    return n


def run_cli(path: Path, out: Path, jobs: int | None, code: Path = REPO) -> tuple[float, float, float]:
    """``pyprof prof --csv -q -o OUT FILE`` in a fresh process, as a user runs it: wall seconds, CPU
    seconds (user + system, its decoding and formatting processes included) and peak RSS in MB (the
    largest process of the command). ``code``: the checkout whose pyprof runs."""
    cmd = [sys.executable, "-m", "pyprof.cli.main", "prof", "--csv", "-q", "-o", str(out.resolve()), str(path.resolve())]
    if jobs:
        cmd[4:4] = ["-j", str(jobs)]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(code.resolve())}, cwd=str(code))
    _, status, usage = os.wait4(child.pid, 0)  # this child's resource usage, its own children included
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"pyprof prof failed with exit code {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--source", default="josiahdavis__profiling-lm")
    ap.add_argument("--kineto", action="store_true",
                    help="seed: the CPU records of bench_kineto.py's marker-dense torch.profiler trace")
    ap.add_argument("--seed", help="seed: the records of this file (a record file, or a trace pyprof parse reads)")
    ap.add_argument("--code", action="append", type=Path, metavar="DIR",
                    help="run pyprof prof from this checkout (PYTHONPATH=DIR); repeat to alternate between checkouts")
    ap.add_argument("--keep", help="write the tiled record file here (default: a temp file, removed)")
    ap.add_argument("--file", help="time this existing record file instead of tiling one")
    ap.add_argument("--runs", type=int, default=1, help="timed runs of the command (each printed, then the median)")
    ap.add_argument("-j", "--jobs", type=int, help="pass -j N to pyprof prof (default: its own default)")
    ap.add_argument("--no-stages", action="store_true", help="skip the in-process per-stage timings")
    ap.add_argument("--make", help=argparse.SUPPRESS)  # internal: only write the tiled file
    args = ap.parse_args()

    if args.make:  # run in a child, so that the measuring process stays small (max RSS is inherited)
        make(args.make, args.n, args.source, args.seed, args.kineto)
        return

    workdir = Path(tempfile.mkdtemp(prefix="pyprof-bench-"))
    if args.file:
        path = Path(args.file)
        n = count_records(path)
        print(f"records: {n:,} in {path} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
    else:
        path = Path(args.keep) if args.keep else workdir / "tiled.dict"
        seed = (["--kineto"] if args.kineto else []) + (["--seed", str(Path(args.seed).resolve())] if args.seed else [])
        subprocess.run([sys.executable, __file__, "--make", str(path), "--n", str(args.n), "--source", args.source,
                        *seed], check=True)
        n = args.n
    try:
        timed_cli(path, workdir / "out.csv", n, args.runs, args.jobs, args.code or [REPO])
        if not args.no_stages:
            stages(path, n)
    finally:
        if not args.file and not args.keep:
            path.unlink()
        (workdir / "out.csv").unlink(missing_ok=True)
        workdir.rmdir()


def timed_cli(path: Path, out: Path, n: int, runs: int, jobs: int | None, codes: list[Path]) -> None:
    """1. end to end: the real command in a fresh process (interpreter and imports included)."""
    print(f"command: pyprof prof --csv -q{f' -j {jobs}' if jobs else ''} -o OUT FILE "
          f"(load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    results: dict[Path, list[tuple]] = {c: [] for c in codes}
    for _ in range(runs):
        for code in codes:
            wall, cpu, peak = run_cli(path, out, jobs, code)
            results[code].append((wall, cpu, peak))
            label = "pyprof prof --csv" if len(codes) == 1 else str(code)
            print(f"{label:>24}: {wall:6.2f} s  {n / wall:>10,.0f} kernels/s   "
                  f"CPU {cpu:6.2f} s ({n / cpu:,.0f} kernels per CPU-second)   peak RSS {peak:,.0f} MB", flush=True)
    for code, rs in results.items():
        if runs > 1 or len(codes) > 1:
            mid, cpu = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
            label = f"median of {runs}" + ("" if len(codes) == 1 else f", {code}")
            print(f"{label:>24}: {mid:6.2f} s  {n / mid:>10,.0f} kernels/s   CPU {cpu:6.2f} s "
                  f"({n / cpu:,.0f} kernels per CPU-second)   peak RSS {max(r[2] for r in rs):,.0f} MB")
    print(f"{'load average (1 min)':>24}: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          "(other work slows every figure)")


def stages(path: Path, n: int) -> None:
    """2. in this process, stage by stage: where the time goes."""
    from pyprof import process
    from pyprof.prof import columns, render
    from pyprof.prof.load import iter_records
    from pyprof.prof.summary import summarize
    from pyprof.prof.table import build, build_file, default_workers

    def timed(fn):
        with process.owning():  # as `pyprof prof` runs: workers forked, the collector paused
            t = time.perf_counter()
            result = fn()
            return result, time.perf_counter() - t

    def drain():
        for _ in iter_records(path):  # decode and check every line, keep nothing
            pass

    workers = default_workers()  # what `pyprof prof` does without -j
    _, t_read = timed(drain)
    df, t_build1 = timed(lambda: build(iter_records(path)))
    del df
    df, t_file1 = timed(lambda: build_file(path, workers=1))  # what `pyprof prof -j 1 FILE` does
    del df
    df, t_buildn = timed(lambda: build_file(path, workers=workers))
    print(f"{'distinct op calls costed':>24}: {df.attrs.get('n_costed')}; flops known for "
          f"{df['flops'].notna().mean() * 100:.1f}% of rows, gap for {df['gap'].notna().mean() * 100:.1f}%")
    _, t_csv1 = timed(lambda: render.write(df, columns.DEFAULT, io.StringIO(), "csv"))
    _, t_csvn = timed(lambda: render.write(df, columns.DEFAULT, io.StringIO(), "csv", workers=workers))
    _, t_sum = timed(lambda: summarize(df, "op"))
    for label, dt in (("read (JSON decode only)", t_read), ("read + build, 1 process (records API)", t_build1),
                      ("build without the read", t_build1 - t_read),
                      ("build_file, 1 process", t_file1),
                      (f"read + build, {workers} processes", t_buildn),
                      ("render CSV, 1 process", t_csv1), (f"render CSV, {workers} processes", t_csvn),
                      ("summary by op", t_sum)):
        print(f"{label:>38}: {dt:6.2f} s  {n / dt:>10,.0f} kernels/s")
    load = os.getloadavg()[0]
    print(f"{'load average (1 min)':>24}: {load:.1f} on {os.cpu_count()} CPUs (other work slows every figure)")


if __name__ == "__main__":
    main()
