"""``compile``: modules whose time goes to many small ops, each bound by its dispatch (CPU) or launch
(GPU) cost rather than by its FLOPs or bytes: ``torch.compile`` fuses them into few kernels.

An op instance is small when it takes under :data:`SMALL_NS` (CPU; :data:`SMALL_GPU_NS` a GPU kernel)
and ran :data:`~pyprof.advise.common.LATENCY_GAP` times its roofline time or more (or has no roofline:
views, reshapes, allocations). A module (the innermost layer of its forward and backward ops; the
optimizer's are the ``optim`` advice's) is op-dense with :data:`MIN_OPS` or more small ops per step;
the advice covers their time.
"""

from __future__ import annotations

from pyprof.advise.common import LATENCY_GAP, Advice, Context, num
from pyprof.prof.units import duration as us
from pyprof.records import BACKWARD_DIRS

SMALL_NS = 50_000.0
SMALL_GPU_NS = 10_000.0
MIN_OPS = 8

NO_ESTIMATE = ("what compiling saves is the dispatch or launch cost of the ops it fuses and the passes it "
               "removes; neither is modelled from a profile (`pyprof advise --try` measures it)")

KINDS = {
    "compile": ("Compile the op-dense modules named in the evidence (or the whole model): "
                "`model = torch.compile(model)`, so that their many small ops run as a few fused kernels.",
                "not estimated: " + NO_ESTIMATE),
}


def dense(ctx: Context) -> Advice | None:
    df = ctx.df
    mods: dict[str, list] = {}  # module -> [small op instances, time in small ops, time]
    for rec, d, sil, gap, ideal, layer, opid in zip(ctx.records, df["dir"], df["sil"], df["gap"], df["ideal"],
                                                    df["layer"], df["opid"], strict=True):
        if d not in ("fprop", *BACKWARD_DIRS) or not isinstance(layer, (list, tuple)) or not layer:
            continue
        t = num(sil)
        m = mods.setdefault(layer[-1], [set(), 0.0, 0.0])
        m[2] += t
        limit = SMALL_NS if rec.get("device") is None else SMALL_GPU_NS
        if t < limit and (num(ideal) <= 0 or num(gap) >= LATENCY_GAP):
            m[0].add(opid)
            m[1] += t
    rows, now, n = [], 0.0, 0
    for name, (ops, small, total) in mods.items():
        count = len(ops)
        if count / ctx.per_step >= MIN_OPS:
            rows.append((f"{name}: {count / ctx.per_step:.0f} small ops per step, {us(small / ctx.per_step)} per step "
                         f"in them ({small / total:.0%} of its time)", small))
            now += small
            n += count
    if not n:
        return None
    rows.sort(key=lambda r: -r[1])
    return ctx.make("compile", *KINDS["compile"], None, [(label, None) for label, _ in rows[:5]]
                    + ([(f"+{len(rows) - 5} more modules", None)] if len(rows) > 5 else []), n, now, NO_ESTIMATE)
