"""A timeline of one step: every kernel of the step as a bar on its lane (a GPU stream, or a CPU
thread), coloured by its layer.

The step is a ``ProfilerStep#N`` range (torch.profiler's, which ``pyprof run`` records): of the steps
in the records, the one whose kernel time is the median, so the chart shows a typical step, not the
first (warm-up) or an outlier. Records without steps (an Nsight export without such ranges) show from
their first record on. Past :data:`MAX_BARS` kernels, the shortest are left out (``left_out`` counts
them) so the page stays small. CPU records are drawn at their start with their self time (prof's
kernel time of a CPU op), GPU kernels from start to end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pyprof.report.profile import Profile

STEP = re.compile(r"^ProfilerStep#(\d+)$")
MAX_BARS = 3000
MAX_LAYERS = 12  # distinct colours; the other layers share one
OTHER_LAYERS = "(other layers)"
NO_LAYER = "(no layer)"


@dataclass
class Timeline:
    """``bars``: ``lane``, ``start`` (ns from the step's first record), ``dur`` (ns), ``layer`` (the
    colour group), ``kernel``, ``op``, ``dir``; ``lanes`` in display order; ``step`` (``ProfilerStep#N``
    or None), ``steps`` (how many the records hold), ``left_out`` (shortest kernels not drawn)."""

    bars: pd.DataFrame
    lanes: list[str] = field(default_factory=list)
    step: str | None = None
    steps: int = 0
    left_out: int = 0
    span_ns: float = 0.0


def step_of(rec: dict[str, Any]) -> str | None:
    """The ``ProfilerStep#N`` range open around a record, or None."""
    for r in rec.get("ranges") or ():
        text = r.get("text") if isinstance(r, dict) else None
        if isinstance(text, str) and STEP.match(text):
            return text
    return None


def lane_of(rec: dict[str, Any]) -> str:
    """``GPU 0 stream 7`` for a GPU record, ``CPU thread 1234`` for a CPU one."""
    if rec.get("device") is not None:
        return f"GPU {rec['device']} stream {rec.get('stream') if rec.get('stream') is not None else '?'}"
    return f"CPU thread {rec.get('tid') if rec.get('tid') is not None else '?'}"


def _lane_key(lane: str):
    parts = lane.split()
    nums = [int(p) if p.isdigit() else 0 for p in parts]
    return (parts[0] != "GPU", nums, lane)


def choose_step(records: list[dict[str, Any]], sil: list[float]) -> tuple[str | None, int]:
    """The step to draw (the median by kernel time; the earlier of two middles) and how many steps."""
    totals: dict[str, float] = {}
    for rec, t in zip(records, sil, strict=True):
        s = step_of(rec)
        if s is not None:
            totals[s] = totals.get(s, 0.0) + t
    if not totals:
        return None, 0
    ranked = sorted(totals, key=lambda s: (totals[s], int(s.rpartition("#")[2])))
    return ranked[(len(ranked) - 1) // 2], len(ranked)


def one_step(profile: Profile, max_bars: int = MAX_BARS) -> Timeline:
    """The :class:`Timeline` of one step of ``profile``."""
    records, df = profile.records, profile.df
    sil = df["sil"].fillna(0.0).tolist()
    step, n_steps = choose_step(records, sil)
    rows = [i for i, r in enumerate(records) if r.get("start") is not None
            and (step is None or step_of(r) == step)]
    if not rows:
        return Timeline(pd.DataFrame(columns=["lane", "start", "dur", "layer", "kernel", "op", "dir"]),
                        step=step, steps=n_steps)
    module = df["module"].tolist()
    bars = pd.DataFrame({
        "lane": [lane_of(records[i]) for i in rows],
        "start": [float(records[i]["start"]) for i in rows],
        "dur": [float(sil[i]) for i in rows],
        "layer": [str(module[i]) if module[i] else NO_LAYER for i in rows],
        "kernel": [str(records[i].get("kShortName") or "-") for i in rows],
        "op": [str(records[i].get("op") or "-") for i in rows],
        "dir": [str(records[i].get("dir") or "-") for i in rows],
    })
    t0 = bars["start"].min()
    bars["start"] -= t0
    span = float((bars["start"] + bars["dur"]).max())
    left_out = 0
    if len(bars) > max_bars:
        keep = bars["dur"].rank(method="first", ascending=False) <= max_bars
        left_out = int((~keep).sum())
        bars = bars[keep]
    by_layer = bars.groupby("layer")["dur"].sum().sort_values(ascending=False)
    top = set(by_layer.index[:MAX_LAYERS])
    bars["layer"] = [v if v in top else OTHER_LAYERS for v in bars["layer"].tolist()]
    bars = bars.sort_values("start", kind="stable").reset_index(drop=True)
    lanes = sorted(set(bars["lane"]), key=_lane_key)
    return Timeline(bars, lanes, step, n_steps, left_out, span)
