"""Pointwise family: elementwise arithmetic, comparisons and activations (add, sub, mul, div, pow, relu,
gelu, silu, sigmoid, tanh, clamp, where, addcmul, lerp, ...), in-place and operator forms included.

The output has the broadcast shape of the tensor arguments. Per output element an op costs the number
of arithmetic operations in its textbook formula, counting a transcendental function (``exp``,
``log``, ``tanh``, ``erf``, ``sqrt``) as one FLOP, as roofline tools do; comparisons and selections
count one. The numbers are in :data:`TABLE` as ``(forward, backward, backward reads the inputs)``;
``add``/``sub`` with ``alpha != 1`` cost one more, ``gelu(approximate="tanh")`` 9 (backward 15).

Backward rule (stated once, applied to every op here): for each tensor argument that requires grad,
the local derivative times ``dY`` costs ``backward`` FLOPs per output element, plus one add per output
element to reduce ``dY`` over the dimensions that argument was broadcast along. Bytes in backward:
``dY`` read once, the forward inputs read once when the derivative needs them, each gradient written
once. Forward bytes: each tensor argument read once and the output written once (in-place ops read
and write ``self``). Optimizer-direction calls (``add_`` in an optimizer step) cost as forward.

Complex results from two real tensors: ``complex(real, imag)`` interleaves them (0 FLOPs), ``polar(abs,
angle)`` is ``abs·cos(angle) + i·abs·sin(angle)`` (4 FLOPs per element); the output is complex of the
inputs' precision (twice their item size). Backward splits dY's real and imaginary parts (complex: 0
FLOPs; polar: 4 per element per input that needs a gradient), dY read once, each gradient written.
``special.ndtr`` is Φ(x) = ½(1 + erf(x/√2)) (4 FLOPs; backward φ(x)·dY, 3), priced from the table.
"""

from __future__ import annotations

from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register

# name: (forward FLOPs per element, backward FLOPs per element per grad input, backward reads inputs)
TABLE: dict[str, tuple[int, int, bool]] = {
    # arithmetic
    "add": (1, 0, False), "sub": (1, 1, False), "rsub": (1, 1, False), "mul": (1, 1, True),
    "div": (1, 2, True), "true_divide": (1, 2, True), "floor_divide": (2, 0, False),
    "remainder": (4, 1, True), "fmod": (4, 1, True), "pow": (1, 3, True), "float_power": (1, 3, True),
    "neg": (1, 1, False), "negative": (1, 1, False), "abs": (1, 2, True), "reciprocal": (1, 2, True),
    "sqrt": (1, 2, True), "rsqrt": (1, 3, True), "square": (1, 2, True), "exp": (1, 1, True),
    "exp2": (1, 2, True), "expm1": (1, 2, True), "log": (1, 1, True), "log2": (1, 2, True),
    "log10": (1, 2, True), "log1p": (1, 2, True), "sin": (1, 2, True), "cos": (1, 2, True),
    "tan": (1, 3, True), "sinh": (1, 2, True), "cosh": (1, 2, True), "asin": (1, 4, True),
    "acos": (1, 4, True), "atan": (1, 3, True), "atan2": (1, 5, True), "erf": (1, 5, True),
    "erfc": (1, 5, True), "erfinv": (1, 5, True), "hypot": (4, 3, True), "copysign": (1, 1, True),
    "sign": (1, 0, False), "sgn": (1, 0, False), "floor": (1, 0, False), "ceil": (1, 0, False),
    "round": (1, 0, False), "trunc": (1, 0, False), "frac": (1, 0, False),
    "clamp": (2, 1, True), "clip": (2, 1, True), "clamp_min": (1, 1, True), "clamp_max": (1, 1, True),
    "maximum": (1, 1, True), "minimum": (1, 1, True), "fmax": (1, 1, True), "fmin": (1, 1, True),
    "where": (1, 1, True), "lerp": (3, 2, True), "addcmul": (3, 2, True), "addcdiv": (3, 3, True),
    "fma": (2, 1, True),  # prims::fma(a, b, c) = a·b + c: Inductor's decomposition of softmax's backward
    "nan_to_num": (3, 1, True), "tril": (1, 1, False), "triu": (1, 1, False),
    # comparisons and logic (no gradient)
    "eq": (1, 0, False), "ne": (1, 0, False), "lt": (1, 0, False), "le": (1, 0, False),
    "gt": (1, 0, False), "ge": (1, 0, False), "isnan": (1, 0, False), "isinf": (1, 0, False),
    "isfinite": (1, 0, False), "logical_not": (1, 0, False), "logical_and": (1, 0, False),
    "logical_or": (1, 0, False), "logical_xor": (1, 0, False), "bitwise_not": (1, 0, False),
    "bitwise_and": (1, 0, False), "bitwise_or": (1, 0, False), "bitwise_xor": (1, 0, False),
    "bitwise_left_shift": (1, 0, False), "bitwise_right_shift": (1, 0, False),
    "isclose": (6, 0, False),  # |a − b| ≤ atol + rtol·|b|: subtract, two abs, multiply, add, compare
    "isreal": (1, 0, False),
    # activations
    "relu": (1, 1, True), "relu6": (2, 2, True), "leaky_relu": (2, 2, True), "threshold": (1, 1, True),
    "hardtanh": (2, 2, True), "rrelu": (2, 2, True), "prelu": (2, 3, True),
    "gelu": (5, 11, True),  # x·Φ(x): x/√2, erf, +1, ·x, ·½ | dY·(Φ(x) + x·φ(x))
    "silu": (5, 9, True),  # x·σ(x) | dY·σ(x)·(1 + x·(1 − σ(x)))
    "sigmoid": (4, 3, True), "special_expit": (4, 3, True),  # 1/(1+exp(−x)) | dY·y·(1 − y)
    "tanh": (1, 3, True),  # | dY·(1 − y²)
    "elu": (4, 3, True), "selu": (5, 3, True), "celu": (5, 3, True),
    "softplus": (3, 5, True), "softsign": (3, 4, True), "mish": (5, 9, True), "logsigmoid": (4, 5, True),
    "hardsigmoid": (4, 2, True), "hardswish": (5, 4, True), "tanhshrink": (2, 3, True),
    "softshrink": (2, 1, True), "hardshrink": (1, 1, True),
    "special_ndtr": (4, 3, True),  # ½(1 + erf(x/√2)) | dY·exp(−x²/2)/√(2π)
}
# gelu(approximate="tanh"): ½x(1 + tanh(√(2/π)(x + 0.044715x³))) is 9 FLOPs, its derivative 15.
_GELU_TANH = (9, 15, True)
_BOOL_OUT = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_not", "logical_and",
             "logical_or", "logical_xor", "isclose", "isreal"}
_FLOAT_OUT = {"div", "true_divide", "sqrt", "rsqrt", "exp", "log", "sigmoid", "tanh", "erf"}


def out_dtype(op: str, tensors: list[dict], cdtype: str | None) -> str | None:
    if op in _BOOL_OUT:
        return "bool"
    dt = A.compute_dtype(cdtype, *tensors)
    if dt is not None and dt not in A.FLOATING and op in _FLOAT_OUT:
        return "float32"
    return dt


def elementwise_cost(call: OpCall, ts: list[dict], per: tuple[int, int, bool],
                     out_shape: list[int] | None = None) -> Cost | None:
    """Cost of an elementwise op over tensors ``ts`` (the output has their broadcast shape, unless given)."""
    if not ts:
        return None
    shapes = [A.shape(t) for t in ts]
    out = out_shape if out_shape is not None else A.broadcast(*shapes)
    if out is None:
        return None
    n = prod(out)
    fwd, bwd, reads = per
    dt = A.compute_dtype(call.cdtype, *ts)
    odt = out_dtype(call.op, ts, call.cdtype)
    in_bytes = A.total(*[A.nbytes(t) for t in ts])
    if call.direction == "bprop":
        grads = [t for t in ts if A.requires_grad(t) and A.dtype(t) in A.FLOATING | {None}]
        flops = 0.0
        byts: float | None = A.sized(n, odt) if grads else 0
        for g in grads:
            # an unknown (None) raises TypeError here: cost() answers None
            flops += bwd * n + (n if cast(int, A.numel(A.shape(g))) < n else 0)
            byts = A.total(byts, A.nbytes(g))
        if reads and grads:
            byts = A.total(byts, in_bytes)
        return Cost(flops, byts, dt)
    return Cost(float(fwd * n), A.total(in_bytes, A.sized(n, odt)), dt)


@register(*TABLE)
def _pointwise(call: OpCall) -> Cost | None:
    per = TABLE[call.op]
    if call.op in ("add", "sub", "rsub"):  # add(a, b, alpha=2) is a + 2·b: one multiply more
        alpha = A.bind(call.args, ("input", "other", "alpha")).get("alpha")
        if A.value(alpha, 1) != 1:
            per = (per[0] + 1, per[1], per[2])
    if call.op == "gelu":
        b = A.bind(call.args, ("input", "approximate"))
        if A.value(b.get("approximate"), "none") == "tanh":
            per = _GELU_TANH
    return elementwise_cost(call, A.tensors(call.args), per)


@register("outer", "ger")
def _outer(call: OpCall) -> Cost | None:
    """``outer(a[M], b[N])``: one multiply per element of the ``[M, N]`` result; backward
    ``da = dY·b`` and ``db = dYᵀ·a`` are one multiply-add per element each."""
    ts = A.tensors(call.args)[:2]
    if len(ts) != 2:
        return None
    sa, sb = A.shape(ts[0]), A.shape(ts[1])
    if sa is None or sb is None or len(sa) != 1 or len(sb) != 1:
        return None
    return elementwise_cost(call, ts, (1, 1, True), out_shape=[sa[0], sb[0]])  # + the reduction add


@register("glu")
@binds("self")
def _glu(call: OpCall, b: Bound, x: A.Arg, shp: list[int], _: str | None) -> Cost | None:
    """``glu(x, dim)``: ``a·σ(b)`` of the two halves of ``x`` along ``dim``: sigmoid (4, as above) and a
    multiply per output element; backward ``dY·σ(b)`` and ``dY·a·σ(b)·(1 − σ(b))``: 5 per output element.
    Bytes: ``x`` read, the half-size output written; backward dY and ``x`` read, dX written."""
    dim = A.value(b["dim"], -1)
    if not shp or not isinstance(dim, int) or shp[dim] % 2:
        return None
    n = prod(shp)
    dt = A.compute_dtype(call.cdtype, x)
    return one_input(call, x, dt, (5.0 * n / 2, A.sized(n + n // 2, dt)), (5.0 * n / 2, A.sized(n // 2 + 2 * n, dt)))


_COMPLEX = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}


@register("complex", "polar")
def _complex(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)[:2]
    if len(ts) != 2:
        return None
    out = A.broadcast(A.shape(ts[0]), A.shape(ts[1]))
    dt = A.promote([A.dtype(ts[0]), A.dtype(ts[1])])
    if out is None or dt not in _COMPLEX:
        return None
    n, per = prod(out), (0 if call.op == "complex" else 4)
    if call.direction == "bprop":
        grads = [t for t in ts if A.requires_grad(t)]
        if not grads:
            return Cost(0.0, 0, dt)
        return Cost(float(per * n * len(grads)), A.total(A.sized(n, _COMPLEX[dt]), *[A.nbytes(g) for g in grads]), dt)
    return Cost(float(per * n), A.total(A.nbytes(ts[0]), A.nbytes(ts[1]), A.sized(n, _COMPLEX[dt])), dt)
