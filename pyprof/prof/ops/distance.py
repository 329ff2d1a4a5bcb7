"""Distance family: cdist, pdist, pairwise_distance, dist, cosine_similarity, normalize.

Each is a reduction over a feature dimension of an elementwise formula, counted per element of the
broadcast inputs (``E``) or per compared pair and feature:

* ``cdist(x1[..., P, M], x2[..., R, M], p)``: 3 FLOPs per pair and feature (difference, ``|·|^p`` or a
  square, accumulate): ``3·B·P·R·M``, whichever path torch takes (``p = 2`` through a GEMM computes the
  same count of products); ``pdist(x[N, M])`` the same over the ``N·(N−1)/2`` pairs;
* ``pairwise_distance(x1, x2)``: 4 per element (difference, ``+ eps``, ``|·|^p``, accumulate) and one
  root per row; ``dist(x, y)``: 3 per element (no ``eps``) and one root;
* ``cosine_similarity(x1, x2, dim)``: 6 per element (the product and both squares, each
  accumulated) and 4 per row (two roots, a product, a divide);
* ``normalize(x, p, dim)``: 3 per element (``|·|^p``, accumulate, divide) and 2 per row (root, clamp).

Backward: per input that needs a gradient, 4 FLOPs per compared element (the derivative of the
distance times dY, accumulated; cosine and normalize: 6), reading dY, the inputs and the result and
writing each gradient. Bytes forward: each input read once, the result written once (the
intermediates of torch's composite forms are not counted: prof.md, "Checked against torch's OpInfo
catalogue").
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register


def _cost(call: OpCall, ins: Sequence[dict | None], per_fwd: float, n_out: int, per_bwd: float) -> Cost:
    dt = A.compute_dtype(call.cdtype, *ins)
    read = A.total(*[A.nbytes(t) for t in ins])
    if call.direction == "bprop":
        grads = [t for t in ins if A.requires_grad(t)]
        if not grads:
            return Cost(0.0, 0, dt)
        return Cost(per_bwd * len(grads), A.total(A.sized(2 * n_out, dt), read, *[A.nbytes(g) for g in grads]), dt)
    return Cost(per_fwd, A.total(read, A.sized(n_out, dt)), dt)


@register("cdist", "_cdist_forward")
def _cdist(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("x1", "x2"))  # by position: torch.cdist's compute_mode is a str, aten's an int
    x1, x2 = b.get("x1"), b.get("x2")
    s1, s2 = A.shape(x1), A.shape(x2)
    if s1 is None or s2 is None or len(s1) < 2 or len(s2) < 2 or s1[-1] != s2[-1]:
        return None
    batch = A.broadcast(s1[:-2], s2[:-2])
    if batch is None:
        return None
    pairs = prod(batch) * s1[-2] * s2[-2]
    work = float(pairs * s1[-1])
    return _cost(call, [x1, x2], 3 * work, pairs, 4 * work)


@register("pdist", "_pdist_forward")
@binds("self")
def _pdist(call: OpCall, b: Bound, x: A.Arg, s: list[int], dt: str | None) -> Cost | None:
    if len(s) != 2:
        return None
    pairs = s[0] * (s[0] - 1) // 2
    work = float(pairs * s[1])
    return _cost(call, [x], 3 * work, pairs, 4 * work)


def _rows(shp: list[int], dim: int) -> int:
    """Elements of the result of reducing ``shp`` over ``dim`` (a 0-d ``shp``: 1)."""
    d = shp[dim % len(shp)] if shp else 1
    return prod(shp) // d if d else 0


@register("pairwise_distance", "dist")
@binds()
def _pairwise(call: OpCall, b: Bound) -> Cost | None:
    x1, x2 = b.get("x1", b.get("self")), b.get("x2", b.get("other"))
    out = A.broadcast(A.shape(x1), A.shape(x2))
    if out is None:
        return None
    e = prod(out)
    rows = _rows(out, -1) if call.op == "pairwise_distance" else 1
    per = 4 if call.op == "pairwise_distance" else 3
    return _cost(call, [x1, x2], float(per * e + rows), rows, 4.0 * e)


@register("cosine_similarity")
@binds()
def _cosine(call: OpCall, b: Bound) -> Cost | None:
    x1, x2, dim = b["x1"], b["x2"], A.value(b["dim"], 1)
    out = A.broadcast(A.shape(x1), A.shape(x2))
    if out is None or not isinstance(dim, int):
        return None
    e, rows = prod(out), _rows(out, dim)
    return _cost(call, [x1, x2], float(6 * e + 4 * rows), rows, 6.0 * e)


@register("normalize")
def _normalize(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "p", "dim", "eps"))
    x, dim = b.get("input"), A.value(b.get("dim"), 1)
    s = A.shape(x)
    if s is None or not isinstance(dim, int):
        return None
    e, rows = prod(s), _rows(s, dim)
    dt = A.compute_dtype(call.cdtype, x)
    return one_input(call, x, dt, (float(3 * e + 2 * rows), A.sized(2 * e, dt)), (6.0 * e, A.sized(3 * e, dt)))
