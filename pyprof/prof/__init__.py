"""prof: per-kernel direction, FLOPs, bytes, tensor cores and roofline gap from parse's records.

The API (imported lazily, so ``import pyprof.prof`` stays light)::

    from pyprof.prof import build, summarize, fix_first, iter_records
    df = build(iter_records("net.dict"))      # one row per kernel: pyprof.prof.table
    summarize(df, "op")                       # per op | layer | kernel | dir: pyprof.prof.summary
"""

_API = {
    "build": "pyprof.prof.table",
    "build_file": "pyprof.prof.table",
    "summarize": "pyprof.prof.summary",
    "fix_first": "pyprof.prof.summary",
    "iter_records": "pyprof.prof.load",
    "read_records": "pyprof.prof.load",
}

__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'pyprof.prof' has no attribute {name!r}")
