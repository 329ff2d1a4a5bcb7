"""``fuse``: chains of memory-bound pointwise ops that one fused kernel would run, each intermediate
written and read once less."""

from __future__ import annotations

import functools
import statistics

from pyprof.advise.common import MIN_KERNEL_NS, Advice, Context, num, numel, site, withdraw

#: Chains of pointwise op instances shorter than this are not worth a fusion advice.
MIN_CHAIN = 2

#: why CPU chains get no number (scripts/validate.py --advise, docs/advise.md)
CPU_WITHDRAWN = ("withdrawn on the CPU: torch.compile's saving there is not the memory passes the model counts "
                 "(it also fuses the backward and drops per-op dispatch): measured / predicted 2.6, 1.4 and 0.53 "
                 "in three tries (docs/advise.md)")

KINDS = {
    "fuse": ("Fuse the chain of memory- or latency-bound pointwise ops (torch.compile on the module, or one fused op): each "
             "intermediate is then written and read once less.",
             "for each run of >= 2 consecutive memory- or latency-bound pointwise op instances of one direction (not the "
             "optimizer's), layer and step over tensors of one size: "
             "saved = sum(t) - max(max_i(bytes_i) x sum(t) / sum(bytes), 2 us) (the fused kernel moves the "
             "largest member's bytes, at the chain's achieved bandwidth); a chain that recurs in several steps "
             "(same ops and call site) counts its median saving over them, once a step. CPU records: shown without a "
             "number (withdrawn after measurement: docs/advise.md)"),
}


def _fusable(family: str, bound, sil, nbytes) -> bool:
    return family == "pointwise" and bound in ("memory", "latency") and num(nbytes) > 0 and num(sil) > 0


def _chains(ctx: Context) -> list[list[list]]:
    """Runs of bound pointwise op instances [op, t, bytes, layer, trace, opid, device], one key each."""
    from pyprof.prof.ops import family
    from pyprof.report.timeline import step_of

    fam = functools.cache(lambda op, mod: family(op, mod) or "")
    chains: list[list[list]] = []
    run: list[list] = []
    key_prev = None
    cols = ("kind", "device", "op", "mod", "dir", "layer", "bound", "sil", "bytes", "trace", "opid")
    for rec, kind, device, op, mod, d, layer, bound, sil, nbytes, trace, opid in zip(
            ctx.records, *(ctx.df[c] for c in cols), strict=True):
        ok = kind == "kernel" and op is not None and d != "optim" and _fusable(fam(op, mod), bound, sil, nbytes)
        key = (device, d, tuple(layer) if isinstance(layer, (list, tuple)) else (), step_of(rec), numel(rec)) if ok else None
        item = [op, num(sil), num(nbytes), layer, trace, opid, device]
        if ok and key == key_prev and run and opid is not None and run[-1][5] == opid:
            run[-1][1] += item[1]  # another kernel of the same op instance
            run[-1][2] += item[2]
        elif ok and key == key_prev and run:
            run.append(item)
        else:
            chains.append(run)
            run = [item] if ok else []
        key_prev = key
    return [c for c in [*chains, run] if len(c) >= MIN_CHAIN]


def fuse(ctx: Context) -> Advice | None:
    chains = _chains(ctx)
    # one chain recurs once a step: its saving is the median over the steps it ran in, times the steps
    # (a noisy machine pauses a single op now and then; one such pause must not make the estimate)
    groups: dict[tuple, list[tuple[float, float, int]]] = {}
    for chain in chains:
        t = sum(c[1] for c in chain)
        fused = max(max(c[2] for c in chain) * t / sum(c[2] for c in chain), min(MIN_KERNEL_NS, t))
        label = " -> ".join(c[0] for c in chain[:4]) + (" -> ..." if len(chain) > 4 else "")
        groups.setdefault((label, site(chain[0][3], chain[0][4])), []).append((t - fused, t, len(chain)))
    cpu = any(c[6] is None or c[6] != c[6] for chain in chains for c in chain)
    saved_rows, total, now, n = [], 0.0, 0.0, 0
    for (label, where), runs in groups.items():
        saved = statistics.median(r[0] for r in runs) * len(runs)
        if saved <= 0:
            continue
        saved_rows.append((f"{label} in {where}", saved))
        total += saved
        now += statistics.median(r[1] for r in runs) * len(runs)
        n += sum(r[2] for r in runs)
    if not n:
        return None
    advice = ctx.make("fuse", *KINDS["fuse"], total, saved_rows, n, now)
    return withdraw(advice, CPU_WITHDRAWN) if cpu else advice
