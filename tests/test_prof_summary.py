"""pyprof.prof.summary: group totals, shares, achieved rates, time-weighted gap, fix-this-first order."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pyprof.errors import UsageError
from pyprof.prof.summary import SUMMARY_NAMES, fix_first, latency_line, summarize


def frame():
    # op a: two kernels with known ideal; op b: unknown cost; op c: one kernel far from the roofline
    return pd.DataFrame({
        "op": ["a", "a", "b", "c", None],
        "module": ["m.x", "m.y", "m.x", "m.x", None],
        "kernel": ["k1", "k2", "k1", "k3", "k4"],
        "dir": ["fprop", "bprop", "fprop", "fprop", ""],
        "sil": [100.0, 300.0, 200.0, 400.0, 0.0],
        "flops": [1e6, 3e6, np.nan, 8e6, np.nan],
        "bytes": [1e3, 3e3, np.nan, 1e3, np.nan],
        "ideal": [50.0, 100.0, np.nan, 40.0, np.nan],
        "gap": [2.0, 3.0, np.nan, 10.0, np.nan],
    })


def test_summary_by_op():
    s = summarize(frame(), "op").set_index("key")
    assert list(s.columns[:len(SUMMARY_NAMES) - 1]) == list(SUMMARY_NAMES[1:])
    assert list(s.index) == ["a", "c", "b", "-"]  # by time, largest first
    a = s.loc["a"]
    assert a["time"] == 400 and a["kernels"] == 2
    assert a["share"] == pytest.approx(40.0)
    assert a["flops"] == 4e6 and a["bytes"] == 4e3
    assert a["tflops"] == pytest.approx(4e6 / 400 / 1e3)
    assert a["gbps"] == pytest.approx(4e3 / 400)
    assert a["ideal"] == 150 and a["excess"] == 250
    assert a["gap"] == pytest.approx(400 / 150)  # time / ideal: agrees with excess by construction
    b = s.loc["b"]
    assert math.isnan(b["flops"]) and math.isnan(b["gap"]) and math.isnan(b["excess"])  # n/a, not 0
    assert s["share"].sum() == pytest.approx(100.0)


def test_kernels_faster_than_the_roofline_are_not_findings():
    """A kernel with gap < 1 (a model or peak error) is left out of ideal, excess and gap, so no group
    shows a negative excess, and gap > 1 exactly where excess > 0."""
    df = frame()
    df["gap"] = [2.0, 0.5, np.nan, 10.0, np.nan]
    df["ideal"] = [50.0, 600.0, np.nan, 40.0, np.nan]
    df["beyond"] = [False, True, False, False, False]
    a = summarize(df, "op").set_index("key").loc["a"]
    assert a["ideal"] == 50 and a["excess"] == 50 and a["gap"] == pytest.approx(2.0)
    s = summarize(df, "op").dropna(subset=["excess"])
    assert (s["excess"] >= 0).all() and ((s["gap"] > 1) == (s["excess"] > 0)).all()


def test_fix_first_orders_by_excess():
    s = summarize(frame(), "op")
    first = fix_first(s, 5)
    assert first["key"].tolist() == ["c", "a"]  # c: 360 ns above the roofline, a: 250; b unknown: left out
    assert fix_first(s, 1)["key"].tolist() == ["c"]


def test_other_groupings():
    f = frame()
    assert summarize(f, "layer").set_index("key").loc["m.x", "kernels"] == 3
    assert summarize(f, "kernel").set_index("key").loc["k1", "time"] == 300
    assert set(summarize(f, "dir")["key"]) == {"fprop", "bprop", "-"}
    assert "(no module)" in set(summarize(f, "layer")["key"])  # work outside every module says what it is
    with pytest.raises(UsageError):
        summarize(f, "colour")


def stepped():
    """Three steps of two ops: ``a`` steady (100 ns a step), ``b`` 10, 10 and 70 ns (one slow step);
    a row launched before the first step belongs to none."""
    df = pd.DataFrame({
        "op": ["a", "b", "a", "b", "a", "b", "a"],
        "opid": [1, 2, 3, 4, 5, 6, 7],
        "module": ["m"] * 7, "kernel": ["k"] * 7, "dir": ["fprop"] * 7,
        "sil": [100.0, 10.0, 100.0, 10.0, 100.0, 70.0, 999.0],
        "flops": [1e3] * 7, "bytes": [np.nan] * 7, "ideal": [50.0] * 7, "gap": [2.0, 0.2, 2.0, 0.2, 2.0, 1.4, 20.0],
        "step": [5, 5, 6, 6, 7, 7, -1],
    })
    df.attrs["steps"] = [5, 6, 7]
    return df


def test_the_step_is_the_unit():
    s = summarize(stepped(), "op").set_index("key")
    a, b = s.loc["a"], s.loc["b"]
    assert a["time"] == 100 and a["calls"] == 3 and a["kernels"] == 3  # the row outside the steps is left out
    assert a["spread"] == 0
    assert b["time"] == 10 and b["spread"] == pytest.approx((40 - 10) / 10 * 100)  # IQR of 10, 10, 70 / median
    assert a["flops"] == 1e3  # per step
    assert a["share"] == pytest.approx(100 / 110 * 100)  # of the median step's time


def test_a_group_missing_from_a_step_counts_zero_there():
    df = stepped()
    df.loc[df["op"] == "b", "step"] = [5, 5, 5]
    b = summarize(df, "op").set_index("key").loc["b"]
    assert b["time"] == 0 and b["kernels"] == 3  # median of 90, 0, 0


def test_latency_bound_groups_are_not_fixes():
    df = frame()
    df["bound"] = ["compute", "compute", None, "latency", None]
    s = summarize(df, "op")
    assert s.set_index("key").loc["c", "bound"] == "latency"
    assert fix_first(s, 5)["key"].tolist() == ["a"]  # c's excess is at the floor: no faster kernel saves it
    line = latency_line(s, "op")
    assert "400 ns per step" in line and "1 op mostly so" in line
