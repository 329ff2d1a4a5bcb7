"""Benchmark: parse a ~1M-event torch.profiler trace; print events/s and the parser's peak RSS.

1. Record a real CPU trace here as ``pyprof run`` records one (:func:`pyprof.runner.run_script`:
   ``pyprof.init()`` inside ``torch.profiler.profile(record_shapes=True)``, 1 wait, 1 warmup and 5
   active training steps), or take ``--trace FILE``. Two inputs (``--input``):

   * ``dense`` (the default): the marker-dense trace users' runs give, ``pyprof run --with-stack``
     of a small Transformer encoder's training steps (``tests/small_models.py``): every op the model
     calls is also a pyprof ``record_function`` range, and ``with_stack=True`` adds a
     ``python_function`` range per Python call (about 85% of the events);
   * ``lenet``: LeNet training steps without ``with_stack`` (the benchmark's earlier trace: few
     Python ranges, many CPU op records).
2. Tile it to about ``--events`` events: every copy is shifted in time past the previous one and
   gets fresh ``External id``/``correlation``/``Sequence number``/Python ids and fresh pyprof marker
   instance ids, so no two op instances are equal (the decoder's cache gets no free hits).
3. Parse it ``--runs`` times, each in a fresh child process (``pyprof.parse.run.parse_file``, what
   ``pyprof parse TRACE -o OUT`` runs), and report wall time, events/s (and their median) and the
   child's peak RSS (``ru_maxrss``). The child owns its process (:func:`pyprof.process.own`, as the
   CLI does), so the parser forks workers on big traces (a second core): the CPU figures include
   theirs, and the peak RSS is the largest of the child's and its workers'.

``--code DIR`` (repeatable) parses with the pyprof of another checkout (``PYTHONPATH=DIR``); with
several, the runs alternate between them, so old and new code are timed in the same sitting.

Target: >= 100k events/s with peak RSS <= 2 GB at 1M events (HTA loads about 45k events/s).
Usage: ``python scripts/bench_kineto.py [--input dense|lenet|all] [--events 1000000] [--runs 3] [--gzip]
[--trace FILE] [--keep DIR] [--tiled FILE] [--code DIR ...]``.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent

RECORD = """
import sys, torch
sys.path.insert(0, {repo!r})
import pyprof
from tests.small_models import MODELS
model, x = MODELS[{model!r}]()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(8):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    pyprof.step()
"""

#: input -> (model of tests/small_models.py, with_stack, what it is)
INPUTS = {
    "dense": ("transformer", True, "marker-dense: `pyprof run --with-stack` of SmallTransformer training steps"),
    "lenet": ("lenet", False, "LeNet training steps under `pyprof run` (no with_stack)"),
}

_MARKER_ID = re.compile(r"(%22id%22:)(\d+)")
_SHIFT_ARGS = ("External id", "correlation", "Sequence number", "Record function id", "Python id",
               "Python parent id")


def record(tmp: Path, which: str = "dense") -> Path:
    """Record input ``which``'s trace (see :data:`INPUTS`) as ``pyprof run`` does; return its path."""
    from pyprof.runner import RunOptions, run_script

    model, with_stack, _ = INPUTS[which]
    script = tmp / f"bench_{model}.py"
    script.write_text(textwrap.dedent(RECORD.format(repo=str(REPO), model=model)))
    opts = RunOptions(wait=1, warmup=1, active=5, with_stack=with_stack)
    return run_script(script, [], tmp / f"rec_{which}", opts).trace


def count_events(path: Path) -> int:
    """Events in a trace: its ``"ph"`` keys (one per event; marker names are percent-encoded)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.count(b'"ph":')


def tile(src: Path, target_events: int, out: Path, use_gzip: bool) -> int:
    from pyprof.parse.kineto.load import load_trace

    trace = load_trace(src, raw=True)
    every = trace.events
    base = [e for e in every if e.get("ph") != "M"]
    meta_events = [e for e in every if e.get("ph") == "M"]
    ts = [e["ts"] for e in base if isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000.0
    copies = max(1, target_events // max(len(base), 1))
    events = list(meta_events)
    for k in range(copies):
        shift_t = k * span
        shift_id = k * 10_000_000
        for e in base:
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + shift_t
            if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                e2["id"] += shift_id
            a = e2.get("args")
            if a:
                a = dict(a)
                for key in _SHIFT_ARGS:
                    if isinstance(a.get(key), int) and a[key] > 0:
                        a[key] += shift_id
                e2["args"] = a
            name = e2.get("name")
            if k and name and name.startswith("{%22pyprof"):
                e2["name"] = _MARKER_ID.sub(lambda m, d=shift_id: m.group(1) + str(int(m.group(2)) + d), name)
            events.append(e2)
    doc = dict(trace.meta)
    doc["traceEvents"] = events
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)  # Kineto writes one field per line too
    if use_gzip:
        data = gzip.compress(data, compresslevel=1)
    out.write_bytes(data)
    return len(events)


CHILD = """
import os, resource, sys, time
from pyprof import process
from pyprof.parse.run import parse_file
process.own()  # as `pyprof parse` does: the child is pyprof's, so the reader may fork and pause the collector
t0, c0 = time.perf_counter(), time.process_time()
res = parse_file(sys.argv[1], sys.argv[2])  # what `pyprof parse trace.json -o out.dict` runs
t2, c2 = time.perf_counter(), time.process_time()
kids = os.times()  # CPU of the worker processes the parser forked (and waited for)
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
with open(sys.argv[2], "rb") as fh:
    n = sum(chunk.count(b"\\n") for chunk in iter(lambda: fh.read(1 << 24), b""))
    fh.seek(0)
    n -= fh.read(16) == b'{"pyprofRecords"'  # the header line (record format 2 on) is no record
    fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
    n -= fh.read().rstrip(b"\\n").rpartition(b"\\n")[2].startswith(b'{"pyprofRecords"')  # nor the end line
print(res.kernels + res.copies, n, t2 - t0, c2 - c0, kids.children_user + kids.children_system, peak, flush=True)
os._exit(0)  # skip freeing millions of objects at exit: not part of parsing
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", choices=[*INPUTS, "all"], default="dense",
                    help="which recorded trace to tile (default: dense, the marker-dense one)")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3, help="parses of the tiled trace (each printed, then the median)")
    ap.add_argument("--trace", type=Path, help="tile this trace instead of recording one")
    ap.add_argument("--gzip", action="store_true", help="write and parse the tiled trace gzip-compressed")
    ap.add_argument("--keep", type=Path, help="keep the tiled trace and records in this folder")
    ap.add_argument("--tiled", type=Path, help="parse this (already tiled) trace as it is: no recording, no tiling")
    ap.add_argument("--code", action="append", type=Path, metavar="DIR",
                    help="parse with this checkout's pyprof (PYTHONPATH=DIR; default: this one); repeat to "
                         "alternate runs between checkouts")
    ap.add_argument("--tile-to", type=Path, help=argparse.SUPPRESS)  # the tiling child (see below)
    args = ap.parse_args()
    if args.tile_to:
        with tempfile.TemporaryDirectory() as tmpdir:
            src = args.trace or record(Path(tmpdir), args.input)
            t = time.perf_counter()
            n = tile(src, args.events, args.tile_to, args.gzip)
            print(f"tiled {src.name} to {n:,} events, {args.tile_to.stat().st_size / 1e6:.0f} MB in "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
        return
    if args.tiled or args.trace:
        inputs = [None]
    else:
        inputs = list(INPUTS) if args.input == "all" else [args.input]
    for which in inputs:
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = (args.keep / which if which and args.input == "all" else args.keep) if args.keep else Path(tmpdir)
            tmp.mkdir(parents=True, exist_ok=True)
            bench_input(args, which, tmp)


def bench_input(args, which: str | None, tmp: Path) -> None:
    """Tile (unless ``--tiled``) and parse one input ``--runs`` times; print each run and the medians."""
    if args.tiled:
        big, label = args.tiled, f"{args.tiled} (as given)"
    else:
        # recorded and tiled in a child process: Linux keeps a process's peak RSS across fork and
        # exec, so the parser, started from a process that had held the tiled events, would report it
        big = tmp / ("tiled.json.gz" if args.gzip else "tiled.json")
        label = (f"{args.trace} tiled" if args.trace else f"{which}: {INPUTS[which][2]}, tiled")
        argv = [sys.executable, __file__, "--tile-to", str(big), "--events", str(args.events)]
        argv += ["--input", which] if which else []
        argv += (["--trace", str(args.trace)] if args.trace else []) + (["--gzip"] if args.gzip else [])
        if subprocess.run(argv).returncode:
            sys.exit("recording or tiling the trace failed")
        os.sync()  # the tiled trace's dirty pages written out now, not while the parser runs
    n = count_events(big)
    codes = args.code or [REPO]
    print(f"\ninput: {label}: {n:,} events, {big.stat().st_size / 1e6:,.0f} MB")
    print(f"command: pyprof parse {big.name} -o OUT (in a fresh process owning itself, as the CLI: "
          f"pyprof.parse.run.parse_file after pyprof.process.own()); {args.runs} runs"
          + (f", alternating {', '.join(map(str, codes))}" if len(codes) > 1 else f", code {codes[0]}"))
    out = tmp / "tiled.dict"
    results: dict[Path, list[tuple]] = {c: [] for c in codes}
    for _ in range(args.runs):
        for code in codes:
            r = parse_once(big, out, code)
            results[code].append(r)
            records, t_total, own_cpu, kids_cpu, peak, wall = r
            cpu = own_cpu + kids_cpu
            print(f"  {'' if len(codes) == 1 else str(code) + ': '}{t_total:5.2f} s wall "
                  f"{n / t_total:>9,.0f} events/s | CPU {cpu:5.2f} s ({own_cpu:.2f} parser + {kids_cpu:.2f} "
                  f"workers) {n / cpu:>9,.0f} events/CPU-s | peak RSS {peak:,.0f} MiB | "
                  f"{records:,} records | whole child {wall:.2f} s (interpreter start, imports) | "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    for code, rs in results.items():
        t_med = statistics.median(r[1] for r in rs)
        cpu_med = statistics.median(r[2] + r[3] for r in rs)
        who = "" if len(codes) == 1 else f"{code}: "
        print(f"median of {len(rs)}: {who}{t_med:.2f} s wall, {n / t_med:,.0f} events/s by wall clock; "
              f"{cpu_med:.2f} s CPU, {n / cpu_med:,.0f} events per CPU second; peak RSS "
              f"{max(r[4] for r in rs):,.0f} MiB (targets: >= 100,000 events/s, <= 2048 MiB; HTA ~45,000)")
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work slows every figure)")


def parse_once(big: Path, out: Path, code: Path) -> tuple:
    """One parse in a fresh child: (records, parse wall s, parser CPU s, workers' CPU s, peak RSS MiB,
    the child's whole wall s)."""
    # a new output file, as a first parse writes: replacing a big file by rename makes ext4 write
    # its blocks out at once (auto_da_alloc), about 0.5 s more at 1 GB, which is not parsing
    out.unlink(missing_ok=True)
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, str(big.resolve()), str(out.resolve())], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(code.resolve())}, cwd=str(code))
    wall = time.perf_counter() - t
    if res.returncode:
        sys.exit(f"parser failed:\n{res.stderr}")
    kernels, records, t_total, own_cpu, kids_cpu, rss_kb = res.stdout.split()
    if int(kernels) != int(records):
        sys.exit(f"the parser counted {kernels} records but wrote {records} lines")
    return int(records), float(t_total), float(own_cpu), float(kids_cpu), int(rss_kb) / 1024, wall


if __name__ == "__main__":
    main()
