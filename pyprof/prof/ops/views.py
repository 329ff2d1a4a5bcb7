"""View family: ops that return a view of their input (view, transpose, permute, expand, squeeze,
split, select, narrow, ...) and reshape/flatten, which return a view when they can.

A view launches no kernel: FLOPs 0 and bytes 0, forward and backward (the gradient is a view of dY
too). These are known zeros, so a view is never counted as an op without a model. ``reshape``,
``flatten`` and ``ravel`` copy when the input's strides do not allow a view: their cost is then that
copy (input read, result written). A contiguous input never copies (0); otherwise the copy is priced,
because a kernel attributed to the op means it did copy (a reshape that did not launches nothing and is
never on a kernel row). Same for their backward (reshaping dY).
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register

PURE_VIEWS = ("view", "view_as", "_unsafe_view", "_reshape_alias", "as_strided", "transpose", "t", "permute",
              "expand", "expand_as", "squeeze", "unsqueeze", "unflatten", "split", "split_with_sizes",
              "chunk", "unbind", "select", "narrow", "slice", "detach", "alias", "movedim", "swapaxes",
              "unfold", "diagonal", "real", "imag", "view_as_real", "view_as_complex",
              # views whose schema does not say so: the unsafe forms (no autograd view tracking), and
              # composites of view/reshape/expand (a 0-d input's atleast_1d is a view too)
              "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk", "atleast_1d", "atleast_2d",
              "atleast_3d", "broadcast_tensors", "meshgrid")


@register(*PURE_VIEWS)
def view_cost(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)  # the first tensor, however named (torch.split's is ``tensor``)
    if not ts:
        return None
    return Cost(0.0, 0, A.dtype(ts[0]))


@register("reshape", "flatten", "ravel", "reshape_as")
def _reshape(call: OpCall) -> Cost | None:
    x = A.bind(call.args, ("input",)).get("input")  # by position: x.view(2, 3)'s sizes are varargs
    shp, dt = A.shape(x), A.dtype(x)
    if x is None or shp is None:
        return None
    return Cost(0.0, 0 if x.get("contig") is True else A.sized(2 * prod(shp), dt), dt)
