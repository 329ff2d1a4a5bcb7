"""Op instances: the kernels one call of an op launched in one direction (prof's rule: kernels sharing
``opId`` and ``dir``; a record without an op instance is one alone), with their summed time, FLOPs,
bytes and ideal time, and what a reader needs to recognise the call (op, layer, shapes, call site,
kernel names). The roofline chart plots them and the per-shape tables group them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ("op", "dir", "module", "params", "dtype", "site", "kernels", "device", "first", "n_kernels", "time",
           "flops", "bytes", "ideal", "tc")


def instance_ids(df: pd.DataFrame) -> np.ndarray:
    """An instance number per row of prof's table (not empty): kernels by (opid, dir), every other row alone."""
    opid = df["opid"].to_numpy(dtype=object)
    known = np.not_equal(opid, None)  # type: ignore[call-overload]  # (stubs lack None; it compares each item)
    has = known & (df["kind"].to_numpy(dtype=object) == "kernel")
    # (opid, dir) pairs as tuples: pandas 2 hashes object strings as C strings, which end at a NUL,
    # so a joined text key would need a separator that can never occur in either part
    key = pd.Series(list(zip(opid.tolist(), df["dir"].tolist(), strict=True)), dtype=object)
    ids = np.full(len(df), -1, dtype=np.int64)
    if has.any():
        codes, _ = pd.factorize(key[has])
        ids[has] = codes
    alone = ids < 0
    ids[alone] = int(ids.max()) + 1 + np.arange(int(alone.sum()))  # (after the codes; from 0 where none)
    return ids


def _site(trace) -> str:
    return str(trace[0]) if isinstance(trace, (list, tuple)) and trace else "-"


def _text(v) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) or v == "" else str(v)


def instances(df: pd.DataFrame) -> pd.DataFrame:
    """One row per op instance (columns :data:`COLUMNS`, ``first``: its first row of ``df``), in order
    of first appearance. FLOPs, bytes and ideal are NaN where no kernel of the instance has them."""
    if not len(df):
        return pd.DataFrame(columns=list(COLUMNS))
    ids = instance_ids(df)
    sil = df["sil"].fillna(0.0).to_numpy(dtype=float)
    work = pd.DataFrame({"id": ids, "time": sil, "flops": df["flops"].to_numpy(dtype=float),
                         "bytes": df["bytes"].to_numpy(dtype=float), "ideal": df["ideal"].to_numpy(dtype=float),
                         "tc": (df["tc"] == "1").to_numpy(), "row": np.arange(len(df))})
    g = work.groupby("id", sort=True)
    sums = g[["time"]].sum()
    for col in ("flops", "bytes", "ideal"):
        sums[col] = g[col].sum(min_count=1)
    sums["tc"] = g["tc"].any()
    sums["first"] = g["row"].min()
    sums["n_kernels"] = g["row"].size()
    names: dict[int, dict[str, None]] = {}  # instance -> its distinct kernel names, in order
    for i, k in zip(ids.tolist(), df["kernel"].astype(object).tolist(), strict=True):
        if k:
            names.setdefault(i, {})[str(k)] = None
    first = sums["first"].to_numpy()
    gpu = df["gpu"].astype(object).to_numpy()
    device = df["device"].astype(object).to_numpy()
    out = pd.DataFrame({
        **{c: [_text(v) for v in df[c].to_numpy(dtype=object)[first]]
           for c in ("op", "dir", "module", "params", "dtype")},
        "site": [_site(v) for v in df["trace"].to_numpy(dtype=object)[first]],
        "kernels": [tuple(names.get(i, ())) for i in sums.index.tolist()],
        "device": ["CPU" if d is None else (gp or "unknown GPU") for d, gp in zip(device[first], gpu[first], strict=True)],
        **{c: sums[c].to_numpy() for c in ("first", "n_kernels", "time", "flops", "bytes", "ideal", "tc")},
    })
    return out.sort_values("first", kind="stable").reset_index(drop=True)
