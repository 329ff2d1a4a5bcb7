"""``pyprof advise``: concrete changes ranked by the time each would save per step, with the evidence
and the formula behind every estimate.

Input is a :class:`pyprof.report.profile.Profile` (records priced by prof: FLOPs, bytes, tensor cores,
roofline). Per step means divided by the number of ``ProfilerStep#N`` ranges around the records
(``pyprof run`` and torch.profiler schedules record them); records without steps count as one step,
and the output says so. Every estimate is a model, stated in :data:`KINDS` and in each advice's
``formula``; where the records cannot support an estimate the advice is left out, never shown as 0.

The estimates keep each kernel's efficiency: a kernel that ran at ``gap`` times its roofline time
(``ideal = max(FLOPs / peak, bytes / bandwidth)``) is assumed to run at the same gap against the
roofline of the change (a higher peak, fewer bytes), unless it is latency-bound (``gap`` above
:data:`LATENCY_GAP`): then it saves only the roofline time the change removes. No kernel is assumed
to get faster than :data:`MIN_KERNEL_NS` (launch and tail latency). The kinds (``python -m pyprof.advise`` prints the
table that docs/advise.md holds):
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

#: The shortest time a GPU kernel is assumed to take after a change (ns): launch and tail latency.
MIN_KERNEL_NS = 2_000.0
#: A kernel this many times slower than its roofline is latency-bound: a change saves it only the
#: roofline time it removes, not the same share of its time.
LATENCY_GAP = 10.0
#: Chains of pointwise op instances shorter than this are not worth a fusion advice.
MIN_CHAIN = 2
#: Advice saving less than this share of a step is not shown.
MIN_SHARE = 0.01

#: kind -> (what to change, the estimate's formula)
KINDS: dict[str, tuple[str, str]] = {
    "tf32": ("Let float32 GEMMs and convolutions run on tensor cores as TF32: "
             "`torch.backends.cuda.matmul.allow_tf32 = True` (or `torch.set_float32_matmul_precision('high')`) "
             "and `torch.backends.cudnn.allow_tf32 = True`.",
             "for each fp32 GEMM/conv kernel without tensor cores (tc=0) on a GPU with TF32: "
             "saved = t - max(t x ideal_TF32 / ideal_now, 2 us), ideal = max(FLOPs / peak, bytes / bandwidth); a "
             "latency-bound kernel (t > 10 x ideal_now) saves ideal_now - ideal_TF32"),
    "bf16": ("Run float32 GEMMs and convolutions in bfloat16 under `torch.autocast('cuda', dtype=torch.bfloat16)`.",
             "for each fp32 GEMM/conv/attention kernel on a GPU with bf16 tensor cores: saved = t - max(t x "
             "ideal_bf16 / ideal_now, 2 us), ideal_bf16 = max(FLOPs / bf16 tensor peak, bytes / 2 / bandwidth); a "
             "latency-bound kernel (t > 10 x ideal_now) saves ideal_now - ideal_bf16"),
    "align": ("Pad the GEMM/conv dimensions named in the evidence to multiples of 8 (vocabulary, hidden and "
              "head sizes, channels) so that fp16/bf16 kernels can use tensor cores.",
              "for each fp16/bf16 GEMM/conv kernel without tensor cores whose note names a dimension not a multiple "
              "of 8: saved = t - max(t x ideal_tensor / ideal_now, 2 us); a latency-bound kernel (t > 10 x ideal_now) "
              "saves ideal_now - ideal_tensor"),
    "fuse": ("Fuse the chain of memory-bound pointwise ops (torch.compile on the module, or one fused op): each "
             "intermediate is then written and read once less.",
             "for each run of >= 2 consecutive memory-bound pointwise op instances of one direction (not the "
             "optimizer's), layer and step over tensors of one size: "
             "saved = sum(t) - max(max_i(bytes_i) x sum(t) / sum(bytes), 2 us) (the fused kernel moves the "
             "largest member's bytes, at the chain's achieved bandwidth)"),
    "layout": ("Keep convolution activations in the layout the kernels use: "
               "`model.to(memory_format=torch.channels_last)` and channels_last inputs (CPU: the oneDNN reorders "
               "go away the same way, or run the model under `torch.jit.freeze` / `torch.compile`).",
               "saved = the time of the layout-transform kernels (nchwToNhwc, nhwcToNchw, oneDNN reorders, "
               "contiguous copies) under convolution ops"),
}

LAYOUT_KERNELS = ("nchwtonhwc", "nhwctonchw", "nchw_to_nhwc", "nhwc_to_nchw")
REORDER_ATEN = ("aten::to_mkldnn", "aten::to_dense", "aten::mkldnn_reorder_conv2d_weight",
                "aten::mkldnn_reorder_conv3d_weight", "aten::contiguous")


@dataclass
class Advice:
    """One change: ``kind`` (a key of :data:`KINDS`), the estimated seconds saved per step, the evidence
    (where the time goes now, largest first) and the formula the estimate came from."""

    kind: str
    saved_s: float
    change: str
    formula: str
    evidence: list[str] = field(default_factory=list)
    kernels: int = 0
    now_s: float = 0.0  # time per step of the kernels the change touches

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "saved_s": self.saved_s, "now_s": self.now_s, "kernels": self.kernels,
                "change": self.change, "evidence": self.evidence, "formula": self.formula}


@dataclass
class Advised:
    """What :func:`advise` found: the advice, largest saving first, the step count it divided by and the
    time per step it compares with."""

    items: list[Advice]
    steps: int
    steps_recorded: bool
    step_s: float  # kernel time per step


def _site(layer, trace) -> str:
    """``module path @ file:line`` of a record, as short as it stays readable."""
    mod = layer[-1] if isinstance(layer, (list, tuple)) and layer else "(no layer)"
    where = trace[0] if isinstance(trace, (list, tuple)) and trace else ""
    return f"{mod} @ {where}" if where else str(mod)


def _evidence(rows: list[tuple[str, float]], per_step: float, top: int = 5) -> list[str]:
    """``label: x.x us/step saved`` for the ``top`` labels with the most saving, then a count of the rest."""
    sums: dict[str, float] = defaultdict(float)
    for label, saved in rows:
        sums[label] += saved
    ranked = sorted(sums.items(), key=lambda kv: -kv[1])
    out = [f"{label}: {saved / per_step / 1e3:.1f} us/step" for label, saved in ranked[:top]]
    if len(ranked) > top:
        out.append(f"+{len(ranked) - top} more")
    return out


def _ideal(flops: float, nbytes: float, peak: float | None, bw: float | None) -> float | None:
    """Roofline time (ns) of ``flops`` and ``nbytes`` at ``peak`` FLOP/s and ``bw`` bytes/s; None if unknown."""
    terms = []
    if flops > 0 and peak:
        terms.append(flops / peak * 1e9)
    if nbytes > 0 and bw:
        terms.append(nbytes / bw * 1e9)
    return max(terms) if terms else None


def _faster(t: float, ideal_now: float | None, ideal_new: float | None) -> float | None:
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


def _num(v) -> float:
    return float(v) if v is not None and v == v else 0.0


def _peak_swap(df, devices: dict, per_step: float, kind: str, select, new_peak, new_bytes) -> Advice | None:
    """An advice whose change moves selected kernels to another peak (and byte count)."""
    saved_rows, total, now, n = [], 0.0, 0.0, 0
    cols = ("sil", "flops", "bytes", "dtype", "tc", "note", "gpu", "layer", "trace", "op", "ideal")
    for sil, flops, nbytes, dtype, tc, note, gpu, layer, trace, op, ideal in zip(*(df[c] for c in cols), strict=True):
        dev = devices.get(gpu)
        if dev is None or not select(dtype, tc, note or "", op, dev):
            continue
        t, fl, nb = _num(sil), _num(flops), _num(nbytes)
        if fl <= 0:
            continue
        new = _faster(t, _num(ideal) or None, _ideal(fl, new_bytes(nb), new_peak(dev, dtype), dev.bw))
        if new is None or new >= t:
            continue
        saved_rows.append((f"{op} in {_site(layer, trace)}", t - new))
        total += t - new
        now += t
        n += 1
    if not n:
        return None
    change, formula = KINDS[kind]
    return Advice(kind, total / per_step / 1e9, change, formula, _evidence(saved_rows, per_step), n, now / per_step / 1e9)


def _fp32_gemm(dtype, tc, note, op, dev) -> bool:
    from pyprof.prof.tensorcores import is_gemm_op

    return (dtype or "").removeprefix("torch.") == "float32" and tc in ("0", "1") and is_gemm_op(op)


def _advise_tf32(df, devices, per_step):
    return _peak_swap(df, devices, per_step, "tf32",
                      lambda d, tc, note, op, dev: tc == "0" and note.startswith("fp32 without TF32")
                      and dev.peak("float32", True) is not None,
                      lambda dev, d: dev.peak("float32", True), lambda b: b)


def _advise_bf16(df, devices, per_step):
    return _peak_swap(df, devices, per_step, "bf16",
                      lambda d, tc, note, op, dev: _fp32_gemm(d, tc, note, op, dev)
                      and dev.peak("bfloat16", True) is not None,
                      lambda dev, d: dev.peak("bfloat16", True), lambda b: b / 2)


def _advise_align(df, devices, per_step):
    return _peak_swap(df, devices, per_step, "align",
                      lambda d, tc, note, op, dev: tc == "0" and note.startswith("dims not multiple of 8")
                      and dev.peak(d, True) is not None,
                      lambda dev, d: dev.peak(d, True), lambda b: b)


def _numel(rec: dict) -> int:
    """The element count of a record's largest tensor argument (0 where none is recorded)."""
    best = 0
    for a in rec.get("args") or ():
        if isinstance(a, dict) and a.get("type") == "tensor" and isinstance(a.get("shape"), list):
            n = 1
            for d in a["shape"]:
                n *= d if isinstance(d, int) else 0
            best = max(best, n)
    return best


def _advise_fuse(df, records, per_step) -> Advice | None:
    from pyprof.prof.ops import family
    from pyprof.report.timeline import step_of

    fam: dict = {}
    chains: list[list[tuple]] = []
    run: list[tuple] = []
    key_prev = None
    cols = ("kind", "device", "op", "mod", "dir", "layer", "bound", "sil", "bytes", "trace", "opid")
    for rec, kind, device, op, mod, d, layer, bound, sil, nbytes, trace, opid in zip(
            records, *(df[c] for c in cols), strict=True):
        if kind != "kernel" or op is None or d == "optim":
            f = None
        else:
            f = fam.get((op, mod))
            if f is None:
                f = fam[op, mod] = family(op, mod) or ""
        ok = f == "pointwise" and bound == "memory" and _num(nbytes) > 0 and _num(sil) > 0
        # one chain: one device, direction, layer and step, its ops over tensors of one size
        key = (device, d, tuple(layer) if isinstance(layer, (list, tuple)) else (), step_of(rec), _numel(rec))
        item = [op, _num(sil), _num(nbytes), layer, trace, opid]
        if ok and key == key_prev and run and opid is not None and run[-1][5] == opid:
            run[-1][1] += item[1]  # another kernel of the same op instance
            run[-1][2] += item[2]
        elif ok and key == key_prev and run:
            run.append(item)
        else:
            if len(run) >= MIN_CHAIN:
                chains.append(run)
            run = [item] if ok else []
        key_prev = key if ok else None
    if len(run) >= MIN_CHAIN:
        chains.append(run)
    saved_rows, total, now, n = [], 0.0, 0.0, 0
    for chain in chains:
        t = sum(c[1] for c in chain)
        b = sum(c[2] for c in chain)
        fused = max(max(c[2] for c in chain) * t / b, min(MIN_KERNEL_NS, t))
        if fused >= t:
            continue
        label = " -> ".join(c[0] for c in chain[:4]) + (" -> ..." if len(chain) > 4 else "")
        saved_rows.append((f"{label} in {_site(chain[0][3], chain[0][4])}", t - fused))
        total += t - fused
        now += t
        n += len(chain)
    if not n:
        return None
    change, formula = KINDS["fuse"]
    return Advice("fuse", total / per_step / 1e9, change, formula, _evidence(saved_rows, per_step), n, now / per_step / 1e9)


def _advise_layout(df, records, per_step) -> Advice | None:
    saved_rows, total, n = [], 0.0, 0
    for rec, op, sil, layer, trace, name in zip(records, df["op"], df["sil"], df["layer"], df["trace"],
                                                df["longkernel"], strict=True):
        low = str(name or "").lower()
        gpu_layout = any(k in low for k in LAYOUT_KERNELS)
        cpu_reorder = rec.get("device") is None and rec.get("aten") in REORDER_ATEN
        if not (gpu_layout or cpu_reorder) or not str(op or "").startswith("conv"):
            continue
        t = _num(sil)
        saved_rows.append((f"{op} in {_site(layer, trace)}", t))
        total += t
        n += 1
    if not n:
        return None
    change, formula = KINDS["layout"]
    return Advice("layout", total / per_step / 1e9, change, formula, _evidence(saved_rows, per_step), n,
                  total / per_step / 1e9)


def advise(profile) -> Advised:
    """The advice for ``profile`` (:class:`pyprof.report.profile.Profile`), largest saving first."""
    from pyprof.report.diff import step_count

    df, records = profile.df, profile.records
    steps = step_count(records)
    per_step = float(steps or 1)
    devices = {d.label: d.device for d in profile.devices if not d.is_cpu and d.device is not None}
    step_s = float(df.loc[df["kind"] == "kernel", "sil"].fillna(0).sum()) / per_step / 1e9
    found = [_advise_tf32(df, devices, per_step), _advise_bf16(df, devices, per_step),
             _advise_align(df, devices, per_step), _advise_fuse(df, records, per_step),
             _advise_layout(df, records, per_step)]
    items = [a for a in found if a is not None and step_s > 0 and a.saved_s / step_s >= MIN_SHARE]
    items.sort(key=lambda a: -a.saved_s)
    return Advised(items, steps or 1, bool(steps), step_s)


def _seconds(s: float) -> str:
    from pyprof.prof.units import duration

    return duration(s * 1e9)


def format_text(result: Advised, width: int = 100) -> str:
    """The advice as a person reads it: one block per change, largest saving first."""
    import textwrap

    head = (f"{result.steps} step{'s' if result.steps != 1 else ''}" if result.steps_recorded
            else "no ProfilerStep ranges: the whole window counted as one step")
    lines = [f"pyprof advise: {head}; kernel time {_seconds(result.step_s)} per step"]
    if not result.items:
        lines.append("No change found that this model can estimate (kinds: " + ", ".join(KINDS) + ").")
        return "\n".join(lines) + "\n"
    for i, a in enumerate(result.items, 1):
        share = a.saved_s / result.step_s if result.step_s else math.nan
        lines.append("")
        lines.append(f"{i}. [{a.kind}] saves ~{_seconds(a.saved_s)} per step ({share:.1%} of kernel time; "
                     f"{a.kernels} kernels now taking {_seconds(a.now_s)} per step)")
        lines += textwrap.wrap(a.change, width, initial_indent="   ", subsequent_indent="   ")
        lines += ["   where: " + e for e in a.evidence]
        lines += textwrap.wrap("estimate: " + a.formula, width, initial_indent="   ", subsequent_indent="     ")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """docs/advise.md: the kinds, their changes and formulas."""
    import re

    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", __doc__.split("\n\n", 1)[1].strip()).replace("``", "`")
    out = ["# pyprof advise", "", "Generated by `python -m pyprof.advise`; the text is pyprof/advise.py's.", "",
           text, "", "| kind | change | estimate |", "|---|---|---|"]
    for k, (change, formula) in KINDS.items():
        out.append(f"| `{k}` | {change} | {formula} |")
    out += ["", f"Constants: a kernel is never assumed faster than {MIN_KERNEL_NS / 1e3:g} us; advice saving less than "
            f"{MIN_SHARE:.1%} of a step's kernel time is not shown. `pyprof advise --json` prints one object per "
            "advice with `kind`, `saved_s` (seconds per step), `now_s`, `kernels`, `change`, `evidence` and `formula`.",
            "", "Not yet estimated (later work): exposed communication, launch-bound phases (CUDA graphs), "
            "non-fused optimizers, dataloader stalls, CPU thread oversubscription (shown by `pyprof run`'s "
            "findings). The estimates have not yet been checked against measured savings."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
