"""``pyprof advise --try``: profile a script (``pyprof run``), advise, then time each advised change that
:mod:`pyprof.advise.changes` can apply without editing the script, against the script as written.

Each trial is a fresh process (:mod:`pyprof.advise.trial`); the two variants run in pairs, which goes
first alternating, so that a drift in the machine's load hits both alike. A run's step time is the
median of its steps after :data:`WARM` warm-up steps; a pair's saving is (as written) - (changed).
Pairs are added until the interval of the median saving is tight (at :data:`MIN_LEVEL` confidence or
more, no wider than :data:`TIGHT` of the saving or 2% of the step) or the change's share of the time
budget is spent. The interval is distribution-free: order statistics of the pairs' savings, at the
confidence their count allows (6 pairs: 96.9%; fewer: less, and said). Where it holds zero the change
made no measurable difference.

Results: the losses of both variants' steps are compared (the scalars ``backward()`` ran on): within
:data:`ATOL` plus the change's relative tolerance (:data:`pyprof.advise.changes.CHANGES`) they are equal; where two runs of the
unchanged script already disagree by more, they cannot be compared. The machine's load during each
run (other processes' share of the CPUs, this process and its children left out) is kept; above
:data:`pyprof.prof.noise.BUSY_SHARE` the measurement is said to be unreliable.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from pyprof.advise.changes import CHANGES, for_kind
from pyprof.machine import LoadProbe
from pyprof.prof.noise import BUSY_SHARE

WARM = 3
MAX_PAIRS = 20
MIN_LEVEL = 0.95
TIGHT = 0.2
ATOL = 1e-5  # absolute tolerance of a loss (torch.testing's for float32 and bfloat16)


def trial(script: str, args: list[str], change: str | None, params: dict, steps: int, timeout: float) -> dict:
    """One fresh process running ``script`` with ``change`` (None: as written): its result
    (:mod:`pyprof.advise.trial`) with ``busy_others``, the share of the CPUs other processes used."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="pyprof-try-") as tmp:
        result = os.path.join(tmp, "out.json")
        spec = {"script": os.path.abspath(script), "args": list(args), "change": change, "params": params,
                "steps": steps, "out": result}
        Path(tmp, "spec.json").write_text(json.dumps(spec))
        probe, kids, t0 = LoadProbe(), os.times(), time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-m", "pyprof.advise.trial", os.path.join(tmp, "spec.json")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"times": [], "losses": [], "error": f"no result within {timeout:.0f} s"}
        load, wall, now = probe.result(), time.perf_counter() - t0, os.times()
        try:
            out = json.loads(Path(result).read_text())
        except (OSError, ValueError):
            out = {"times": [], "losses": [], "error": (r.stderr.strip().splitlines() or ["no result"])[-1][:300]}
    if load.get("busy_others") is not None and load.get("cpus"):  # the trial and its workers are not others
        mine = now.children_user + now.children_system - kids.children_user - kids.children_system
        load["busy_others"] = round(max(load["busy_others"] - mine / (wall * load["cpus"]), 0.0), 3)
    return {**out, "load": load}


def interval(d: list[float]) -> tuple[float, float, float]:
    """(low, high, confidence) of the median of ``d``: the order statistics whose binomial tails leave
    at most 5% out, else the extremes at the confidence their count gives."""
    n, d = len(d), sorted(d)
    k, level = 1, 1 - 2 * 0.5**n
    for j in range(2, n // 2 + 1):
        tail = sum(math.comb(n, i) for i in range(j)) / 2**n
        if 2 * tail <= 1 - MIN_LEVEL:
            k, level = j, 1 - 2 * tail
    return d[k - 1], d[n - k], level


def _step(r: dict) -> float | None:
    t = r["times"]
    return statistics.median(t[min(WARM, len(t) - 1):]) if t else None


def _diff(a: list[float], b: list[float], rtol: float) -> tuple[bool, float, float] | None:
    """Whether two loss sequences agree over the steps both ran (each ``|x - y| <= ATOL + rtol x
    max(|x|, |y|)``, torch.testing's rule), their largest absolute and relative difference."""
    n = min(len(a), len(b))
    if not n:
        return None
    ok, ab, rel = True, 0.0, 0.0
    for x, y in zip(a[:n], b[:n], strict=True):
        e = abs(x - y) if math.isfinite(x) and math.isfinite(y) else (0.0 if str(x) == str(y) else math.inf)
        ok = ok and (e == 0 or e <= ATOL + rtol * max(abs(x), abs(y)) < math.inf)
        ab, rel = max(ab, e), max(rel, e / max(abs(x), abs(y), 1e-30))
    return ok, ab, rel


def results(before: list[dict], after: list[dict], rtol: float) -> dict:
    """``results_equal`` (None: not comparable, ``results_note`` says why) and ``max_abs_diff`` of the
    losses of the changed runs against the first unchanged one."""
    base = before[0]["losses"]
    own = [d for d in (_diff(base, r["losses"], rtol) for r in before[1:]) if d]
    got = [d for d in (_diff(base, r["losses"], rtol) for r in after) if d]
    if not got:
        return {"results_equal": None, "max_abs_diff": None, "results_note": "no loss seen (no backward() of a scalar)"}
    ab, rel = max(g[1] for g in got), max(g[2] for g in got)
    if not all(o[0] for o in own):
        return {"results_equal": None, "max_abs_diff": ab, "results_note": "the unchanged script's losses differ "
                f"between its runs by up to {max(o[1] for o in own):.3g}: not comparable"}
    if ab == math.inf:
        return {"results_equal": False, "max_abs_diff": None, "results_note": "a loss became NaN or infinite in "
                "one variant only"}
    return {"results_equal": all(g[0] for g in got), "max_abs_diff": ab, "results_note":
            f"largest loss difference {ab:.3g} ({rel:.2g} relative; tolerance {ATOL:g} + {rtol:g} relative)"}


def _failed(a: dict, b: dict) -> str | None:
    """Why a pair of runs (unchanged, changed) gives no timing, or None."""
    if a["error"] or b["error"] or _step(a) is None or _step(b) is None:
        return f"the {'changed' if b['error'] else 'unchanged'} script failed: {b['error'] or a['error'] or 'no steps'}"
    return None


def _load_note(pairs: list, lo: float, hi: float) -> tuple[float | None, str | None]:
    """The median share of the CPUs other processes used during the trials, and the measurement's note."""
    loads = [r["load"].get("busy_others") for p in pairs for r in p if r["load"].get("busy_others") is not None]
    busy = statistics.median(loads) if loads else None
    notes = ["no measurable change" if lo <= 0 <= hi else "", f"unreliable: other processes used {busy:.0%} of the "
             "CPUs during the trials" if busy is not None and busy > BUSY_SHARE else ""]
    return busy, "; ".join(n for n in notes if n) or None


def measure(script: str, args: list[str], change: str, params: dict, budget: float, steps: int,
            say=lambda line: None, rtol: float = 0.0) -> dict:
    """Time ``change`` against the script as written, in pairs of fresh runs, until the interval is tight
    or ``budget`` seconds are spent; the ``measured_*`` fields of the advice. Losses are held to the
    change's tolerance, or ``rtol`` where larger (a script that computes in bf16 itself)."""
    pairs: list[tuple[dict, dict]] = []
    step_s: list[tuple[float, float]] = []
    t0, spent = time.perf_counter(), 0.0
    timeout = max(budget, 120.0)
    while len(pairs) < MAX_PAIRS:
        t = time.perf_counter()
        order = (None, change) if len(pairs) % 2 == 0 else (change, None)
        runs = {v: trial(script, args, v, params if v else {}, steps, timeout) for v in order}
        a, b = runs[None], runs[change]
        failed = _failed(a, b)
        if failed:
            return {"measured_s": None, "trials": len(pairs), "measured_note": failed}
        pairs.append((a, b))
        step_s.append((cast(float, _step(a)), cast(float, _step(b))))  # (both timed: _failed said so)
        spent = time.perf_counter() - t0
        d = [x - y for x, y in step_s]
        lo, hi, level = interval(d)
        med = statistics.median(d)
        say(f"pyprof advise --try: {change}: pair {len(pairs)}: saved {med * 1e3:.2f} ms per step "
            f"({lo * 1e3:.2f} .. {hi * 1e3:.2f} ms, {level:.1%})")
        base = statistics.median(x for x, _ in step_s)
        if level >= MIN_LEVEL and hi - lo <= max(TIGHT * abs(med), 0.02 * base):
            break
        if spent + (time.perf_counter() - t) > budget:
            break
    busy, note = _load_note(pairs, lo, hi)
    return {"measured_s": med, "measured_ci": [lo, hi], "ci_level": round(level, 4), "trials": len(pairs),
           "step_s": [base, statistics.median(y for _, y in step_s)], "busy_others": busy,
           "loadavg": pairs[0][0]["load"].get("loadavg"),
           **results([x for x, _ in pairs], [y for _, y in pairs], max(CHANGES[change].rtol, rtol)),
           "measured_note": note}


def try_advice(result, script: str, args: list[str], budget: float, say=lambda line: None,
               low_precision: bool = False) -> list[dict]:
    """Measure every advice of ``result`` (:class:`pyprof.advise.Advised`) that a change can apply,
    ``budget`` seconds shared among them; each advice's ``measured`` is set (``not_tried`` where no
    change applies). ``low_precision``: the script computes in bf16 or fp16 already (its losses are held
    to the bf16 change's tolerance whatever the change). Returns what was measured, one dict per change."""
    todo: dict[str, list] = {}
    for a in result.items:
        name = for_kind(a.kind)
        if name is None:
            a.measured = {"measured_s": None, "not_tried": "needs an edit of the script"}
        else:
            todo.setdefault(name, []).append(a)
    steps = WARM + min(30, max(8, int(4.0 / max(result.step_s, 1e-3))))
    done = []
    for name, items in todo.items():
        params = {k: v for a in items for k, v in a.params.items()}
        say(f"pyprof advise --try: {name}: {CHANGES[name].what} {params or ''}")
        m = {"change": name, "params": params, **measure(script, args, name, params, budget / len(todo), steps, say,
                                                         CHANGES["bf16"].rtol if low_precision else 0.0)}
        for a in items:
            a.measured = m
        done.append({"kinds": [a.kind for a in items], **m})
    return done
