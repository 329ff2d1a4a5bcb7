"""pyprof.prof.units: the human units of terminal tables and the report, and render's width fitting."""

from __future__ import annotations

import io
import math

import pytest

from pyprof.prof import render, units

MU = "\u00b5"


@pytest.mark.parametrize("ns,text", [
    (0, "0 ns"), (850, "850 ns"), (999.7, f"1.00 {MU}s"), (12_400, f"12.4 {MU}s"), (3.07e6, "3.07 ms"),
    (999.96e6, "1.00 s"), (1.52e9, "1.52 s"), (-2500, f"-2.50 {MU}s"), (float("nan"), "n/a"), (None, "n/a"),
])
def test_duration(ns, text):
    assert units.duration(ns) == text


@pytest.mark.parametrize("fn,value,text", [
    (units.flop, 183_398_400, "183 MFLOP"), (units.flop, 1.25e9, "1.25 GFLOP"), (units.flop, 3.2e13, "32.0 TFLOP"),
    (units.flop, 0, "0 FLOP"), (units.flop, 999, "999 FLOP"), (units.nbytes, 10_108_320, "10.1 MB"),
    (units.nbytes, 512, "512 B"), (units.flop_rate, 4.1e10, "41.0 GFLOP/s"), (units.byte_rate, 2.26e9, "2.26 GB/s"),
    (units.percent, 46.8, "46.8%"), (units.percent, 0.031, "0.03%"), (units.percent, 0.001, "<0.01%"),
    (units.number, 7.4, "7.40"), (units.number, 299697, "299697"), (units.number, math.inf, "inf"),
    (units.flop, float("nan"), "n/a"),
])
def test_si_units(fn, value, text):
    assert fn(value) == text


def test_signed_changes():
    assert units.column([2e5, -2e5, 0, None], "+dur") == [f"+200 {MU}s", f"-200 {MU}s", "0 ns", "n/a"]
    assert units.column([38.46, -3.2, 0.001], "+pct") == ["+38.5%", "-3.2%", "<0.01%"]


def test_column_of_mixed_values():
    assert units.column([1e6, None, "x", float("nan")], "dur") == ["1.00 ms", "n/a", "n/a", "n/a"]


def _table(width, drop=()):
    cols = [["conv2d", "cross_entropy_loss_of_a_long_name"], ["4.47 ms", "12.0 ms"], ["183 MFLOP", "1 FLOP"],
            ["1.2", "300"]]
    out = io.StringIO()
    render.write_aligned(cols, ["Op", "Time", "FLOPs", "Gap"], [False, True, True, True], out, width, drop=drop)
    return out.getvalue().splitlines()


def test_fits_by_cutting_text_then_leaving_out_columns():
    full = _table(0)
    assert len(full[0]) == max(map(len, full)) and "cross_entropy_loss_of_a_long_name" in full[2]
    cut = _table(45)
    assert all(len(line) <= 45 for line in cut) and "~" in cut[2] and "FLOPs" in cut[0]
    dropped = _table(30, drop=[2])
    assert all(len(line) <= 30 for line in dropped)
    assert "FLOPs" not in dropped[0] and dropped[-1].startswith("(left out to fit -w 30: FLOPs")
    for width in range(1, 60):
        assert all(len(line) <= width for line in _table(width, drop=[2, 3])), width


def test_fit_widths_drops_groups_together_and_never_the_first_column():
    widths, out = render.fit_widths([10, 8, 8, 8], ["a", "b", "c", "d"], [True, False, False, False], 22,
                                    drop=[(2, 3)])
    assert out == [2, 3] and widths[2] == widths[3] == 0 and widths[0] >= 10
    widths, out = render.fit_widths([10, 8], ["a", "b"], [False, False], 5)
    assert out == [1] and widths[0] == 5
