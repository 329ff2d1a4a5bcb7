"""CPU findings over kernel records, with numbers: thread oversubscription, layout reorders and copies,
and the Python call sites of the hottest ops. ``pyprof run`` prints them after the summary.

* **Threads**: intra-op threads x processes on the machine vs its physical cores (hyper-threads do
  not add FLOP/s to GEMMs and convolutions), and the OpenMP/MKL variables that set them.
  The thread count comes from the profiled process (``pyprof run`` records ``torch.get_num_threads()``);
  processes from ``LOCAL_WORLD_SIZE`` or the number of processes in the records.
* **Reorders and copies**: time in ops that only move data between layouts (:data:`REORDER_OPS`: oneDNN
  reorders, ``aten::contiguous``, ``clone``, ``copy_``, ...); a kernel counts when it or any op open
  around it is one of them, so ``contiguous -> clone -> copy_`` is counted once, under the outermost.
* **Hottest ops**: the ops with the most kernel time (instances summed per op and direction), each
  with its share of all kernel time and, under it, every distinct call site that op was called from,
  with the site's share of the op's time, largest first (:data:`SITES_SHOWN`, then ``+N more``). A call site
  is the record's ``trace`` (innermost frame shown) together with its innermost layer: one line
  calling three layers of an ``nn.Sequential`` is three call sites, so an op summed over all of them is
  never shown as if it came from one.

No torch import: works on a record file from any machine (:func:`findings` takes the environment
as a dict; :func:`machine_env` reads this machine's).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

REORDER_OPS = frozenset({
    "aten::to_mkldnn", "aten::to_dense", "aten::mkldnn_reorder_conv2d_weight",
    "aten::mkldnn_reorder_conv3d_weight", "aten::_mkldnn_reshape", "aten::_mkldnn_transpose",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from",
    "aten::_copy_from_and_resize", "aten::to_padded_tensor",
})
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "OMP_PROC_BIND",
               "KMP_BLOCKTIME", "GOMP_CPU_AFFINITY")


@dataclass
class Finding:
    kind: str                 # "threads", "reorders", "hot_ops"
    title: str
    lines: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    warn: bool = False        # a problem worth acting on


def physical_cores() -> int | None:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo; None where that cannot be read."""
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        return None
    cores, phys = set(), "0"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            phys = value.strip()
        elif key == "core id":
            cores.add((phys, value.strip()))
    return len(cores) or None


def machine_env() -> dict[str, Any]:
    """This machine's CPUs and thread variables (no torch)."""
    from pyprof.machine import usable_cpus

    cpus = usable_cpus()
    return {
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(cpus) if cpus else os.cpu_count(),
        "physical_cores": physical_cores(),
        "processes": int(os.environ.get("LOCAL_WORLD_SIZE") or 1),
        "vars": {k: os.environ[k] for k in THREAD_VARS if k in os.environ},
    }


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def thread_finding(env: dict[str, Any], records: list[dict[str, Any]] | None = None) -> Finding | None:
    threads = env.get("intra_op_threads")
    cores = env.get("physical_cores") or env.get("usable_cpus") or env.get("logical_cpus")
    if not threads or not cores:
        return None
    procs = int(env.get("processes") or 1)
    if records:
        procs = max(procs, len({r.get("pid") for r in records if r.get("pid") is not None}))
    total = threads * procs
    usable = env.get("usable_cpus")
    f = Finding("threads", "CPU threads", numbers={"intra_op_threads": threads, "processes": procs,
                                                    "threads_total": total, "physical_cores": cores})
    f.lines.append(f"{threads} intra-op threads x {procs} process(es) = {total} threads on "
                   f"{cores} physical cores" + (f" ({usable} usable CPUs)" if usable else ""))
    variables = env.get("vars") or {}
    if variables:
        f.lines.append("set: " + ", ".join(f"{k}={v}" for k, v in sorted(variables.items())))
    else:
        f.lines.append("OMP_NUM_THREADS and MKL_NUM_THREADS are not set (torch picks the thread count)")
    omp = variables.get("OMP_NUM_THREADS")
    if omp and omp.isdigit() and int(omp) != threads:
        f.lines.append(f"OMP_NUM_THREADS={omp} but torch runs {threads} intra-op threads "
                       "(torch.set_num_threads overrides it)")
    per_proc = max(cores // procs, 1)
    if total > cores:
        f.warn = True
        f.lines.append(f"oversubscribed by {total / cores:.1f}x: set OMP_NUM_THREADS={per_proc} "
                       f"(physical cores / processes) or torch.set_num_threads({per_proc})")
    elif total < cores:
        f.lines.append(f"{cores - total} physical cores idle: up to {per_proc} threads per process would fit")
    return f


def _is_reorder(rec: dict[str, Any]) -> str | None:
    """The outermost reorder/copy op open at the kernel (``aten::contiguous`` rather than the
    ``aten::copy_`` inside it), or None."""
    for r in rec.get("ranges") or ():
        text = r.get("text") if isinstance(r, dict) else None
        if text in REORDER_OPS:
            return text
    for name in (rec.get("kShortName"), rec.get("aten")):
        if name in REORDER_OPS:
            return name
    return None


def reorder_finding(records: list[dict[str, Any]]) -> Finding:
    total = sum(r.get("kDuration") or 0 for r in records)
    by_op: Counter = Counter()
    calls: Counter = Counter()
    by_site: Counter = Counter()
    for rec in records:
        op = _is_reorder(rec)
        if op is None:
            continue
        d = rec.get("kDuration") or 0
        by_op[op] += d
        calls[op] += 1
        site = (rec.get("trace") or [None])[0] or ("/".join(rec.get("layer") or []) or None)
        by_site[site or "(unknown call site)"] += d
    spent = sum(by_op.values())
    share = spent / total if total else 0.0
    f = Finding("reorders", "Layout reorders and copies",
                numbers={"ns": spent, "share": share, "by_op": dict(by_op)})
    f.lines.append(f"{_ms(spent)} = {share:.1%} of {_ms(total)} kernel time in {sum(calls.values())} "
                   "reorder/copy kernels")
    for op, ns in by_op.most_common(5):
        f.lines.append(f"  {op:<36} {_ms(ns):>12}  {calls[op]} calls")
    if by_site:
        site, ns = by_site.most_common(1)[0]
        f.lines.append(f"  most from {site} ({_ms(ns)})")
    f.warn = share >= 0.10
    return f


SITES_SHOWN = 3
"""Call sites listed under each hot op; the rest are summed on one ``+N more`` line."""


def _dur(ns: float) -> str:
    """A duration in the unit a person reads at a glance: ``850 ns``, ``12.4 us``, ``3.07 ms``, ``1.52 s``."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            v = ns / scale
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}"
    return f"{ns:.0f} ns"


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _site_labels(keys: list[tuple[tuple[str, ...], str | None]]) -> dict:
    """Display text per call site key ``(trace, layer)``: the innermost frame and ``[layer]``; where two
    sites would read the same (same line and layer, reached through different callers), outer frames
    are added (``inner < caller``) until they differ."""
    def label(key, depth):
        trace, layer = key
        text = " < ".join(trace[:depth]) if trace else "(no call site)"
        return f"{text} [{layer}]" if layer else text

    out: dict = {}
    groups: dict[str, list] = defaultdict(list)
    for key in keys:
        groups[label(key, 1)].append(key)
    for group in groups.values():
        deepest, depth = max(len(k[0]) for k in group), 1
        while depth < deepest and len({label(k, depth) for k in group}) < len(group):
            depth += 1
        out.update((k, label(k, depth)) for k in group)
    return out


def hot_ops_finding(records: list[dict[str, Any]], top: int = 5) -> Finding:
    """The ``top`` ops by kernel time (records grouped by ``op`` and ``dir``), each followed by the
    distinct call sites its time was spent at, with each site's share of the op's time.

    ``numbers["ops"]``: per op ``op``, ``ns``, ``share`` (of all kernel time; None when that is 0),
    ``site`` (the site with most time) and ``sites`` (every site, largest first: ``site``, ``ns``,
    ``share`` of the op's time, None when the op's time is 0)."""
    total = sum(r.get("kDuration") or 0 for r in records)
    time: Counter = Counter()
    sites: dict[str, Counter] = defaultdict(Counter)
    for rec in records:
        key = rec.get("op") or rec.get("kShortName") or "?"
        if rec.get("dir"):
            key = f"{key} ({rec['dir']})"
        d = rec.get("kDuration") or 0
        time[key] += d
        layer = rec.get("layer") or []
        sites[key][(tuple(rec.get("trace") or ()), layer[-1] if layer else None)] += d
    f = Finding("hot_ops", "Hottest ops and their call sites", numbers={"total_ns": total})
    for key, ns in time.most_common(top):
        ranked = sites[key].most_common()
        labels = _site_labels([k for k, _ in ranked])
        n = len(ranked)
        f.lines.append(f"{key:<32} {_dur(ns):>9}  {_pct(ns, total):>6} of kernel time, "
                       f"{n} call site{'s' if n != 1 else ''}")
        for site, site_ns in ranked[:SITES_SHOWN]:
            f.lines.append(f"  {_pct(site_ns, ns):>6} {_dur(site_ns):>9}  {labels[site]}")
        if n > SITES_SHOWN:
            rest = sum(site_ns for _, site_ns in ranked[SITES_SHOWN:])
            f.lines.append(f"  {_pct(rest, ns):>6} {_dur(rest):>9}  +{n - SITES_SHOWN} more call sites")
        f.numbers.setdefault("ops", []).append({
            "op": key, "ns": ns, "share": ns / total if total else None, "site": labels[ranked[0][0]],
            "sites": [{"site": labels[k], "ns": v, "share": v / ns if ns else None} for k, v in ranked]})
    return f


def findings(records: Iterable[dict[str, Any]], env: dict[str, Any] | None = None, top: int = 5) -> list[Finding]:
    """All CPU findings over ``records`` (CPU op records of a torch.profiler trace, or any records).

    ``env``: the profiled process's settings (``intra_op_threads``, ``processes``, ``physical_cores``,
    ``vars``); ``None`` reads this machine (:func:`machine_env`) without a thread count.
    """
    records = list(records)
    out: list[Finding] = []
    t = thread_finding(env if env is not None else machine_env(), records)
    if t is not None:
        out.append(t)
    if records:
        out.append(reorder_finding(records))
        out.append(hot_ops_finding(records, top))
    return out


def format_findings(items: list[Finding]) -> str:
    lines = ["CPU findings"]
    for f in items:
        lines.append(f"- {f.title}{' (!)' if f.warn else ''}")
        lines.extend(f"    {line}" for line in f.lines)
    return "\n".join(lines) + "\n"
