"""Two profiles side by side: per op, layer or kernel, the time, FLOPs and roofline gap of A (the
baseline) and B, and B - A, sorted by the size of the change in time (largest first).

Both sides are prof's summaries (:func:`pyprof.prof.summary.summarize`) of the same grouping. Where
both record files hold torch.profiler steps (``ProfilerStep#N`` ranges) and their counts differ, each
side's time and FLOPs are divided by its step count, so a run of 5 steps compares with one of 3 per
step (``per_step`` says so); otherwise totals are compared.

A regression (:func:`regressions`, ``pyprof diff --fail-above PCT``) is the total time, or the time of
one group, grown by more than PCT percent; groups below ``min_share`` percent of both totals are not
judged (their noise is larger than their weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pyprof.prof.summary import summarize
from pyprof.report.timeline import step_of

BY = ("op", "layer", "kernel")
COLUMNS = ("key", "time_a", "time_b", "delta", "delta_pct", "flops_a", "flops_b", "gap_a", "gap_b", "status")
MIN_SHARE = 1.0


@dataclass(frozen=True)
class Scale:
    """How each side's sums are divided: ``a`` and ``b`` (steps, or 1), and whether that is per step."""

    a: float = 1.0
    b: float = 1.0
    per_step: bool = False


def step_count(records: list[dict[str, Any]]) -> int:
    """Distinct ``ProfilerStep#N`` ranges around the records (0: none)."""
    return len({s for s in map(step_of, records) if s is not None})


def scale_for(records_a: list[dict[str, Any]], records_b: list[dict[str, Any]]) -> Scale:
    na, nb = step_count(records_a), step_count(records_b)
    if na and nb and na != nb:
        return Scale(float(na), float(nb), True)
    return Scale()


def compare(df_a: pd.DataFrame, df_b: pd.DataFrame, by: str, scale: Scale = Scale()) -> pd.DataFrame:
    """One row per group present in A or B (columns :data:`COLUMNS`; NaN where a side lacks the
    group), ``status`` ``new``/``gone``/``""``, sorted by ``|delta|`` then key."""
    a = summarize(df_a, by).set_index("key")
    b = summarize(df_b, by).set_index("key")
    keys = list(dict.fromkeys(list(a.index) + list(b.index)))
    a, b = a.reindex(keys), b.reindex(keys)
    out = pd.DataFrame({"key": keys})
    out["time_a"] = a["time"].to_numpy() / scale.a
    out["time_b"] = b["time"].to_numpy() / scale.b
    ta, tb = np.nan_to_num(out["time_a"].to_numpy()), np.nan_to_num(out["time_b"].to_numpy())
    out["delta"] = tb - ta
    with np.errstate(divide="ignore", invalid="ignore"):
        out["delta_pct"] = np.where(ta > 0, (tb - ta) / np.where(ta > 0, ta, 1) * 100, np.nan)
    out["flops_a"] = a["flops"].to_numpy() / scale.a
    out["flops_b"] = b["flops"].to_numpy() / scale.b
    out["gap_a"] = a["gap"].to_numpy()
    out["gap_b"] = b["gap"].to_numpy()
    out["status"] = np.where(np.isnan(out["time_a"]), "new", np.where(np.isnan(out["time_b"]), "gone", ""))
    out = out.assign(_abs=np.abs(out["delta"].to_numpy()))
    out = out.sort_values(["_abs", "key"], ascending=[False, True], kind="stable").drop(columns="_abs")
    return out.reset_index(drop=True)[list(COLUMNS)]


@dataclass(frozen=True)
class Total:
    time_a: float
    time_b: float

    @property
    def delta_pct(self) -> float:
        return (self.time_b - self.time_a) / self.time_a * 100 if self.time_a > 0 else float("nan")


def total(df_a: pd.DataFrame, df_b: pd.DataFrame, scale: Scale = Scale()) -> Total:
    return Total(float(df_a["sil"].fillna(0).sum()) / scale.a, float(df_b["sil"].fillna(0).sum()) / scale.b)


def regressions(table: pd.DataFrame, tot: Total, pct: float, min_share: float = MIN_SHARE) -> list[str]:
    """One line per regression beyond ``pct`` percent: the total, then each group of ``table`` (from
    :func:`compare`) whose time grew by more than that and that holds at least ``min_share`` percent of
    either side's total; a group new in B counts when it holds that share of B."""
    from pyprof.prof.units import duration

    lines = []
    if tot.time_a > 0 and tot.delta_pct > pct:
        lines.append(f"total time +{tot.delta_pct:.1f}% ({duration(tot.time_a)} -> {duration(tot.time_b)})")
    for row in table.itertuples(index=False):
        ta = 0.0 if np.isnan(row.time_a) else row.time_a
        tb = 0.0 if np.isnan(row.time_b) else row.time_b
        big = (tot.time_a > 0 and ta / tot.time_a * 100 >= min_share) or \
              (tot.time_b > 0 and tb / tot.time_b * 100 >= min_share)
        if not big or tb <= ta:
            continue
        if ta == 0:
            lines.append(f"{row.key}: new, {duration(tb)}")
        elif (tb - ta) / ta * 100 > pct:
            lines.append(f"{row.key}: time +{(tb - ta) / ta * 100:.1f}% ({duration(ta)} -> {duration(tb)})")
    return lines


def regressions_all(tables: dict[str, pd.DataFrame], tot: Total, pct: float, min_share: float = MIN_SHARE) -> list[str]:
    """:func:`regressions` of several tables (by op, layer, kernel): the total once, then each table's
    groups prefixed with the grouping (``op conv2d: ...``)."""
    lines = []
    for i, (by, table) in enumerate(tables.items()):
        found = regressions(table, tot, pct, min_share)
        has_total = bool(found) and found[0].startswith("total time")
        if has_total:
            if i == 0:
                lines.append(found[0])
            found = found[1:]
        lines += [f"{by} {line}" for line in found]
    if not tables:
        lines = regressions(pd.DataFrame(columns=list(COLUMNS)), tot, pct, min_share)
    return lines
