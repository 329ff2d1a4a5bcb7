"""Calibration timing repeats until its best runs agree, and records how busy the machine was.

Driven by a fake clock and crafted /proc/stat readings: nothing here depends on this machine's speed
or load."""

from __future__ import annotations

import pytest

from pyprof import machine
from pyprof.calibrate import STABLE_WITHIN, time_stable
from pyprof.machine import LoadProbe, cpu_jiffies


class FakeRuns:
    """``fn`` and ``clock`` for :func:`time_stable`: each call of ``fn`` advances the clock by the next
    duration (the first one is the warm-up); the last duration repeats when they run out."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.t = 0.0
        self.calls = 0

    def fn(self):
        d = self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        self.t += d

    def clock(self):
        return self.t


def test_stops_as_soon_as_the_best_three_agree():
    runs = FakeRuns([50.0, 1.0, 1.02, 1.04, 9.0])  # warm-up, then three runs within 4 %
    t = time_stable(runs.fn, 10.0, budget=100.0, clock=runs.clock)
    assert t.reps == 3 and runs.calls == 4
    assert t.rate == 10.0 and t.best == 1.0  # the slow warm-up is not timed
    assert t.spread == pytest.approx(0.04) and t.spread <= STABLE_WITHIN


def test_keeps_timing_while_the_best_runs_disagree():
    # a busy start: slow, scattered runs, then the machine quietens down
    runs = FakeRuns([1.0, 3.0, 1.0, 2.0, 1.5, 1.02, 1.01, 7.0])
    t = time_stable(runs.fn, 1.0, budget=100.0, clock=runs.clock)
    assert t.reps == 6  # stops at the first run that brings the best three within 5 %
    assert t.best == 1.0 and t.spread == pytest.approx(0.02) and t.spread <= STABLE_WITHIN


def test_a_timing_that_never_settles_stops_at_the_budget_and_says_so():
    # one quiet moment, then ever slower: the best three (1, 2, 3 s) never come within 5 %
    runs = FakeRuns([1.0, 1.0, 2.0, 3.0, 5.0])
    t = time_stable(runs.fn, 1.0, budget=20.0, clock=runs.clock)
    assert t.reps == 6 and runs.t - 1.0 == 21.0  # 1+2+3+5+5 = 16 s < 20: a sixth run ends past the budget
    assert t.best == 1.0 and t.spread == pytest.approx(2.0) and t.spread > STABLE_WITHIN


def test_at_least_min_reps_even_past_the_budget():
    runs = FakeRuns([5.0, 5.0, 6.0, 7.0, 8.0])
    t = time_stable(runs.fn, 1.0, budget=0.001, clock=runs.clock, min_reps=3)
    assert t.reps == 3 and t.spread == pytest.approx(0.4)


def test_the_rate_is_that_of_the_stable_timing():
    runs = FakeRuns([2.0, 4.0, 4.0, 4.0])
    assert time_stable(runs.fn, 8.0, 10.0, clock=runs.clock).rate == 2.0
    assert time_stable(lambda: None, 1.0, budget=0.01).rate > 0  # real clock: any positive rate


def test_cpu_jiffies_sums_only_the_usable_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  900 0 90 900 10 0 0 0 0 0\n"
                    "cpu0 100 0 10 100 0 0 0 0 0 0\n"
                    "cpu1 200 5 20 300 10 1 2 3 0 0\n"
                    "cpu2 600 0 60 500 0 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    assert cpu_jiffies([0, 1], str(stat)) == (110 + 231, 110 + 231 + 100 + 310)
    assert cpu_jiffies(None, str(stat)) == (990, 1900)
    assert cpu_jiffies([7], str(stat)) is None
    assert cpu_jiffies([0], str(tmp_path / "missing")) is None


def test_load_probe_counts_other_processes_not_this_one(monkeypatch):
    ticks = iter([(1000, 2000), (1180, 2200)])  # 180 of 200 ticks busy during the measurement
    own = iter([10.0, 10.5])                   # of which this process took 0.5 s = 50 ticks
    monkeypatch.setattr(machine, "cpu_jiffies", lambda cpus, stat="/proc/stat": next(ticks))
    monkeypatch.setattr(machine, "own_cpu_seconds", lambda: next(own))
    monkeypatch.setattr(machine, "_tick_rate", lambda: 100)
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (3.456, 2.0, 1.0))
    monkeypatch.setattr(machine, "usable_cpus", lambda: [0, 1])
    result = LoadProbe().result()
    assert result == {"cpus": 2, "loadavg": [3.46, 2.0, 1.0], "busy_others": 0.65}


def test_load_probe_without_proc_stat_leaves_the_share_unknown(monkeypatch):
    monkeypatch.setattr(machine, "cpu_jiffies", lambda cpus, stat="/proc/stat": None)
    assert LoadProbe().result()["busy_others"] is None
