"""``pyprof advise``'s estimates against measured savings (``scripts/validate.py --advise``).

For each case of :data:`CASES` (a kind of advice and a model of
:mod:`scripts.validation.advice_models` that shows the problem):

1. ``pyprof run`` profiles the ``before`` variant and ``pyprof advise --json`` reads its output; the
   advice of the case's kind gives the predicted saving per step (``saved_s``; none where the kind's
   estimate is withdrawn, or where the advice is missing);
2. one fresh process, not profiled, builds both variants (after: the advised change) and runs their
   steps in pairs, alternating which goes first, so that the machine's load drifts alike for both;
   the median step time of each after ``warm`` warm-up pairs gives the measured saving (median before
   - median after);
3. steps 1 and 2 are repeated ``reps`` times: predicted and measured are the medians of the repeats,
   the spread their range; the ratio is measured / predicted, and *within* is
   ``|measured - predicted| <= 30% of predicted``.

Every step is timed as a user sees it (wall clock around fetch, forward, backward and optimizer step).
The machine may be shared: the spread says how much the repeats disagree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MODELS = Path(__file__).with_name("advice_models.py")
TOLERANCE = 0.30

#: kind -> (case of advice_models, what the model is, the change timed as `after`)
CASES: dict[str, tuple[str, str, str]] = {
    "optim": ("optim", "12 x Linear(256, 256), batch 8, AdamW", "foreach=False -> fused=True"),
    "fuse": ("fuse", "Linear, 5 pointwise ops on [2048, 256], Linear; SGD", "eager -> torch.compile"),
    "dataloader": ("dataloader", "MLP 64-2048-2048-8, 8 samples x 5 ms sleep per batch", "num_workers 0 -> 4"),
    "layout": ("layout", "3 x Conv2d 16-32-32-16 (3x3) on [8, 16, 56, 56]; SGD", "NCHW -> channels_last"),
    "threads": ("threads", "MLP 512-1024-512, batch 64; SGD", "set_num_threads(4 x cores) -> (cores)"),
}


@dataclass
class Check:
    kind: str
    model: str
    change: str
    predicted: list[float] = field(default_factory=list)  # per repeat: saved_s of the advice
    no_estimate: str | None = None
    advised: bool = False
    withdrawn: bool = False  # the predicted numbers are a withdrawn estimate's (model_s)
    before: list[float] = field(default_factory=list)  # per repeat: median step time
    after: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def predicted_s(self) -> float | None:
        return statistics.median(self.predicted) if self.predicted else None

    @property
    def saved(self) -> list[float]:
        return [b - a for b, a in zip(self.before, self.after, strict=False)]

    @property
    def measured_s(self) -> float | None:
        return statistics.median(self.saved) if self.saved else None

    @property
    def ratio(self) -> float | None:
        if self.measured_s is None or not self.predicted_s:
            return None
        return self.measured_s / self.predicted_s

    @property
    def within(self) -> bool | None:
        if self.ratio is None:
            return None
        return abs(self.ratio - 1) <= TOLERANCE


def _python(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


def predict(check: Check, case: str, workdir: Path, steps: int = 9) -> None:
    """Profile the case's ``before`` variant with ``pyprof run`` and read the advice of its kind."""
    out = workdir / case
    run = _python(["-m", "pyprof", "run", "-o", str(out), "--active", str(steps - 4), str(MODELS), case, "before",
                   "--steps", str(steps)], timeout=1200)
    if run.returncode != 0:
        raise RuntimeError(f"pyprof run failed: {(run.stderr or run.stdout).strip()[-300:]}")
    adv = _python(["-m", "pyprof", "advise", "--json", "-q", str(out)], timeout=600)
    if adv.returncode != 0:
        raise RuntimeError(f"pyprof advise failed: {adv.stderr.strip()[-300:]}")
    for item in json.loads(adv.stdout):
        if item["kind"] == check.kind:
            check.advised = True
            if item["saved_s"] is not None:
                check.predicted.append(item["saved_s"])
            elif item.get("model_s") is not None:  # withdrawn: the model's number still compared
                check.predicted.append(item["model_s"])
                check.withdrawn = True
            check.no_estimate = item.get("no_estimate")


def time_pairs(case: str, steps: int, warm: int) -> tuple[float, float]:
    """Median step times (s) of the two variants of one fresh process that runs their steps in pairs,
    warm-up pairs left out."""
    r = _python([str(MODELS), case, "both", "--steps", str(steps)], timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(f"{case}: {r.stderr.strip()[-300:]}")
    times = json.loads(r.stdout.strip().splitlines()[-1])
    return statistics.median(times["before"][warm:]), statistics.median(times["after"][warm:])


def check(kind: str, workdir: Path, reps: int = 3, steps: int = 16, warm: int = 4, log=None) -> Check:
    """One kind: ``reps`` times, a profile and advice of ``before``, then both variants timed."""
    case, model, change = CASES[kind]
    c = Check(kind, model, change)
    for r in range(reps):
        predict(c, case, workdir)
        before, after = time_pairs(case, steps, warm)
        c.before.append(before)
        c.after.append(after)
        if log:
            pred = (f"{c.predicted[-1] * 1e3:.1f} ms" if len(c.predicted) > r else c.no_estimate or "no advice")
            log(f"{kind}: repeat {r + 1}: predicted {pred}; before {before * 1e3:.1f} ms, after {after * 1e3:.1f} ms")
    return c


def run(kinds: list[str] | None = None, reps: int = 3, steps: int = 16, warm: int = 4, keep: str | None = None,
        log=None) -> list[Check]:
    out = []
    with tempfile.TemporaryDirectory(prefix="pyprof-advise-") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        for kind in kinds or list(CASES):
            try:
                out.append(check(kind, workdir, reps, steps, warm, log))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                c = Check(kind, *CASES[kind][1:])
                c.error = str(exc)
                out.append(c)
    return out


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def table(checks: list[Check]) -> str:
    """The predicted-vs-measured table, in markdown."""
    rows = ["| kind | model | change | predicted saved/step | measured saved/step (spread) | step before -> after "
            "| ratio | within 30%? |", "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        if c.error:
            rows.append(f"| `{c.kind}` | {c.model} | {c.change} | error: {c.error} | | | | |")
            continue
        pred = (f"{_ms(c.predicted_s)} ({_ms(min(c.predicted))} .. {_ms(max(c.predicted))})"
                + (" (withdrawn)" if c.withdrawn else "") if c.predicted_s is not None else
                f"not estimated ({c.no_estimate})" if c.advised else "no advice")
        spread = f" ({_ms(min(c.saved))} .. {_ms(max(c.saved))})" if c.saved else ""
        steps = (f"{_ms(statistics.median(c.before))} -> {_ms(statistics.median(c.after))}" if c.before else "n/a")
        ratio = "n/a" if c.ratio is None else f"{c.ratio:.2f}"
        within = "n/a" if c.within is None else ("yes" if c.within else "no")
        rows.append(f"| `{c.kind}` | {c.model} | {c.change} | {pred} | {_ms(c.measured_s)}{spread} | {steps} | {ratio} "
                    f"| {within} |")
    return "\n".join(rows) + "\n"
