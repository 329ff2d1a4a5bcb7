"""Where a device's time went, from the kernels' start and end times: busy (computing), exposed
communication (NCCL kernels while no compute kernel runs), exposed memcpy/memset (while neither
compute nor communication runs), and idle (nothing runs); the four add up to the device's window,
its first record's start to its last record's end.

Overlap is what counts: a collective hidden under a GEMM on another stream costs nothing, one that
the compute waits for is exposed. CPU records (a CPU trace) form one device, ``CPU``: its ops' spans
(start to end, the ops they call included) on any thread are busy, the gaps between them idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyprof.prof.intervals import union_length

COMM_NAMES = ("nccl", "rccl")


@dataclass(frozen=True)
class Breakdown:
    """One device's window split four ways (ns): ``busy + comm_exposed + memcpy_exposed + idle ==
    window``; ``comm`` and ``memcpy`` are the totals of those records, hidden or not."""

    device: str
    window: float
    busy: float
    comm_exposed: float
    memcpy_exposed: float
    idle: float
    comm: float
    memcpy: float

    def share(self, part: str) -> float:
        return getattr(self, part) / self.window * 100 if self.window > 0 else float("nan")


def is_comm(rec: dict[str, Any]) -> bool:
    name = f"{rec.get('kShortName') or ''} {rec.get('kLongName') or ''}".lower()
    return any(c in name for c in COMM_NAMES)


def _span(rec: dict[str, Any]) -> tuple[float, float] | None:
    start, end = rec.get("start"), rec.get("end")
    if start is None:
        return None
    end = start + (rec.get("kDuration") or 0) if end is None else end
    return float(start), float(max(end, start))


def _cover(arr: dict[str, np.ndarray], *kinds: str) -> float:
    a = np.concatenate([arr[k] for k in kinds])
    return float(union_length(a[:, 0], a[:, 1]))


def breakdown(records: list[dict[str, Any]]) -> list[Breakdown]:
    """One :class:`Breakdown` per GPU (``GPU N: name``), then the CPU where there are CPU records."""
    groups: dict[tuple, dict[str, list]] = {}
    for rec in records:
        span = _span(rec)
        if span is None:
            continue
        dev = rec.get("device")
        key = (0, dev, f"GPU {dev}: {rec.get('gpu') or 'unknown'}") if dev is not None else (1, -1, "CPU")
        kind = ("memcpy" if rec.get("kind") in ("memcpy", "memset") else "comm" if is_comm(rec) else "compute")
        g = groups.setdefault(key, {"compute": [], "comm": [], "memcpy": []})
        g[kind].append(span)
    out = []
    for key in sorted(groups, key=lambda k: (k[0], k[1])):
        g = groups[key]
        arr = {k: np.array(v, dtype=float).reshape(-1, 2) for k, v in g.items()}
        every = np.concatenate(list(arr.values()))
        window = float(every[:, 1].max() - every[:, 0].min())

        busy = _cover(arr, "compute")
        with_comm = _cover(arr, "compute", "comm")
        everything = _cover(arr, "compute", "comm", "memcpy")
        out.append(Breakdown(key[2], window, busy, with_comm - busy, everything - with_comm, window - everything,
                             float(np.sum(arr["comm"][:, 1] - arr["comm"][:, 0])),
                             float(np.sum(arr["memcpy"][:, 1] - arr["memcpy"][:, 0]))))
    return out
