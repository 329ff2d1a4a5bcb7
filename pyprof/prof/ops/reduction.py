"""Reduction family: sum, mean, prod, max/min (and amax/amin/argmax/argmin), norm and the vector norms,
var/std (and var_mean/std_mean), logsumexp, all/any, count_nonzero, nansum/nanmean, and the scans
(cumsum, cumprod, ...).

Forward FLOPs per *input* element (``dim=None`` reduces everything; ``keepdim`` only changes the shape):
sum/mean/prod/nansum/max/min/argmax/any/all/count_nonzero 1 (one add or compare), plus one divide per
output element for mean; norm p=2: square and add = 2 (+ one sqrt per output), p=1 / inf: abs and
add/compare = 2, other p: abs, pow, add = 3 (+ one root per output); var/std: two passes (mean, then
centre, square, add) = 4 (+ one divide, and sqrt for std, per output); logsumexp: max, subtract, exp,
add = 4 (+ log and add per output).

Backward per input element (the gradient is broadcast back): sum 0 (a broadcast copy), mean 1 (scale),
max/min 2 (compare with the result, select), norm 2 (``dY·x/‖x‖``), var/std 3, logsumexp 3
(``dY·exp(x − lse)``), prod 2. Bytes: forward reads the input and writes the output; backward reads
dY (and the input and output where the derivative needs them) and writes dX.

``max``/``min`` with a second tensor are the elementwise maximum/minimum and priced as such.

Histograms (``histc``, ``histogram``, ``histogramdd``): the result's size is set by ``bins`` (not by
the data). Per input element 3 FLOPs (offset, scale, count), 2 more where the range is the data's own
(a min and a max pass first: ``histc`` with ``min == max``, ``histogram*`` with int bins and no
``range``), 1 more with ``weight``; ``density`` divides each bin (2 per bin). Bytes: the input (and
weight, and bin edges given as tensors) read, the counts and the bin edges (``bins + 1`` per dim, not
written by ``histc``) written. No gradient.

Other reductions over a dim: ``renorm(x, p, dim, maxnorm)`` (a norm per sub-tensor, 2 or 3 per element
as ``norm``, then a rescale, 1): 3 or 4 per element, backward 4; ``trapezoid``/``trapz`` (sums of
neighbour pairs times the spacing: with ``x`` given, a difference, an add and a multiply per element,
then the sum: 4; with a scalar spacing 2) and ``cumulative_trapezoid`` (the same, a scan), backward 2
per element per input needing a gradient; ``hash_tensor`` (one combine per element; an int64 result);
``segment_reduce(data, reduce, lengths | offsets)`` (one add or compare per element, plus a divide per
segment for ``mean``; segments: ``lengths``' count, or ``offsets``' less one), backward 1 per element.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any, cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.pointwise import TABLE as _PW
from pyprof.prof.ops.pointwise import elementwise_cost
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, bound, one_input, register

# name: (forward per input element, forward per output element, backward per input element, bwd reads x)
TABLE: dict[str, tuple[int, int, int, bool]] = {
    "sum": (1, 0, 0, False), "nansum": (1, 0, 0, False), "mean": (1, 1, 1, False), "nanmean": (1, 1, 1, False),
    "prod": (1, 0, 2, True), "max": (1, 0, 2, True), "min": (1, 0, 2, True), "amax": (1, 0, 2, True),
    "amin": (1, 0, 2, True), "argmax": (1, 0, 0, False), "argmin": (1, 0, 0, False),
    "aminmax": (2, 0, 0, False), "all": (1, 0, 0, False), "any": (1, 0, 0, False),
    "count_nonzero": (1, 0, 0, False),
    "norm": (2, 1, 2, True), "linalg_vector_norm": (2, 1, 2, True), "frobenius_norm": (2, 1, 2, True),
    "var": (4, 1, 3, True), "std": (4, 2, 3, True), "var_mean": (4, 2, 3, True), "std_mean": (4, 3, 3, True),
    "logsumexp": (4, 2, 3, True),
}
# parameter names: the dim argument sits at different positions
_SIG = {"norm": ("input", "p", "dim", "keepdim"), "linalg_vector_norm": ("input", "ord", "dim", "keepdim"),
        "frobenius_norm": ("input", "dim", "keepdim"), "count_nonzero": ("input", "dim")}
_DEFAULT_SIG = ("input", "dim", "keepdim")
_CORRECTED = {"var", "std", "var_mean", "std_mean"}  # read by schema: their overloads differ in dim's place
_NO_GRAD = {"argmax", "argmin", "all", "any", "count_nonzero", "aminmax"}


@register("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin")
@binds("self")
def _scan(call: OpCall, b: Bound, x: A.Arg, sx: list[int], _: str | None) -> Cost | None:
    """Scans along a dim: one add (multiply, compare) per element (logcumsumexp 3: exp, add, log);
    the output has the input's shape. Backward: a reverse scan of dY (cumprod 3 per element: it also
    divides by the input and multiplies). Bytes: input read, output written; backward dY read, dX written
    (and the input and output for cumprod)."""
    n, dt = prod(sx), A.compute_dtype(call.cdtype, x)
    odt = A.out_dtype(b, dt)
    per, heavy = 3 if call.op == "logcumsumexp" else 1, call.op in ("cumprod", "logcumsumexp")
    return one_input(call, x, dt, (float(per * n), A.total(A.nbytes(x), A.sized(n, odt))),
                     (float((3 if heavy else 1) * n), A.sized((4 if heavy else 2) * n, dt)))


def reduced_shape(shp: list[int], dim, keepdim: bool) -> list[int] | None:
    """Output shape of reducing ``shp`` over ``dim`` (int, list, or None for all)."""
    nd = len(shp)
    dim = [dim] if isinstance(dim, int) and not isinstance(dim, bool) else dim
    if dim is None or dim == []:
        dims = set(range(nd))
    elif isinstance(dim, (list, tuple)) and all(isinstance(d, int) for d in dim):
        dims = {d % nd for d in dim} if nd else set()
    else:
        return None
    return [1 if i in dims else s for i, s in enumerate(shp) if keepdim or i not in dims]


def _reduce_args(call: OpCall) -> dict[str, Any]:
    """A reduction's arguments by name; var(x, True): the bool is ``unbiased``, not a dim (read by schema)."""
    b: dict[str, Any] = A.bind(call.args, _SIG.get(call.op, _DEFAULT_SIG))
    sb = bound(call)
    if call.op in _CORRECTED and sb is not None:
        b = {"input": sb.get("self"), "dim": sb.get("dim") or {"type": "NoneType", "value": None},
             "keepdim": sb.get("keepdim")}
    return b


@register(*TABLE)
def _reduce(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if call.op in ("max", "min") and len(ts) >= 2:  # torch.max(a, b): elementwise
        return elementwise_cost(call, ts, _PW["maximum"])
    b = _reduce_args(call)
    x = b.get("input") or b.get("self")
    sx = A.shape(x)
    if sx is None or not A.known(b.get("dim")) or not A.known(b.get("keepdim")):
        return None
    dim = A.value(b.get("dim"))
    out = reduced_shape(sx, dim, bool(A.value(b.get("keepdim"), False)))
    if out is None:
        return None
    per_in, per_out, bwd, reads = TABLE[call.op]
    if call.op in ("norm", "linalg_vector_norm"):
        p = A.value(b.get("p") if call.op == "norm" else b.get("ord"), 2)
        if p == "nuc":  # the nuclear norm sums singular values: an SVD's (the linalg family's count)
            from pyprof.prof.ops.linalg import nuclear_norm

            return nuclear_norm(call, x, dim)
        if p not in (2, 2.0, 1, 1.0, "fro", float("inf"), "inf", float("-inf"), "-inf"):
            per_in = 3
    n, no = prod(sx), prod(out)
    dt = A.compute_dtype(call.cdtype, x)
    odt = A.out_dtype(b, "int64" if call.op in ("argmax", "argmin", "count_nonzero") else (
        "bool" if call.op in ("all", "any") else dt))
    if call.direction == "bprop":
        if call.op in _NO_GRAD or not A.requires_grad(x):
            return Cost(0.0, 0, dt)
        byts = A.total(A.sized(no, odt), A.nbytes(x), A.nbytes(x) if reads else 0, A.sized(no, odt) if reads else 0)
        return Cost(float(bwd * n), byts, dt)
    return Cost(float(per_in * n + per_out * no), A.total(A.nbytes(x), A.sized(no, odt)), dt)


@register("sum_to_size")
@binds()
def _sum_to_size(call: OpCall, b: Bound) -> Cost | None:
    """``x.sum_to_size(size)``: a sum over the broadcast dims, one add per input element; input read,
    result written (nothing where ``x`` has the size already: torch returns it). Backward broadcasts dY
    back (dY read, dX written)."""
    x, size = b.get("self"), A.value(b.get("size"))
    if isinstance(size, int) and not isinstance(size, bool):
        size = [size]  # x.sum_to_size(3): the size as varargs
    sx = A.shape(x)
    if sx is None or not isinstance(size, list) or not all(isinstance(d, int) and d >= 0 for d in size):
        return None
    n, no, dt = prod(sx), prod(size), A.dtype(x)
    if call.direction == "bprop":
        return Cost(0.0, A.sized(n + no, dt) if A.requires_grad(x) else 0, dt)
    work = n != no or not size  # torch returns self for a size it already has, except a 0-d one (a sum)
    return Cost(float(n) if work else 0.0, A.sized(n + no, dt) if work else 0, dt)


@register("allclose", "equal")
def _all_compare(call: OpCall) -> Cost | None:
    """``allclose``: ``isclose`` (6 FLOPs per element, pointwise.py) then ``all`` (1); ``equal``: a compare
    and ``all`` (2). Both tensors read, one bool written; no gradient."""
    ts = A.tensors(call.args)
    if len(ts) < 2:
        return None
    n = A.numel(A.broadcast(A.shape(ts[0]), A.shape(ts[1])))
    if n is None:
        return None
    dt = A.compute_dtype(call.cdtype, ts[0], ts[1])
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    return Cost(float((7 if call.op == "allclose" else 2) * n), A.total(A.nbytes(ts[0]), A.nbytes(ts[1]), 1), dt)


def _bin_counts(bins: dict | None, dims: int) -> tuple[list | None, list[int]] | None:
    """The bin edges where given as tensors (else None) and the bins per dim, or None."""
    given = A.tensorlist(bins) if A.is_tensor(bins) or (bins or {}).get("type") == "tensorlist" else None
    if given is not None:  # an unknown (None) raises TypeError here: cost() answers None
        counts = [cast(int, A.numel(A.shape(t))) - 1 for t in given]
    else:
        v = A.value(bins, 100)
        counts = list(v) if isinstance(v, list) else [v] * dims
    return (given, counts) if len(counts) == dims and all(isinstance(c, int) and c >= 0 for c in counts) else None


@register("histc", "histogram", "histogramdd")
@binds("self")
def _histogram(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    bins, w = b["bins"], b.get("weight")
    dims = 1 if call.op != "histogramdd" else (sx[-1] if sx else 0)
    got = _bin_counts(bins, dims)
    if got is None:
        return None
    given, counts = got
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    n, cells = prod(sx), prod(counts)
    if call.op == "histc":
        own_range, edges = A.value(b.get("min"), 0) == A.value(b.get("max"), 0), 0
    else:
        own_range, edges = given is None and A.value(b.get("range")) is None, sum(c + 1 for c in counts)
    flops = (3 + (2 if own_range else 0)) * n + (n // max(dims, 1) if A.is_tensor(w) else 0)
    if call.op != "histc" and A.value(b.get("density"), False):
        flops += 2 * cells
    read = A.total(A.nbytes(x), A.nbytes(w) if A.is_tensor(w) else 0,
                   *[A.nbytes(t) for t in given or []])
    return Cost(float(flops), A.total(read, A.sized(cells + edges, dt)), dt)


def _reduced_cost(call: OpCall, ins: Sequence[dict | None], n: int, n_out: int, fwd: float, bwd_per_input: float,
                  odt: str | None = None) -> Cost:
    dt = A.compute_dtype(call.cdtype, *ins)
    if call.direction == "bprop":
        grads = [t for t in ins if A.requires_grad(t) and A.dtype(t) in A.FLOATING]
        if not grads:
            return Cost(0.0, 0, dt)
        return Cost(bwd_per_input * len(grads), A.total(A.sized(n_out, dt), *[A.nbytes(t) for t in ins],
                                                        *[A.nbytes(g) for g in grads]), dt)
    return Cost(fwd, A.total(*[A.nbytes(t) for t in ins], A.sized(n_out, odt or dt)), dt)


@register("renorm")
@binds("self")
def _renorm(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    p, n = A.value(b["p"]), prod(sx)
    if p is None and b["p"].get("type") == "float":
        p = float("inf")  # a float recorded without its value: inf and nan have no JSON number
    if not isinstance(p, (int, float)):
        return None
    per = 3 if p in (1, 2) or p == float("inf") else 4
    return _reduced_cost(call, [x], n, n, float(per * n), 4.0 * n)


@register("trapezoid", "trapz", "cumulative_trapezoid")
@binds("y")
def _trapezoid(call: OpCall, b: Bound, y: A.Arg, sy: list[int], dt: str | None) -> Cost | None:
    x, dim = b.get("x"), A.value(b["dim"], -1)
    if not sy or not isinstance(dim, int):
        return None
    ins = [y, x] if A.is_tensor(x) else [y]
    n = prod(sy)
    along = sy[dim % len(sy)]
    rest = n // along if along else 0
    n_out = rest * max(along - 1, 0) if call.op == "cumulative_trapezoid" else rest
    per = 4 if A.is_tensor(x) else 2
    return _reduced_cost(call, ins, n, n_out, float(per * n), 2.0 * n)


@register("hash_tensor")
@binds("self")
def _hash_tensor(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    dim = A.value(b["dim"])
    dims = [] if dim is None else [dim] if isinstance(dim, int) else dim
    if not isinstance(dims, list):
        return None
    n = prod(sx)
    n_out = 1 if not dims or not sx else prod(s for i, s in enumerate(sx) if i not in {d % len(sx) for d in dims})
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    return _reduced_cost(call, [x], n, n_out, float(n), 0.0, "int64")


@register("segment_reduce", "_segment_reduce")
@binds("data")
def _segment_reduce(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    red, lengths, offsets, axis = A.value(b["reduce"]), b["lengths"], b["offsets"], A.value(b["axis"], 0)
    if not sx or not isinstance(axis, int) or not isinstance(red, str):
        return None
    idx = lengths if A.is_tensor(lengths) else offsets
    si = A.shape(idx)
    segs = si[-1] - (0 if idx is lengths else 1) if si else -1  # offsets: one more than the segments
    if segs < 0:
        return None
    n = prod(sx)
    along = sx[axis % len(sx)]
    n_out = n // along * segs if along else 0
    if call.direction == "bprop":
        return _reduced_cost(call, [x], n, n_out, 0.0, float(n))
    fwd = n + (n_out if red == "mean" else 0)
    return Cost(float(fwd), A.total(A.nbytes(x), A.nbytes(idx), A.sized(n_out, dt)), dt)
