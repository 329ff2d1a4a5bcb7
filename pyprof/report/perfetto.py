"""A profile as a trace for Perfetto (ui.perfetto.dev) and chrome://tracing: the Trace Event Format's JSON
(``{"traceEvents": [...]}``), with pyprof's answer on the timeline.

* Every kernel (a CPU trace: every CPU op) is a complete event (``ph`` ``X``) on its device's process
  (``GPU N``, process id N; ``CPU``, the process's own) and its stream's (thread's) track, its args
  pyprof's columns for it (:data:`ARGS`; ``idx`` is its row of ``pyprof prof``). An unknown value is
  left out, never 0.
* Module ranges are slices on a track of their own per device (``modules``): for each depth of the layer
  path, a run of consecutive kernels (in start order) with the same path to that depth is one slice,
  from its first kernel's start to its last one's end (cut where the next run or the enclosing slice
  begins or ends, so they nest): the GPU time each module's kernels span, not the CPU range.
* The profiled steps (the header's ``ProfilerStep#N``) are slices on the ``pyprof steps`` process, with
  per-step counters there: kernel time, FLOPs and kernels of the step's records.

Times are microseconds from the first event (``otherData.time_zero_ns``: that instant in the records'
clock), so that nvprof's absolute nanoseconds keep their precision in a double.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
import pandas as pd

from pyprof.atomic import atomic_output
from pyprof.version import __version__

#: pyprof's columns carried as each kernel event's args, under their own names but for :data:`RENAMED`
ARGS = ("idx", "op", "dir", "layer", "module", "trace", "params", "flops", "bytes", "ideal", "gap", "bound",
        "tc", "priced", "step", "sil", "note")
RENAMED = {"trace": "call site", "ideal": "ideal (ns)", "sil": "sil (ns)"}
# As Kineto writes them: a GPU's process id is its device number, its thread ids its streams; CPU ops keep
# their process and thread ids. These ids are none of those:
STEPS_PID = 2**30  # the steps and their counters
NO_PID = 2**30 + 1  # CPU ops of an unknown process
MODULES_TID = 2**30  # each process's module track


def _value(v: Any) -> Any:
    """A JSON value for an arg (None: unknown, left out): lists joined as ``pyprof prof`` prints them."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v in ("", "-")):
        return None
    if isinstance(v, (list, tuple)):
        return ":".join(map(str, v)) if v else None
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    return v


def _module_slices(rows: list[tuple[int, int, tuple]], pid: int, us, dur) -> list[dict]:
    """The module slices of one process's kernels ``(start, end, layer path)``, start order (see above)."""
    out: list[dict] = []
    spans = [(rows, 0, None)]  # (kernels, depth, enclosing end)
    while spans:
        ks, depth, limit = spans.pop()
        runs: list[list] = []  # [name, start, kernels]: a kernel without a module at this depth ends a run
        last = None
        for k in ks:
            name = k[2][depth] if len(k[2]) > depth else None
            if name is not None and name == last:
                runs[-1][2].append(k)
            elif name is not None:
                runs.append([name, k[0], [k]])
            last = name
        for i, (name, start, kids) in enumerate(runs):
            end = max(k[1] for k in kids)
            if i + 1 < len(runs):
                end = min(end, runs[i + 1][1])
            if limit is not None:
                end = min(end, limit)
            out.append({"ph": "X", "name": name, "cat": "module", "pid": pid, "tid": MODULES_TID, "ts": us(start),
                        "dur": dur(start, end), "args": {"layer": ":".join(kids[0][2][:depth + 1])}})
            spans.append((kids, depth + 1, end))
    return out


def events(p) -> tuple[list[dict], int]:
    """The trace events of :class:`pyprof.report.profile.Profile` ``p``, and the time zero (ns)."""
    df, recs = p.df, p.records
    steps = (df.attrs.get("header") or {}).get("steps") or []
    starts = [r["start"] for r in recs if type(r.get("start")) is int] + [s[1] for s in steps]
    zero = min(starts) if starts else 0

    def us(t: int) -> float:
        return round((t - zero) / 1000, 3)

    def dur(t0: int, t1: int) -> float:
        return round(max(t1 - t0, 0) / 1000, 3)

    out: list[dict] = [{"ph": "M", "name": "process_name", "pid": STEPS_PID, "tid": 0, "args": {"name": "pyprof steps"}}]
    names: dict = {}
    per_pid: dict[int, list] = {}
    cols = {c: df[c].tolist() for c in ARGS if c in df}
    for i, rec in enumerate(recs):
        t0, t1 = rec.get("start"), rec.get("end")
        if type(t0) is not int or type(t1) is not int:
            continue
        pid, tid, cat, pname, tname = _track(rec)
        names.setdefault(pid, pname)
        names.setdefault((pid, tid), tname)
        args = {RENAMED.get(c, c): v for c, col in cols.items() if (v := _value(col[i])) is not None}
        out.append({"ph": "X", "name": rec.get("kShortName") or "?", "cat": cat,
                    "pid": pid, "tid": tid, "ts": us(t0), "dur": dur(t0, t1), "args": args})
        per_pid.setdefault(pid, []).append((t0, t1, tuple(rec.get("layer") or ())))
    out += [{"ph": "M", "name": "process_name", "pid": key, "tid": 0, "args": {"name": name}} if isinstance(key, int)
            else {"ph": "M", "name": "thread_name", "pid": key[0], "tid": key[1], "args": {"name": name}}
            for key, name in names.items()]
    for pid, rows in per_pid.items():
        rows.sort(key=lambda r: r[0])
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": MODULES_TID,
                    "args": {"name": "modules (the span of their kernels)"}})
        out += _module_slices(rows, pid, us, dur)
    return out + _steps(df, steps, us, dur), zero


def _track(rec: dict) -> tuple:
    """(pid, tid, category, process name, thread name) of a record's slice: a CPU op's process and thread,
    a kernel's GPU and stream."""
    dev = rec.get("device")
    if dev is None:
        pid = rec.get("pid") if type(rec.get("pid")) is int else NO_PID
        return pid, rec.get("tid") or 0, "cpu_op", f"CPU (process {pid})", f"thread {rec.get('tid') or 0}"
    gpu = f" ({rec['gpu']})" if rec.get("gpu") else ""
    return int(dev), rec.get("stream") or 0, "kernel", f"GPU {dev}{gpu}", f"stream {rec.get('stream') or 0}"


def _steps(df: pd.DataFrame, steps: list, us, dur) -> list[dict]:
    """The steps as slices, and per-step counters (the last set back to 0 at the last step's end)."""
    if not steps:
        return []
    out: list[dict] = [{"ph": "M", "name": "thread_name", "pid": STEPS_PID, "tid": 1, "args": {"name": "steps"}}]
    by = df.groupby("step")
    sil, flops, n = by["sil"].sum(), by["flops"].sum(min_count=1), by.size()
    for num, t0, t1 in steps:
        out.append({"ph": "X", "name": f"ProfilerStep#{num}", "cat": "step", "pid": STEPS_PID, "tid": 1, "ts": us(t0),
                    "dur": dur(t0, t1), "args": {"step": num}})
        values = {"kernel time (ms)": float(sil.get(num, 0.0)) / 1e6, "kernels": int(n.get(num, 0)),
                  "GFLOP": None if pd.isna(flops.get(num)) else float(flops[num]) / 1e9}
        out += [{"ph": "C", "name": f"step {k}", "pid": STEPS_PID, "tid": 0, "ts": us(t0), "args": {"value": v}}
                for k, v in values.items() if v is not None]
    last = max(s[2] for s in steps)
    out += [{"ph": "C", "name": f"step {k}", "pid": STEPS_PID, "tid": 0, "ts": us(last), "args": {"value": 0}}
            for k in ("kernel time (ms)", "kernels", "GFLOP")]
    return out


def write(p, path: str) -> int:
    """Write ``p``'s trace to ``path`` (all or nothing); returns its size in bytes."""
    evs, zero = events(p)
    data = orjson.dumps({"traceEvents": evs, "displayTimeUnit": "ns",
                         "otherData": {"pyprof": __version__, "source": p.name, "time_zero_ns": zero}})
    with atomic_output(path, "wb") as fh:
        fh.write(data)
    return len(data)
