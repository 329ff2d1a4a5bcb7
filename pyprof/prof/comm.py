"""Collectives: one row per collective instance, with its bandwidths and how much of it compute hid.

``collectives(records)`` finds each collective's *run*: the NCCL/RCCL kernels of a GPU trace (records with
``link`` ``collective`` on a device; those of one op instance, ``opId`` and ``dir``, are one collective),
or gloo's ``gloo:NAME`` range on its worker thread in a CPU trace, and prices it as nccl-tests does
(:data:`FACTOR_TEXT`). ``skew(sets)`` matches the collectives of several ranks (per-rank record sets of
one job, in rank order); ranks' clocks must agree, or skew is their clock offset. docs/prof.md
("Collectives") states the rules and the columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd

from pyprof.prof.intervals import Cover
from pyprof.prof.ops import _args as A

#: kernels (GPU) or ranges (CPU, gloo) that run a collective
GLOO_PREFIX = "gloo:"

#: columns of the per-collective table: name, header, format, meaning
COMM_COLUMNS = (
    ("idx", "Idx", "int", "Collective, 1-based, in start order (per rank on a dataset)."),
    ("rank", "Rank", "str", "The rank (the dataset's file) it ran on; '-' for one record file."),
    ("device", "Device", "str", "CUDA device ordinal, or cpu."),
    ("lane", "Lane", "str", "Stream (GPU) or thread (CPU, gloo's worker) it ran on."),
    ("op", "Op", "str", "Collective type as recorded (allreduce_, all_to_all, _allgather_base, ...)."),
    ("kind", "Kind", "str", "Its nccl-tests kind: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, "
                            "reduce, send_recv, barrier; '-' unknown."),
    ("kernel", "Kernel", "str", "The NCCL kernel (or gloo range) that ran it."),
    ("dtype", "Dtype", "str", "Element type of the message."),
    ("size", "Size(B)", "sci", "Message size in bytes, as nccl-tests counts it (all-gather: the whole output; "
                               "reduce-scatter: the whole input; else the input)."),
    ("group", "Group", "int", "Ranks in its process group (n/a: not recorded)."),
    ("start", "Start(ns)", "int", "Start of its first kernel (or of gloo's range), ns, in the trace's clock."),
    ("time", "Time(ns)", "sci", "Its run: first kernel start to last kernel end."),
    ("algbw", "AlgBW(GB/s)", "float", "size / time."),
    ("busbw", "BusBW(GB/s)", "float", "algbw x the nccl-tests factor of its kind and group (see docs/prof.md)."),
    ("overlap", "Overlap(ns)", "sci", "Time during which compute ran on another stream (thread) of its device."),
    ("exposed", "Exposed(ns)", "sci", "time - overlap: the time no compute hid."),
)
COMM_NAMES = tuple(c[0] for c in COMM_COLUMNS)
COMM_DROP = ("start", "kernel", "lane", "device", "rank", "overlap", "dtype", "op", "idx")

#: the busbw factor of each kind for a group of n (nccl-tests), as docs/prof.md writes it
FACTOR_TEXT = (("all_reduce", "2(n-1)/n"), ("all_gather", "(n-1)/n"), ("reduce_scatter", "(n-1)/n"),
               ("all_to_all", "(n-1)/n"), ("broadcast", "1"), ("reduce", "1"), ("send_recv", "1"))
_FACTORS = {"2(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n, "1": lambda n: 1.0}

_KINDS = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
          ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("send", "send_recv"),
          ("recv", "send_recv"), ("reduce", "reduce"), ("barrier", "barrier"))


def kind_of(op: str | None) -> str | None:
    """The nccl-tests kind of a collective op name (``allreduce_``, ``_allgather_base_``,
    ``reduce_scatter_tensor``, ``all_to_all``, ``send_recv``), or None."""
    if not op:
        return None
    bare = re.sub(r"[^a-z]", "", op.lower())
    for prefix, kind in _KINDS:
        if bare.startswith(prefix):
            return kind
    return None


def bus_factor(kind: str | None, n: int | None) -> float | None:
    """The nccl-tests busbw factor of ``kind`` for a group of ``n``; None where unknown."""
    text = dict(FACTOR_TEXT).get(kind or "")
    if text is None:
        return None
    if n is None or n < 1:
        return 1.0 if text == "1" else None
    return _FACTORS[text](n)


def message_size(kind: str | None, n_in: int | None, n_out: int | None, group: int | None,
                 dtype: str | None) -> int | None:
    """The nccl-tests message size in bytes (an all-gather's whole output, a reduce-scatter's whole input,
    else the input), or None."""
    if kind == "all_gather":
        n = n_out if n_out is not None else (n_in * group if n_in is not None and group else None)
    elif kind == "reduce_scatter":
        n = n_in if n_in is not None else (n_out * group if n_out is not None and group else None)
    else:
        n = n_in if n_in is not None else n_out
    return cast("int | None", A.sized(n, dtype))  # int elements: int bytes


#: NCCL/RCCL kernel names, old and new: ``ncclKernel_AllReduce_RING_LL_Sum_float``,
#: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``; group 1: the collective (``SendRecv``)
NCCL_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")


def is_run(rec: dict[str, Any]) -> bool:
    """Whether a record is a collective's run: a kernel of a collective op or with an NCCL/RCCL kernel name
    (its launch may be missing from the trace), or gloo's range (see the module docstring)."""
    if rec.get("kind", "kernel") != "kernel":
        return False
    if rec.get("device") is not None:
        return rec.get("link") == "collective" or NCCL_KERNEL.search(str(rec.get("kShortName") or "")) is not None
    return rec.get("link") == "collective" and str(rec.get("kShortName") or "").startswith(GLOO_PREFIX)


def _message(args: Any) -> tuple[int | None, int | None, int | None, str | None]:
    """(input elements, output elements, group size, dtype) from a collective's arguments."""
    if not isinstance(args, list):
        return None, None, None, None
    b = {a.get("name"): a for a in args if isinstance(a, dict)}
    x, y = b.get("input"), b.get("output")
    group = A.value(b.get("group_size"), None)
    group = group if type(group) is int and group > 0 else None
    return A.numel(A.shape(x)), A.numel(A.shape(y)), group, A.dtype(x) or A.dtype(y)


def _lane(rec: dict[str, Any]) -> Any:
    return rec.get("stream") if rec.get("device") is not None else rec.get("tid")


def _end(rec: dict[str, Any]) -> int:
    end = rec.get("end")
    return end if type(end) is int else rec["start"] + (rec.get("kDuration") or 0)


def _gather(records: Iterable[dict[str, Any]]) -> tuple[dict[tuple, list], dict[tuple, list]]:
    """The collectives' runs by (device, op instance), and the compute kernels' (start, end, lane) by device."""
    runs: dict[tuple, list] = {}
    compute: dict[tuple, list] = {}
    for rec in records:
        if rec.get("start") is None:
            continue
        # a device: its ordinal (every process on it: a kernel whose launch is missing has no pid); the CPU: its process
        dev = (None, rec["device"]) if rec.get("device") is not None else (rec.get("pid"), None)
        if is_run(rec):
            op_id = rec.get("opId")
            key = (dev, op_id, rec.get("dir")) if op_id is not None else (dev, "rec", len(runs))
            runs.setdefault(key, []).append(rec)
        elif rec.get("kind", "kernel") == "kernel" and rec.get("link") != "collective":  # (a run is no compute)
            compute.setdefault(dev, []).append((rec["start"], _end(rec), _lane(rec)))
    return runs, compute


def _row(rank: str, dev: tuple, recs: list) -> dict[str, Any]:
    """One collective instance from its run's records."""
    first = min(recs, key=lambda r: r["start"])
    start, end = first["start"], max(map(_end, recs))
    n_in, n_out, group, dt = _message(first.get("args"))
    name = str(first.get("kShortName") or "")
    m = NCCL_KERNEL.search(name)
    kind = kind_of(first.get("op")) or kind_of(m.group(1) if m else name.removeprefix(GLOO_PREFIX))
    api = [r.get("apiStart") for r in recs if type(r.get("apiStart")) is int]
    return {"rank": rank, "device": "cpu" if dev[1] is None else str(dev[1]), "pid": dev[0],
            "lane": str(_lane(first)), "op": first.get("op") or "-", "kind": kind or "-",
            "kernel": first.get("kShortName") or "-", "dtype": dt or "-",
            "size": message_size(kind, n_in, n_out, group, dt), "group": group, "start": start,
            "time": end - start, "end": end, "arrival": min(api) if api else start, "factor": bus_factor(kind, group)}


def _overlap(df: pd.DataFrame, compute: dict[tuple, list]) -> np.ndarray:
    """Each collective's time the other lanes' compute on its device covered."""
    overlap = np.zeros(len(df))
    dev_key = [(pid, None if d == "cpu" else int(d)) for pid, d in zip(df["pid"], df["device"], strict=True)]
    lanes: dict[tuple, list[int]] = {}
    for i, (dev, lane) in enumerate(zip(dev_key, df["lane"], strict=True)):
        lanes.setdefault((dev, lane), []).append(i)
    for (dev, lane), rows_i in lanes.items():  # the other lanes' compute, merged once per lane
        others = [(s, e) for s, e, ln in compute.get(dev, ()) if str(ln) != lane]
        cover = Cover([s for s, _ in others], [e for _, e in others])
        for i in rows_i:
            overlap[i] = cover.covered(int(df["start"].iat[i]), int(df["end"].iat[i]))
    return overlap


def collectives(records: Iterable[dict[str, Any]], rank: str = "-") -> pd.DataFrame:
    """One row per collective instance (columns :data:`COMM_NAMES` plus ``arrival``, ``pid``), in start
    order. ``records`` is consumed once."""
    runs, compute = _gather(records)
    df = pd.DataFrame([_row(rank, dev, recs) for (dev, _, _), recs in runs.items()],
                      columns=["rank", "device", "pid", "lane", "op", "kind", "kernel", "dtype", "size", "group",
                               "start", "time", "end", "arrival", "factor"])
    df = df.sort_values("start", kind="stable").reset_index(drop=True)
    df.insert(0, "idx", np.arange(1, len(df) + 1))
    df["nth"] = df.groupby("kind", sort=False).cumcount() + 1  # its ordinal among its kind (skew matches by it)
    size = pd.to_numeric(df["size"], errors="coerce").to_numpy(dtype=float)
    time = df["time"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(time > 0, size / time, np.nan)  # bytes per ns = GB/s
    df["size"] = size
    df["group"] = pd.to_numeric(df["group"], errors="coerce").astype(float)
    df["algbw"] = algbw
    df["busbw"] = algbw * pd.to_numeric(df["factor"], errors="coerce").to_numpy(dtype=float)
    df["overlap"] = _overlap(df, compute)
    df["exposed"] = time - df["overlap"].to_numpy()
    return df


TOTAL_COLUMNS = (
    ("rank", "Rank", "str", "The rank."),
    ("kind", "Kind", "str", "Collective kind."),
    ("count", "Count", "int", "Collectives of that kind."),
    ("time", "Time(ns)", "sci", "Their run time."),
    ("exposed", "Exposed(ns)", "sci", "Their time no compute hid."),
    ("size", "Size(B)", "sci", "Their message bytes (n/a if any is unknown)."),
    ("algbw", "AlgBW(GB/s)", "float", "size / time over them."),
    ("busbw", "BusBW(GB/s)", "float", "Time-weighted busbw over them (n/a if any is unknown)."),
)


def totals(df: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, kind): count, time, exposed time, bytes and the time-weighted bandwidths."""
    if df.empty:
        return pd.DataFrame(columns=["rank", "kind", "count", "time", "exposed", "size", "algbw", "busbw"])
    g = df.assign(bus_bytes=df["busbw"] * df["time"]).groupby(["rank", "kind"], sort=False)
    out = g.agg(count=("idx", "size"), time=("time", "sum"), exposed=("exposed", "sum"),
                size=("size", lambda v: v.sum(min_count=len(v))),
                bus_bytes=("bus_bytes", lambda v: v.sum(min_count=len(v)))).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["algbw"] = np.where(out["time"] > 0, out["size"] / out["time"], np.nan)
        out["busbw"] = np.where(out["time"] > 0, out["bus_bytes"] / out["time"], np.nan)
    return out.drop(columns="bus_bytes").sort_values("time", ascending=False, kind="stable").reset_index(drop=True)


SKEW_COLUMNS = (
    ("kind", "Kind", "str", "Collective kind."),
    ("nth", "Nth", "int", "Its ordinal among the collectives of that kind on each rank (1-based)."),
    ("size", "Size(B)", "sci", "Message size on the first rank."),
    ("skew", "Skew(ns)", "sci", "Latest arrival - earliest arrival across ranks (arrival: the kernel's launch call, "
                                "or gloo's range start)."),
    ("last", "Last", "str", "The rank that arrived last."),
    ("first", "First", "str", "The rank that arrived first."),
    ("tmin", "MinTime(ns)", "sci", "Shortest run across ranks (the last to arrive waits least)."),
    ("tmax", "MaxTime(ns)", "sci", "Longest run across ranks."),
)


RANK_COLUMNS = (
    ("rank", "Rank", "str", "The rank."),
    ("count", "Count", "int", "Its collectives."),
    ("time", "Time(ns)", "sci", "Its time running collectives."),
    ("last", "Last", "int", "Matched collectives it arrived last at."),
    ("made_wait", "MadeWait(ns)", "sci", "Sum of the skew of those: how long the first rank waited for it."),
)


def skew(sets: list[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per collective, per rank) across the per-rank tables of :func:`collectives` (see the module
    docstring). Collectives some rank lacks (a window cut differently) are left out."""
    keyed = [df for df in sets if len(df)]
    if len(keyed) < 2:
        return pd.DataFrame(columns=[c[0] for c in SKEW_COLUMNS]), pd.DataFrame()
    both = pd.concat(keyed, ignore_index=True)
    n_ranks = both["rank"].nunique()
    rows = []
    for (kind, nth), g in both.groupby(["kind", "nth"], sort=False):
        if g["rank"].nunique() < n_ranks:
            continue
        a = g.sort_values("arrival", kind="stable")
        rows.append({"kind": kind, "nth": int(nth), "size": g["size"].iloc[0],
                     "skew": float(a["arrival"].iloc[-1] - a["arrival"].iloc[0]), "last": a["rank"].iloc[-1],
                     "first": a["rank"].iloc[0], "tmin": float(g["time"].min()), "tmax": float(g["time"].max()),
                     "t0": a["arrival"].iloc[0]})
    per = pd.DataFrame(rows, columns=[c[0] for c in SKEW_COLUMNS] + ["t0"])
    per = per.sort_values("t0", kind="stable").drop(columns="t0").reset_index(drop=True)
    ranks = []
    for r, d in both.groupby("rank", sort=False):
        ranks.append({"rank": r, "count": len(d), "time": float(d["time"].sum()),
                      "last": int((per["last"] == r).sum()), "made_wait": float(per.loc[per["last"] == r, "skew"].sum())})
    return per, pd.DataFrame(ranks)
