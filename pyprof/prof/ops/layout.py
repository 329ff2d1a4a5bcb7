"""Layout family: ops that place an input's elements into a new tensor (diag, diag_embed, diagflat,
block_diag, pixel_shuffle, pixel_unshuffle, channel_shuffle), and small products and differences
over a layout (cross, linalg_cross, diff, trace, kron).

Bytes: each input read once, the result written once (a diagonal matrix, block-diagonal matrix or
embedded diagonal is written in full, zeros included; ``diag`` of a matrix reads only its diagonal).
FLOPs: 0 for the placements; ``cross``: 3 per output element (each component is two products and a
difference); ``diff``: one subtraction per output element of each order (``n`` times for the n-th
difference); ``trace``: one add per diagonal element; ``kron``: one multiply per output element.
Backward, per input needing a gradient: the placements gather dY back (dY read, dX written);
``cross``'s gradient is a cross product per input (3 FLOPs per element); ``diff``'s and ``trace``'s
are differences and a broadcast of dY (``diff``: as many FLOPs as forward); ``kron``'s sums the
products of dY with the other factor (2 FLOPs per output element: a multiply and an add).

``cartesian_prod(a, b, ...)`` writes the ``[Π nᵢ, k]`` grid of the inputs' elements (one input: the
input itself, no work); ``combinations(x[n], r)`` the ``[C(n, r), r]`` (with replacement
``C(n + r − 1, r)``) tuples: placements, 0 FLOPs; backward sums dY's entries back onto their source
(one add per output element). ``gradient(x, dim, spacing)`` writes one tensor of ``x``'s shape per
differentiated dim (all dims by default), each a central difference scaled by the spacing: 2 FLOPs
per element per dim; backward as forward, per dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb, prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register


def _cost(call: OpCall, ins: Sequence[dict | None], n_out: int | None, fwd: float, bwd_per_input: float,
          dt: str | None) -> Cost | None:
    if n_out is None or any(A.shape(t) is None for t in ins):
        return None
    if call.direction == "bprop":
        grads = [t for t in ins if A.requires_grad(t)]
        return Cost(bwd_per_input * len(grads), A.total(*[A.total(A.sized(n_out, dt), A.nbytes(t)) for t in grads]), dt)
    return Cost(fwd, A.total(*[A.nbytes(t) for t in ins], A.sized(n_out, dt)), dt)


@register("diag", "diagflat", "diag_embed")
@binds("self")
def _diag(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    k = abs(A.value(b.get("diagonal" if call.op == "diag" else "offset"), 0))
    if call.op == "diag" and len(shp) == 2:  # the diagonal of a matrix: read and write its elements
        off = A.value(b.get("diagonal"), 0)
        m, n = shp
        d = max(0, min(m, n - off) if off >= 0 else min(m + off, n))
        # backward: dY placed on the diagonal of a zero matrix
        return one_input(call, x, dt, (0.0, A.sized(2 * d, dt)), (0.0, A.sized(d + m * n, dt)))
    if call.op == "diag_embed":
        if not shp:
            return None
        n_out = prod(shp[:-1]) * (shp[-1] + k) ** 2
    else:
        if call.op == "diag" and len(shp) != 1:
            return None
        n_out = (prod(shp) + k) ** 2
    return _cost(call, [x], n_out, 0.0, 0.0, A.dtype(x))


@register("block_diag")
def _block_diag(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if not ts or any(A.shape(t) is None or len(cast("list[int]", A.shape(t))) > 2 for t in ts):
        return None
    shapes = [[1, 1] if not (s := A.shape(t)) else ([1] + s if len(s) == 1 else s) for t in ts]
    n_out = sum(s[0] for s in shapes) * sum(s[1] for s in shapes)
    return _cost(call, ts, n_out, 0.0, 0.0, A.promote(A.dtype(t) for t in ts))


@register("pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle")
def _shuffle(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if not ts or A.shape(ts[0]) is None:
        return None
    return _cost(call, [ts[0]], prod(cast("list[int]", A.shape(ts[0]))), 0.0, 0.0, A.dtype(ts[0]))


@register("cross", "linalg_cross")
@binds()
def _cross(call: OpCall, b: Bound) -> Cost | None:
    x, y = b.get("self"), b.get("other")
    out = A.broadcast(A.shape(x), A.shape(y))
    if out is None:
        return None
    n = prod(out)
    dt = A.compute_dtype(call.cdtype, x, y)
    return _cost(call, [x, y], n, 3.0 * n, 3.0 * n, dt)


@register("diff")
@binds("self")
def _diff(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    order, dim = A.value(b.get("n"), 1), A.value(b.get("dim"), -1)
    if not shp or not isinstance(order, int) or not isinstance(dim, int) or order < 0:
        return None
    extra = [t for t in (b.get("prepend"), b.get("append")) if A.is_tensor(t)]
    d = dim % len(shp)
    length = shp[d] + sum((A.shape(t) or [0] * len(shp))[d] if len(A.shape(t) or []) == len(shp) else 1 for t in extra)
    rest = prod(shp) // shp[d] if shp[d] else 0
    flops = float(sum(max(0, length - k) for k in range(1, order + 1)) * rest)
    n_out = max(0, length - order) * rest
    return _cost(call, [x, *extra], n_out, flops, flops, A.dtype(x))


@register("trace")
@binds("self")
def _trace(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    if len(shp) != 2:
        return None
    d, dt = min(shp), A.dtype(x)
    # backward: dY broadcast onto the diagonal of a zero matrix
    return one_input(call, x, dt, (float(d), A.sized(d + 1, dt)), (0.0, A.sized(1 + prod(shp), dt)))


@register("kron")
@binds()
def _kron(call: OpCall, b: Bound) -> Cost | None:
    x, y = b.get("self"), b.get("other")
    sx, sy = A.shape(x), A.shape(y)
    if sx is None or sy is None:
        return None
    nd = max(len(sx), len(sy))
    sx, sy = [1] * (nd - len(sx)) + sx, [1] * (nd - len(sy)) + sy
    n = prod(a * c for a, c in zip(sx, sy, strict=True))
    return _cost(call, [x, y], n, float(n), 2.0 * n, A.compute_dtype(call.cdtype, x, y))


@register("cartesian_prod")
def _cartesian_prod(call: OpCall) -> Cost | None:
    ins = A.tensors(call.args)
    shapes = [A.shape(t) for t in ins]
    if not ins or any(s is None or len(s) != 1 for s in shapes):
        return None
    dt = A.compute_dtype(call.cdtype, *ins)
    if len(ins) == 1:  # returns its input
        return Cost(0.0, 0, dt)
    n_out = prod(s[0] for s in cast("list[list[int]]", shapes)) * len(ins)
    return _cost(call, ins, n_out, 0.0, float(n_out), dt)


@register("combinations")
@binds("self")
def _combinations(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    r, rep = A.value(b["r"], 2), A.value(b["with_replacement"], False)
    if len(sx) != 1 or not isinstance(r, int) or r < 0:
        return None
    n = sx[0]
    if rep and n + r - 1 < 0:
        return None
    n_out = (comb(n + r - 1, r) if rep else comb(n, r)) * r
    return _cost(call, [x], n_out, 0.0, float(n_out), dt)


@register("gradient")
@binds("self")
def _gradient(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    dim = A.value(b["dim"])
    if not sx:
        return None
    dims = len(sx) if dim is None else 1 if isinstance(dim, int) else len(dim) if isinstance(dim, list) else None
    if dims is None:
        return None
    spacing = A.tensorlist(b.get("spacing")) or []
    n = prod(sx)
    return _cost(call, [x, *spacing], n * dims, 2.0 * n * dims, 2.0 * n * dims, dt)
