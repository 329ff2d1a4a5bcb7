"""Two profiles compared with statistics: per op, layer or kernel, A's (the baseline's) and B's time per
step, the change, and whether the steps show it; the rules as a user reads them are ``pyprof diff
--help`` (:data:`pyprof.cli.diff_cmd.HELP`).

The step is the sample (:mod:`pyprof.prof.steps`): each side gives one time per profiled step for each
group (0 in a step without it). ``change`` is the median of B's steps / the median of A's - 1; ``p`` a
one-sided Mann-Whitney U test of B's steps against A's in the direction of the change (exact where the
steps hold no ties and are few, else the normal approximation with the tie correction); a ``verdict`` of
``slower``/``faster`` needs both the change past the threshold and ``p`` below :data:`ALPHA`, as asv
judges benchmarks. :func:`judge` turns the tables into one outcome: ``regression`` (a ``slower`` group
holding at least ``min_share`` percent of either side's step, or the total), ``inconclusive`` (a side
ran under load, :mod:`pyprof.prof.noise`, or a change above the threshold had too few steps to ever
reach :data:`ALPHA`), else ``no regression``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pandas as pd

from pyprof.prof.summary import keys, step_times, summarize
from pyprof.prof.units import duration

BY = ("op", "layer", "kernel")
COLUMNS = ("key", "time_a", "time_b", "delta", "delta_pct", "p", "verdict", "tflops_a", "tflops_b", "gap_a",
           "gap_b", "shapes")
#: a change whose one-sided p is below this is shown by the steps
ALPHA = 0.01
MIN_SHARE = 1.0
#: (column, header, format, scale to the format's unit) of the tables a person reads: ``pyprof diff``'s and
#: the report's baseline section (the tflops columns hold TFLOP/s; the format writes FLOP/s)
HUMAN = (("key", "", "str", 1.0), ("time_a", "A/step", "dur", 1.0), ("time_b", "B/step", "dur", 1.0),
         ("delta", "B - A", "+dur", 1.0), ("delta_pct", "Change", "+pct", 1.0), ("p", "p", "num", 1.0),
         ("verdict", "Verdict", "str", 1.0), ("tflops_a", "FLOP/s A", "flops", 1e12),
         ("tflops_b", "FLOP/s B", "flops", 1e12), ("gap_a", "Gap A", "num", 1.0), ("gap_b", "Gap B", "num", 1.0),
         ("shapes", "Shapes", "str", 1.0))


@cache
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings of n and m distinct values give each U = 0..n*m."""
    if n == 0 or m == 0:
        return (1,)
    a, b = _u_counts(n - 1, m), _u_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(a):  # the largest value is one of the n: it beats all m
        out[u + m] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def mann_whitney(a: np.ndarray, b: np.ndarray, greater: bool) -> float:
    """One-sided p that ``b``'s values are larger than ``a``'s (``greater``) or smaller: exact for small
    samples without ties, else the normal approximation with the tie correction."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 1.0
    both = np.concatenate([a, b])
    ranks = pd.Series(both).rank(method="average").to_numpy()
    u_b = ranks[n:].sum() - m * (m + 1) / 2  # pairs (a, b) with b > a, ties counted half
    u = u_b if greater else n * m - u_b
    ties = len(np.unique(both)) < n + m
    if not ties and n * m <= 400:
        counts = _u_counts(m, n)  # U of b's values over a's
        return sum(counts[int(round(u)):]) / math.comb(n + m, n)
    _, t = np.unique(both, return_counts=True)
    var = n * m / 12 * ((n + m + 1) - (t**3 - t).sum() / ((n + m) * (n + m - 1)))
    if var <= 0:
        return 1.0
    z = (u - n * m / 2 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def best_p(n: int, m: int) -> float:
    """The smallest one-sided p :func:`mann_whitney` can give with ``n`` and ``m`` steps."""
    return 1.0 / math.comb(n + m, n) if n and m else 1.0


@dataclass
class Side:
    """One profile's per-step times: ``wide`` (groups x steps, ns, per sample with a batch size), its
    summary (``summ``, indexed by key), and the distinct call arguments per group."""

    wide: pd.DataFrame
    summ: pd.DataFrame
    params: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.wide.shape[1]


def side(df: pd.DataFrame, by: str, batch: float = 1.0) -> Side:
    """What :func:`compare` reads of prof's table ``df`` for grouping ``by``."""
    wide = step_times(df, by) / batch
    summ = summarize(df, by).set_index("key")
    params: dict = {}
    if "params" in df:
        for k, p in zip(keys(df, by), df["params"].tolist(), strict=True):
            params.setdefault(k, set()).add(p)
    return Side(wide, summ, params)


def compare(a: Side, b: Side, pct: float = 10.0) -> pd.DataFrame:
    """One row per group of A or B (:data:`COLUMNS`), largest change in time first."""
    groups = list(dict.fromkeys(list(a.wide.index) + list(b.wide.index)))
    wa = a.wide.reindex(groups, fill_value=0.0).to_numpy(dtype=float)
    wb = b.wide.reindex(groups, fill_value=0.0).to_numpy(dtype=float)
    rows = []
    for i, key in enumerate(groups):
        ta, tb = float(np.median(wa[i])) if a.steps else 0.0, float(np.median(wb[i])) if b.steps else 0.0
        in_a, in_b = key in a.wide.index, key in b.wide.index
        change = (tb - ta) / ta * 100 if ta > 0 else math.nan
        p = mann_whitney(wa[i], wb[i], greater=tb >= ta)
        if not in_a or not in_b:
            verdict = "new" if in_b else "gone"
        elif not abs(change) > pct:
            verdict = "same"
        else:
            verdict = ("slower" if change > 0 else "faster") if p < ALPHA else "unclear"
        pa, pb = a.params.get(key), b.params.get(key)
        rows.append((key, ta if in_a else math.nan, tb if in_b else math.nan, tb - ta, change, p, verdict,
                     _get(a.summ, key, "tflops"), _get(b.summ, key, "tflops"), _get(a.summ, key, "gap"),
                     _get(b.summ, key, "gap"), "changed" if pa and pb and pa != pb else ""))
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out = out.assign(_abs=out["delta"].abs()).sort_values(["_abs", "key"], ascending=[False, True], kind="stable")
    return out.drop(columns="_abs").reset_index(drop=True)


def _get(summ: pd.DataFrame, key, col: str) -> float:
    return float(summ.at[key, col]) if key in summ.index and pd.notna(summ.at[key, col]) else math.nan


@dataclass(frozen=True)
class Total:
    """The step totals of each side (ns per step, medians) and the test of their change."""

    time_a: float
    time_b: float
    p: float
    steps_a: int
    steps_b: int

    @property
    def delta_pct(self) -> float:
        return (self.time_b - self.time_a) / self.time_a * 100 if self.time_a > 0 else float("nan")


def total(a: Side, b: Side) -> Total:
    sa, sb = a.wide.sum(axis=0).to_numpy(dtype=float), b.wide.sum(axis=0).to_numpy(dtype=float)
    ta = float(np.median(sa)) if len(sa) else 0.0
    tb = float(np.median(sb)) if len(sb) else 0.0
    return Total(ta, tb, mann_whitney(sa, sb, greater=tb >= ta), len(sa), len(sb))


@dataclass
class Outcome:
    """:func:`judge`'s verdict: ``kind`` (``regression``, ``inconclusive``, ``no regression``), the
    regressions found, and why it is inconclusive."""

    kind: str
    regressions: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"regression": 1, "inconclusive": 3}.get(self.kind, 0)


def _judge_row(by: str, row, tot: Total, min_share: float, testable: bool, found: list, untestable: list) -> None:
    """One row of a comparison table (grouped ``by``), taken into ``found`` where it is slower (or new) and
    large enough to matter, into ``untestable`` where so few steps could not have shown that."""
    ta, tb = (0.0 if math.isnan(v) else v for v in (row.time_a, row.time_b))
    big = ta / tot.time_a * 100 >= min_share if tot.time_a > 0 else False
    big |= tb / tot.time_b * 100 >= min_share if tot.time_b > 0 else False
    if not big or tb <= ta:
        return
    if row.verdict in ("slower", "new") and row.p < ALPHA:
        what = "new" if row.verdict == "new" else f"time per step +{row.delta_pct:.1f}%"
        found.append(f"{by} {row.key}: {what} ({duration(ta)} -> {duration(tb)}, p={row.p:.2g})")
    elif row.verdict in ("unclear", "new") and not testable:
        untestable.append(f"{by} {row.key}")


def judge(tables: dict[str, pd.DataFrame], tot: Total, pct: float, min_share: float = MIN_SHARE,
          loaded: list[str] | None = None) -> Outcome:
    """The outcome of a comparison at threshold ``pct`` (see the module docstring). ``loaded``: each side's
    load phrase where it ran under load (:func:`pyprof.prof.noise.under_load`)."""
    found, untestable = [], []
    testable = best_p(tot.steps_a, tot.steps_b) < ALPHA
    if tot.time_a > 0 and tot.delta_pct > pct:
        if tot.p < ALPHA:
            found.append(f"total time per step +{tot.delta_pct:.1f}% ({duration(tot.time_a)} -> "
                         f"{duration(tot.time_b)}, p={tot.p:.2g})")
        elif not testable:
            untestable.append("total time")
    for by, table in tables.items():
        for row in table.itertuples(index=False):
            _judge_row(by, row, tot, min_share, testable, found, untestable)
    why = list(loaded or [])
    if untestable:
        why.append(f"{tot.steps_a} and {tot.steps_b} steps cannot show a change (the best one-sided p is "
                   f"{best_p(tot.steps_a, tot.steps_b):.2g}; profile at least 5 steps a side: pyprof run --active 5)"
                   f" of {', '.join(untestable[:4])}" + (f" and {len(untestable) - 4} more" if len(untestable) > 4 else ""))
    if why:
        return Outcome("inconclusive", found, why)
    return Outcome("regression" if found else "no regression", found)


def by_groups(value: str) -> list[str]:
    """The groupings ``--by`` (and :func:`pyprof.diff`'s ``by``) names: a comma list of op, layer, kernel."""
    from pyprof.errors import UsageError

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in BY]
    if bad or not names:
        raise UsageError(f"unknown grouping {bad[0] if bad else value!r} (--by, by=)",
                         "use op, layer, kernel or a comma list")
    return names


def compared(pa, pb, groupings: list[str], pct: float, min_share: float, ignore_load: bool,
             batches: tuple[float, float] = (1.0, 1.0)):
    """``(tables, total, outcome)`` of profile ``pb`` against ``pa``: a table per grouping, the step
    totals, and the verdict (:mod:`pyprof.report.diff`), inconclusive where a side ran under load
    unless ``ignore_load``."""
    from pyprof.prof import noise

    sides = {g: (side(pa.df, g, batches[0]), side(pb.df, g, batches[1])) for g in groupings}
    tot = total(*sides[groupings[0]])
    tables = {g: compare(sa, sb, pct) for g, (sa, sb) in sides.items()}
    loaded = [] if ignore_load else [f"{n} ran under load ({why})" for n, p in (("A", pa), ("B", pb))
                                     if (why := noise.under_load(p.df))]
    return tables, tot, judge(tables, tot, pct, min_share, loaded)
