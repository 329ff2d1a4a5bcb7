"""Concatenation family: cat (concat, concatenate), stack, hstack, vstack, dstack.

No arithmetic: FLOPs 0 (a known zero). Bytes: each input read once, the result (the sum of the inputs)
written once. Backward: the input gradients are slices of dY; when the consumer needs them contiguous
each is copied once, so bytes are dY read and every gradient written (an upper bound; views cost 0).

Arguments come as one ``tensorlist`` (pyprof markers) or, in old PyProf markers, as the tensors spread
over the positional arguments.
"""

from __future__ import annotations

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register


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
