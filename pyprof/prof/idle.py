"""GPU idle time and kernel launches, per device and per step: why the GPU waited, and for what.

``idle(records)`` takes the GPU activities (kernels, memcpy, memset) of each device (its ordinal; the
activities of every process on it) in start order, and puts each gap between busy periods in one
category (``host``, ``wait`` or ``other``) by the launch call of the activity that ends it. Steps are
``ProfilerStep#N``, found by launch time (the autograd thread has no step range open).

``by_stream=True`` does the same per stream instead of per device: Holistic Trace Analysis' idle time
breakdown works this way. docs/prof.md ("GPU idle time and launches") states the rules, the columns and
the differences from HTA.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from pyprof.prof.intervals import union_length

#: a kernel under this many ns is tiny
TINY_NS = 10_000
STEP_PREFIX = "ProfilerStep#"
GPU_KINDS = frozenset({"kernel", "memcpy", "memset"})

IDLE_COLUMNS = (
    ("device", "Device", "str", "Device ordinal (by stream: device:stream)."),
    ("step", "Step", "str", "ProfilerStep#N open at the launches; 'all' for the device's whole timeline; '-' none."),
    ("busy", "Busy(ns)", "sci", "Time some GPU activity (kernel, memcpy, memset) ran."),
    ("idle", "Idle(ns)", "sci", "Gaps between busy periods (each put in the step of the activity ending it)."),
    ("idle_pct", "Idle(%)", "float", "idle / (busy + idle)."),
    ("host", "Host(ns)", "sci", "Idle with nothing queued: the next launch call began after the gap began."),
    ("wait", "Wait(ns)", "sci", "Idle with the next activity queued before the gap: a dependency or launch latency."),
    ("other", "Other(ns)", "sci", "Idle before an activity whose launch is not in the trace."),
    ("kernels", "Kernels", "int", "Kernels."),
    ("delay", "Delay(ns)", "sci", "Mean launch delay: kernel start - launch call start."),
    ("short_pct", "Short(%)", "float", "Kernels that ran shorter than their launch call took."),
    ("tiny_pct", "Tiny(%)", "float", f"Kernels under {TINY_NS // 1000} us."),
    ("tiny_time_pct", "TinyT(%)", "float", "Tiny kernels' share of kernel time."),
)
IDLE_NAMES = tuple(c[0] for c in IDLE_COLUMNS)
IDLE_DROP = ("tiny_time_pct", "other", "kernels", "delay", "busy")


def _step(rec: dict[str, Any]) -> str:
    for r in rec.get("ranges") or ():
        text = r.get("text") if isinstance(r, dict) else None
        if isinstance(text, str) and text.startswith(STEP_PREFIX):
            return text
    return "-"


def activities(records: Iterable[dict[str, Any]], by_stream: bool = False) -> dict[str, pd.DataFrame]:
    """Per device (or device and stream) key, its GPU activities as columns: start, end, api_start,
    api_end (NaN without a launch), kernel (bool), step; in start order."""
    rows: dict[str, list] = {}
    for rec in records:
        if rec.get("device") is None or rec.get("kind", "kernel") not in GPU_KINDS:
            continue
        start, end = rec.get("start"), rec.get("end")
        if type(start) is not int:
            continue
        if type(end) is not int:
            end = start + (rec.get("kDuration") or 0)
        key = f"{rec['device']}" + (f":{rec.get('stream')}" if by_stream else "")
        a0, a1 = rec.get("apiStart"), rec.get("apiEnd")
        rows.setdefault(key, []).append((start, end, a0 if type(a0) is int else np.nan,
                                         a1 if type(a1) is int else np.nan, rec.get("kind", "kernel") == "kernel",
                                         _step(rec)))
    return {key: _timeline(r) for key, r in rows.items()}


def _timeline(rows: list[tuple]) -> pd.DataFrame:
    """Activities ``(start, end, api_start, api_end, kernel, step)`` as columns in start order, steps by time."""
    df = pd.DataFrame(rows, columns=["start", "end", "api_start", "api_end", "kernel", "step"])
    df["step"] = _steps_by_time(df)
    return df.sort_values(["start", "end"], kind="stable").reset_index(drop=True)


def _steps_by_time(df: pd.DataFrame) -> np.ndarray:
    """Each activity's step by time: the last step whose first launch came at or before its launch (its
    start without one). The ``ProfilerStep#N`` range is open on the thread that runs the step, so the
    kernels other threads launch (the autograd engine's backward) find none around their launch."""
    named = df[df["step"] != "-"]
    if named.empty:
        return df["step"].to_numpy()
    when = named["api_start"].where(named["api_start"].notna(), named["start"])
    first = when.groupby(named["step"]).min().sort_values(kind="stable")
    t = df["api_start"].where(df["api_start"].notna(), df["start"]).to_numpy(dtype=float)
    pos = np.searchsorted(first.to_numpy(dtype=float), t, side="right") - 1
    names = np.asarray(first.index.tolist() + ["-"], dtype=object)
    return names[np.where(pos >= 0, pos, len(first))]


def gaps(acts: pd.DataFrame) -> pd.DataFrame:
    """The idle gaps of one device's activities (start order): gap start, end, category, step."""
    start = acts["start"].to_numpy(dtype=np.int64)
    end = acts["end"].to_numpy(dtype=np.int64)
    if len(start) < 2:
        return pd.DataFrame(columns=["g0", "g1", "cat", "step"])
    busy_to = np.maximum.accumulate(end)[:-1]  # the busy period's end before each next activity
    nxt = np.arange(1, len(start))
    is_gap = start[1:] > busy_to
    idx = nxt[is_gap]
    g0, g1 = busy_to[is_gap], start[idx]
    api = acts["api_start"].to_numpy(dtype=float)[idx]
    cat = np.where(np.isnan(api), "other", np.where(api > g0, "host", "wait"))
    return pd.DataFrame({"g0": g0, "g1": g1, "cat": cat, "step": acts["step"].to_numpy()[idx]})


def _by_step(acts: pd.DataFrame, gp: pd.DataFrame, per_step: bool):
    """``(step, its activities, its gaps)`` per step (``per_step``; none where no activity has a step),
    then ``("all", acts, gp)``: the whole timeline."""
    steps = pd.unique(acts["step"]) if per_step else []
    if len(steps) == 1 and steps[0] == "-":
        steps = []
    for step in steps:
        yield step, acts[acts["step"] == step], gp[gp["step"] == step]
    yield "all", acts, gp


def _row(key: str, step: str, acts: pd.DataFrame, gp: pd.DataFrame) -> dict[str, Any]:
    busy = int(union_length(acts["start"].to_numpy(dtype=np.int64), acts["end"].to_numpy(dtype=np.int64)))
    length = (gp["g1"] - gp["g0"]).astype(float)
    by = {c: float(length[gp["cat"] == c].sum()) for c in ("host", "wait", "other")}
    idle = float(length.sum())
    k = acts[acts["kernel"]]
    dur = (k["end"] - k["start"]).to_numpy(dtype=float)
    call = (k["api_end"] - k["api_start"]).to_numpy(dtype=float)
    delay = (k["start"] - k["api_start"]).to_numpy(dtype=float)
    known = ~np.isnan(call)
    n = len(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"device": key, "step": step, "busy": float(busy), "idle": idle,
                "idle_pct": idle / (busy + idle) * 100 if busy + idle > 0 else np.nan, **by, "kernels": n,
                "delay": float(np.nanmean(delay)) if known.any() else np.nan,
                "short_pct": float((dur[known] < call[known]).mean() * 100) if known.any() else np.nan,
                "tiny_pct": float((dur < TINY_NS).mean() * 100) if n else np.nan,
                "tiny_time_pct": float(dur[dur < TINY_NS].sum() / dur.sum() * 100) if n and dur.sum() > 0 else np.nan}


def idle(records: Iterable[dict[str, Any]], by_stream: bool = False, per_step: bool = True) -> pd.DataFrame:
    """One row per device (or device and stream) and step, then its ``all`` row (columns
    :data:`IDLE_NAMES`); empty where the records hold no GPU activity."""
    rows = [_row(key, *part) for key, acts in sorted(activities(records, by_stream).items())
            for part in _by_step(acts, gaps(acts), per_step)]
    return pd.DataFrame(rows, columns=list(IDLE_NAMES))


CPU_IDLE_COLUMNS = (
    ("thread", "Thread", "str", "Process:thread that ran ops."),
    ("step", "Step", "str", "ProfilerStep#N (by time, as on a GPU); 'all' for the thread's whole timeline."),
    ("busy", "InOps(ns)", "sci", "Time inside some op on the thread."),
    ("idle", "Outside(ns)", "sci", "Gaps between ops on the thread: Python between ops, dataloader waits, "
                                   "blocking waits outside ops."),
    ("idle_pct", "Outside(%)", "float", "outside / (in ops + outside)."),
    ("gaps", "Gaps", "int", "Gaps between ops."),
)


def cpu_idle(records: Iterable[dict[str, Any]], per_step: bool = True) -> pd.DataFrame:
    """A CPU trace's records (no device): per thread that ran ops, and per step, the time inside ops and the
    gaps between them (a thread's time outside any op: its Python, dataloader waits). gloo's collective
    ranges are no ops and are left out. Empty where no record is a CPU op."""
    rows: dict[str, list] = {}
    for rec in records:
        if rec.get("device") is not None or rec.get("kind", "kernel") != "kernel":
            continue
        if str(rec.get("kShortName") or "").startswith("gloo:"):
            continue
        start, end = rec.get("start"), rec.get("end")
        if type(start) is not int or type(end) is not int:
            continue
        rows.setdefault(f"{rec.get('pid')}:{rec.get('tid')}", []).append(
            (start, end, np.nan, np.nan, True, _step(rec)))
    out = []
    for key, r in sorted(rows.items()):
        acts = _timeline(r)
        for step, a, g in _by_step(acts, gaps(acts), per_step):
            busy = int(union_length(a["start"].to_numpy(dtype=np.int64), a["end"].to_numpy(dtype=np.int64)))
            outside = float((g["g1"] - g["g0"]).sum())
            out.append({"thread": key, "step": step, "busy": float(busy), "idle": outside,
                        "idle_pct": outside / (busy + outside) * 100 if busy + outside > 0 else np.nan,
                        "gaps": len(g)})
    return pd.DataFrame(out, columns=[c[0] for c in CPU_IDLE_COLUMNS])
