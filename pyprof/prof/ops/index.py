"""Indexing family: index (advanced indexing, ``x[idx]``), index_select, gather, scatter (and
scatter_add, scatter_reduce), index_add, index_copy, index_fill, index_put, masked_fill, take.

Moves data, little arithmetic. Forward bytes: the index tensors read, the elements selected read, the
result written. In-place and out-of-place forms share one name after ``canonical()`` (``scatter_`` ->
``scatter``), so scatter-like bytes are the in-place form's; the out-of-place form also copies the input
(one more read and write of it), which is not counted. FLOPs: 0 for pure selection and copies; one add per source element for the
accumulating forms (scatter_add, scatter with ``reduce``, index_add, index_put with accumulate); one
select per element for masked_fill. Backward: a gather-like op's gradient is a scatter-add of dY into a
zeroed input-sized gradient (one add per dY element; dY and indices read, the gradient written in full);
a scatter-like op's gradient gathers dY for the source (read dY at the indices, write the source's
gradient) and passes dY through for the input.

Out-of-place ``put(x, index, source)`` and ``index_reduce(x, dim, index, source, reduce)`` also copy
``x`` (read and written once): each tensor is counted once, as torch's dispatch sees them. FLOPs: one
reduction per source element (``put`` with ``accumulate``, every ``index_reduce``), plus one divide per
element of ``x`` for ``index_reduce(..., "mean")``. Their backward passes dY to ``x`` (read, written;
``index_reduce``: one FLOP per element, the mask or scale of the selected places) and gathers dY at the
indices for ``source``.

``nonzero_static(x, size)`` compares each element with 0 (1 FLOP) and writes ``size`` rows of int64
coordinates; out-of-place ``masked_scatter(x, mask, source)`` copies ``x`` and places ``source``'s
elements where ``mask`` holds (each tensor counted once: how many of ``source``'s elements are read is
the mask's count, not in the record; the in-place form, which writes only those, has no model).
``nonzero``, ``argwhere``, ``masked_select``: their result's size is the count of the data's nonzeros,
not in the record: no model.

``x[i]`` (``Tensor.__getitem__``) is priced only when its key is one integer index tensor; basic slicing
returns a view (no kernel) and a boolean mask's result size is data dependent: both give ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, out_of_place, register


def _gather_like(call: OpCall, x: dict | None, idx_tensors: Sequence[dict | None], out_shape: list[int] | None) -> Cost | None:
    sx = A.shape(x)
    if sx is None or out_shape is None:
        return None
    dt = A.dtype(x)
    n_out = prod(out_shape)
    idx_b = A.total(*[A.nbytes(i) for i in idx_tensors])
    return one_input(call, x, dt, (0.0, A.total(idx_b, A.sized(2 * n_out, dt))),
                     (float(n_out), A.total(A.sized(n_out, dt), idx_b, A.sized(prod(sx), dt))))


@register("index_select")
@binds("self")
def _index_select(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    idx, dim = b["index"], A.value(b["dim"])
    si = A.shape(idx)
    if si is None or not isinstance(dim, int):
        return None
    out = list(sx)
    if sx:  # a 0-d tensor indexes as one element along dim 0: a 0-d result
        out[dim % len(sx)] = prod(si)
    return _gather_like(call, x, [idx], out)


@register("gather", "take_along_dim", "take")
@binds()
def _gather(call: OpCall, b: Bound) -> Cost | None:
    idx = b.get("index") or b.get("indices")
    return _gather_like(call, b["self"], [idx], A.shape(idx))


@register("index")
@binds("self")
def _index(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    """``aten::index(self, indices)``: leading integer index tensors, broadcast together."""
    idx = A.tensorlist(b["indices"])
    if not idx or any(A.dtype(i) in ("bool", "uint8") for i in idx):
        return None
    ib = A.broadcast(*[A.shape(i) for i in idx])
    if ib is None or len(idx) > len(sx):
        return None
    return _gather_like(call, x, idx, ib + sx[len(idx):])


@register("getitem")
def _getitem(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("self", "key"))
    x, key = b.get("self"), b.get("key")
    sx = A.shape(x)
    if sx is None or not A.is_tensor(key) or A.dtype(key) not in ("int64", "int32"):
        return None
    # an unknown (None) raises TypeError here: cost() answers None
    return _gather_like(call, x, [key], cast("list[int]", A.shape(key)) + sx[1:])


def _scatter_like(call: OpCall, x: dict | None, idx: Sequence[dict | None], src: dict | None, n_src: int | None,
                  accumulate: bool) -> Cost | None:
    """``n_src`` elements written into ``x`` at ``idx`` (from ``src`` or a scalar)."""
    sx = A.shape(x)
    if sx is None or n_src is None:
        return None
    dt = A.dtype(x)
    n = prod(sx)
    idx_b = A.total(*[A.nbytes(i) for i in idx])
    src_b = A.sized(n_src, dt) if A.is_tensor(src) else 0
    if call.direction == "bprop":
        dx = A.sized(2 * n, dt) if A.requires_grad(x) else 0  # dY to the input, the overwritten places zeroed
        dsrc = [idx_b, A.sized(2 * n_src, dt)] if A.requires_grad(src) else []  # dY gathered at the indices
        return Cost(0.0, A.total(dx, *dsrc), dt)
    return Cost(float(n_src if accumulate else 0), A.total(idx_b, src_b, A.sized(n_src, dt)), dt)


@register("scatter", "scatter_add", "scatter_reduce")
@binds()
def _scatter(call: OpCall, b: Bound) -> Cost | None:
    idx = b["index"]
    if not A.is_tensor(idx):
        return None
    acc = call.op != "scatter" or A.value(b.get("reduce")) is not None
    return _scatter_like(call, b["self"], [idx], b.get("src"), A.numel(A.shape(idx)), acc)


@register("index_add", "index_copy", "index_fill")
@binds("self")
def _index_add(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    idx, dim = b["index"], A.value(b["dim"])
    src = b.get("source", b.get("value"))  # index_fill's value: a tensor counts as a source
    si = A.shape(idx)
    if si is None or not isinstance(dim, int):
        return None
    rows = list(sx) or [1]  # a 0-d tensor: one element along dim 0
    rows[dim % len(rows)] = prod(si)
    return _scatter_like(call, x, [idx], src, prod(rows), call.op == "index_add")


@register("index_put")
def _index_put(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "indices", "values", "accumulate"))
    x, vals = b.get("input") or b.get("self"), b.get("values")
    idx = A.tensorlist(b.get("indices")) or []
    if not A.is_tensor(vals) or any(A.dtype(i) == "bool" for i in idx):
        return None
    return _scatter_like(call, x, idx, vals, A.numel(A.shape(vals)), bool(A.value(b.get("accumulate"), False)))


@register("masked_fill")
@binds()
def _masked_fill(call: OpCall, b: Bound) -> Cost | None:
    x, mask = b["self"], b["mask"]
    out = A.broadcast(A.shape(x), A.shape(mask))
    if out is None:
        return None
    dt, n = A.dtype(x), prod(out)
    return one_input(call, x, dt, (float(n), A.total(A.nbytes(x), A.nbytes(mask), A.sized(n, dt))),
                     (float(n), A.total(A.sized(2 * n, dt), A.nbytes(mask))))


@register("put", "index_reduce")
@binds("self")
def _put(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    idx, src = b["index"], b["source"]
    n, n_src = prod(sx), A.numel(A.shape(src))
    if n_src is None or not A.is_tensor(idx):
        return None
    red = A.value(b.get("reduce"))
    if call.op == "index_reduce" and red not in ("prod", "mean", "amax", "amin"):
        return None
    acc = call.op == "index_reduce" or bool(A.value(b.get("accumulate"), False))
    if call.direction == "bprop":
        gx, gs = A.requires_grad(x), A.requires_grad(src)
        flops = float(n * gx + n_src * gs) if call.op == "index_reduce" else 0.0
        byts = A.total(A.sized(2 * n, dt) if gx else 0, *([A.nbytes(idx), A.sized(2 * n_src, dt)] if gs else []))
        return Cost(flops, byts, dt)
    flops = float((n_src if acc else 0) + (n if red == "mean" else 0))
    if out_of_place(call):  # it copies self first
        return Cost(flops, A.total(A.sized(2 * n, dt), A.nbytes(idx), A.nbytes(src)), dt)
    written = n if call.op == "index_reduce" and red == "mean" else n_src  # mean rescales every element
    return Cost(flops, A.total(A.nbytes(idx), A.nbytes(src), A.sized(written, dt)), dt)


@register("nonzero_static")
@binds("self")
def _nonzero_static(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    size = A.value(b["size"])
    if not isinstance(size, int) or size < 0:
        return None
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    return Cost(float(prod(sx)), A.total(A.nbytes(x), A.sized(size * len(sx), "int64")), dt)


@register("masked_scatter")
@binds("self")
def _masked_scatter(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    mask, src = b["mask"], b["source"]
    out = A.broadcast(sx, A.shape(mask))
    if out is None or not A.is_tensor(src) or not out_of_place(call):
        return None
    n = prod(out)
    if call.direction == "bprop":
        dx = [A.nbytes(mask), A.sized(2 * n, dt)] if A.requires_grad(x) else []  # the scattered places zeroed
        dsrc = [A.nbytes(mask), A.sized(n, dt), A.nbytes(src)] if A.requires_grad(src) else []  # masked dY
        return Cost(0.0, A.total(*dx, *dsrc), dt)
    return Cost(0.0, A.total(A.nbytes(x), A.nbytes(mask), A.nbytes(src), A.sized(n, dt)), dt)
