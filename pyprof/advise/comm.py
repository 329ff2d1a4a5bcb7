"""``comm``: collectives that no compute hid (:mod:`pyprof.prof.comm`'s exposed time), which overlap
with computation would hide, as far as there is computation left to hide them behind."""

from __future__ import annotations

import numpy as np

from pyprof.advise.common import Advice, Context, num
from pyprof.prof.units import duration as us

#: DDP's default bucket (bucket_cap_mb=25)
DDP_BUCKET = 25 * 2**20

KINDS = {
    "comm": ("Overlap communication with computation: DistributedDataParallel overlaps gradient buckets with "
             "the backward (tune `bucket_cap_mb`: larger buckets for many small collectives, smaller ones so the "
             "first bucket starts earlier); FSDP's `forward_prefetch`/`backward_prefetch`; issue collectives "
             "with `async_op=True` and wait late.",
             "per device (per process on a CPU trace): saved = min(exposed, compute - overlap), exposed = the "
             "collectives' time during which no compute ran on another stream or thread (pyprof prof --summary "
             "comm), compute = the device's non-collective kernel time (a collective can hide only behind compute "
             "that is not already hiding one); per step"),
}


def comm(ctx: Context) -> Advice | None:
    from pyprof.prof.comm import collectives, is_run

    df = collectives(ctx.records)
    if df.empty:
        return None
    compute: dict[tuple, float] = {}
    for rec, t in zip(ctx.records, ctx.df["sil"], strict=True):
        if rec.get("kind", "kernel") != "kernel" or rec.get("link") == "collective" or is_run(rec):
            continue
        key = (None, str(rec["device"])) if rec.get("device") is not None else (rec.get("pid"), "cpu")
        compute[key] = compute.get(key, 0.0) + num(t)
    total, exposed_all, ev = 0.0, 0.0, []
    for (pid, dev), g in df.groupby(["pid", "device"], sort=True, dropna=False):
        key = (None, dev) if dev != "cpu" else (pid, "cpu")
        exposed = float(g["exposed"].sum())
        room = compute.get(key, 0.0) - float(g["overlap"].sum())
        exposed_all += exposed
        total += max(min(exposed, room), 0.0)
        size = g["size"].to_numpy(dtype=float)
        med = float(np.nanmedian(size)) if np.isfinite(size).any() else float("nan")
        where = f"GPU {dev}" if dev != "cpu" else f"process {pid}"
        ev.append((f"{where}: {len(g) / ctx.per_step:.0f} collectives per step, {us(exposed / ctx.per_step)} exposed "
                   f"of {us(float(g['time'].sum()) / ctx.per_step)}; compute {us(compute.get(key, 0.0) / ctx.per_step)}"
                   + (f"; median message {med / 2**20:.2f} MiB" if med == med else ""), None))
        for kind, k in g.groupby("kind", sort=False):
            bw = k["busbw"].to_numpy(dtype=float)
            ev.append((f"  {kind}: {len(k)} x, exposed {us(float(k['exposed'].sum()) / ctx.per_step)} per step"
                       + (f", busbw {np.nanmedian(bw):.2f} GB/s" if np.isfinite(bw).any() else ""), None))
        if med == med and med < DDP_BUCKET / 4 and len(g) / ctx.per_step > 4:
            ev.append(("  many small collectives: larger buckets (bucket_cap_mb) cut their count", None))
    if total <= 0:
        return None
    return ctx.make("comm", *KINDS["comm"], total, ev, len(df), exposed_all)
