"""Per-shape tables: each op by its unique arguments (shapes, dtypes, scalars: prof's ``params``), with
how many instances ran and the mean, median and spread (standard deviation) of their time and
achieved FLOP/s. GEMMs (prof's ``gemm`` family: mm, bmm, matmul, addmm, linear, ...) also show the
product's batch, M, N, K and dtype, so two calls of one shape on different layers read as one.

Instances are :mod:`pyprof.report.instances`; their FLOPs come from prof's cost models.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
import pandas as pd

from pyprof.report.instances import instances
from pyprof.report.profile import Profile

KEYS = ("op", "dir", "params", "dtype", "device")
COLUMNS = ("op", "dir", "params", "dtype", "gemm", "count", "total", "mean", "median", "std", "rate_mean",
           "rate_median", "rate_std", "flops")


def _operands(A, name: str, args: list) -> tuple:
    """The two matrix operands of a call of GEMM-family op ``name`` (not linear or einsum)."""
    if name in ("addmm", "baddbmm", "addbmm"):
        b = A.bind(args, ("input", "mat1", "mat2") if name == "addmm" else ("input", "batch1", "batch2"))
        return b.get("mat1") or b.get("batch1"), b.get("mat2") or b.get("batch2")
    if name == "rmatmul":
        b = A.bind(args, ("self", "other"))
        return b.get("other"), b.get("self")
    b = A.bind(args, ("input", "other"))
    return b.get("input") or b.get("self"), b.get("other") or b.get("mat2") or b.get("vec") or b.get("tensor")


def gemm_dims(op: str, mod: str | None, args: list | None) -> tuple[int, int, int, int] | None:
    """``(batch, M, N, K)`` of a GEMM-family op call from its arguments, or None (not a GEMM, an
    einsum, or shapes unknown). The binding is the one prof's GEMM models use."""
    from pyprof.prof.ops import _args as A
    from pyprof.prof.ops.gemm import matmul_dims
    from pyprof.prof.ops.registry import canonical, family

    if not op or not args or family(op, mod) != "gemm" or canonical(op, mod) == "einsum":
        return None
    name = canonical(op, mod)
    try:
        if name == "linear":
            b = A.bind(args, ("input", "weight", "bias"))
            sx, sw = A.shape(b.get("input")), A.shape(b.get("weight"))
            return (1, prod(sx[:-1]), (sw[0] if len(sw) == 2 else 1), sx[-1]) if sx and sw else None
        d = matmul_dims(*map(A.shape, _operands(A, name, args)))
    except (TypeError, ValueError, LookupError, AttributeError):
        return None
    if d is None:
        return None
    _, macs, (m, n, k) = d
    return (macs // (m * n * k) if m * n * k else 1), m, n, k


def gemm_text(dims: tuple[int, int, int, int] | None, dtype: str) -> str:
    """``M=64 N=256 K=512 float32`` (``B=8`` first for a batch), or ``-``."""
    if dims is None:
        return "-"
    b, m, n, k = dims
    return (f"B={b} " if b != 1 else "") + f"M={m} N={n} K={k} {dtype}"


def by_shape(profile: Profile) -> pd.DataFrame:
    """One row per (op, direction, arguments, dtype, device), columns :data:`COLUMNS` (time in ns,
    rates in FLOP/s, NaN where unknown), largest total time first."""
    inst = instances(profile.df)
    if not len(inst):
        return pd.DataFrame(columns=list(COLUMNS))
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(inst["time"].to_numpy() > 0, inst["flops"].to_numpy() / (inst["time"].to_numpy() * 1e-9),
                        np.nan)
    inst = inst.assign(rate=rate)
    g = inst.groupby(list(KEYS), sort=False)
    t, r = g["time"], g["rate"]
    out = pd.DataFrame({
        "count": t.size(), "total": t.sum(), "mean": t.mean(), "median": t.median(), "std": t.std(ddof=0),
        "rate_mean": r.mean(), "rate_median": r.median(), "rate_std": r.std(ddof=0),
        "flops": g["flops"].mean(), "first": g["first"].min(),
    }).reset_index()
    recs = profile.records
    out["gemm"] = [gemm_text(gemm_dims(op, _get(recs, i, "mod"), _get(recs, i, "args")), dt)
                   for op, i, dt in zip(out["op"].tolist(), out["first"].tolist(), out["dtype"].tolist(), strict=True)]
    out = out.sort_values("total", ascending=False, kind="stable").reset_index(drop=True)
    return out[list(COLUMNS)]


def _get(records: list[dict[str, Any]], i: int, key: str):
    return records[i].get(key) if 0 <= i < len(records) else None
