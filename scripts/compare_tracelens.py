"""Compare pyprof's FLOPs per GEMM/convolution/attention op instance with AMD TraceLens' count.

    python scripts/compare_tracelens.py                 # the four TraceLens H100 traces of the corpus
    python scripts/compare_tracelens.py trace.json.gz --reference hand
    python scripts/compare_tracelens.py --details       # also list every instance that differs

For each torch.profiler trace: every aten GEMM, convolution and attention op that launched kernels
(``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``convolution``, the ``_scaled_dot_product_*_attention``
ops) is one reference instance, its kernels found through the launches inside it (CUDA correlation
ids). pyprof's instance is the op instance that holds those kernels (``pyprof parse`` -> ``prof``'s
table, summed over the instance's rows). Printed per trace: the instances, how many agree within 2%,
how many differ (and the documented convention that explains each, or ``unexplained``), in how many
the longest kernel (the GEMM, convolution or attention kernel) carries the instance's FLOPs (the
split rule: not spread over the copies and layout kernels beside it), and the largest achieved/peak
ratio of any kernel (FLOP/s over the peak of its dtype and unit, bandwidth over
the memory peak). Exit status 1 when an instance differs without a convention or a kernel is above
its peak.

Reference counts (``--reference``):

* ``tracelens``: TraceLens' own per-instance GFLOPS (``TreePerfAnalyzer.build_df_unified_perf_table``),
  where the ``TraceLens`` package imports (``pip install`` it from its source; it is not a dependency).
* ``hand`` (the default where TraceLens does not import): the same conventions as TraceLens,
  counted here from the shapes the trace recorded (``Input Dims``, ``Concrete Inputs``), with no code
  of pyprof's or TraceLens': a GEMM is ``2·M·N·K`` (a multiply-add is 2) plus ``M·N`` for a bias
  (``addmm``, ``baddbmm``); a convolution ``2·numel(out)·numel(weight[1:])`` plus ``numel(out)`` with a
  bias; attention ``2·B·H·Sq·Sk·(Dqk + Dv)``, halved when causal with ``Sq == Sk``.

The conventions by which pyprof's count may differ from TraceLens' are in docs/prof.md ("Conventions"):
pyprof leaves a GEMM's or convolution's bias epilogue out of FLOPs; on a training trace, which records
no ``requires_grad``, a GEMM's backward is priced for both operands (dX + dW) where only one product
ran (a first layer, whose input needs no gradient). A pyprof instance that holds several reference ops
(a ``linear`` backward's two ``aten::mm``) is compared with their sum.
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "kineto"
TOLERANCE = 0.02

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
CONV_OPS = ("aten::convolution",)
ATTENTION_OPS = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                 "aten::_scaled_dot_product_cudnn_attention")
REFERENCE_OPS = GEMM_OPS + CONV_OPS + ATTENTION_OPS
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass
class Instance:
    """One reference op instance: its aten op, FLOPs, and the correlation ids of its GPU records."""

    name: str
    flops: float
    correlations: frozenset
    bias_flops: float = 0.0  # the part of ``flops`` that is a bias epilogue (M·N, or numel(out))
    external_id: int | None = None
    backward: bool = False  # pyprof's instance holding it is a backward one


@dataclass
class Outcome:
    trace: str
    instances: int = 0
    agree: int = 0
    differ: list = field(default_factory=list)  # (name, reference, pyprof, convention or "unexplained")
    on_gemm_kernel: int = 0  # instances whose longest kernel (the GEMM's) carries all their FLOPs
    max_flops_ratio: float = float("nan")  # achieved FLOP/s over the peak, largest of any kernel
    max_bw_ratio: float = float("nan")  # achieved bandwidth over the peak, largest of any kernel
    above_peak: int = 0  # kernels that pyprof's roofline flags as faster than it allows

    @property
    def ok(self) -> bool:
        return self.above_peak == 0 and all(d[3] != "unexplained" for d in self.differ)


def default_traces() -> list[Path]:
    return sorted(CORPUS.glob("AMD-AGI__TraceLens__*.json.gz"))


def load_events(path: Path) -> list[dict]:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


# -- the reference: counted by hand from the recorded shapes ----------------------------------------
def _prod(xs) -> int:
    return math.prod(int(x) for x in xs)


def _scalar(text, default=None):
    if text in (None, "", "None"):
        return default
    return text


def _ints(text, default):
    """A recorded int list (``'[1, 1]'``) or int; ``default`` when not recorded."""
    v = _scalar(text)
    if v is None:
        return default
    v = orjson.loads(v) if isinstance(v, str) else v
    return [int(x) for x in v] if isinstance(v, list) else [int(v)]


def gemm_flops(name: str, dims: list) -> tuple[float, float]:
    """(FLOPs, bias part) of an aten GEMM from its ``Input Dims``."""
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * n * k, 0.0
    if name == "aten::addmm":  # addmm(bias, mat1[M,K], mat2[K,N])
        (m, k), (_, n) = dims[1], dims[2]
        return 2.0 * m * n * k + m * n, float(m * n)
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * n * k, 0.0
    if name == "aten::baddbmm":  # baddbmm(bias, b1[B,M,K], b2[B,K,N])
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return 2.0 * b * m * n * k + b * m * n, float(b * m * n)
    raise ValueError(name)


def conv_flops(dims: list, concrete: list) -> tuple[float, float]:
    """(FLOPs, bias part) of ``aten::convolution(input, weight, bias, stride, padding, dilation,
    transposed, output_padding, groups)`` from the recorded shapes and scalars."""
    x, w = dims[0], dims[1]
    bias = len(dims) > 2 and bool(dims[2])
    nsp = len(x) - 2

    def get(i):
        return concrete[i] if i < len(concrete) else None

    stride = _ints(get(3), [1] * nsp)
    padding = _ints(get(4), [0] * nsp)
    dilation = _ints(get(5), [1] * nsp)
    transposed = str(_scalar(get(6), "False")).lower() in ("true", "1")
    out_pad = _ints(get(7), [0] * nsp)
    groups = int(_scalar(get(8), 1))
    stride, padding, dilation, out_pad = ((v * nsp if len(v) == 1 else v) for v in (stride, padding, dilation, out_pad))
    if transposed:  # weight [C_in, C_out/groups, k...]
        spatial = [(x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w[2 + i] - 1) + out_pad[i] + 1
                   for i in range(nsp)]
        out = [x[0], w[1] * groups, *spatial]
        per_out = 2 * _prod(w[1:])  # each input element meets C_out/groups·k filters
        conv = float(_prod(x) * per_out)
    else:
        spatial = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
                   for i in range(nsp)]
        out = [x[0], w[0], *spatial]
        conv = 2.0 * _prod(out) * _prod(w[1:])
    b = float(_prod(out)) if bias else 0.0
    return conv + b, b


def attention_flops(dims: list, concrete: list, name: str) -> tuple[float, float]:
    """FLOPs of a fused attention op from q, k, v ``[B, H, S, D]`` and ``is_causal``."""
    (b, h, sq, dqk), (_, _, sk, _), (_, _, _, dv) = dims[0], dims[1], dims[2]
    causal_at = 4 if "flash" in name else 5 if "efficient" in name else 6
    causal = str(_scalar(concrete[causal_at] if causal_at < len(concrete) else None, "False")).lower() == "true"
    flops = 2.0 * b * h * sq * sk * (dqk + dv)
    if causal and sq == sk:
        flops /= 2
    return flops, 0.0


def reference_flops(event: dict) -> tuple[float, float]:
    name, args = event["name"], event.get("args", {})
    dims, concrete = args.get("Input Dims") or [], args.get("Concrete Inputs") or []
    if name in GEMM_OPS:
        return gemm_flops(name, dims)
    if name in CONV_OPS:
        return conv_flops(dims, concrete)
    return attention_flops(dims, concrete, name)


def hand_instances(events: list[dict]) -> list[Instance]:
    """Every outermost reference op that launched GPU work, with its FLOPs counted from its shapes."""
    launches: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches.setdefault((e.get("pid"), e.get("tid")), []).append((e["ts"], e["args"]["correlation"]))
    gpu = {e["args"]["correlation"] for e in events if e.get("cat") in GPU_CATS and "correlation" in e.get("args", {})}
    for v in launches.values():
        v.sort()
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("name") in REFERENCE_OPS),
                 key=lambda e: (e["ts"], -e.get("dur", 0)))
    out: list[Instance] = []
    inside_until: dict[tuple, float] = {}  # per thread: end of the reference op being inside which is nested
    for e in ops:
        key = (e.get("pid"), e.get("tid"))
        start, end = e["ts"], e["ts"] + e.get("dur", 0)
        if start < inside_until.get(key, -math.inf):
            continue  # nested in a reference op already counted
        inside_until[key] = end
        corr = frozenset(c for t, c in launches.get(key, ()) if start <= t <= end and c in gpu)
        if not corr:
            continue
        flops, bias = reference_flops(e)
        out.append(Instance(e["name"], flops, corr, bias, e.get("args", {}).get("External id")))
    return out


# -- the reference: TraceLens itself, where it imports -----------------------------------------------
def tracelens_instances(path: Path) -> list[Instance] | None:
    """TraceLens' per-instance FLOPs of the reference ops; None where TraceLens does not import."""
    try:
        import logging
        import warnings

        from TraceLens import TreePerfAnalyzer
    except Exception:
        return None
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyzer = TreePerfAnalyzer.from_file(str(path))
        df = analyzer.build_df_unified_perf_table()
    tree = analyzer.tree
    out = []
    for row in df.to_dict("records"):
        if row["name"] not in REFERENCE_OPS or row.get("GFLOPS") is None or math.isnan(row["GFLOPS"]):
            continue
        corr = frozenset(tree.get_UID2event(k["gpu_op_uid"])["args"].get("correlation")
                         for k in row.get("kernel_details") or [])
        out.append(Instance(row["name"], row["GFLOPS"] * 1e9, corr, external_id=row.get("External id")))
    return out


# -- pyprof's side -----------------------------------------------------------------------------------
def pyprof_table(path: Path):
    """(table, correlation id per row) of a trace through ``pyprof parse`` -> ``prof``."""
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.table import build

    records = list(KinetoSource(path).records())
    corr = [r.get("correlationId") for r in records]
    return build(records), corr


def peak_ratios(df) -> tuple[float, float, int]:
    """Largest achieved/peak FLOP/s and bandwidth of any kernel, and how many kernels pyprof flags."""
    from pyprof.prof.devices import DeviceResolver

    resolver = DeviceResolver(None, None, None, None)
    best_f = best_b = 0.0
    for r in df[df["kind"] == "kernel"].itertuples():
        if not (r.sil > 0):
            continue
        dev = resolver.resolve(r.gpu, r.device is None)
        if dev is None:
            continue
        pf = dev.peak(r.dtype, r.tc == "1")
        if pf and r.flops == r.flops and r.flops > 0:
            best_f = max(best_f, r.flops / r.sil * 1e9 / pf)
        if dev.bw and r.bytes == r.bytes and r.bytes > 0:
            best_b = max(best_b, r.bytes / r.sil * 1e9 / dev.bw)
    return best_f, best_b, int(df["beyond"].sum())


def convention(ref: Instance, ours: float) -> str:
    """The documented convention that explains a difference, or ``unexplained``."""
    if ours != ours:
        return "unexplained"
    if ref.bias_flops and abs(ours - (ref.flops - ref.bias_flops)) <= 1e-6 * ref.flops:
        return "bias epilogue not counted (docs/prof.md, Conventions)"
    if ref.backward and abs(ours - 2 * ref.flops) <= 1e-3 * ref.flops:
        return ("backward priced dX + dW where the trace shows one product ran: no requires_grad recorded "
                "(docs/prof.md, Conventions)")
    return "unexplained"


def compare(path: Path, reference: str = "auto") -> tuple[Outcome, str]:
    """The outcome for one trace, and which reference was used."""
    refs = tracelens_instances(path) if reference in ("auto", "tracelens") else None
    used = "tracelens"
    if refs is None:
        if reference == "tracelens":
            raise SystemExit("compare_tracelens: TraceLens does not import here; pip install it from its source "
                             "or pass --reference hand")
        refs, used = hand_instances(load_events(path)), "hand"
    if used == "tracelens":  # the bias part for the conventions, from the same shapes
        hand = {i.correlations: i for i in hand_instances(load_events(path))}
        for r in refs:
            h = hand.get(r.correlations)
            if h is not None:
                r.bias_flops = h.bias_flops
    df, corr = pyprof_table(path)
    inst_of = {}
    rows_of_instance: dict = {}
    for i, (c, opid, d) in enumerate(zip(corr, df["opid"].tolist(), df["dir"].tolist(), strict=True)):
        key = (opid, d) if opid is not None else ("row", i)
        inst_of.setdefault(c, set()).add(key)
        rows_of_instance.setdefault(key, []).append(i)
    flops = df["flops"].to_numpy()
    o = Outcome(Path(path).name)
    # a pyprof instance may hold several reference ops (a linear's backward: the dX and dW mm's): each
    # group of reference ops is compared with the pyprof instances that hold their kernels, summed
    groups: dict[frozenset, list[Instance]] = {}
    for ref in refs:
        keys = frozenset().union(*(inst_of.get(c, set()) for c in ref.correlations))
        groups.setdefault(keys, []).append(ref)
    for keys, members in groups.items():
        vals = [flops[i] for k in keys for i in rows_of_instance[k]]
        known = [v for v in vals if v == v]
        ours = float(sum(known)) if known else float("nan")
        ref = members[0] if len(members) == 1 else Instance(
            "+".join(sorted({m.name for m in members})), sum(m.flops for m in members),
            frozenset().union(*(m.correlations for m in members)), sum(m.bias_flops for m in members))
        ref.backward = any(k[1] == "bprop" for k in keys)
        o.instances += len(members)
        if ours == ours and abs(ours - ref.flops) <= TOLERANCE * max(ref.flops, 1.0):
            o.agree += len(members)
        else:
            o.differ.extend([(ref.name, ref.flops, ours, convention(ref, ours))] * len(members))
    row_of = {c: i for i, c in enumerate(corr) if c is not None}
    sil, kind = df["sil"].to_numpy(), df["kind"].tolist()
    for ref in refs:  # the split rule: the instance's FLOPs on its GEMM/conv/attention kernel, not beside it
        rows = [row_of[c] for c in ref.correlations if c in row_of and kind[row_of[c]] == "kernel"]
        if rows:
            main = max(rows, key=lambda i: sil[i])
            v = flops[main]
            if v == v and abs(v - (ref.flops - ref.bias_flops)) <= TOLERANCE * ref.flops:
                o.on_gemm_kernel += 1
    o.max_flops_ratio, o.max_bw_ratio, o.above_peak = peak_ratios(df)
    return o, used


def table(outcomes: list[tuple[Outcome, str]], details: bool = False) -> str:
    head = ("trace", "reference", "instances", "agree ≤2%", "differ", "unexplained", "on GEMM kernel", "max FLOP/s÷peak",
            "max GB/s÷peak", "above peak")
    rows = [head]
    for o, used in outcomes:
        unexplained = sum(1 for d in o.differ if d[3] == "unexplained")
        rows.append((o.trace.removeprefix("AMD-AGI__TraceLens__").removesuffix(".json.gz"), used, str(o.instances),
                     str(o.agree), str(len(o.differ)), str(unexplained), str(o.on_gemm_kernel), f"{o.max_flops_ratio:.3f}",
                     f"{o.max_bw_ratio:.3f}", str(o.above_peak)))
    width = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip() for r in rows]
    for o, _ in outcomes:
        conv: dict[str, int] = {}
        for d in o.differ:
            conv[d[3]] = conv.get(d[3], 0) + 1
        for text, n in conv.items():
            lines.append(f"{o.trace}: {n} differ: {text}")
        if details:
            for name, ref, ours, text in o.differ:
                lines.append(f"  {name}: reference {ref:.6g}, pyprof {ours:.6g} ({ours / ref - 1:+.2%}): {text}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, help="torch.profiler traces (default: the corpus' TraceLens traces)")
    ap.add_argument("--reference", choices=("auto", "tracelens", "hand"), default="auto",
                    help="TraceLens' count, the hand count, or TraceLens where it imports (default)")
    ap.add_argument("--details", action="store_true", help="list every instance that differs")
    args = ap.parse_args(argv)
    traces = args.traces or default_traces()
    if not traces:
        print(f"compare_tracelens: no traces given and none found under {CORPUS}", file=sys.stderr)
        return 2
    outcomes = [compare(p, args.reference) for p in traces]
    sys.stdout.write(table(outcomes, args.details))
    return 0 if all(o.ok for o, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
