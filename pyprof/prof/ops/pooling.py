"""Pooling family: max/avg pooling 1d/2d/3d (``max_pool2d_with_indices`` included), adaptive avg/max
pooling, and lp pooling.

Output size per spatial dim: ``floor((in + 2·pad − dil·(k − 1) − 1) / stride) + 1`` (``ceil`` with
``ceil_mode``, the last window kept only if it starts inside the padded input); ``stride`` defaults to
the kernel size. Adaptive pooling uses PyTorch's windows ``[floor(i·in/out), ceil((i+1)·in/out))``.

FLOPs: one compare (max) or add (avg) per window element, ``prod(out)·prod(k)`` per channel, plus one
divide per output for avg (lp pooling: pow, add per element and a root per output). Backward: max
scatters dY to the recorded argmax, one add per output (windows may overlap); avg spreads dY over each
window, one add per window element (plus the divide per output). Bytes: input read, output written
(max_pool also writes int64 indices when it records them); backward reads dY (and indices), writes dX.

``max_pool{1,2,3}d_with_indices_backward`` (called as an op): one add per dY element, dY and the
indices read, dX written; its own backward gathers ddX at the indices. ``fractional_max_pool{2,3}d``: windows of ``kernel_size`` at pseudo-random
offsets, ``output_size`` (or ``floor(in·output_ratio)``) per dim; a compare per window element; its
aten op always writes the int64 indices and reads its random samples (``N·C·nd`` of the input's dtype,
drawn first, written once, where the call passes none); backward as max pooling. ``max_unpool{1,2,3}d``: the inverse scatter: the output (``output_size``, or
``(in − 1)·stride − 2·pad + kernel``) zero-filled and each input element written at its index, no
arithmetic; input, indices read and the output written once; backward gathers dY at the indices
(indices read, dX read and written).
"""

from __future__ import annotations

from math import ceil, floor, prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, one_input, register

_MAX = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_AVG1 = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")
_AVG = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
_LP = ("input", "norm_type", "kernel_size", "stride", "ceil_mode")
# name: (params, spatial dims, kind)
SIGNATURES: dict[str, tuple[tuple[str, ...], int, str]] = {
    **{f"max_pool{nd}d{suffix}": (_MAX, nd, "max") for nd in (1, 2, 3) for suffix in ("", "_with_indices")},
    **{f"avg_pool{nd}d": (_AVG1 if nd == 1 else _AVG, nd, "avg") for nd in (1, 2, 3)},
    **{f"lp_pool{nd}d": (_LP, nd, "lp") for nd in (1, 2, 3)},
    **{f"{pre}adaptive_avg_pool{nd}d": (("input", "output_size"), nd, "aavg") for pre, nd in
       (("", 1), ("", 2), ("", 3), ("_", 2), ("_", 3))},
    **{f"adaptive_max_pool{nd}d": (("input", "output_size", "return_indices"), nd, "amax") for nd in (1, 2, 3)},
}


def pool_out(i: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = i + 2 * p - d * (k - 1) - 1
    o = (ceil if ceil_mode else floor)(span / s) + 1
    if ceil_mode and (o - 1) * s >= i + p:  # the last window must start inside the input or left padding
        o -= 1
    return o


def adaptive_window_total(i: int, o: int) -> int:
    """Sum of the adaptive window lengths along one dim (each input visited about once)."""
    return sum(ceil((j + 1) * i / o) - floor(j * i / o) for j in range(o))


def _adaptive(b: dict, ins: list[int], nd: int) -> tuple[list[int], int] | None:
    """Adaptive pooling's output dims and window elements summed over its outputs, or None."""
    osz = A.known_value(b.get("output_size"))
    osz = [osz] * nd if isinstance(osz, int) else osz
    if not isinstance(osz, list) or len(osz) != nd:
        return None
    out = [i if o is None else o for i, o in zip(ins, osz, strict=True)]
    if not all(isinstance(o, int) and o > 0 for o in out):
        return None
    return out, prod(adaptive_window_total(i, o) for i, o in zip(ins, out, strict=True))


def _windowed(b: dict, ins: list[int], nd: int, kind: str) -> tuple[list[int], int] | None:
    """Max, avg or lp pooling's output dims and window elements summed over its outputs, or None."""
    k = A.ints(b.get("kernel_size"), nd, None, minimum=1)
    sv = b.get("stride")
    stride = k if A.value(sv) in (None, []) and A.known(sv) else A.ints(sv, nd, None, minimum=1)
    pad = A.ints(b.get("padding"), nd, 0)
    dil = A.ints(b.get("dilation"), nd, 1, minimum=1) if kind == "max" else [1] * nd
    cm = b.get("ceil_mode")
    if k is None or stride is None or pad is None or dil is None or not A.known(cm):
        return None
    out = [pool_out(i, kk, s, p, d, bool(A.value(cm, False)))
           for i, kk, s, p, d in zip(ins, k, stride, pad, dil, strict=True)]
    return None if any(o <= 0 for o in out) else (out, prod(out) * prod(k))


@register(*SIGNATURES)
def _pool(call: OpCall) -> Cost | None:
    params, nd, kind = SIGNATURES[call.op]
    b = A.bind(call.args, params)
    x = b.get("input") or b.get("self")
    sx = A.shape(x)
    if sx is None or len(sx) < nd + 1:
        return None
    lead, ins = sx[:-nd], sx[-nd:]
    shape = _adaptive(b, ins, nd) if kind in ("aavg", "amax") else _windowed(b, ins, nd, kind)
    if shape is None:
        return None
    out_sp, k_total = shape[0], prod(lead) * shape[1]
    n_in, n_out = prod(sx), prod(lead) * prod(out_sp)
    dt = A.compute_dtype(call.cdtype, x)
    per_out = {"max": 0, "amax": 0, "avg": 1, "aavg": 1, "lp": 1}[kind]
    idx = n_out if kind in ("max", "amax") and (call.op.endswith("_with_indices") or
                                               A.value(b.get("return_indices"), False) or
                                               call.direction == "bprop") else 0
    byts = A.total(A.sized(n_in + n_out, dt), A.sized(idx, "int64"))
    return one_input(call, x, dt, (float((2 if kind == "lp" else 1) * k_total + per_out * n_out), byts),
                     (float(n_out if kind in ("max", "amax") else k_total + per_out * n_out), byts))


@register("max_pool1d_with_indices_backward", "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def _max_pool_backward(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("grad_output", "self", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                           "indices"))
    dy, x, idx = b.get("grad_output"), b.get("self") or b.get("input"), b.get("indices")
    n_out, n_in = A.numel(A.shape(dy)), A.numel(A.shape(x))
    if n_out is None or n_in is None:
        return None
    dt = A.dtype(dy)
    if call.direction == "bprop":  # double backward: ddX gathered at the indices
        return Cost(0.0, A.total(A.nbytes(idx), A.sized(2 * n_out, dt)), dt)
    return Cost(float(n_out), A.total(A.nbytes(dy), A.nbytes(idx), A.sized(n_in, dt)), dt)


def _spatial(b: dict, name: str, nd: int) -> list | None:
    v = A.value(b.get(name))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [v] * nd
    return list(v)[-nd:] if isinstance(v, list) and len(v) >= nd else None


@register("fractional_max_pool2d", "fractional_max_pool3d")
def _fractional(call: OpCall) -> Cost | None:
    nd = 2 if call.op.endswith("2d") else 3
    b = A.bind(call.args, ("input", "kernel_size", "output_size", "output_ratio", "return_indices",
                           "_random_samples"))
    x = b.get("input") or b.get("self")
    sx, k = A.shape(x), _spatial(b, "kernel_size", nd)
    if sx is None or len(sx) < nd + 1 or k is None:
        return None
    out = _spatial(b, "output_size", nd)
    if out is None:
        ratio = _spatial(b, "output_ratio", nd)
        if ratio is None:
            return None
        out = [int(i * r) for i, r in zip(sx[-nd:], ratio, strict=True)]
    if not all(isinstance(o, int) and o > 0 for o in out + k):
        return None
    lead = sx[:-nd]
    n_in, n_out, dt = prod(sx), prod(lead) * prod(out), A.compute_dtype(call.cdtype, x)
    samples = prod(lead[:2]) * nd if len(lead) == 2 else lead[0] * nd if lead else nd
    if not A.is_tensor(b.get("_random_samples")):
        samples *= 2  # drawn first (written), then read
    idx = A.sized(n_out, "int64")
    return one_input(call, x, dt, (float(n_out * prod(k)), A.total(A.sized(n_in + n_out + samples, dt), idx)),
                     (float(n_out), A.total(A.sized(n_out + n_in, dt), idx)))


@register("max_unpool1d", "max_unpool2d", "max_unpool3d")
def _unpool(call: OpCall) -> Cost | None:
    nd = int(call.op[-2])
    b = A.bind(call.args, ("input", "indices", "kernel_size", "stride", "padding", "output_size"))
    x, idx = b.get("input") or b.get("self"), b.get("indices")
    sx = A.shape(x)
    if sx is None or len(sx) < nd + 1 or not A.is_tensor(idx):
        return None
    out = _spatial(b, "output_size", nd)
    if out is None:
        k = _spatial(b, "kernel_size", nd)
        st = _spatial(b, "stride", nd) if A.value(b.get("stride")) is not None else k
        pad = _spatial(b, "padding", nd) if A.value(b.get("padding")) is not None else [0] * nd
        if k is None or st is None or pad is None:
            return None
        out = [(i - 1) * s - 2 * p + kk for i, s, p, kk in zip(sx[-nd:], st, pad, k, strict=True)]
    if not all(isinstance(o, int) and o >= 0 for o in out):
        return None
    n_in, n_out, dt = prod(sx), prod(sx[:-nd]) * prod(out), A.compute_dtype(call.cdtype, x)
    return one_input(call, x, dt, (0.0, A.total(A.nbytes(x), A.nbytes(idx), A.sized(n_out, dt))),
                     (0.0, A.total(A.nbytes(idx), A.sized(2 * n_in, dt))))
