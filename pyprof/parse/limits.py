"""Bounds on the work an export can ask of ``pyprof parse``: what no real capture reaches, so that a
crafted or damaged file is refused in one line instead of taking gigabytes or hours.

==============  ==========================================================  =================
name            what it bounds                                              default
==============  ==========================================================  =================
``inflate``     bytes a gzip trace may inflate to, beyond 100 x its size    512 MiB
``depth``       ranges open at once on one thread (NVTX, user annotations)  2,000
``text``        characters of one range text (a marker, an annotation)      16 MiB
``cross``       ranges stacked again where ranges cross (one ends under     16
                others), per range and launch of the thread
``chain``       torch.profiler ranges open around a range, on average over  64
                the trace's ranges (beyond one stack as deep as ``depth``)
==============  ==========================================================  =================

A gzip trace may always inflate to 100 times its own size (real traces compress 5 to 30 times), and
to ``inflate`` bytes whatever its size. Each limit is raised with ``pyprof parse --limit NAME=N``
(several allowed), which sets ``PYPROF_LIMITS`` (``depth=5000,text=100000000``), read here, so that
forked and Dask workers see the same limits.

``depth`` bounds what one record carries (a kernel's record lists every range open at its launch)
and the sweep's walk up the nesting, one step per level (timings: docs/benchmarks.md); ``cross`` and
``chain`` keep time and memory linear in the input whatever its ranges do.
"""

from __future__ import annotations

import functools
import os

from pyprof.errors import InputError

DEFAULTS = {"inflate": 512 << 20, "depth": 2000, "text": 16 << 20, "cross": 16, "chain": 64}
#: a gzip trace may inflate to this many times its compressed size whatever ``inflate`` says
INFLATE_RATIO = 100
ENV = "PYPROF_LIMITS"


class LimitError(InputError):
    """An export past one of the limits: one line naming the limit and how to raise it."""


def parse_spec(spec: str) -> dict[str, int]:
    """``"depth=5000,text=100"`` -> {name: value}; ValueError naming what is wrong."""
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in DEFAULTS:
            raise ValueError(f"unknown limit {item!r} (known: {', '.join(DEFAULTS)}; NAME=N)")
        try:
            n = int(value.strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"limit {name} needs a whole number, not {value.strip()!r}") from None
        least = 65536 if name == "text" else 1
        if n < least:
            raise ValueError(f"limit {name} must be at least {least}")
        out[name] = n
    return out


def get(name: str) -> int:
    """The limit ``name`` in force: ``PYPROF_LIMITS`` where it sets it, else its default."""
    return _in_force(os.environ.get(ENV, "")).get(name, DEFAULTS[name])


@functools.lru_cache(maxsize=8)
def _in_force(spec: str) -> dict[str, int]:
    try:
        return parse_spec(spec)
    except ValueError:
        return {}


def exceeded(what: str, name: str, value: int) -> LimitError:
    """The one line for an export past limit ``name``: ``what`` says what was found."""
    limit = get(name)
    return LimitError(f"{what}, past pyprof's limit of {limit:,} ({name}); no real capture reaches it",
                      f"if this one is real, raise the limit: pyprof parse --limit {name}={max(value, limit * 2)}")
