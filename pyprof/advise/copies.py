"""``copies``: CPU time in ops that only copy data, or move it between layouts and dtypes (the reorders
and copies of ``pyprof run``'s CPU findings, :func:`pyprof.cpu_findings.reorder_finding`), by call
site. Those under a convolution are the ``layout`` advice's. Whether a copy can go depends on the code
(a ``.contiguous()`` after a transpose that the next op does not need, a ``.to()`` or ``.float()`` of
the same tensor every step, a reshape of a non-contiguous view): shown without an estimate.
"""

from __future__ import annotations

from pyprof.advise.common import Advice, Context, num, site
from pyprof.cpu_findings import _is_reorder

NO_ESTIMATE = "whether each copy can go depends on the code at its call site"

KINDS = {
    "copies": ("Remove the copies named in the evidence: keep tensors in the layout, dtype and device the next "
               "op takes (no `.contiguous()`, `.to()` or `.clone()` that the next op does not need; constant "
               "tensors and conversions made once, outside the step; views instead of copies).",
               "not estimated: " + NO_ESTIMATE),
}


def copies(ctx: Context) -> Advice | None:
    rows = []
    for rec, op, sil, layer, trace in zip(ctx.records, ctx.df["op"], ctx.df["sil"], ctx.df["layer"],
                                          ctx.df["trace"], strict=True):
        kind = None if rec.get("device") is not None or str(op or "").startswith("conv") else _is_reorder(rec)
        if kind is not None:
            rows.append((f"{kind} in {op} at {site(layer, trace)}", num(sil)))
    return ctx.covering("copies", *KINDS["copies"], rows, NO_ESTIMATE)
