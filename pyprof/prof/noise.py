"""Whether a profile's timings can be trusted: the machine's load while its steps ran, and how much its
steps varied (docs/prof.md, "Steps, noise, the latency floor and pinned peaks"):

* the machine: the share of the usable CPUs' time other processes took while the profiled steps ran
  (``pyprof run`` measures it: the header's ``conditions``), above :data:`BUSY_SHARE`;
* the program: the spread of its step times (:func:`pyprof.prof.steps.spread`), above :data:`SPREAD`
  (torch.utils.benchmark's threshold).

:func:`problems` names each in a short phrase; :func:`warning` makes the one line ``run``, ``prof``,
``report`` and ``diff`` print. ``diff`` calls a comparison with a side under load inconclusive.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyprof.prof import steps

#: the share of the usable CPUs' time other processes may take while the steps run (or a calibration
#: measures) before the timings count as taken under load: work on all threads waits for its slowest
#: thread, so one busy core of two already costs it about half its speed
BUSY_SHARE = 0.25
#: the spread of step times (interquartile range / median) above which a warning says so
SPREAD = 0.10


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def load_problem(conditions: Any) -> str | None:
    """The phrase on the machine's load while the steps ran, or None (quiet, or not recorded)."""
    if not isinstance(conditions, dict):
        return None
    busy = _number(conditions.get("busy_others"))
    cpus = _number(conditions.get("cpus"))
    if busy is not None and busy > BUSY_SHARE:
        where = f"the {cpus:.0f} CPUs" if cpus else "the CPUs"
        return f"other processes used {busy:.0%} of {where} while the steps ran"
    return None


def step_times(df) -> np.ndarray:
    """The time of each profiled step of prof's table ``df`` (ns; the steps of :mod:`pyprof.prof.steps`)."""
    table = steps.summary(df)
    rows = table[table["step"] != "median"]
    return rows["sil"].to_numpy(dtype=float)


def spread_problem(times: np.ndarray) -> str | None:
    """The phrase on steps that varied more than :data:`SPREAD`, or None."""
    from pyprof.prof.units import duration

    if len(times) < 2:
        return None
    s = float(steps.spread(times))
    if not s > SPREAD:
        return None
    return (f"the step time varied {s:.0%} between steps (interquartile range / median; "
            f"{duration(float(times.min()))} to {duration(float(times.max()))})")


def problems(df) -> list[str]:
    """Why the timings of prof's table ``df`` may not hold: load, spread (each a phrase; [] when none)."""
    return [p for p in (under_load(df), spread_problem(step_times(df))) if p]


def under_load(df) -> str | None:
    """The load phrase of ``df``'s header, or None: a side of ``diff`` ran under load."""
    return load_problem((df.attrs.get("header") or {}).get("conditions"))


def warning(found: list[str], name: str = "") -> str | None:
    """The one line that says a profile's timings may not hold, naming why and what to do; None when
    nothing was found."""
    if not found:
        return None
    what = f"{name}: " if name else ""
    return (f"{what}timings may not hold: {'; '.join(found)}; profile again on a quiet machine, with more steps "
            "(pyprof run --active N)")
