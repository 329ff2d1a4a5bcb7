"""Fill family: fill_, zero_, zeros/ones/full, their ``_like`` and ``new_`` forms, and arange/linspace.
``empty``/``empty_like``/``new_empty`` allocate without launching anything: 0 and 0.

No arithmetic: FLOPs 0. Bytes: the result written once (``numel · itemsize``). ``zeros(size)`` without
a ``dtype`` argument is float32 (PyTorch's default dtype); ``arange`` of integers is int64 (of floats,
float32) with ``ceil((end − start) / step)`` elements; ``linspace(start, end, steps)`` has ``steps``. Backward: a filled tensor's gradient w.r.t.
its old values is zero and launches nothing: 0 and 0.

Tensors from Python values: ``scalar_tensor(s)`` writes one element (float32 unless ``dtype``);
``eye(n, m)`` writes ``n·m``; ``logspace(start, end, steps, base)`` writes ``steps`` (2 FLOPs each: the
exponent, then the power); ``torch.tensor(data)`` writes one element per number of ``data`` (a nested list counted leaf by leaf;
int64 for integers, float32 for floats, bool for bools, unless ``dtype``), or copies a tensor ``data``
(read and written); ``item()`` reads one element of its tensor and writes no tensor.
"""

from __future__ import annotations

from math import ceil, prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, register


def _written(call: OpCall, n: int | None, dt: str | None) -> Cost | None:
    if n is None:
        return None
    return Cost(0.0, 0 if call.direction == "bprop" else A.sized(n, dt), dt)


@register("fill", "zero", "zeros_like", "ones_like", "full_like", "empty_like", "new_empty")
def _fill_like(call: OpCall) -> Cost | None:
    x = A.bind(call.args, ("input",)).get("input")
    if not A.is_tensor(x):
        return None
    if call.op in ("empty_like", "new_empty"):  # allocates, launches nothing
        return Cost(0.0, 0, A.dtype(x))
    return _written(call, A.numel(A.shape(x)), A.dtype_kwarg(call.args, A.dtype(x)))


@register("zeros", "ones", "full", "new_zeros", "new_ones", "new_full")
@binds()
def _fill_new(call: OpCall, b: Bound) -> Cost | None:
    """Read by schema name: ``size`` (a Python call's ``zeros(2, 3)`` is bound as ``size=[2, 3]``),
    ``dtype``, ``fill_value``; ``new_*`` take ``self``'s dtype by default."""
    size = A.value(b.get("size"))
    dims = [size] if isinstance(size, int) and not isinstance(size, bool) else size
    if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        return None
    new = call.op.startswith("new_")
    base = A.dtype(b.get("self")) if new else "float32"
    if call.op == "full" and b.get("fill_value", {}).get("type") in ("int", "bool"):
        base = "int64" if b["fill_value"]["type"] == "int" else "bool"  # full(size, 3) is an integer tensor
    return _written(call, prod(dims), A.out_dtype(b, base))


@register("empty", "empty_strided", "new_empty_strided", "empty_permuted", "resize", "resize_as")
def _empty(call: OpCall) -> Cost | None:
    """Allocates (``resize_``/``resize_as_``: reallocates, the old contents not copied), launches
    nothing: 0 and 0."""
    return Cost(0.0, 0, A.dtype_kwarg(call.args, "float32"))


@register("arange")
def _arange(call: OpCall) -> Cost | None:
    nums = [A.value(a) for a in call.args if a.get("type") in ("int", "float") and
            a.get("name") in ("", "start", "end", "step")]
    if not 1 <= len(nums) <= 3:
        return None
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) == 3 else 1)
    if step == 0:
        return None
    ints = all(isinstance(v, int) for v in nums)
    n = max(0, -(-(end - start) // step) if ints else ceil((end - start) / step))
    base = "int64" if ints else "float32"
    return _written(call, n, A.dtype_kwarg(call.args, base))


@register("linspace")
@binds()
def _linspace(call: OpCall, b: Bound) -> Cost | None:
    steps = A.value(b["steps"])
    if not isinstance(steps, int) or steps < 0:
        return None
    return _written(call, steps, A.dtype_kwarg(call.args, "float32"))


def _leaves(v) -> tuple[int, str] | None:
    """(number of scalars, their default dtype) of a Python value, None if it is not numbers."""
    kind = {bool: "bool", int: "int64", float: "float32"}.get(type(v))
    if kind is not None:
        return 1, kind
    parts = [_leaves(x) for x in v] if isinstance(v, list) else [None]
    if any(p is None for p in parts):
        return None
    kinds = {p[1] for p in parts if p}
    return sum(p[0] for p in parts if p), next((k for k in ("float32", "int64", "bool") if k in kinds), "float32")


@register("tensor", "scalar_tensor")
def _from_python(call: OpCall) -> Cost | None:
    data = call.args[0] if call.args else None
    if data is None:
        return None
    if call.direction == "bprop":
        return Cost(0.0, 0, A.dtype_kwarg(call.args, A.dtype(data)))
    if A.is_tensor(data):  # torch.tensor(t): a copy
        n = A.numel(A.shape(data))
        dt = A.dtype_kwarg(call.args, A.dtype(data))
        return Cost(0.0, A.total(A.nbytes(data), A.sized(n, dt)), dt)
    if not A.known(data):
        return None
    kind = cast(str, data.get("type"))
    # a number the marker could not write (inf, nan: JSON has neither) is still one number
    leaves = {"int": (1, "int64"), "float": (1, "float32"), "bool": (1, "bool")}.get(kind) or _leaves(A.value(data))
    if leaves is None:
        return None
    n, base = leaves
    dt = A.dtype_kwarg(call.args, "float32" if call.op == "scalar_tensor" else base)
    return _written(call, n, dt)


@register("item")
def _item(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    return _written(call, 1, A.dtype(ts[0])) if ts else None


@register("eye")
@binds()
def _eye(call: OpCall, b: Bound) -> Cost | None:
    n = A.value(b.get("n"))
    m = A.value(b.get("m"), n)
    if not isinstance(n, int) or not isinstance(m, int) or n < 0 or m < 0:
        return None
    return _written(call, n * m, A.out_dtype(b, "float32"))


@register("logspace")
@binds()
def _logspace(call: OpCall, b: Bound) -> Cost | None:
    steps = A.value(b.get("steps"))
    if not isinstance(steps, int) or steps < 0:
        return None
    dt = A.out_dtype(b, "float32")
    return Cost(0.0, 0, dt) if call.direction == "bprop" else Cost(2.0 * steps, A.sized(steps, dt), dt)
