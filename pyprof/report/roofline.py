"""The roofline chart's data: op instances as points (arithmetic intensity, achieved FLOP/s) and the
roofs of the devices they ran on.

A point is an op instance (:mod:`pyprof.report.instances`) with FLOPs, bytes and time all above 0; past
:data:`MAX_POINTS` instances, the instances of the same call (op, direction, layer, arguments, dtype,
device) are merged into one point (their FLOPs, bytes and time summed; ``count`` says how many), so
a long trace stays a readable, small page. Intensity, achieved rate and the roofs are prof's figures
(FLOPs and bytes from its cost models, peaks from :mod:`pyprof.prof.devices`), not recomputed here.

A roof is a device's memory bandwidth (the slope) capped by one compute peak: one per dtype the
device's points computed in, on tensor cores and on the other units (CUDA cores; a CPU's vector
units), as :meth:`pyprof.prof.devices.Device.peak` gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pyprof.prof.devices import dtype_class
from pyprof.report.instances import instances
from pyprof.report.profile import Profile

MAX_POINTS = 2000
DIRECTIONS = ("fprop", "bprop", "optim", "other")
MAX_KERNELS_SHOWN = 4
POINT_COLUMNS = ("ai", "rate", "time", "flops", "bytes", "count", "dir", "op", "module", "params", "dtype",
                 "site", "kernels", "tc", "device")


@dataclass(frozen=True)
class Roof:
    """``min(peak, bw * intensity)``: ``peak`` FLOP/s, ``bw`` bytes/s (either may be None: unknown)."""

    device: str
    label: str
    peak: float | None
    bw: float | None
    tensor: bool

    @property
    def ridge(self) -> float | None:
        """Intensity (FLOP/byte) where the memory slope meets the compute peak."""
        return self.peak / self.bw if self.peak and self.bw else None


def points(profile: Profile, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """One row per point: ``ai`` (FLOP/byte), ``rate`` (FLOP/s), ``time`` (ns), ``flops``, ``bytes``,
    ``count`` (instances merged), ``dir`` (one of :data:`DIRECTIONS`), ``op``, ``module``, ``params``,
    ``dtype``, ``site``, ``kernels`` (names, comma-separated), ``tc``, ``device``; largest time first."""
    inst = instances(profile.df)
    if len(inst):
        keep = (inst["flops"] > 0) & (inst["bytes"] > 0) & (inst["time"] > 0)
        inst = inst[keep.fillna(False).to_numpy(dtype=bool)]
    inst = inst.assign(count=1)
    if len(inst) > max_points:
        keys = ["op", "dir", "module", "params", "dtype", "device"]
        g = inst.groupby(keys, sort=False)
        merged = g[["time", "flops", "bytes", "count"]].sum()
        firsts = g[["site", "kernels", "tc"]].first()
        inst = merged.join(firsts).reset_index()
    if not len(inst):
        return pd.DataFrame(columns=list(POINT_COLUMNS))
    out = inst.assign(ai=inst["flops"] / inst["bytes"], rate=inst["flops"] / (inst["time"] * 1e-9),
                      dir=[d if d in DIRECTIONS else "other" for d in inst["dir"].tolist()],
                      kernels=[_kernels(k) for k in inst["kernels"].tolist()], tc=inst["tc"].astype(bool))
    out = out[list(POINT_COLUMNS)]
    return out.sort_values("time", ascending=False, kind="stable").reset_index(drop=True)


def _kernels(names) -> str:
    names = list(names)
    shown = ", ".join(names[:MAX_KERNELS_SHOWN])
    return shown + (f", +{len(names) - MAX_KERNELS_SHOWN} more" if len(names) > MAX_KERNELS_SHOWN else "")


def roofs(profile: Profile, pts: pd.DataFrame | None = None) -> list[Roof]:
    """The roofs of every device with known peaks: per dtype class its points computed in (fp32 where
    none is known), tensor cores and not where the device has them; equal peaks of one device are
    shown once. A device with a bandwidth but no FLOP/s peak gets its memory roof alone."""
    pts = points(profile) if pts is None else pts
    out: list[Roof] = []
    for info in profile.devices:
        dev = info.device
        if dev is None or (not dev.flops and not dev.bw):
            continue
        classes = _classes(pts[pts["device"] == info.label] if len(pts) else pts)
        units = [False, True] if dev.has_tensor_cores else [False]
        seen: set[float] = set()
        for cls in classes:
            for tensor in units:
                peak = dev.peak(_DTYPE_OF.get(cls, cls), tensor)
                if peak is None or peak in seen:
                    continue
                seen.add(peak)
                out.append(Roof(info.label, _label(cls, tensor, info.is_cpu, "any" in dev.flops), peak, dev.bw, tensor))
        if not seen and dev.bw:
            out.append(Roof(info.label, "memory", None, dev.bw, False))
    return out


def _classes(mine: pd.DataFrame) -> list[str]:
    """The dtype classes a device's points computed in (fp32 where none is known; no roof for int)."""
    classes = sorted({dtype_class(d) or "fp32" for d in (mine["dtype"].tolist() if len(mine) else [])} or {"fp32"})
    return [c for c in classes if c != "int"] or ["fp32"]


_DTYPE_OF = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn",
             "int8": "int8"}


def _label(cls: str, tensor: bool, is_cpu: bool, override: bool) -> str:
    if override:
        return "peak (--peak-flops)"
    if is_cpu:
        return f"{cls} (calibrated)"
    if tensor:
        return f"{'tf32' if cls == 'fp32' else cls} tensor cores"
    return f"{cls} CUDA cores"


def roof_line(roof: Roof, lo: float, hi: float) -> tuple[list[float], list[float | None]]:
    """The roof as a polyline over intensities ``lo``..``hi`` (FLOP/byte): ``(x, y)`` in FLOP/s."""
    if roof.bw is None:
        return [lo, hi], [roof.peak, roof.peak]
    if roof.peak is None:
        return [lo, hi], [roof.bw * lo, roof.bw * hi]
    ridge = roof.ridge
    xs = [lo] + ([ridge] if ridge is not None and lo < ridge < hi else []) + [hi]
    return xs, [min(roof.peak, roof.bw * x) for x in xs]


def x_range(pts: pd.DataFrame, rfs: list[Roof]) -> tuple[float, float]:
    """Intensities the chart spans: every point and every ridge, with a margin (log scale)."""
    xs = [float(v) for v in pts["ai"].tolist()] if len(pts) else []
    xs += [r.ridge for r in rfs if r.ridge]
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    if not xs:
        return 0.01, 1000.0
    lo, hi = min(xs), max(xs)
    return 10 ** (math.floor(np.log10(lo)) - 0.5), 10 ** (math.ceil(np.log10(hi)) + 0.5)
