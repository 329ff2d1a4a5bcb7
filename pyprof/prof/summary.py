"""Summaries of the per-kernel table, per step: time, calls, FLOPs, bytes and roofline gap per op, layer,
kernel or dir.

``summarize(df, by="op")`` groups the rows of :func:`pyprof.prof.table.build` that belong to a profiled step
(:mod:`pyprof.prof.steps`) and returns one row per group, sorted by time (largest first); its per-step
figures are medians over the steps (docs/prof.md: "The step is the unit"; "Summaries" lists the columns).

FLOPs, bytes and ideal sum only the kernels where they are known; a group where none is known shows
``n/a`` (NaN), never 0. ``gap`` is time / ideal over the kernels with a known ideal, so it agrees with
``excess`` (gap > 1 exactly when excess > 0). Kernels that ran faster than their roofline (``beyond``)
are left out of ideal, excess and gap. :func:`fix_first` ranks the groups by the excess a faster kernel
could remove, leaving latency-bound time (launch or dispatch cost) to :func:`latency_line`.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from pyprof.errors import UsageError
from pyprof.prof import steps as steps_mod
from pyprof.prof.columns import SUMMARY_COLUMNS

KEYS = {"op": "op", "layer": "module", "kernel": "kernel", "dir": "dir"}

SUMMARY_NAMES = tuple(c[0] for c in SUMMARY_COLUMNS)
# the columns a narrow terminal leaves out first, in order (ideal = time - excess; bytes and bandwidth
# before FLOPs and FLOP/s): key, time, gap and the fix-this-first excess stay longest
SUMMARY_DROP = ("ideal", "bytes", "gbps", "flops", "kernels", "bound", "tflops", "calls", "spread", "share", "excess")
HEADERS = {c[0]: c[1] for c in SUMMARY_COLUMNS}
FORMATS = {c[0]: c[2] for c in SUMMARY_COLUMNS}
#: the per-step columns (medians over the steps); the others come from every step's rows together
_PER_STEP = ("time", "flops", "bytes", "ideal", "excess", "fixable", "latency")
_BOUNDS = ("compute", "memory", "latency")


@functools.lru_cache(maxsize=4096)
def _outside(op, direction: str, trace) -> str:
    """What work outside every module is (the layer summary's key for it, instead of ``-``): the
    optimizer step, the loss, else the line of the user's code that called it."""
    from pyprof.prof.ops.registry import family

    if direction == "optim":
        return "(optimizer step)"
    if isinstance(op, str) and family(op) == "loss":
        return "(loss)"
    if isinstance(trace, (list, tuple)) and trace and isinstance(trace[0], str):
        return f"(no module) {trace[0]}"
    return "(no module)"


def keys(df: pd.DataFrame, by: str) -> pd.Series:
    """Each row's group for summary ``by`` (``-`` where it has none)."""
    if by not in KEYS:
        raise UsageError(f"unknown summary {by!r}", "use --summary op, layer, kernel, dir or step")
    col = df[KEYS[by]].astype(object)
    col = col.where(col.notna() & (col != ""), None)
    if by == "layer" and len(df):
        for i in np.flatnonzero(col.isna().to_numpy()).tolist():
            trace = df["trace"].iat[i] if "trace" in df else None
            key = (df["op"].iat[i], df["dir"].iat[i], tuple(trace) if isinstance(trace, list) else None)
            col.iat[i] = _outside(*key)
    return col.where(col.notna(), "-")


def _in_steps(df: pd.DataFrame) -> tuple[np.ndarray, list[int]]:
    """Each row's step (:mod:`pyprof.prof.steps`) and the steps summarised (a table without steps: one)."""
    step = df["step"].to_numpy(dtype=np.int64) if "step" in df else np.zeros(len(df), dtype=np.int64)
    numbers = df.attrs.get("steps")
    if numbers is None:
        numbers = sorted(set(step[step >= 0].tolist()))
    return step, list(numbers)


def _work(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per table row in a step: its key, step, time, and the known parts of its cost."""
    sil = df["sil"].fillna(0.0).to_numpy(dtype=float)
    flops = df["flops"].to_numpy(dtype=float)
    nbytes = df["bytes"].to_numpy(dtype=float)
    ideal = df["ideal"].to_numpy(dtype=float)
    gap = df["gap"].to_numpy(dtype=float)
    has_f, has_b, has_i = ~np.isnan(flops), ~np.isnan(nbytes), ~np.isnan(ideal) & ~np.isnan(gap)
    if "beyond" in df:  # faster than the roofline: a model or peak error, not a finding
        has_i &= ~df["beyond"].to_numpy(dtype=bool)
    bound = df["bound"].to_numpy(dtype=object) if "bound" in df else np.full(len(df), None, dtype=object)
    step, _ = _in_steps(df)
    opid = df["opid"] if "opid" in df else pd.Series([None] * len(df), dtype=object)
    work = pd.DataFrame({
        "key": keys(df, by).to_numpy(), "step": step, "opid": opid.to_numpy(dtype=object),
        "time": sil,
        "flops": np.where(has_f, flops, 0.0), "n_f": has_f, "t_f": np.where(has_f, sil, 0.0),
        "bytes": np.where(has_b, nbytes, 0.0), "n_b": has_b, "t_b": np.where(has_b, sil, 0.0),
        "ideal": np.where(has_i, ideal, 0.0), "n_i": has_i, "t_i": np.where(has_i, sil, 0.0),
        **{b: np.where(bound == b, sil, 0.0) for b in _BOUNDS},
    })
    work["excess"] = work["t_i"] - work["ideal"]
    # the excess a faster kernel could remove: that of the kernels not at the latency floor
    work["fixable"] = np.where(bound == "latency", 0.0, work["excess"])
    return work[step >= 0]


def summarize(df: pd.DataFrame, by: str = "op") -> pd.DataFrame:
    """One row per group (columns :data:`SUMMARY_NAMES`), sorted by time per step, largest first."""
    work = _work(df, by)
    _, numbers = _in_steps(df)
    sums = ["time", "flops", "n_f", "t_f", "bytes", "n_b", "t_b", "ideal", "n_i", "t_i", "excess", "fixable",
            *_BOUNDS]
    per = work.groupby(["key", "step"], sort=False)[sums].sum()
    g = per.groupby(level="key", sort=False).sum()
    out = pd.DataFrame(index=g.index)
    wide = {c: per[c].unstack("step", fill_value=0.0).reindex(columns=numbers, fill_value=0.0).reindex(g.index)
            for c in _PER_STEP}
    for c in _PER_STEP:
        out[c] = np.median(wide[c].to_numpy(), axis=1) if numbers else np.nan
    out["spread"] = steps_mod.spread(wide["time"].to_numpy(), axis=1) * 100 if len(g) else np.nan
    step_total = float(np.median(per["time"].groupby(level="step").sum().reindex(numbers, fill_value=0.0))) \
        if numbers else 0.0
    out["share"] = out["time"] / step_total * 100 if step_total > 0 else np.nan
    ids = work[work["opid"].notna()]
    out["calls"] = ids.groupby("key", sort=False)["opid"].nunique().reindex(g.index)
    out["kernels"] = work.groupby("key", sort=False).size().reindex(g.index).astype(int)
    out["flops"] = out["flops"].where(g["n_f"] > 0)
    out["bytes"] = out["bytes"].where(g["n_b"] > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = (g["flops"] / g["t_f"] / 1e3).where((g["n_f"] > 0) & (g["t_f"] > 0))
        out["gbps"] = (g["bytes"] / g["t_b"]).where((g["n_b"] > 0) & (g["t_b"] > 0))
        out["gap"] = (g["t_i"] / g["ideal"]).where((g["n_i"] > 0) & (g["ideal"] > 0))
    bounds = g[list(_BOUNDS)]
    out["bound"] = np.where(bounds.sum(axis=1) > 0, bounds.idxmax(axis=1).to_numpy(dtype=object), None)
    for c in ("ideal", "excess", "fixable"):  # unknown where no kernel of the group has an ideal
        out[c] = out[c].where(g["n_i"] > 0)
    out = out.assign(_total=g["time"])
    out = out.sort_values(["time", "_total"], ascending=False, kind="stable").reset_index()
    # (fixable, latency: read by fix_first and latency_line, not printed)
    return out.rename(columns={"index": "key"})[[*SUMMARY_NAMES, "fixable", "latency"]]


def step_times(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """Each group's time in each profiled step (groups x steps, ns; 0 in a step without it): the samples
    a comparison of two profiles judges (:mod:`pyprof.report.diff`)."""
    work = _work(df, by)
    _, numbers = _in_steps(df)
    wide = work.groupby(["key", "step"], sort=False)["time"].sum().unstack("step", fill_value=0.0)
    return wide.reindex(columns=numbers, fill_value=0.0)


def fix_first(summary: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The ``n`` groups with the most time above the roofline that a faster kernel could remove, largest
    first: their ``excess`` is that of their kernels not at the latency floor."""
    s = summary.assign(excess=summary["fixable"]) if "fixable" in summary else summary
    s = s.dropna(subset=["excess"])
    s = s[s["excess"] > 0]
    return s.sort_values("excess", ascending=False, kind="stable").head(n).reset_index(drop=True)


def latency_line(summary: pd.DataFrame, what: str) -> str | None:
    """One line on the time of kernels at the latency floor (their roofline time below the device's
    launch or dispatch floor), or None: per step, its share, and how many groups it bounds."""
    from pyprof.prof.units import duration

    if "latency" not in summary or not (summary["latency"] > 0).any():
        return None
    t = float(summary["latency"].sum())
    share = t / float(summary["time"].sum()) * 100 if summary["time"].sum() > 0 else float("nan")
    n = int((summary["bound"] == "latency").sum())
    bounded = f"; {n} {what}{'s' if n != 1 else ''} mostly so" if n else ""
    return (f"{duration(t)} per step ({share:.1f}%) at the latency floor: launch/dispatch cost of small ops"
            f"{bounded}. Fewer, larger ops help (fusion, torch.compile, CUDA graphs); a faster kernel does not")
