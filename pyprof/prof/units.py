"""Numbers in the units a person reads at a glance: ``4.47 ms``, ``183 MFLOP``, ``10.1 MB``, ``41.0 GFLOP/s``.

Human tables (``pyprof prof -w``, the summaries ``pyprof prof --summary`` and ``pyprof run`` print,
``pyprof diff``, the HTML report) use these; CSV, JSON lines and the space-separated per-kernel table
keep raw numbers (ns, FLOPs, bytes) for machines. Three significant figures, SI prefixes (decimal: a
MB is 10^6 bytes, as GB/s is 10^9 bytes per second), ``n/a`` for an unknown (NaN) number.

:data:`FORMATS` maps each kind (``+dur`` and ``+pct``: a change, signed) to its function of one number;
:func:`column` formats a whole column of one kind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

NA = "n/a"
MICRO = "\u00b5"  # µ

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_TIME = ((1e9, "s"), (1e6, "ms"), (1e3, MICRO + "s"))


def _known(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _mantissa(m: float) -> str:
    """Three significant figures of ``0 < m < 1000`` (``123``, ``12.3``, ``1.23``)."""
    if m >= 99.95:
        return f"{m:.0f}"
    if m >= 9.995:
        return f"{m:.1f}"
    return f"{m:.2f}"


def _scaled(v: float, scales, base: str, sep: str = " ") -> str:
    """``v`` with the largest scale whose mantissa is at least 1, e.g. ``12.3 M`` + base."""
    sign = "-" if v < 0 else ""
    a = abs(v)
    for scale, prefix in scales:
        # a value that rounds up to the next scale (999.96e3 -> "1.00 M") takes that scale
        if a >= scale * 0.9995:
            return f"{sign}{_mantissa(max(a / scale, 1.0))}{sep}{prefix}{base}"
    return f"{sign}{a:.0f}{sep}{base}" if a >= 1 or a == 0 else f"{sign}{a:.2g}{sep}{base}"


def duration(ns) -> str:
    """A duration given in ns: ``850 ns``, ``12.4 µs``, ``3.07 ms``, ``1.52 s``."""
    if not _known(ns):
        return NA
    sign = "-" if ns < 0 else ""
    a = abs(float(ns))
    for scale, unit in _TIME:
        if a >= scale * 0.9995:
            return f"{sign}{_mantissa(a / scale)} {unit}"
    return f"{sign}{a:.0f} ns"


def flop(n) -> str:
    """A FLOP count: ``183 MFLOP``, ``1.25 GFLOP``, ``0 FLOP``."""
    return _scaled(float(n), _SI, "FLOP") if _known(n) else NA


def nbytes(n) -> str:
    """A byte count: ``10.1 MB``, ``512 B``."""
    return _scaled(float(n), _SI, "B") if _known(n) else NA


def flop_rate(per_s) -> str:
    """FLOP/s: ``41.0 GFLOP/s``, ``1.23 TFLOP/s``."""
    return _scaled(float(per_s), _SI, "FLOP/s") if _known(per_s) else NA


def byte_rate(per_s) -> str:
    """Bytes/s: ``2.26 GB/s``."""
    return _scaled(float(per_s), _SI, "B/s") if _known(per_s) else NA


def percent(p) -> str:
    """A percentage given as 0-100: ``46.8%``, ``0.03%``, ``<0.01%``."""
    if not _known(p):
        return NA
    a = abs(float(p))
    if a == 0:
        return "0%"
    if a < 0.005:
        return "<0.01%" if p > 0 else ">-0.01%"
    return f"{p:.1f}%" if a >= 1 else f"{p:.2f}%"


def number(v) -> str:
    """A ratio (gap, intensity): ``7.40``, ``452``, ``0.0123``."""
    if not _known(v):
        return NA
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    a = abs(v)
    if a >= 100 or a == 0:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def signed(fn):
    """``fn`` with a ``+`` on positive values: a change reads as one (``+200 µs``, ``+38.5%``)."""
    def fmt(v) -> str:
        text = fn(v)
        return "+" + text if _known(v) and v > 0 and text[0] not in "+<" else text

    return fmt


FORMATS = {"dur": duration, "flop": flop, "byte": nbytes, "flops": flop_rate, "bps": byte_rate, "pct": percent,
           "num": number, "+dur": signed(duration), "+pct": signed(percent)}


def column(values: Iterable, kind: str) -> list[str]:
    """Every value of a column as text of ``kind`` (a key of :data:`FORMATS`)."""
    fn = FORMATS[kind]
    out = []
    for v in values:
        try:
            out.append(fn(None if v is None else float(v)))
        except (TypeError, ValueError):
            out.append(NA)
    return out
