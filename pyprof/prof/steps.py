"""The profiled steps (iterations): which one each row of prof's table belongs to, and figures per step.

A record file's header lists its steps (``steps`` in :func:`pyprof.records.header`: ``[N, start, end]`` in
the records' clock); a row by its launch belongs to one of them, to none (:data:`OUTSIDE`) or, in a file
without steps, to :data:`WHOLE`. docs/prof.md ("Steps, noise, the latency floor and pinned peaks") states
the rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: the step of a row outside every profiled step
OUTSIDE = -1
#: the one step of a file without steps
WHOLE = 0


def table(header: dict[str, Any] | None) -> np.ndarray:
    """The header's steps as an ``(n, 3)`` int64 array ``[N, start, end]`` in start order (malformed
    entries left out; an empty ``(0, 3)`` array where there are none)."""
    rows = [s for s in (header or {}).get("steps") or ()
            if isinstance(s, list) and len(s) == 3 and all(type(v) is int for v in s) and s[2] >= s[1]]
    if not rows:
        return np.zeros((0, 3), dtype=np.int64)
    out = np.asarray(rows, dtype=np.int64)
    return out[np.argsort(out[:, 1], kind="stable")]


def launches(api_start: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's launch time (ns, int64: ``apiStart``, else ``start``; record fields as objects, null None)
    and whether it is known."""
    try:
        a = pd.array(api_start, dtype="Int64")
        s = pd.array(start, dtype="Int64")
    except (OverflowError, TypeError, ValueError):  # a time beyond int64 (or not an integer): unknown
        a, s = (pd.array([v if type(v) is int and -(2**63) <= v < 2**63 else None for v in col], dtype="Int64")
                for col in (api_start, start))
    t = a.fillna(s) if len(a) else a
    known = ~np.asarray(t.isna(), dtype=bool)
    return t.to_numpy(dtype=np.int64, na_value=0), known


def assign(launch: np.ndarray, known: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The step number of each row launched at ``launch`` (ns; ``known`` false: unknown, then
    :data:`OUTSIDE`), by the module's rule; :data:`WHOLE` for every row where ``steps`` is empty."""
    n = len(launch)
    if not len(steps):
        return np.full(n, WHOLE, dtype=np.int64)
    pos = np.searchsorted(steps[:, 1], launch, side="right") - 1
    last = len(steps) - 1
    inside = known & (pos >= 0) & ((pos < last) | (launch <= steps[last, 2]))
    return np.where(inside, steps[np.clip(pos, 0, last), 0], OUTSIDE)


def numbers(step: np.ndarray, steps: np.ndarray) -> list[int]:
    """The steps a summary is taken over: the header's (a step whose rows are all gone counts, with
    nothing in it), else the one :data:`WHOLE` step where rows have it."""
    if len(steps):
        return [int(s) for s in steps[:, 0]]
    return [WHOLE] if (step == WHOLE).any() else []


def spread(per_step: np.ndarray, axis: int = -1) -> np.ndarray:
    """The spread of per-step values: interquartile range / median (NaN with fewer than 2 steps or a
    zero median), the measure torch.utils.benchmark warns on above 10%."""
    a = np.asarray(per_step, dtype=float)
    if a.shape[axis] < 2:
        return np.full(np.delete(a.shape, axis), np.nan)
    q1, med, q3 = np.percentile(a, [25, 50, 75], axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(med > 0, (q3 - q1) / np.where(med > 0, med, 1), np.nan)


# name, header, format, meaning: the columns of ``--summary step``
STEP_COLUMNS = (
    ("step", "Step", "str", "The step (ProfilerStep#N's N; 'all' for a file without steps), then the median "
                            "over the steps."),
    ("wall", "Wall(ns)", "sci", "The step's wall time: its ProfilerStep#N range on the CPU (n/a without steps)."),
    ("sil", "Sil(ns)", "sci", "Silicon time of the step's records (kernels, memcpy, memset; CPU ops' self time)."),
    ("calls", "Calls", "int", "Op instances in the step."),
    ("kernels", "Kernels", "int", "Kernels (and memcpy/memset) in the step."),
    ("samples", "Samples/s", "float", "Samples per second: the batch size pyprof run saw / wall (n/a when unknown)."),
)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """``--summary step``: one row per profiled step (:data:`STEP_COLUMNS`), then a ``median`` row and a
    ``spread`` row (percent) where there are two steps or more."""
    head = df.attrs.get("header") or {}
    st = table(head)
    step = df["step"].to_numpy(dtype=np.int64) if "step" in df else np.zeros(len(df), dtype=np.int64)
    found = df.attrs.get("steps")  # as the build found them, else from the rows
    nums = list(found) if found is not None else numbers(step, st)
    walls = {int(n): float(e - s) for n, s, e in st.tolist()}
    batch = (head.get("conditions") or {}).get("batch")
    work = pd.DataFrame({"step": step, "time": df["sil"].fillna(0.0).to_numpy(dtype=float),
                         "opid": (df["opid"] if "opid" in df else pd.Series([None] * len(df))).to_numpy(dtype=object)})
    work = work[work["step"] >= 0]
    g = work.groupby("step")
    rows = pd.DataFrame({"step": nums}).set_index("step")
    rows["wall"] = [walls.get(n, np.nan) for n in nums]
    rows["sil"] = g["time"].sum().reindex(nums, fill_value=0.0)
    rows["calls"] = g["opid"].nunique().reindex(nums, fill_value=0)
    rows["kernels"] = g.size().reindex(nums, fill_value=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["samples"] = batch / (rows["wall"] / 1e9) if isinstance(batch, int) and batch > 0 else np.nan
    out = rows.reset_index()
    out["step"] = ["all" if n == WHOLE and not len(st) else str(n) for n in nums]
    if len(nums) >= 2:
        values = out[["wall", "sil", "calls", "kernels", "samples"]].astype(float)
        out = pd.concat([out, pd.DataFrame([{"step": "median", **values.median().to_dict()}])], ignore_index=True)
    return out[[c[0] for c in STEP_COLUMNS]]


def spread_line(table_: pd.DataFrame) -> str | None:
    """How much the steps of :func:`summary` varied (wall and time: interquartile range / median), or None
    with fewer than two steps."""
    rows = table_[table_["step"] != "median"]
    if len(rows) < 2:
        return None
    spreads = [(name, spread(rows[col].to_numpy(dtype=float)))
               for col, name in (("wall", "wall time"), ("sil", "time"))]
    parts = [f"{name} {s * 100:.0f}%" for name, s in spreads if not np.isnan(s)]
    return f"spread over the {len(rows)} steps (interquartile range / median): {', '.join(parts)}" if parts else None


def from_records(records: list[dict]) -> list[list[int]]:
    """The steps of records read with their ``ranges`` but no header steps (records in memory, or a file
    written before headers held them): each ``ProfilerStep#N`` around some record, from the first launch
    in it to the last end (``[N, start, end]``, start order)."""
    found: dict[int, list[int]] = {}
    prefix = "ProfilerStep#"
    for rec in records:
        for r in rec.get("ranges") or ():
            text = r.get("text") if isinstance(r, dict) else None
            if isinstance(text, str) and text.startswith(prefix) and text[len(prefix):].isdigit():
                t0 = rec.get("apiStart") if type(rec.get("apiStart")) is int else rec.get("start")
                t1 = rec.get("end")
                if type(t0) is int:
                    span = found.setdefault(int(text[len(prefix):]), [t0, t0])
                    span[0] = min(span[0], t0)
                    span[1] = max(span[1], t1 if type(t1) is int else t0)
                break
    return sorted(([n, s, e] for n, (s, e) in found.items()), key=lambda x: x[1])
