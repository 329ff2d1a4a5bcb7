"""assemble.group_codes (numpy, no pandas on the Nsight path) against a plain-Python reference:
codes numbered by first appearance, equal rows equal codes, on every path (values by offset, by a sort, a key
re-coded before it overflows, object columns)."""

from __future__ import annotations

import numpy as np
import pytest

from pyprof.parse import assemble
from pyprof.parse.assemble import group_codes


def _reference(columns):
    index: dict = {}
    codes = [index.setdefault(row, len(index)) for row in zip(*(c.tolist() for c in columns), strict=True)]
    first = {}
    for i, c in enumerate(codes):
        first.setdefault(c, i)
    return codes, [first[c] for c in range(len(index))]


def _columns(rng, n, kind):
    if kind == "small":
        return [rng.integers(-1, 5, n), rng.integers(0, 3, n)]
    if kind == "wide":  # values spread far apart: coded by a sort
        return [rng.choice(np.array([-1, 7, 1 << 40, 1 << 62, -(1 << 50)]), n), rng.integers(0, 1 << 45, n)]
    if kind == "overflow":  # many wide columns: the key is re-coded before the product overflows
        return [rng.integers(0, 1 << 40, n) // (1 << 36) * (1 << 36) for _ in range(6)]
    if kind == "mixed":
        return [rng.integers(0, 2, n).astype(bool), rng.integers(0, 100, n).astype(np.int32),
                rng.integers(-(1 << 62), 1 << 62, n) % 7]
    # nvprof's object columns: text with nulls, None or NaN
    return [np.array([[None, "a", "b", float("nan"), "a"][i % 5] for i in range(n)], dtype=object),
            rng.integers(0, 2, n)]


@pytest.mark.parametrize("fast_at", [True, False])  # (numpy >= 1.25's ufunc.at, or a sort)
@pytest.mark.parametrize("kind", ["small", "wide", "overflow", "mixed", "object"])
@pytest.mark.parametrize("n", [0, 1, 7, 5000])
def test_group_codes_match_reference(kind, n, fast_at, monkeypatch):
    monkeypatch.setattr(assemble, "_FAST_AT", fast_at)
    rng = np.random.default_rng(n + len(kind))
    cols = _columns(rng, n, kind)
    codes, first = group_codes(cols)
    ref_codes, ref_first = _reference(cols) if kind != "object" else _reference_object(cols)
    assert codes.tolist() == ref_codes
    assert first.tolist() == ref_first


def _reference_object(cols):
    # (NaN != NaN in Python: nulls, None or NaN, are one value for group_codes, as they were for pandas)
    norm = [np.array(["<null>" if v is None or v != v else v for v in cols[0].tolist()], dtype=object), cols[1]]
    return _reference(norm)


def test_one_column_codes_values_in_order_of_appearance():
    col = np.array([9, 3, 9, 1 << 50, 3, -1], dtype=np.int64)
    codes, first = group_codes([col])
    assert codes.tolist() == [0, 1, 0, 2, 1, 3]
    assert col[first].tolist() == [9, 3, 1 << 50, -1]
