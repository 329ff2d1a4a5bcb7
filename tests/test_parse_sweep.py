"""The vectorised open-range sweep against a brute-force definition, on random data (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from pyprof.parse.sweep import open_stacks


def _nested_ranges(rng, n_threads=3, n=60):
    """Properly nested push/pop ranges per thread (a random walk of pushes and pops)."""
    th, st, en, lab = [], [], [], []
    for t in range(n_threads):
        time, stack = 0, []
        for _ in range(n):
            time += int(rng.integers(1, 5))
            if stack and rng.random() < 0.45:
                i = stack.pop()
                en[i] = time
            else:
                th.append(t)
                st.append(time)
                en.append(None)
                lab.append(int(rng.integers(0, 6)))
                stack.append(len(st) - 1)
        while stack:
            time += 1
            en[stack.pop()] = time
    return np.array(th), np.array(st), np.array(en), np.array(lab)


def _brute(th, st, en, lab, qth, qt):
    out = []
    for t, x in zip(qth.tolist(), qt.tolist(), strict=False):
        open_ = [i for i in range(len(st)) if th[i] == t and st[i] <= x < en[i]]
        open_.sort(key=lambda i: (st[i], -en[i], i))
        out.append(tuple(int(lab[i]) for i in open_))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_nested_sweep_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    th, st, en, lab = _nested_ranges(rng)
    qth = rng.integers(0, 4, 200)  # thread 3 has no ranges
    qt = rng.integers(0, int(en.max()) + 3, 200)
    s = open_stacks(th, st, en, lab, qth, qt)
    got = [s.stack_labels[i] if i >= 0 else () for i in s.q_sid.tolist()]
    assert got == _brute(th, st, en, lab, qth, qt)


@pytest.mark.parametrize("seed", range(6))
def test_overlapping_sweep_matches_brute_force(seed):
    """Start/end ranges may overlap without nesting: the fallback path must give the same answer."""
    rng = np.random.default_rng(100 + seed)
    n = 50
    th = rng.integers(0, 2, n)
    st = rng.integers(0, 100, n)
    en = st + rng.integers(1, 40, n)
    lab = rng.integers(0, 5, n)
    qth = rng.integers(0, 2, 150)
    qt = rng.integers(0, 140, 150)
    s = open_stacks(th, st, en, lab, qth, qt)
    got = [s.stack_labels[i] if i >= 0 else () for i in s.q_sid.tolist()]
    assert got == _brute(th, st, en, lab, qth, qt)


def test_q_chain_gives_the_range_instance_at_a_depth():
    # thread 0: A [0,100) > B [10,50) > C [20,30); query at 25 -> chain A, B, C
    s = open_stacks([0, 0, 0], [0, 10, 20], [100, 50, 30], [7, 8, 9], [0, 0], [25, 60])
    assert s.stack_labels[s.q_sid[0]] == (7, 8, 9)
    assert s.stack_labels[s.q_sid[1]] == (7,)
    assert s.q_chain(np.array([0, 0, 0, 1]), np.array([0, 1, 2, 0])).tolist() == [0, 1, 2, 0]


def test_half_open_intervals_and_empty_inputs():
    # a range is open at t when start <= t < end
    s = open_stacks([0], [10], [20], [1], [0, 0, 0], [10, 19, 20])
    assert [s.stack_labels[i] if i >= 0 else () for i in s.q_sid.tolist()] == [(1,), (1,), ()]
    e = open_stacks([], [], [], [], [0], [5])
    assert e.q_sid.tolist() == [-1]


def test_deep_nesting_keeps_stacks_linear_in_the_depth(monkeypatch):
    """One stack 5,000 deep (the depth limit raised), distinct labels, a query inside the innermost
    range and one at each of three levels: the stacks are right, and interning them takes memory
    linear in the depth (a tuple per stack, as before #29, took 5,000^2 / 2 label ids: 100 MB)."""
    import tracemalloc

    d = 5_000
    monkeypatch.setenv("PYPROF_LIMITS", f"depth={d}")
    start = np.arange(d, dtype=np.int64)
    end = 3 * d - start
    qt = np.array([d, 1, 2_500, 3 * d - 1], dtype=np.int64)  # innermost; 2 open; 2,501 open; outermost only
    tracemalloc.start()
    try:
        s = open_stacks(np.zeros(d, np.int64), start, end, np.arange(d) + 100, np.zeros(4, np.int64), qt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, peak
    got = [s.stack_labels[i] for i in s.q_sid.tolist()]
    assert got == [tuple(range(100, 100 + d)), (100, 101), tuple(range(100, 2_601)), (100,)]
    assert len(s.stack_labels) == d


def test_overlapping_thread_shares_stack_ids_with_nested_ones():
    """A stack met on a thread whose ranges overlap (the Python sweep) and on a nested thread is one
    stack id, as the decoders downstream expect (one decode per distinct stack)."""
    # thread 0 nests A > B; thread 1: A [0,50) overlaps C [20,80) (no nesting), then A > B nested later
    th = [0, 0, 1, 1, 1, 1]
    st = [0, 10, 0, 20, 100, 110]
    en = [100, 50, 50, 80, 200, 150]
    lab = [1, 2, 1, 3, 1, 2]
    s = open_stacks(th, st, en, lab, [0, 1], [15, 120])
    assert s.stack_labels[s.q_sid[0]] == (1, 2) == s.stack_labels[s.q_sid[1]]
    assert s.q_sid[0] == s.q_sid[1]
