"""Sorting family: sort, argsort, msort, topk, kthvalue, median/nanmedian, mode, quantile/nanquantile,
and the searches searchsorted, bucketize and isin.

FLOPs 0: these compare and move data, and how many comparisons they make depends on the algorithm
(a radix sort makes none), so none is counted, as FlopCounterMode and fvcore count none. The one
exception is quantile's interpolation between the two neighbouring order statistics: 3 FLOPs per
output element (a subtract, a multiply and an add).

Bytes: the input read once and every output written once: values in the input's dtype, indices as
int64 (``sort``, ``topk``, ``kthvalue``, ``median``/``mode`` along a dim return both, and ``argsort``
and ``msort`` run ``sort``, which writes both; a whole-tensor ``median`` writes one value). A reduction along ``dim`` keeps
``size/size[dim]`` slices (``topk``: ``k`` per slice). The searches read both tensors and write one
int64 (``isin``: bool) per element searched for. Backward (values' gradient scattered back by the
indices): dY and the indices read, dX written; the searches have no gradient.
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register

# the ops writing values and indices (argsort and msort run sort), along a dim or the whole tensor
_SELECT = ("sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode")


def _slices(shp: list[int], dim) -> tuple[int, int] | None:
    """(number of slices along ``dim``, the slice length) of a tensor of shape ``shp``."""
    if not shp:
        return 1, 1
    if not isinstance(dim, int) or isinstance(dim, bool) or not -len(shp) <= dim < len(shp):
        return None
    along = shp[dim]
    return (prod(shp) // along if along else 0), along


@register(*_SELECT)
@binds("self")
def _select(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    n = prod(shp)
    idx = True
    dim_arg = b.get("dim")
    if call.op in ("median", "nanmedian") and dim_arg is None:  # the whole tensor: one value
        n_out, idx = 1, False
    elif call.op in ("sort", "argsort", "msort"):
        n_out = n
    else:
        s = _slices(shp, A.value(dim_arg, -1))
        if s is None:
            return None
        k = A.value(b.get("k"), 1) if call.op == "topk" else 1
        if not isinstance(k, int) or k < 0:
            return None
        n_out = s[0] * k
    out = A.total(A.sized(n_out, dt), A.sized(n_out, "int64") if idx else 0)
    return one_input(call, x, dt, (0.0, A.total(A.nbytes(x), out)), (0.0, A.total(out, A.nbytes(x))))


@register("quantile", "nanquantile")
@binds("self")
def _quantile(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    q = b.get("q")
    nq = A.numel(A.shape(q)) if A.is_tensor(q) else 1
    dim = A.value(b.get("dim"))
    s = (1, 1) if dim is None else _slices(shp, dim)  # no dim: one value per q
    if s is None:
        return None
    n_out = (nq or 1) * s[0]
    read = A.total(A.nbytes(x), A.nbytes(q) if A.is_tensor(q) else 0)
    return one_input(call, x, dt, (float(3 * n_out), A.total(read, A.sized(n_out, dt))),
                     (float(3 * n_out), A.total(A.sized(n_out, dt), A.nbytes(x))))


# op: the schema names of (the table searched, the keys looked up in it)
_SEARCHED = {"searchsorted": ("sorted_sequence", "self"), "bucketize": ("boundaries", "self"),
             "isin": ("test_elements", "elements")}


@register(*_SEARCHED)
@binds()
def _search(call: OpCall, b: Bound) -> Cost | None:
    table, keys = (b.get(name) for name in _SEARCHED[call.op])
    n_keys = A.numel(A.shape(keys)) if A.is_tensor(keys) else 1
    if n_keys is None or (A.is_tensor(table) and A.shape(table) is None):
        return None
    out_dt = "bool" if call.op == "isin" else "int32" if A.value(b.get("out_int32"), False) else "int64"
    dt = A.dtype(keys) or A.dtype(table)
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    reads = A.total(A.nbytes(keys) if A.is_tensor(keys) else 0, A.nbytes(table) if A.is_tensor(table) else 0)
    return Cost(0.0, A.total(reads, A.sized(n_keys, out_dt)), dt)
