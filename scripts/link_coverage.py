"""How much GPU kernel time of torch.profiler traces pyprof ties to an op, and how much GEMM time it prices.

For every GPU trace given (default: every trace in ../shared/corpus/kineto), parse it as a user would
(``KinetoSource(path).records()``), write the records, run ``python -m pyprof prof --json`` on them,
and print per trace:

* ``in-event``: kernel time whose launch lies inside a CPU event (a ``cpu_op`` or ``user_annotation``
  range on the launching thread, ``ProfilerStep#N`` not counted: it names no work), read from each
  record's ``ranges``;
* ``op%``: the share of that time whose record carries an op (``op`` or ``bwdNode`` set);
* ``gemm%``: the share of GEMM/conv/attention kernel time (kernel names matched by prof's
  ``gemm_like`` patterns, helpers and fbgemm_gpu's namespace excluded) with FLOPs (> 0) in prof's table, over
  the kernels whose innermost op (``aten``, a namespaced op: not a compiled region's graph) recorded
  shapes (``atenSizes`` holds a non-empty shape); ``n/a`` where none did;
* ``inst%``: the same share counting a kernel as priced when its op instance has FLOPs (prof puts an
  instance's FLOPs on its kernels of the highest role: a GEMM kernel its role rule misses gets none);
* ``launched%``: the share of all kernel time with a launch in the trace (whatever encloses it, a launch under
  ``ProfilerStep#N`` alone included: a CUDA graph replayed by hand) whose record carries an op;
* ``no-launch``: GPU activities with no launch in the trace (their time, in ms).

Usage: ``python scripts/link_coverage.py [TRACE ...]``. Needs no torch and no GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyprof.parse.kineto import KinetoSource  # noqa: E402
from pyprof.prof.tensorcores import kernel_class  # noqa: E402
from pyprof.records import is_header, write_records  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "kineto"
STEP = "ProfilerStep#"


def _shaped(sizes) -> bool:
    return isinstance(sizes, list) and any(isinstance(s, list) and s for s in sizes)


def _gemm(name: str | None) -> bool:
    """A GEMM/conv/attention kernel by prof's patterns; fbgemm_gpu's kernels (embedding lookups, sparse
    permutes) are none, though their namespace holds ``gemm``."""
    return kernel_class((name or "").replace("fbgemm", ""))[1]


def coverage(path: Path) -> dict | None:
    src = KinetoSource(path)
    if not src.gpu_mode:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "records.dict"
        with open(out, "wb") as fh:
            write_records(src.records(), fh)
        recs = [r for r in map(orjson.loads, filter(bytes.strip, out.read_bytes().splitlines())) if not is_header(r)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        prof = subprocess.run([sys.executable, "-m", "pyprof", "prof", "--json", "-c", "idx,flops", str(out)],
                              capture_output=True, env=env, check=True)
        flops = [orjson.loads(line).get("flops") for line in prof.stdout.splitlines() if line.strip()]
    assert len(flops) == len(recs), (len(flops), len(recs))
    t_in = t_op = t_gemm = t_priced = t_inst = t_none = t_launched = t_launched_op = 0
    priced_inst = {(r["opId"], r["dir"]) for r, fl in zip(recs, flops, strict=True)
                   if r.get("opId") is not None and fl is not None and fl > 0}
    for rec, fl in zip(recs, flops, strict=True):
        if rec.get("kind") != "kernel":
            continue
        dur = rec["kDuration"] or 0
        has_op = rec.get("op") is not None or rec.get("bwdNode") is not None
        if rec.get("apiName") is None:
            t_none += dur
        else:
            t_launched += dur
            t_launched_op += dur if has_op else 0
        inside = any(not r["text"].startswith(STEP) for r in rec.get("ranges") or ())
        if inside:
            t_in += dur
            if has_op:
                t_op += dur
        if _gemm(rec["kLongName"]) and "::" in (rec.get("aten") or "") and _shaped(rec.get("atenSizes")):
            t_gemm += dur
            if fl is not None and fl > 0:
                t_priced += dur
            if (rec.get("opId"), rec.get("dir")) in priced_inst:
                t_inst += dur
    return {"in_ms": t_in / 1e6, "op": t_op / t_in if t_in else None, "gemm_ms": t_gemm / 1e6,
            "gemm": t_priced / t_gemm if t_gemm else None, "inst": t_inst / t_gemm if t_gemm else None,
            "launched": t_launched_op / t_launched if t_launched else None, "no_launch_ms": t_none / 1e6}


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or sorted(CORPUS.glob("*.json*"))
    print(f"{'trace':<62} {'in-event ms':>11} {'op%':>7} {'gemm ms':>9} {'gemm%':>7} {'inst%':>7} "
          f"{'launched%':>9} {'no-launch ms':>12}")
    for p in paths:
        c = coverage(p)
        if c is None:
            print(f"{p.name[:62]:<62} (CPU-only trace)")
            continue
        print(f"{p.name[:62]:<62} {c['in_ms']:>11.2f} {_pct(c['op']):>7} {c['gemm_ms']:>9.2f} "
              f"{_pct(c['gemm']):>7} {_pct(c['inst']):>7} {_pct(c['launched']):>9} {c['no_launch_ms']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
