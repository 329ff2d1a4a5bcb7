"""Convolution family: conv1d/2d/3d, conv_transpose1d/2d/3d and the aten convolution entry points
(``convolution``, ``_convolution``, ``cudnn_convolution``, ``cudnn_convolution_transpose``,
``mkldnn_convolution``, ``convolution_overrideable``, ``_slow_conv2d_forward``).

FLOPs (a multiply-add is 2; bias adds not counted, as FlopCounterMode and fvcore):

* forward: ``2 · N · prod(out spatial) · prod(weight.shape)`` where ``weight = [C_out, C_in/groups, k...]``;
  transposed: ``2 · N · prod(in spatial) · prod(weight.shape)`` where ``weight = [C_in, C_out/groups, k...]``.
* backward: data gradient (if the input requires grad) = the forward's FLOPs (it is the transposed
  convolution of ``dY`` with the same weight); weight gradient (if the weight requires grad) = the
  forward's FLOPs too. (FlopCounterMode prices the weight gradient of a *grouped* convolution ``groups``
  times too high; here it is exact. For ``groups == 1`` both agree.)

Bytes: input, weight, bias read once, output written once; backward: per gradient, ``dY`` and the
other operand read and the gradient written; ``db`` reads ``dY``.

The backward ops themselves (:data:`BACKWARD`: ``convolution_backward``, and the per-backend ones that
traces of PyTorch 1.8-1.10 record) are priced from their recorded ``input``, ``grad_output`` and
``weight`` by the same formulas: ``grad_output``'s shape is the forward's output shape, so stride,
padding and dilation are not needed. The gradients computed are ``output_mask``'s
where recorded, else those of the tensors that require grad (assumed all where unknown, as elsewhere).

A forward convolution recorded without stride/padding (PyTorch 1.8) takes its output shape from the
backward op of the same layer: :func:`price_with_backward` (docs/prof.md says when).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.gemm import _tc_note
from pyprof.prof.ops.registry import Cost, OpCall, register

# Parameter names of each spelling, in positional order; ``transposed`` is fixed per spelling or an argument.
_CONV = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONVT = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_ATEN = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
SIGNATURES: dict[str, tuple[tuple[str, ...], bool | None, int | None]] = {
    # name: (params, transposed (None: from the 'transposed' argument), spatial dims (None: from shapes))
    "conv1d": (_CONV, False, 1), "conv2d": (_CONV, False, 2), "conv3d": (_CONV, False, 3),
    "conv_transpose1d": (_CONVT, True, 1), "conv_transpose2d": (_CONVT, True, 2),
    "conv_transpose3d": (_CONVT, True, 3),
    "convolution": (_ATEN, None, None), "_convolution": (_ATEN, None, None),
    "convolution_overrideable": (_ATEN, None, None),
    "cudnn_convolution": (("input", "weight", "padding", "stride", "dilation", "groups"), False, None),
    "cudnn_convolution_transpose": (("input", "weight", "padding", "output_padding", "stride", "dilation",
                                     "groups"), True, None),
    "mkldnn_convolution": (("input", "weight", "bias", "padding", "stride", "dilation", "groups"), False, None),
    "_slow_conv2d_forward": (("input", "weight", "kernel_size", "bias", "stride", "padding"), False, 2),
    "thnn_conv2d": (("input", "weight", "kernel_size", "bias", "stride", "padding"), False, 2),
}


def conv_out_spatial(ins: list[int], k: list[int], stride: list[int], pad: list[int], dil: list[int],
                     transposed: bool, out_pad: list[int]) -> list[int]:
    """Output spatial sizes (PyTorch's formula)."""
    if transposed:
        return [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
                for i, kk, s, p, d, op in zip(ins, k, stride, pad, dil, out_pad, strict=True)]
    return [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, kk, s, p, d in zip(ins, k, stride, pad, dil, strict=True)]


def _out_spatial_of(b: dict, nd: int, ins: list[int], k: list[int], transposed: bool) -> list[int] | None:
    """Output spatial sizes from the call's stride, padding ('valid': 0), dilation and output padding."""
    stride = A.ints(b.get("stride"), nd, 1, minimum=1)
    dil = A.ints(b.get("dilation"), nd, 1, minimum=1)
    out_pad = A.ints(b.get("output_padding"), nd, 0)
    pv = A.known_value(b.get("padding"), 0)
    if stride is None or dil is None or out_pad is None:
        return None
    if pv == "same":  # output size = input size (PyTorch allows 'same' with stride 1 only)
        return list(ins)
    pad = [0] * nd if pv == "valid" else A.ints(b.get("padding"), nd, 0)
    return None if pad is None else conv_out_spatial(ins, k, stride, pad, dil, transposed, out_pad)


def conv_geometry(call: OpCall):
    """Bind a convolution call -> (input, weight, bias, out shape, transposed, spatial) or ``None``."""
    params, transposed, nd = SIGNATURES[call.op]
    b = A.bind(call.args, params)
    x = b.get("input") or b.get("self")
    w = b.get("weight")
    sx, sw = A.shape(x), A.shape(w)
    if sx is None or sw is None or len(sw) < 3:
        return None
    nd = len(sw) - 2 if nd is None else nd
    transposed = A.known_value(b.get("transposed"), False) if transposed is None else transposed
    groups = A.known_value(b.get("groups"), 1)
    if (transposed is None or len(sx) not in (nd + 1, nd + 2) or len(sw) - 2 != nd or type(groups) is not int
            or groups < 1):
        return None
    transposed, batched, ins, k = bool(transposed), len(sx) == nd + 2, sx[-nd:], sw[2:]
    out_sp = _out_spatial_of(b, nd, ins, k, transposed)
    if out_sp is None or any(o <= 0 for o in out_sp):
        return None
    n = sx[0] if batched else 1
    c_out = sw[1] * groups if transposed else sw[0]
    out = ([n] if batched else []) + [c_out, *out_sp]
    bias = b.get("bias") if A.is_tensor(b.get("bias")) else None
    return x, w, bias, out, transposed, ins, n


@register(*SIGNATURES)
def _conv(call: OpCall) -> Cost | None:
    g = conv_geometry(call)
    if g is None:
        return None
    x, w, bias, out, transposed, ins, n = g
    sw = cast("list[int]", A.shape(w))  # conv_geometry checked it
    conv_pts = prod(ins) if transposed else prod(out[-len(ins):])
    macs = n * conv_pts * prod(sw)
    dt = A.compute_dtype(call.cdtype, x, w)
    nx, nw, ny = cast(int, A.numel(A.shape(x))), prod(sw), prod(out)  # conv_geometry checked it
    # an unknown (None) raises TypeError here: cost() answers None
    nb = cast(int, A.numel(A.shape(bias)) if bias is not None else 0)
    # implicit-GEMM view for the tensor-core note: M = N*out points, N = C_out, K = C_in/g * prod(k)
    note = _tc_note(dt, [sw[1], sw[0]]) if not transposed else _tc_note(dt, [sw[0], sw[1]])
    if call.direction == "bprop":
        grads = A.requires_grad(x) + A.requires_grad(w)  # dX: dY and W read; dW: X and dY read; each written
        byts = (nx + ny + nw) * grads + (ny + nb) * (bias is not None and A.requires_grad(bias))  # db: dY read
        return Cost(2.0 * macs * grads, A.sized(int(byts), dt), dt, tensor_op=True, note=note)
    return Cost(2.0 * macs, A.sized(nx + nw + nb + ny, dt), dt, tensor_op=True, note=note)


# backward ops: (params in positional order; which of them are input, grad_output, weight)
_BWD_OLD = ("input", "grad_output", "weight", "padding", "stride", "dilation", "groups")
BACKWARD: dict[str, tuple[str, ...]] = {
    "convolution_backward": ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation",
                             "transposed", "output_padding", "groups", "output_mask"),
    "cudnn_convolution_backward": (*_BWD_OLD, "benchmark", "deterministic", "allow_tf32", "output_mask"),
    "miopen_convolution_backward": (*_BWD_OLD, "benchmark", "deterministic", "output_mask"),
    "mkldnn_convolution_backward": (*_BWD_OLD, "output_mask"),
    "mps_convolution_backward": (*_BWD_OLD, "output_mask"),
}


def _mask(call: OpCall, b: dict, x, w) -> tuple[bool, bool, bool | None] | None:
    """Which gradients the backward computes: (dX, dW, db or None when unknown)."""
    m = b.get("output_mask")
    if m is None and call.op == "cudnn_convolution_backward" and len(call.args) == 10:  # torch < 1.7: no allow_tf32
        m = call.args[-1]
    if m is not None and A.known(m):
        v = A.value(m)
        if not isinstance(v, (list, tuple)) or len(v) < 2:
            return None
        return bool(v[0]), bool(v[1]), (bool(v[2]) if len(v) > 2 else False)
    return A.requires_grad(x), A.requires_grad(w), None


@register(*BACKWARD)
def _conv_backward(call: OpCall) -> Cost | None:
    if call.direction == "bprop":  # (a double backward runs as _convolution_double_backward)
        return None
    b = A.bind(call.args, BACKWARD[call.op])
    x, gy, w = b.get("input"), b.get("grad_output"), b.get("weight")
    sx, sy, sw = A.shape(x), A.shape(gy), A.shape(w)
    if sx is None or sy is None or sw is None or len(sw) < 3 or len(sx) != len(sy) or len(sy) != len(sw):
        return None
    tv = b.get("transposed")
    if not A.known(tv):
        return None
    transposed = bool(A.value(tv, False))
    n = sx[0]
    macs = n * (prod(sx[2:]) if transposed else prod(sy[2:])) * prod(sw)
    mask = _mask(call, b, x, w)
    if mask is None:
        return None
    dx, dw, db = mask
    dt = A.compute_dtype(call.cdtype, x, w)
    nx, ny, nw = prod(sx), prod(sy), prod(sw)
    flops = 2.0 * macs * (int(dx) + int(dw))
    byts = (nx + ny + nw) * (dx + dw) + (ny + sy[1]) * bool(db)  # per gradient: dY, the other read, it written
    note = "" if db is not None else "output_mask not recorded: gradients of the tensors that require grad"
    return Cost(flops, A.sized(int(byts), dt), dt, tensor_op=True, note=note)


_DOUBLE = ("ggI", "ggW", "ggb", "grad_output", "weight", "input", "stride", "padding", "dilation", "transposed",
           "output_padding", "groups", "output_mask")


@register("_convolution_double_backward")
def _conv_double_backward(call: OpCall) -> Cost | None:
    """The double backward (a gradient penalty's) as torch runs it, whatever ``output_mask`` says, from the
    gradients ``ggI``, ``ggW``, ``ggb`` that reached dX, dW, db: ``conv(ggI, W) + conv(X, ggW) + ggb`` and the
    data gradient of ``(gO, ggW)``, each the forward's FLOPs (that gradient of a transposed convolution with
    ``output_padding >= stride`` more: it runs wider than X); the weight gradient of ``(ggI, gO)``, a
    convolution over the batch, stride and dilation swapped, cut to the kernel's size after it ran."""
    b = A.bind(call.args, _DOUBLE)
    x, gy, w = b.get("input"), b.get("grad_output"), b.get("weight")
    sx, sy, sw = A.shape(x), A.shape(gy), A.shape(w)
    tv = b.get("transposed")
    if sx is None or sy is None or sw is None or len(sw) < 3 or len(sx) != len(sw) or not A.known(tv):
        return None
    transposed = bool(A.value(tv, False))
    nd = len(sw) - 2
    fwd = 2.0 * sx[0] * (prod(sx[2:]) if transposed else prod(sy[2:])) * prod(sw)
    gi, gw, gb = (A.is_tensor(b.get(k)) and A.shape(b.get(k)) is not None for k in ("ggI", "ggW", "ggb"))
    stride, dil = A.ints(b.get("stride"), nd, 1, minimum=1), A.ints(b.get("dilation"), nd, 1, minimum=1)
    pad, out_pad = A.ints(b.get("padding"), nd, 0), A.ints(b.get("output_padding"), nd, 0)
    # dX of (gO, ggW), transposed: a convolution of gO that comes out i + output_padding // stride wide per dim
    # (output_padding may reach the stride, below the dilation), cut to X's size after it ran
    wide = 1.0
    if transposed and gw:
        if not (stride and out_pad):
            return None
        wide = prod(i + o // s for i, o, s in zip(sx[2:], out_pad, stride, strict=True)) / prod(sx[2:])
    flops = fwd * (gi + gw * (1 + wide))
    if gi and stride and dil and pad:  # dW of (ggI, gO): one of them the weight of the other, over the batch
        big, small = (sy, sx) if transposed else (sx, sy)
        kept = [(i + 2 * p - s * (o - 1) - 1) // d + 1 for i, o, s, p, d in zip(big[2:], small[2:], stride, pad, dil,
                                                                                 strict=True)]
        flops += 2.0 * sw[0] * sw[1] * prod(kept) * sx[0] * prod(small[2:])
    elif gi:
        return None
    dt = A.compute_dtype(call.cdtype, x, w)
    nx, ny, nw = prod(sx), prod(sy), prod(sw)
    byts = (gi + 2 * gw) * (nx + ny + nw) + gi * (nx + ny + nw) + gb * (ny + sy[1])
    return Cost(flops, A.sized(int(byts), dt), dt, tensor_op=True, note=_tc_note(dt, [sw[1], sw[0]]))


def backward_outputs(calls: Iterable[OpCall]) -> dict[tuple, set[tuple[int, ...]]]:
    """(input shape, weight shape) -> the ``grad_output`` shapes recorded with them by backward convolution
    calls: the forward outputs of the layers with those shapes."""
    out: dict[tuple, set[tuple[int, ...]]] = {}
    for call in calls:
        params = BACKWARD.get(call.op)
        if params is None:
            continue
        b = A.bind(call.args, params)
        sx, sw, sy = (A.shape(b.get(k)) for k in ("input", "weight", "grad_output"))
        if sx is not None and sw is not None and sy is not None:
            out.setdefault((tuple(sx), tuple(sw)), set()).add(tuple(sy))
    return out


def _stride_padding(ins: list[int], k: list[int], out: list[int]) -> str:
    """The (stride, padding) per dim that give ``out`` with dilation 1 and padding at most k // 2, where
    one pair does; else ``?``."""
    parts = []
    for i, kk, o in zip(ins, k, out, strict=True):
        fits = [(s, p) for s in range(1, i + 1) for p in range(kk // 2 + 1) if (i + 2 * p - kk) // s + 1 == o
                and i + 2 * p >= kk]
        if len(fits) != 1:
            return "stride/padding not recorded (ambiguous)"
        parts.append(fits[0])
    return ("stride/padding not recorded; dilation 1 assumed, they fit stride " +
            ",".join(str(s) for s, _ in parts) + " padding " + ",".join(str(p) for _, p in parts))


def price_with_backward(call: OpCall, outputs: dict[tuple, set[tuple[int, ...]]]) -> Cost | None:
    """A forward, non-transposed convolution the trace gave without stride/padding, priced with the output
    shape of its backward (:func:`backward_outputs`); ``None`` where none or several shapes fit."""
    spelling = SIGNATURES.get(call.op)
    if spelling is None or spelling[1] is not False or call.direction not in ("fprop", "recomp"):
        return None
    b = A.bind(call.args, spelling[0])
    x, w = b.get("input") or b.get("self"), b.get("weight")
    sx, sw = A.shape(x), A.shape(w)
    if sx is None or sw is None or len(sw) < 3 or len(sx) != len(sw):
        return None
    found = outputs.get((tuple(sx), tuple(sw)))
    if found is None or len(found) != 1:
        return None
    out = list(next(iter(found)))
    if len(out) != len(sx) or out[0] != sx[0] or out[1] != sw[0] or sx[1] % sw[1]:
        return None
    macs = sx[0] * prod(out[2:]) * prod(sw)
    dt = A.compute_dtype(call.cdtype, x, w)
    nbias = (A.numel(A.shape(b.get("bias"))) or 0) if A.is_tensor(b.get("bias")) else 0
    note = "output shape from its backward; " + _stride_padding(sx[2:], sw[2:], out[2:])
    return Cost(2.0 * macs, A.sized(prod(sx) + prod(sw) + nbias + prod(out), dt), dt, tensor_op=True, note=note)
