"""Which roofline peaks ``pyprof prof`` uses for every export and trace of the corpus.

For each file: ``python -m pyprof parse FILE -o X`` and ``python -m pyprof prof X --summary op`` (as a user
runs them; their exit codes are checked), then one line per GPU the records name: the GPU, where its peaks
came from, its fp32 and fp16 tensor-core FLOP/s and its bandwidth, and whether prof warned that a peak is
unknown. Figures are read back through :class:`pyprof.prof.devices.DeviceResolver`, as prof resolves them.

    python scripts/corpus_peaks.py [CORPUS_DIR] [--jobs N]

CORPUS_DIR defaults to ``../shared/corpus``. Run with another checkout first on ``PYTHONPATH`` to see
that checkout's peaks (older ones, without device properties in the records, print what they can).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson


def _tflops(v) -> str:
    return "n/a" if v is None else f"{v / 1e12:.1f}"


def _gbs(v) -> str:
    return "n/a" if v is None else f"{v / 1e9:.0f}"


def one(path: Path, tmp: Path) -> list[str]:
    out = tmp / (path.name + ".dict")
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "pyprof", "parse", str(path), "-o", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        return [f"{path.name}\t-\tparse exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"]
    q = subprocess.run([sys.executable, "-m", "pyprof", "prof", str(out), "--summary", "op", "-w", "200"],
                       capture_output=True, text=True, env=env, timeout=900)
    if q.returncode != 0:
        return [f"{path.name}\t-\tprof exit {q.returncode}: {q.stderr.strip().splitlines()[-1:]}"]
    warned = "no peak" in q.stderr
    stated = [ln for ln in q.stdout.splitlines() if ln.startswith("# peaks")]
    from pyprof.prof.devices import DeviceResolver
    from pyprof.records import is_header

    resolver = DeviceResolver()
    seen: dict = {}
    with open(out, "rb") as fh:
        for line in fh:
            rec = orjson.loads(line)
            if is_header(rec) or rec.get("device") is None:
                continue
            key = (rec.get("gpu"), orjson.dumps(rec.get("gpuProps")))
            if key not in seen:
                seen[key] = rec.get("gpuProps")
    out.unlink()
    if not seen:
        return [f"{path.name}\t-\tno GPU records"]
    rows = []
    for (gpu, _), props in seen.items():
        try:
            dev = resolver.resolve(gpu, False, props)
        except TypeError:  # a checkout whose resolver takes no device properties
            dev = resolver.resolve(gpu, False)
        if dev is None:
            src, f32, f16, bw = "none", None, None, None
        else:
            src = getattr(dev, "origin", None) or dev.source.split(" http")[0][:40] or "table"
            f32, f16, bw = dev.peak("float32", False), dev.peak("float16", True), dev.bw
        rows.append(f"{path.name}\t{gpu}\t{src}\t{_tflops(f32)}\t{_tflops(f16)}\t{_gbs(bw)}\t"
                    f"{'warned' if warned else '-'}\t{'stated' if stated else '-'}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", default="../shared/corpus")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    files = sorted(p for d in ("nsys", "nvprof", "kineto") for p in (Path(a.corpus) / d).glob("*") if p.is_file())
    print("file\tgpu\tpeak source\tfp32 TFLOP/s\tfp16 tensor TFLOP/s\tbandwidth GB/s\tn/a warning\tprof states source")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as pool:
        for rows in pool.map(lambda p: one(p, Path(tmp)), files):
            for r in rows:
                print(r, flush=True)


if __name__ == "__main__":
    main()
