"""Concatenation family: cat (concat, concatenate), stack, hstack, vstack, dstack.

No arithmetic: FLOPs 0 (a known zero). Bytes: each input read once, the result (the sum of the inputs)
written once. Backward: the input gradients are slices of dY; when the consumer needs them contiguous
each is copied once, so bytes are dY read and every gradient written (an upper bound; views cost 0).

``_chunk_cat(tensors, dim, num_chunks)`` splits each tensor into ``num_chunks`` along ``dim`` (padded
to a multiple of it) and concatenates the chunks: each input read, the padded result written; no
gradient.

Arguments come as one ``tensorlist`` (pyprof markers) or, in old PyProf markers, as the tensors spread
over the positional arguments.
"""

from __future__ import annotations

from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, register


@register("cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack")
def _cat(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if not ts:
        return None
    dt = A.compute_dtype(call.cdtype, *ts)
    inb = A.total(*[A.nbytes(t) for t in ts])
    n = A.total(*[A.numel(A.shape(t)) for t in ts])
    if call.direction == "bprop":
        grads = [t for t in ts if A.requires_grad(t)]
        if not grads:
            return Cost(0.0, 0, dt)
        return Cost(0.0, A.total(A.sized(n, dt), *[A.nbytes(t) for t in grads]), dt)
    return Cost(0.0, A.total(inb, A.sized(n, A.promote(A.dtype(t) for t in ts))), dt)


@register("_chunk_cat")
@binds()
def _chunk_cat(call: OpCall, b: Bound) -> Cost | None:
    ts = A.tensorlist(b["tensors"]) or []
    dim, chunks = A.value(b["dim"]), A.value(b["num_chunks"])
    shapes = [A.shape(t) for t in ts]
    if not ts or any(not s for s in shapes) or not isinstance(dim, int) or not isinstance(chunks, int) or chunks < 1:
        return None
    dt = A.dtype(ts[0]) or "float32"  # the list's items may carry no dtype: the first one's, else float32
    out = 0
    for s in cast("list[list[int]]", shapes):  # none is None (checked above)
        d = dim % len(s)
        along = -(-s[d] // chunks) * chunks
        out += prod(s[:d]) * along * prod(s[d + 1:])
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    return Cost(0.0, A.total(*[A.sized(A.numel(s), A.dtype(t) or dt) for s, t in zip(shapes, ts, strict=True)],
                             A.sized(out, dt)), dt)
