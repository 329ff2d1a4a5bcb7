"""View-copy family: the ``*_copy`` forms of views (``t_copy``, ``expand_copy``, ``narrow_copy``, ...)
and the scatters that write a view's elements into a copy of a tensor (``slice_scatter``,
``select_scatter``, ``diagonal_scatter``, ``as_strided_scatter``).

No arithmetic: FLOPs 0. A ``*_copy`` op materialises the view its name drops the suffix of: the
viewed elements read once (the input, whole, for an expand: each element is read once and written
many times) and the result written once, each in the input's dtype; the result's element count is the
view's (``expand_copy``: the expanded size; ``narrow_copy``: ``length`` of the narrowed dim;
``diagonal_copy``: the diagonal's length; ``unfold_copy``: the windows; ``as_strided_copy``: ``size``;
the rest keep the input's count). A ``*_scatter`` op reads ``self`` and ``src`` and writes a result of
``self``'s shape. Backward: the gradient is a view of dY copied (dY's viewed part read, dX written);
``expand_copy``'s sums the broadcast copies (one add per dY element); a scatter's splits dY into the
gradient of ``self`` (dY with the view zeroed: dY read, written) and of ``src`` (the view's part of dY).
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register

# views whose copy keeps the element count of the input
_SAME = ("t", "transpose", "permute", "squeeze", "unsqueeze", "view", "alias", "unbind", "split_with_sizes",
         "split", "_reshape_alias", "detach", "values", "indices", "view_as_real", "view_as_complex",
         "_neg_view", "_conj", "ccol_indices", "row_indices", "col_indices", "crow_indices", "_indices",
         "_values", "lift_fresh")


def _int(b: dict, name: str, default: int | None = None) -> int | None:
    v = A.value(b.get(name), default)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _expand(b: dict, shp: list[int], n: int) -> int | None:
    size = A.value(b.get("size"))
    if not isinstance(size, list) or len(size) < len(shp):
        return None
    lead = len(size) - len(shp)
    out = [s if s != -1 else shp[i - lead] for i, s in enumerate(size)]
    return prod(out) if all(isinstance(d, int) and d >= 0 for d in out) else None


def _narrow(b: dict, shp: list[int], n: int) -> int | None:
    dim, length = _int(b, "dim"), _int(b, "length")
    if dim is None or length is None or not shp:
        return None
    return n // shp[dim] * length if shp[dim] else 0


def _diagonal(b: dict, shp: list[int], n: int) -> int | None:
    off, d1, d2 = _int(b, "offset", 0), _int(b, "dim1", 0), _int(b, "dim2", 1)
    if off is None or d1 is None or d2 is None or len(shp) < 2:
        return None
    a, c = shp[d1], shp[d2]
    diag = max(0, min(a, c - off) if off >= 0 else min(a + off, c))
    return prod(s for i, s in enumerate(shp) if i not in (d1 % len(shp), d2 % len(shp))) * diag


def _unfold(b: dict, shp: list[int], n: int) -> int | None:
    dim, size, step = _int(b, "dimension"), _int(b, "size"), _int(b, "step")
    if dim is None or size is None or step is None or step <= 0:
        return None
    along = shp[dim] if shp else 1
    windows = (along - size) // step + 1
    return (n // along if along else 0) * windows * size if windows > 0 else 0


def _as_strided(b: dict, shp: list[int], n: int) -> int | None:
    size = A.value(b.get("size"))
    return prod(size) if isinstance(size, list) and all(isinstance(d, int) for d in size) else None


# views whose copy's element count is not the input's: (args, the input's shape, its elements) -> the view's
_SHAPED = {"expand": _expand, "narrow": _narrow, "diagonal": _diagonal, "unfold": _unfold, "as_strided": _as_strided}


def _out_numel(op: str, b: dict, shp: list[int]) -> int | None:
    """Elements of the view ``op`` (``narrow``, ``expand``, ...) of a tensor of shape ``shp``."""
    if op in _SAME:
        return prod(shp)
    return _SHAPED[op](b, shp, prod(shp)) if op in _SHAPED else None


@register(*(v + "_copy" for v in (*_SAME, *_SHAPED)))
@binds("self")
def _view_copy(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    view = call.op[: -len("_copy")]
    n_out = _out_numel(view, b, shp)
    if n_out is None:
        return None
    dt = A.dtype(x)
    n_in = prod(shp)
    read = n_in if view == "expand" else min(n_in, n_out)
    adds = float(n_out) if view == "expand" and n_out > n_in else 0.0  # backward sums dY over the copies
    return one_input(call, x, dt, (0.0, A.sized(read + n_out, dt)), (adds, A.sized(n_out + n_in, dt)))


@register("slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter")
@binds()
def _scatter(call: OpCall, b: Bound) -> Cost | None:
    x, src = b.get("self"), b.get("src")
    nx, ns = A.numel(A.shape(x)), A.numel(A.shape(src))
    if nx is None or ns is None:
        return None
    dt = A.dtype(x)
    if call.direction == "bprop":
        n = (nx if A.requires_grad(x) else 0) * 2 + (2 * ns if A.requires_grad(src) else 0)
        return Cost(0.0, A.sized(n, dt), dt)
    return Cost(0.0, A.total(A.nbytes(x), A.nbytes(src), A.sized(nx, dt)), dt)
