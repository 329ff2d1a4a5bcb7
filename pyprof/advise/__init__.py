"""``pyprof advise``: concrete changes ranked by the time each would save per step, with the evidence
and the formula behind every estimate.

Input is a :class:`pyprof.report.profile.Profile` (records priced by prof: FLOPs, bytes, tensor cores,
roofline), with the profiled process's env.json and the trace's step and DataLoader ranges where they
are at hand. Per step means divided by the number of ``ProfilerStep#N`` ranges around the records
(``pyprof run`` and torch.profiler schedules record them); records without steps count as one step,
and the output says so. Every estimate is a model, stated in :data:`KINDS` and in each advice's
``formula``; where the records cannot support an advice it is left out, never shown as 0; where they
show the problem but the saving cannot be estimated (or the estimate was withdrawn after measurement)
the advice shows with no number and the reason (``no_estimate``). One module per kind (or family of
kinds) in this package.

The GEMM estimates keep each kernel's efficiency: a kernel that ran at ``gap`` times its roofline time
(``ideal = max(FLOPs / peak, bytes / bandwidth)``) is assumed to run at the same gap against the
roofline of the change (a higher peak, fewer bytes), unless it is latency-bound (``gap`` above
:data:`LATENCY_GAP`): then it saves only the roofline time the change removes. No kernel is assumed
to get faster than :data:`MIN_KERNEL_NS` (launch and tail latency). The kinds (docs/advise.md holds the
table, ``python scripts/validation/advice.py`` writes it):
"""

from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass
from typing import Any

from pyprof.advise import (
    attention,
    comm,
    copies,
    dataloader,
    dense,
    fuse,
    gemm,
    launch,
    layout,
    optim,
    threads,
)
from pyprof.advise.changes import CHANGES
from pyprof.advise.common import LATENCY_GAP, MIN_KERNEL_NS, MIN_SHARE, Advice, Context, faster, ideal, numel
from pyprof.prof.units import duration

__all__ = ["KINDS", "LATENCY_GAP", "MIN_KERNEL_NS", "MIN_SHARE", "Advice", "Advised", "advise", "faster",
           "format_text", "ideal", "numel"]

#: kind -> (what to change, the estimate's formula), in the order they are computed
KINDS: dict[str, tuple[str, str]] = {
    k: v for m in (gemm, attention, fuse, dense, layout, copies, optim, dataloader, threads, launch, comm)
    for k, v in m.KINDS.items()}
#: the functions, in order: dataloader before launch (launch leaves out the dataloader's wait)
_RULES = (gemm.tf32, gemm.bf16, gemm.align, attention.attention, fuse.fuse, dense.dense, layout.layout,
          copies.copies, optim.optim, dataloader.dataloader, threads.threads, launch.launch, comm.comm)


@dataclass
class Advised:
    """What :func:`advise` found: the advice ranked (estimated savings first, largest first; then the
    unestimated ones by the time they cover), the step count it divided by, ``step_s`` the step that
    shares are of (the mean ``ProfilerStep#N`` wall time where the trace is at hand, else the kernel
    time per step: ``wall`` says which) and ``kernel_s`` the kernel time per step."""

    items: list[Advice]
    steps: int
    steps_recorded: bool
    step_s: float
    kernel_s: float = 0.0
    wall: bool = False


def context(profile, spans: dict[str, list] | None = None) -> Context:
    """What the kinds read of ``profile`` (and the trace's ``spans``); ``steps``: the ProfilerStep count."""
    from pyprof.prof.steps import table
    from pyprof.report.timeline import step_of

    names = {f"ProfilerStep#{n}" for n in table(profile.df.attrs.get("header"))[:, 0]}
    names = names or {s for s in map(step_of, profile.records) if s is not None}  # (a file without step facts)
    steps = len(names)
    # GPUs by label; the CPU's peaks under None, the ``gpu`` of CPU rows
    devices = {(None if d.is_cpu else d.label): d.device for d in profile.devices if d.device is not None}
    return Context(profile.df, profile.records, float(steps or 1), devices, profile.env, spans, steps=steps,
                   step_names=names)


def size(a: Advice) -> float:
    """What an advice is ranked and filtered by: its estimated saving, or where it has none the time it
    covers (the most it could save)."""
    return a.saved_s if a.saved_s is not None else a.now_s


def advise(profile, spans: dict[str, list] | None = None) -> Advised:
    """The advice for ``profile`` (:class:`pyprof.report.profile.Profile`), ranked by :func:`size`
    (estimated first), none under :data:`MIN_SHARE` of the step. ``spans``: the trace's annotations
    (:func:`pyprof.advise.spans.read_spans`), for the step's wall time and the dataloader advice."""
    ctx = context(profile, spans)
    df, steps, per_step = ctx.df, ctx.steps, ctx.per_step
    kernel_s = float(df.loc[df["kind"] == "kernel", "sil"].fillna(0).sum()) / per_step / 1e9
    walls = [s[2] for s in (spans or {}).get("ProfilerStep#") or () if s[3] in ctx.step_names]
    step_s = statistics.fmean(walls) / 1e9 if walls else kernel_s  # a mean, as the savings per step are
    found = [a for a in (rule(ctx) for rule in _RULES) if a is not None]
    items = sorted((a for a in found if step_s > 0 and size(a) / step_s >= MIN_SHARE),
                   key=lambda a: (a.saved_s is None, -size(a)))
    return Advised(items, steps or 1, bool(steps), step_s, kernel_s, bool(walls))


def _seconds(s: float) -> str:
    return duration(s * 1e9)


def format_text(result: Advised, width: int = 100) -> str:
    """The advice as a person reads it: one block per change, largest saving first."""
    head = (f"{result.steps} step{'s' if result.steps != 1 else ''}" if result.steps_recorded
            else "no ProfilerStep ranges: the whole window counted as one step")
    step = f"; step {_seconds(result.step_s)} (mean wall time)" if result.wall else ""
    lines = [f"pyprof advise: {head}{step}; kernel time {_seconds(result.kernel_s)} per step"]
    if not result.items:
        lines.append("No change found that this model can estimate (kinds: " + ", ".join(KINDS) + ").")
        return "\n".join(lines) + "\n"
    for i, a in enumerate(result.items, 1):
        lines.append("")
        share = f"{size(a) / result.step_s:.1%} of the step" if result.step_s else "n/a"
        what = f"{a.kernels} kernels now taking" if a.kernels else "now"
        if a.saved_s is None:
            lines.append(f"{i}. [{a.kind}] saving not estimated ({what} {_seconds(a.now_s)} per step, {share})")
        else:
            lines.append(f"{i}. [{a.kind}] saves ~{_seconds(a.saved_s)} per step ({share}; {what} "
                         f"{_seconds(a.now_s)} per step)")
        lines += textwrap.wrap(a.change, width, initial_indent="   ", subsequent_indent="   ")
        lines += ["   where: " + e for e in a.evidence]
        notes = [f"no estimate: {a.no_estimate}" if a.no_estimate else f"estimate: {a.formula}"]
        for note in notes + ([tried(a)] if a.measured else []):
            lines += textwrap.wrap(note, width, initial_indent="   ", subsequent_indent="     ")
    return "\n".join(lines) + "\n"


def tried(a: Advice) -> str:
    """``--try``'s measurement of an advice, in words, beside its estimate."""
    m = a.measured or {}
    if m.get("not_tried"):
        return "not tried: " + m["not_tried"]
    what = f"tried ({CHANGES[m['change']].what}{''.join(f', {k}={v}' for k, v in m['params'].items())}): "
    if m.get("measured_s") is None:
        return what + (m.get("measured_note") or "no measurement")
    lo, hi = m["measured_ci"]
    s = m["measured_s"]
    spread = (f"interval {_seconds(lo)} .. {_seconds(hi)} at {m['ci_level']:.0%}, {m['trials']} pairs of runs"
              if m["trials"] > 1 else "one pair of runs: no interval")
    out = (f"{'saves' if s >= 0 else 'costs'} {_seconds(abs(s))} per step ({spread}; step {_seconds(m['step_s'][0])} "
           f"-> {_seconds(m['step_s'][1])}); estimated " + ("n/a" if a.saved_s is None else _seconds(a.saved_s)))
    verdict = {True: "results kept", False: "CHANGES RESULTS: not recommended", None: "results not compared"}
    load = m.get("busy_others")
    return (what + out + f"; {verdict[m.get('results_equal')]} ({m.get('results_note')})"
            + (f"; {m['measured_note']}" if m.get("measured_note") else "")
            + (f"; other processes used {load:.0%} of the CPUs" if load is not None and "unreliable" not in (
                m.get("measured_note") or "") else ""))


def as_json(result: Advised) -> list[dict[str, Any]]:
    return [a.as_json() for a in result.items]
