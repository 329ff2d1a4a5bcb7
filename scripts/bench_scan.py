"""Benchmark: the Kineto index alone (``scan`` then ``finish``, :mod:`pyprof.parse.kineto.index`) of two or
more checkouts, timed alternately in one process on the same decoded events; prints CPU ms per checkout and
checks that every checkout builds the same index.

The events are loaded once with this checkout's loader; each ``--code DIR`` contributes only its
``pyprof/parse/kineto/index.py`` (the rest is this checkout's), so this times the index and nothing else.
Traces: ``bench_kineto.py --runs 0 --keep DIR`` writes its tiled ``lenet`` and ``dense`` inputs; default: the
corpus's kineto traces. CPU time (``time.process_time``), garbage collector off, min and median of ``--runs``.

Usage: ``python scripts/bench_scan.py --code /work/main --code . [--runs 11] [TRACE ...]``.
"""

from __future__ import annotations

import argparse
import gc
import glob
import importlib.util
import statistics
import sys
import time
from pathlib import Path

from pyprof.parse.kineto.load import load_trace

FIELDS = ("name", "role", "start", "end", "pid", "tid", "args", "seq", "bwd", "launches", "gpu", "threads",
          "launch_threads", "steps", "comms", "fwd_thread", "skipped", "n_events", "parent", "chain", "cut",
          "frames", "modules", "launch_node")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", action="append", type=Path, required=True, help="a checkout (repeat)")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args()
    mods = []
    for i, code in enumerate(args.code):
        spec = importlib.util.spec_from_file_location(f"index_{i}", code / "pyprof/parse/kineto/index.py")
        mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (dataclasses look it up)
        spec.loader.exec_module(mod)
        mods.append((str(code), mod))
    traces = args.traces or sorted(glob.glob(str(Path(__file__).resolve().parents[2] / "shared/corpus/kineto/*.json.gz")))
    data = [(t, [list(c) for c in t.chunks]) for t in map(load_trace, traces)]
    n = sum(len(c) for _, chunks in data for c in chunks)

    def index(mod, trace, chunks):
        ix = mod.Index()
        mod.scan(ix, chunks, trace)
        mod.finish(ix)
        return ix

    times: dict[str, list[float]] = {name: [] for name, _ in mods}
    gc.disable()
    for run in range(args.runs):
        for name, mod in mods if run % 2 == 0 else mods[::-1]:
            t0 = time.process_time()
            for trace, chunks in data:
                index(mod, trace, chunks)
            times[name].append(time.process_time() - t0)
        gc.collect()
    for name, ts in times.items():
        print(f"{name}: min {min(ts) * 1e3:.1f} ms, median {statistics.median(ts) * 1e3:.1f} ms "
              f"({n:,} events in {len(data)} traces, {n / min(ts) / 1e6:.2f} M events/s)")
    for trace, chunks in data:
        first, *rest = (index(mod, trace, chunks) for _, mod in mods)
        for ix in rest:
            diff = [f for f in FIELDS if getattr(ix, f) != getattr(first, f)]
            assert not diff, f"the indexes differ in {diff}"
    print("same index from every checkout")


if __name__ == "__main__":
    main()
