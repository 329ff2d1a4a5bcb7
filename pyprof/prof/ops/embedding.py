"""Embedding family: embedding (and ``embedding_bag``).

Forward is a gather: 0 FLOPs (a known zero); bytes: the indices read, one row of the table read per
index, the output written. Backward (``embedding_dense_backward``) accumulates ``dY`` rows into a zeroed
table gradient: one add per output element; bytes: dY and the indices read, the whole ``[V, D]``
gradient written (it is zero-filled, then scattered into). embedding_bag with mode sum/mean adds the
rows of each bag: one add per gathered element (mean: one divide per output element on top).

``torch.embedding(weight, indices)`` and ``F.embedding(input, weight)`` order their tensors differently:
the table is told from the indices by dtype (integer) when known, else by the namespace's order.
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, one_input, register


def _table_and_indices(call: OpCall):
    """``(table, indices, table shape, indices shape)`` with a 2-D table, or None when not known."""
    ts = A.tensors(call.args)[:2]
    if len(ts) < 2:
        return None
    named = [t for t in ts if t.get("name") == "weight"]
    d0, d1 = A.dtype(ts[0]), A.dtype(ts[1])
    if named:
        w = named[0]
    elif d0 is not None and d1 is not None and (d0 in A.FLOATING) != (d1 in A.FLOATING):
        w = ts[0] if d0 in A.FLOATING else ts[1]
    else:
        w = ts[1] if call.mod == "torch.nn.functional" else ts[0]
    idx = ts[1] if w is ts[0] else ts[0]
    sw, si = A.shape(w), A.shape(idx)
    if sw is None or si is None or len(sw) != 2:
        return None
    return w, idx, sw, si


@register("embedding")
def _embedding(call: OpCall) -> Cost | None:
    ti = _table_and_indices(call)
    if ti is None:
        return None
    w, idx, sw, si = ti
    n_idx, d = prod(si), sw[1]
    dt = A.compute_dtype(call.cdtype, w)
    return one_input(call, w, dt, (0.0, A.total(A.nbytes(idx), A.sized(2 * n_idx * d, dt))),
                     (float(n_idx * d), A.total(A.sized(n_idx * d, dt), A.nbytes(idx), A.sized(prod(sw), dt))))


@register("embedding_bag")
def _embedding_bag(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "weight", "offsets", "max_norm", "norm_type", "scale_grad_by_freq", "mode"))
    ti = _table_and_indices(call)
    if ti is None:
        return None
    w, idx, sw, si = ti
    mode = A.value(b.get("mode"), "mean")
    off = b.get("offsets")
    bags = si[0] if len(si) == 2 else (A.numel(A.shape(off)) if A.is_tensor(off) else None)
    if bags is None or not isinstance(mode, str):
        return None
    n_idx, d = prod(si), sw[1]
    dt = A.compute_dtype(call.cdtype, w)
    flops = float(n_idx * d + (bags * d if mode == "mean" else 0))  # max: one compare each
    return one_input(call, w, dt, (flops, A.total(A.nbytes(idx), A.sized(n_idx * d + bags * d, dt))),
                     (float(n_idx * d), A.total(A.sized(bags * d, dt), A.nbytes(idx), A.sized(prod(sw), dt))))
