"""``launch``: GPU idle time that is host-bound (:mod:`pyprof.prof.idle`: the next launch call began only
after the GPU went idle), which CUDA graphs or torch.compile's ``reduce-overhead`` mode close by
queueing a step's kernels ahead of the GPU."""

from __future__ import annotations

from pyprof.advise.common import Advice, Context
from pyprof.prof.units import duration as us

KINDS = {
    "launch": ("Launch the step's kernels ahead of the GPU: capture it in a CUDA graph (`torch.cuda.graphs`, "
               "`torch.compile(mode='reduce-overhead')`), or fuse small kernels (torch.compile) so that fewer "
               "launches are needed.",
               "saved = host-bound GPU idle per step (pyprof prof --summary idle: gaps where the next kernel's "
               "launch call began after the GPU went idle), summed over the steps' rows of each device, less the "
               "dataloader wait per step (its own advice); an upper bound: the step's first launch still waits"),
}


def launch(ctx: Context) -> Advice | None:
    from pyprof.prof.idle import idle

    table = idle(ctx.records)
    if table.empty:
        return None
    stepped = table[table["step"] != "all"]
    rows = stepped if len(stepped) and not (stepped["step"] == "-").all() else table[table["step"] == "all"]
    rows = rows[rows["step"] != "-"] if (rows["step"] != "-").any() else rows
    total, ev = 0.0, []
    for dev, g in rows.groupby("device", sort=True):
        host = float(g["host"].sum())
        if host <= 0:
            continue
        total += host
        busy, idle_ns = float(g["busy"].sum()), float(g["idle"].sum())
        allrow = table[(table["device"] == dev) & (table["step"] == "all")].iloc[0]
        ev.append((f"GPU {dev}: {us(host / ctx.per_step)} host-bound idle per step of {us(idle_ns / ctx.per_step)} "
                   f"idle ({idle_ns / (busy + idle_ns):.1%} of the steps); {allrow['kernels']} kernels, "
                   f"{allrow['tiny_pct']:.0f}% under 10 us, {allrow['short_pct']:.0f}% shorter than their launch "
                   f"call, mean launch delay {us(allrow['delay'])}", None))
    total -= ctx.claimed.get("dataloader", 0.0) * 1e9 * ctx.per_step
    if total <= 0:
        return None
    return ctx.make("launch", *KINDS["launch"], total, ev, 0, total, mode="reduce-overhead")  # --try: CUDA graphs
