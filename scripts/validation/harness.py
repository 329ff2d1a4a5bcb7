"""The end-to-end FLOP check: each model of the zoo through the path a user runs, against torch's count.

For a case of :data:`scripts.validation.zoo.CASES`, :func:`validate`:

1. writes a two-line script that trains the model (:func:`scripts.validation.zoo.train`) and runs it as
   ``pyprof run`` does (:func:`pyprof.runner.run_script`: torch.profiler, ``pyprof.init()``, the
   step schedule), then parses the trace (:class:`pyprof.parse.kineto.KinetoSource`), writes the records
   file and prices it with :func:`pyprof.prof.build_file`, as ``pyprof prof`` does;
2. sums the per-kernel FLOPs of the GEMM, convolution and attention ops (the families FlopCounterMode
   counts) per direction (``fprop``, ``bprop``, ``recomp``: a checkpointed forward re-run by backward)
   and per module, inclusive of submodules (a compiled model's kernels take their modules from the
   Inductor metadata ``pyprof run`` records);
3. compares them with :func:`scripts.validation.reference.count_step` of the same model and input, times the
   number of recorded steps, and the forward bytes of each one-op layer with
   :func:`scripts.validation.reference.hand_bytes`.

The result lists every (direction, module, family) total of both sides; :func:`table` prints the
one-table summary ``scripts/validate.py`` shows.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .reference import FAMILIES, prefixes

TOLERANCE = 0.01  # relative
DIRECTIONS = ("fprop", "bprop", "recomp")  # compared; recomp: a checkpointed forward re-run by backward


@dataclass
class Outcome:
    """One case's comparison: ``pyprof`` and ``torch`` map (direction, module, family) to FLOPs."""

    name: str
    steps: int
    pyprof: dict = field(default_factory=dict)
    torch: dict = field(default_factory=dict)
    error: str = ""
    uncovered: float = 0.0  # share of kernel time of ops without a FLOP/byte model
    attributed: tuple = (None, None, None)  # compiled cases: kernel time joined to Inductor, with module+op; own time
    bytes_pyprof: dict = field(default_factory=dict)  # module path -> fprop bytes (one-op layers)
    bytes_hand: dict = field(default_factory=dict)
    frame: object = None  # the prof table the figures came from (pandas DataFrame), for further checks

    def bytes_mismatches(self, tol: float = TOLERANCE) -> list[tuple]:
        """(module, pyprof, hand) for every one-op layer whose forward bytes differ by more than ``tol``."""
        return [(m, self.bytes_pyprof.get(m, 0.0), b) for m, b in sorted(self.bytes_hand.items())
                if not math.isclose(self.bytes_pyprof.get(m, 0.0), b, rel_tol=tol)]

    def total(self, side: str, direction: str, fam: str | None = None) -> float:
        got = getattr(self, side)
        return sum(v for (d, m, f), v in got.items() if d == direction and m == "" and fam in (None, f))

    def mismatches(self, tol: float = TOLERANCE) -> list[tuple]:
        """(direction, module, family, pyprof, torch) for every total off by more than ``tol``."""
        keys = {k for k, v in self.torch.items() if v} | {k for k, v in self.pyprof.items() if v}
        out = []
        for k in sorted(keys):
            a, b = self.pyprof.get(k, 0.0), self.torch.get(k, 0.0)
            if not math.isclose(a, b, rel_tol=tol, abs_tol=0.0):
                out.append((*k, a, b))
        return out

    @property
    def ok(self) -> bool:
        return not self.error and not self.mismatches() and not self.bytes_mismatches()


_SCRIPT = """\
from {package}.zoo import train
train({name!r}, {steps}, device={device!r}, tf32={tf32!r})
"""


def pyprof_flops(df, root: str) -> dict[tuple[str, str, str], float]:
    """{(direction, module path, family): FLOPs} of a prof table, inclusive of submodules. ``root`` is the
    model's class name, the first entry of every record's ``layer`` (module paths follow)."""
    from pyprof.prof.ops import family

    out: dict[tuple[str, str, str], float] = {}
    fam_of: dict = {}
    for d, op, mod, lay, flops, ran in zip(df["dir"], df["op"], df["mod"], df["layer"], df["flops"], df["priced"],
                                           strict=True):
        d = "bprop" if d == "bprop2" else d  # (the reference counts a double backward as backward)
        if op is None or d not in DIRECTIONS or not flops == flops:  # NaN: no model
            continue
        if ran:  # a backward priced on what ran: the family of the aten op that ran
            op, mod = ran, "aten"
        fam = fam_of.get((op, mod))
        if fam is None:  # a recurrent op's work is its GEMMs (torch's side counts them as such)
            fam = fam_of[op, mod] = {"rnn": "gemm"}.get(family(op, mod) or "", family(op, mod) or "")
        if fam not in FAMILIES:
            continue
        mods = [x for x in (lay or []) if not x.startswith("layer:")]
        path = mods[-1] if mods and mods[-1] != root else ""
        for pre in prefixes(path):
            out[d, pre, fam] = out.get((d, pre, fam), 0.0) + float(flops)
    return out


def attributed_share(records, root: str = "OptimizedModule") -> tuple[float | None, float | None, float | None]:
    """(Inductor share, module+op share, own share) of a compiled model's time: the kernel records
    whose layer starts with its ``root`` (``kDuration``; a CPU trace's self times).

    * Inductor share: of the time of its kernels (Inductor's generated kernels, the generated code's
      extern calls, anything else run inside), the part whose module and op came from Inductor's record
      of the compiled graph (``link`` ``inductor``: a generated kernel named by its origin aten ops, or an
      extern call that kept its own op; a generated kernel whose origin nodes name no aten op,
      ``fused:NAME``, does not count). Its module is the innermost one holding all its origin nodes:
      the compiled module itself for its own code, or for a kernel fused from several of its children.
    * module+op share: the part with a module and an op from any source: Inductor's record, or an op
      the trace names in the compiled module (the ``contiguous`` copy torch's compiled backward makes of
      an incoming gradient, outside Inductor's graph).
    * own share: the compiled regions' own time (``Torch-Compiled Region``, its autograd node, Dynamo's
      guard checks: the wrapper's Python, allocations, and on a CPU trace without Inductor's kernel
      profiling every C++ kernel's time too) over all of the model's time. It names no op.

    None where there is no such time."""
    from pyprof.parse.kineto.inductor import FUSED_MOD, FUSED_PREFIX, LINK_INDUCTOR, kernel_name

    own = kern = hit = named = 0
    for rec in records:
        lay = rec.get("layer")
        if rec.get("kind") != "kernel" or not lay or lay[0] != root:
            continue
        t = rec.get("kDuration") or 0
        if rec.get("mod") == "torch.compile" or rec.get("link") in ("region", "annotation"):
            own += t
            continue
        kern += t
        unnamed = rec.get("mod") == FUSED_MOD and rec.get("op") == FUSED_PREFIX + kernel_name(rec["kShortName"])
        if rec.get("op") and not unnamed:
            named += t
            if rec.get("link") == LINK_INDUCTOR:
                hit += t
    return ((hit / kern if kern else None), (named / kern if kern else None),
            (own / (own + kern) if own + kern else None))


def fprop_bytes(df, modules: set[str]) -> dict[str, float]:
    """{module path: forward bytes} of the kernels whose innermost layer is one of ``modules``."""
    out: dict[str, float] = {}
    for d, lay, nbytes in zip(df["dir"], df["layer"], df["bytes"], strict=True):
        if d != "fprop" or not lay or not nbytes == nbytes:
            continue
        if lay[-1] in modules:
            out[lay[-1]] = out.get(lay[-1], 0.0) + float(nbytes)
    return out


def validate(name: str, steps: int = 2, workdir: str | Path | None = None, device: str = "cpu",
             tf32: bool = False) -> Outcome:
    """Run case ``name`` through ``pyprof run`` -> records -> ``prof`` and compare with torch's count,
    on ``device`` (``"cuda"``: the profiler records the GPU's kernels; ``tf32`` lets float32 GEMMs run
    as TF32). ``workdir`` keeps the trace and records (else a temporary folder)."""
    import torch

    from pyprof.errors import PyprofError
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof import build_file
    from pyprof.prof.load import iter_records
    from pyprof.records import write_records
    from pyprof.runner import RunOptions, run_script

    from . import reference, zoo

    outcome = Outcome(name, steps)
    if hasattr(torch, "_dynamo"):  # each case is a program of its own: no compiled frame of the last one
        torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / f"train_{name}.py"
        script.write_text(_SCRIPT.format(package=__package__, name=name, steps=steps + 2, device=device, tf32=tf32))
        try:
            result = run_script(script, [], folder / "out",
                                RunOptions(wait=1, warmup=1, active=steps, cuda=device.startswith("cuda")))
            records = folder / "records.dict"
            with open(records, "wb") as fh:
                write_records(KinetoSource(result.trace).records(), fh)
            df = build_file(records, peak_flops=1e12, peak_bw=1e11, workers=1)
            if zoo.CASES[name].compiled:
                with open(records, "rb") as fh:
                    outcome.attributed = attributed_share(iter_records(fh))
        except (PyprofError, Exception) as exc:  # the row says what failed; the other cases still run
            outcome.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            return outcome
    case = zoo.CASES[name]
    model, x = zoo.build(name, device=device)
    # a compiled model is called through its OptimizedModule wrapper, the root of the records' layers;
    # inside its compiled regions, the modules come from Inductor's metadata (pyprof.parse.kineto.inductor)
    outcome.pyprof = pyprof_flops(df, "OptimizedModule" if case.compiled else type(model).__name__)
    ref = reference.count_step(case, model, x)
    outcome.torch = {k: v * steps for k, v in ref.items()}
    if not case.compiled:  # (no module ranges inside compiled regions)
        hand = reference.hand_bytes(case, *zoo.build(name, device=device))
        outcome.bytes_hand = {m: v * steps for m, v in hand.items()}
        outcome.bytes_pyprof = fprop_bytes(df, set(outcome.bytes_hand))
    outcome.frame = df
    kern = df[df["kind"] == "kernel"]
    total = float(kern["sil"].sum())
    if total > 0:
        outcome.uncovered = float(kern.loc[kern["flops"].isna() & kern["op"].notna(), "sil"].sum()) / total
    del torch
    return outcome


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.4f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def table(outcomes: list[Outcome]) -> str:
    """One line per case and direction: GEMM/conv/attention FLOPs of pyprof and torch, their ratio, how
    many module totals agree within 1%, and the worst module."""
    head = (f"{'model':<16} {'dir':<6} {'pyprof GFLOP':>13} {'torch GFLOP':>12} {'ratio':>7} "
            f"{'modules ok':>11}  worst module (ratio)")
    bytes_lines = []
    for o in outcomes:
        if o.bytes_hand:
            bad = o.bytes_mismatches()
            worst = max(o.bytes_hand, key=lambda m: abs(o.bytes_pyprof.get(m, 0.0) / o.bytes_hand[m] - 1))
            bytes_lines.append(f"{o.name:<16} {len(o.bytes_hand) - len(bad):>4}/{len(o.bytes_hand):<4} layers' "
                               f"forward bytes equal the hand count; worst {worst} "
                               f"({_ratio(o.bytes_pyprof.get(worst, 0.0), o.bytes_hand[worst])})")
    lines = [head, "-" * len(head)]
    for o in outcomes:
        if o.error:
            lines.append(f"{o.name:<16} {'-':<6} FAILED: {o.error}")
            continue
        for d in DIRECTIONS:
            a, b = o.total("pyprof", d), o.total("torch", d)
            if d == "recomp" and not a and not b:
                continue
            keys = {(m, f) for (dd, m, f), v in {**o.torch, **o.pyprof}.items() if dd == d and v}
            worst, worst_err, ok = "", 0.0, 0
            for m, f in sorted(keys):
                pa, tb = o.pyprof.get((d, m, f), 0.0), o.torch.get((d, m, f), 0.0)
                err = abs(pa - tb) / tb if tb else (math.inf if pa else 0.0)
                if err <= TOLERANCE:
                    ok += 1
                if err > worst_err:
                    worst, worst_err = f"{m or '<root>'}/{f} ({_ratio(pa, tb)})", err
            lines.append(f"{o.name:<16} {d:<6} {a / 1e9:>13.4f} {b / 1e9:>12.4f} {_ratio(a, b):>7} "
                         f"{ok:>5}/{len(keys):<5}  {worst or '-'}")
    if bytes_lines:
        lines += ["", "Bytes of one-op layers (nn.Linear, nn.Conv*) against a hand count:", *bytes_lines]
    shares = [f"{o.name:<16} {_pct(o.attributed[0]):>10} {_pct(o.attributed[1]):>10} {_pct(o.attributed[2]):>10}"
              for o in outcomes if o.attributed != (None, None, None)]
    if shares:
        lines += ["", "Compiled models (attributed_share): kernel time with its module and op from Inductor's record,",
                  "with a module and an op from any source; the compiled regions' own time (no op) as a share of",
                  "the model's time",
                  f"{'model':<16} {'Inductor':>10} {'module+op':>10} {'own time':>10}", *shares]
    return "\n".join(lines) + "\n"
