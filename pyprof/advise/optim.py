"""``optim``: an optimizer that loops over its parameters (``foreach=False``: a few small ops per
parameter) where ``foreach=True`` or ``fused=True`` runs one pass over all of them.

The records' ``optim`` direction holds the optimizer's ops (``pyprof.init`` marks every
``optimizer.step``); a step already made of ``_foreach_*`` or ``_fused_*`` ops gets no advice. The
loop's ops over one parameter's tensors come one after another: a run of ops over tensors of one size
(scalar ops, the step counter and ``.item()``, left out) is one parameter's ops, or several
parameters' of one size one after another; the shortest run is one parameter's ``m`` ops (a model
whose every parameter follows another of its size would count half its parameters).
"""

from __future__ import annotations

import re
import statistics
from itertools import groupby
from operator import itemgetter

from pyprof.advise.common import MIN_KERNEL_NS, Advice, Context, largest, num, numel, withdraw
from pyprof.prof.units import duration as us

#: tensors a fused update reads or writes per parameter element: Adam/AdamW p, g, m, v read and p, m,
#: v written; SGD with momentum p, g, buf read and p, buf written (3 without momentum); Adagrad and
#: RMSprop one state: 5
TENSORS = {"Adam": 7, "AdamW": 7, "NAdam": 7, "RAdam": 7, "Adamax": 7, "SGD": 5, "Adagrad": 5, "RMSprop": 5}
ITEMSIZE = {"float32": 4, "float": 4, "float64": 8, "double": 8, "float16": 2, "half": 2, "bfloat16": 2,
            "c10::Half": 2, "c10::BFloat16": 2}
_CLS = (re.compile(r'"k":"optim","cls":"(\w+)"'), re.compile(r"Optimizer\.step#(\w+)\.step"))

#: why CPU optimizer loops get no number (scripts/validate.py --advise, docs/advise.md)
CPU_WITHDRAWN = ("withdrawn on the CPU: a profiled CPU op's self time carries the profiler's cost per op, and an "
                 "optimizer loop is hundreds of small ops: the model gave 2.6-3 times the saving fused=True "
                 "measured (docs/advise.md)")

KINDS = {
    "optim": ("Use the optimizer's multi-tensor or fused implementation: `torch.optim.AdamW(params, foreach=True)` "
              "or `fused=True` (Adam, AdamW, SGD, Adagrad; CPU and CUDA).",
              "per optimizer step (per thread, or per GPU): k = tensors the fused update touches per element "
              "(Adam/AdamW 7, SGD 5 with momentum, 3 without), runs = the loop's ops over tensors of one size n "
              "(m = the shortest run: ops per parameter), B_fused = sum over runs of k x itemsize x n x len/m; "
              "T_fused = B_fused x sum(t) / sum(bytes) (the loop's achieved bandwidth); saved = sum(t) - T_fused, "
              "sum(t) = the time inside the loop's ops (kernels; CPU ops' self time), the median step's times "
              "the steps. The Python between the ops "
              "is left out: in a profiled run it is mostly the instrumentation's (scripts/validate.py --advise: "
              "145 ms of a 179 ms loop whose unprofiled step took 45 ms). CPU records: shown without a number "
              "(withdrawn after measurement: docs/advise.md)"),
}


def _cls(rec: dict) -> str | None:
    texts = (r.get("text") for r in rec.get("ranges") or () if isinstance(r, dict))
    return next((m.group(1) for t in texts if isinstance(t, str) for pat in _CLS if (m := pat.search(t))), None)


def _zero_grad(rec: dict) -> bool:
    return any("zero_grad" in str(r.get("text") or "") for r in rec.get("ranges") or () if isinstance(r, dict))


def _itemsize(rec: dict) -> int | None:
    t = largest(rec)
    return ITEMSIZE.get(str(t.get("dtype") or "").removeprefix("torch.")) if t else None


def _add(items: list, rec: dict, opid, t: float, nbytes: float) -> None:
    """Append op instance [opid, n, itemsize, t, bytes, start, end], or add another kernel's to the last."""
    start, end = rec.get("start") or 0, rec.get("end") or 0
    if items and opid is not None and items[-1][0] == opid:
        it = items[-1]
        it[3], it[4], it[6] = it[3] + t, it[4] + nbytes, max(it[6], end)
    else:
        items.append([opid, numel(rec), _itemsize(rec), t, nbytes, start, end])


def _windows(ctx: Context) -> tuple[dict[tuple, list], set[str]] | None:
    """The optimizer's op instances by (step, lane) and its classes; None for a step already one pass."""
    from pyprof.report.timeline import step_of

    windows: dict[tuple, list] = {}
    classes: set[str] = set()
    cols = ("dir", "sil", "bytes", "opid", "op")
    for rec, d, sil, nbytes, opid, op in zip(ctx.records, *(ctx.df[c] for c in cols), strict=True):
        if d != "optim" or rec.get("kind", "kernel") != "kernel" or _zero_grad(rec):
            continue
        cls = _cls(rec) or ""
        name = f"{op} {rec.get('aten') or ''} {rec.get('kShortName') or ''} {cls}".lower()
        if "_foreach_" in name or "_fused_" in name or "fused" in cls.lower():
            return None
        classes.update([cls] if cls else ())
        lane = ("gpu", rec["device"]) if rec.get("device") is not None else ("cpu", rec.get("pid"), rec.get("tid"))
        _add(windows.setdefault((step_of(rec), lane), []), rec, opid, num(sil), num(nbytes))
    return windows, classes


def _runs(items: list) -> list[tuple[int, int, int | None]]:
    """Runs (n, length, itemsize) of one tensor size; scalar ops (the step counter, .item()) are none."""
    sized = [(n, size) for _, n, size, *_ in items if n > 1]
    return [(n, len(run := list(grp)), run[0][1]) for n, grp in groupby(sized, key=itemgetter(0))]


def _fused_bytes(cls: str | None, runs_of: dict, m: int) -> tuple[float | None, str | None]:
    """Bytes a fused update moves over all runs, or None and why not."""
    k = TENSORS.get(cls or "")
    if k == 5 and cls == "SGD" and m < 2:
        k = 3
    if k is None:
        return None, f"no fused-update model for {cls}" if cls else "several optimizer classes or an unknown one"
    if any(size is None for runs in runs_of.values() for *_, size in runs):
        return None, "a parameter dtype without a size"
    return sum(k * size * n * length / m for runs in runs_of.values() for n, length, size in runs), None


def _step_times(windows: dict[tuple, list]) -> tuple[float, float]:
    """The median step's time in the ops times the steps (not one paused op's), and first-to-last spans."""
    by_step: dict = {}
    for (step, _), items in windows.items():
        by_step[step] = by_step.get(step, 0.0) + sum(it[3] for it in items)
    span = sum(max(it[6] for it in items) - min(it[5] for it in items) for items in windows.values())
    return statistics.median(by_step.values()) * len(by_step), span


def optim(ctx: Context) -> Advice | None:
    windows, classes = _windows(ctx) or ({}, set())
    if not windows:
        return None
    change, formula = KINDS["optim"]
    runs_of = {key: _runs(items) for key, items in windows.items()}
    lengths = [r[1] for runs in runs_of.values() for r in runs]
    cls = sorted(classes)[0] if len(classes) == 1 else None
    every = [it for items in windows.values() for it in items]
    t_ops, b_loop = sum(it[3] for it in every), sum(it[4] for it in every)
    now, span = _step_times(windows)
    ev = [(f"{cls or 'optimizer'} step: {len(every) / ctx.per_step:.0f} ops per step, "
           f"{len(lengths) / len(windows):.0f} parameter runs of {min(lengths, default=0)}+ ops; "
           f"{us(t_ops / ctx.per_step)} per step inside the ops, {us(span / ctx.per_step)} from the first to the last",
           None)]
    b_fused, why = (_fused_bytes(cls, runs_of, min(lengths)) if lengths and b_loop > 0 and t_ops > 0 else
                    (None, "the optimizer's ops have no byte counts (no shapes recorded)"))
    if b_fused is None:
        return ctx.make("optim", change, formula, None, ev, len(every), now, why)
    gpu = any(lane[0] == "gpu" for _, lane in windows)
    fused = max(b_fused * now / b_loop, MIN_KERNEL_NS * len(windows) if gpu else 0.0)  # one kernel per step
    if fused >= now:
        return None
    ev.append((f"fused: {b_fused / ctx.per_step / 1e6:.2f} MB per step at the loop's "
               f"{b_loop / t_ops:.2f} GB/s = {us(fused / ctx.per_step)}", None))
    advice = ctx.make("optim", change, formula, now - fused, ev, len(every), now)
    return withdraw(advice, CPU_WITHDRAWN) if not gpu else advice
