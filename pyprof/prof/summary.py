"""Summaries of the per-kernel table: time, share, FLOPs, bytes and roofline gap per op, layer, kernel or dir.

``summarize(df, by="op")`` groups the rows of :func:`pyprof.prof.table.build` and returns one row per group,
sorted by time (largest first). ``excess`` = time - ideal time, summed over the kernels with a known ideal
time: the time that would be saved at the roofline, which orders the "fix this first" list
(``summarize(...).sort_values("excess", ascending=False)``, or :func:`fix_first`).

FLOPs, bytes and ideal sum only the kernels where they are known; a group where none is known shows
``n/a`` (NaN), never 0. ``gap`` is time / ideal over the same kernels as ``excess``, so the two agree by
construction (gap > 1 exactly when excess > 0). Kernels that ran faster than their roofline (``beyond``:
a model or peak error, flagged in their note) are left out of ideal, excess and gap, so no summary
shows a negative excess as a finding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pyprof.errors import UsageError

KEYS = {"op": "op", "layer": "module", "kernel": "kernel", "dir": "dir"}

# name, header, format, meaning: the one table of summary columns (help and renderers use it)
SUMMARY_COLUMNS = (
    ("key", "Key", "str", "The op, innermost layer (module path), kernel name or direction."),
    ("time", "Time(ns)", "sci", "Total silicon time of the group (kernels, memcpy, memset)."),
    ("share", "Share(%)", "float", "Percent of the time of all records (kernels, memcpy, memset)."),
    ("count", "Count", "int", "Number of kernels."),
    ("flops", "FLOPs", "sci", "FLOPs of the kernels with a model (n/a when none has one)."),
    ("bytes", "Bytes", "sci", "Bytes of the kernels with a model."),
    ("tflops", "TFLOP/s", "float", "Achieved: FLOPs / time of the kernels with FLOPs."),
    ("gbps", "GB/s", "float", "Achieved: bytes / time of the kernels with bytes."),
    ("ideal", "Ideal(ns)", "sci", "Roofline time of the kernels with a known ideal."),
    ("excess", "Excess(ns)", "sci", "time - ideal over the kernels with a known ideal: what the roofline would save."),
    ("gap", "Gap", "float", "time / ideal over the kernels with a known ideal (> 1 exactly when excess > 0)."),
)
SUMMARY_NAMES = tuple(c[0] for c in SUMMARY_COLUMNS)
# the columns a narrow terminal leaves out first, in order (ideal = time - excess; bytes and bandwidth
# before FLOPs and FLOP/s): key, time, gap and the fix-this-first excess stay longest
SUMMARY_DROP = ("ideal", "bytes", "gbps", "flops", "count", "tflops", "share", "excess")
HEADERS = {c[0]: c[1] for c in SUMMARY_COLUMNS}
FORMATS = {c[0]: c[2] for c in SUMMARY_COLUMNS}


def _key_series(df: pd.DataFrame, by: str) -> pd.Series:
    if by not in KEYS:
        raise UsageError(f"unknown summary {by!r}", "use --summary op, layer, kernel or dir")
    col = df[KEYS[by]].astype(object)
    col = col.where(col.notna(), "-")
    return col.where(col != "", "-")


def summarize(df: pd.DataFrame, by: str = "op") -> pd.DataFrame:
    """One row per group (columns :data:`SUMMARY_NAMES`), sorted by time, largest first."""
    key = _key_series(df, by)
    sil = df["sil"].fillna(0.0).to_numpy(dtype=float)
    flops = df["flops"].to_numpy(dtype=float)
    nbytes = df["bytes"].to_numpy(dtype=float)
    ideal = df["ideal"].to_numpy(dtype=float)
    gap = df["gap"].to_numpy(dtype=float)
    has_f, has_b, has_i = ~np.isnan(flops), ~np.isnan(nbytes), ~np.isnan(ideal) & ~np.isnan(gap)
    if "beyond" in df:  # faster than the roofline: a model or peak error, not a finding
        has_i &= ~df["beyond"].to_numpy(dtype=bool)
    work = pd.DataFrame({
        "key": key.to_numpy(),
        "time": sil,
        "count": 1,
        "flops": np.where(has_f, flops, 0.0), "n_f": has_f,
        "t_f": np.where(has_f, sil, 0.0),
        "bytes": np.where(has_b, nbytes, 0.0), "n_b": has_b,
        "t_b": np.where(has_b, sil, 0.0),
        "ideal": np.where(has_i, ideal, 0.0), "n_i": has_i,
        "t_i": np.where(has_i, sil, 0.0),
    })
    g = work.groupby("key", sort=False).sum()
    total = sil.sum()
    out = pd.DataFrame(index=g.index)
    out["time"] = g["time"]
    out["share"] = g["time"] / total * 100 if total > 0 else np.nan
    out["count"] = g["count"].astype(int)
    out["flops"] = g["flops"].where(g["n_f"] > 0)
    out["bytes"] = g["bytes"].where(g["n_b"] > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = (g["flops"] / g["t_f"] / 1e3).where((g["n_f"] > 0) & (g["t_f"] > 0))
        out["gbps"] = (g["bytes"] / g["t_b"]).where((g["n_b"] > 0) & (g["t_b"] > 0))
        out["ideal"] = g["ideal"].where(g["n_i"] > 0)
        out["excess"] = (g["t_i"] - g["ideal"]).where(g["n_i"] > 0)
        out["gap"] = (g["t_i"] / g["ideal"]).where((g["n_i"] > 0) & (g["ideal"] > 0))
    out = out.sort_values("time", ascending=False, kind="stable").reset_index().rename(columns={"index": "key"})
    return out[list(SUMMARY_NAMES)]


def fix_first(summary: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The ``n`` groups with the most time above the roofline (largest ``excess`` first)."""
    s = summary.dropna(subset=["excess"])
    return s.sort_values("excess", ascending=False, kind="stable").head(n).reset_index(drop=True)
