"""What every advice kind shares: the :class:`Advice` record, the :class:`Context` a kind reads, the
roofline helpers that keep a kernel's efficiency across a change, and the evidence lines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from pyprof.prof.units import duration

#: The shortest time a GPU kernel is assumed to take after a change (ns): launch and tail latency.
MIN_KERNEL_NS = 2_000.0
#: A kernel this many times slower than its roofline is latency-bound: a change saves it only the
#: roofline time it removes, not the same share of its time.
LATENCY_GAP = 10.0
#: Advice saving less than this share of a step is not shown.
MIN_SHARE = 0.01


@dataclass
class Advice:
    """One change: ``kind`` (a key of ``KINDS``), the estimated seconds saved per step (None: the
    estimate is withdrawn, ``no_estimate`` says why), the evidence (where the time goes now, largest
    first) and the formula the estimate came from."""

    kind: str
    saved_s: float | None
    change: str
    formula: str
    evidence: list[str] = field(default_factory=list)
    kernels: int = 0
    now_s: float = 0.0  # time per step of what the change touches
    no_estimate: str | None = None
    model_s: float | None = None  # a withdrawn estimate: what the model gave (not a prediction to use)
    params: dict[str, Any] = field(default_factory=dict)  # what `--try` applies the change with
    measured: dict[str, Any] | None = None  # `--try`'s measurement (pyprof.advise.measure)

    def as_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "saved_s": self.saved_s, "now_s": self.now_s, "kernels": self.kernels,
               "change": self.change, "evidence": self.evidence, "formula": self.formula}
        if self.no_estimate:
            out["no_estimate"] = self.no_estimate
        if self.model_s is not None:
            out["model_s"] = self.model_s
        return {**out, **(self.measured or {})}


@dataclass
class Context:
    """What a kind reads: prof's table ``df`` and its ``records`` (row for row), the step count
    ``per_step`` divides by, the devices by label (the CPU's under None), the profiled process's ``env``
    (``pyprof run``'s env.json: threads, cores; None where absent) and the trace's annotations
    (``spans``: name -> list of (thread, start ns, duration ns, name), None where no trace is at hand)."""

    df: Any
    records: list[dict[str, Any]]
    per_step: float
    devices: dict[str | None, Any] = field(default_factory=dict)
    env: dict[str, Any] | None = None
    spans: dict[str, list[tuple[Any, int, int, str]]] | None = None
    #: seconds per step other advice already claims for the same idle time (dataloader waits)
    claimed: dict[str, float] = field(default_factory=dict)
    steps: int = 0  # ProfilerStep ranges found (0: none; per_step is then 1)
    step_names: set[str] = field(default_factory=set)  # their names (ProfilerStep#N)

    def make(self, kind: str, change: str, formula: str, total_ns: float | None,
             rows: Sequence[tuple[str, float | None]], n: int, now_ns: float, no_estimate: str | None = None,
             **params: Any) -> Advice:
        """An :class:`Advice` of per-window totals (ns) made per step (s); ``params``: what ``--try``
        applies the change with."""
        saved = None if total_ns is None else total_ns / self.per_step / 1e9
        return Advice(kind, saved, change, formula, evidence(rows, self.per_step), n, now_ns / self.per_step / 1e9,
                      no_estimate, params=params)

    def covering(self, kind: str, change: str, formula: str, rows: list[tuple[str, float]],
                 no_estimate: str | None = None) -> Advice | None:
        """An advice over ``rows`` (label, ns), one per record the change touches: it saves their whole
        time, or where ``no_estimate`` says why, has no estimate; None where there are no rows."""
        if not rows:
            return None
        now = sum(t for _, t in rows)
        saved = None if no_estimate else now
        return self.make(kind, change, formula, saved, rows, len(rows), now, no_estimate)


def withdraw(advice: Advice | None, reason: str) -> Advice | None:
    """``advice`` with its estimate withdrawn (``saved_s`` None, ``no_estimate`` the reason); the number
    the model gave stays in the evidence, marked as such."""
    if advice is None or advice.saved_s is None:
        return advice
    advice.evidence.insert(0, f"the model's estimate, withdrawn: {duration(advice.saved_s * 1e9)} per step")
    advice.model_s, advice.saved_s, advice.no_estimate = advice.saved_s, None, reason
    return advice


def site(layer, trace) -> str:
    """``module path @ file:line`` of a record, as short as it stays readable."""
    mod = layer[-1] if isinstance(layer, (list, tuple)) and layer else "(no layer)"
    where = trace[0] if isinstance(trace, (list, tuple)) and trace else ""
    return f"{mod} @ {where}" if where else str(mod)


def evidence(rows: Sequence[tuple[str, float | None]], per_step: float, top: int = 5) -> list[str]:
    """``label: x.x us/step`` for the ``top`` labels with the most time, then a count of the rest (a
    label given as ``(text, None)`` is shown as it is)."""
    sums: dict[str, float] = defaultdict(float)
    plain: list[str] = []
    for label, saved in rows:
        if saved is None:
            plain.append(label)
        else:
            sums[label] += saved
    ranked = sorted(sums.items(), key=lambda kv: -kv[1])
    out = [f"{label}: {saved / per_step / 1e3:.1f} us/step" for label, saved in ranked[:top]]
    if len(ranked) > top:
        out.append(f"+{len(ranked) - top} more")
    return plain + out


def ideal(flops: float, nbytes: float, peak: float | None, bw: float | None) -> float | None:
    """Roofline time (ns) of ``flops`` and ``nbytes`` at ``peak`` FLOP/s and ``bw`` bytes/s; None if unknown."""
    terms = []
    if flops > 0 and peak:
        terms.append(flops / peak * 1e9)
    if nbytes > 0 and bw:
        terms.append(nbytes / bw * 1e9)
    return max(terms) if terms else None


def faster(t: float, ideal_now: float | None, ideal_new: float | None) -> float | None:
    """Time after a change that keeps the kernel's gap to the roofline: ``t x new / now``, or for a
    latency-bound kernel ``t - (now - new)``; at least :data:`MIN_KERNEL_NS` (never more than ``t``);
    None where either roofline is unknown."""
    if not ideal_now or not ideal_new or not t > 0:
        return None
    if t > LATENCY_GAP * ideal_now:
        new = t - max(ideal_now - ideal_new, 0.0)
    else:
        new = t * ideal_new / ideal_now
    return min(t, max(new, MIN_KERNEL_NS))


def num(v) -> float:
    return float(v) if v is not None and v == v else 0.0


def tensors(rec: dict) -> list[dict]:
    """A record's tensor arguments whose shape is recorded, in order."""
    return [a for a in rec.get("args") or () if isinstance(a, dict) and a.get("type") == "tensor"
            and isinstance(a.get("shape"), list)]


def _size(tensor: dict) -> int:
    return prod(d if isinstance(d, int) else 0 for d in tensor["shape"])


def largest(rec: dict) -> dict | None:
    """A record's tensor argument with the most elements (the first of equals); None where none is
    recorded."""
    return max(tensors(rec), key=_size, default=None)


def numel(rec: dict) -> int:
    """The element count of a record's largest tensor argument (0 where none is recorded)."""
    t = largest(rec)
    return _size(t) if t else 0
