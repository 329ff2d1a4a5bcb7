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
"""

from __future__ import annotations

from math import prod

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
    if transposed is None:
        tv = A.value(b.get("transposed"), False) if A.known(b.get("transposed")) else None
        if tv is None:
            return None
        transposed = bool(tv)
    batched = len(sx) == nd + 2
    if not batched and len(sx) != nd + 1:
        return None
    ins = sx[-nd:]
    k = sw[2:]
    if len(k) != nd:
        return None
    groups = A.value(b.get("groups"), 1) if A.known(b.get("groups")) else None
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        return None
    stride = A.ints(b.get("stride"), nd, 1, minimum=1)
    dil = A.ints(b.get("dilation"), nd, 1, minimum=1)
    out_pad = A.ints(b.get("output_padding"), nd, 0)
    pad_arg = b.get("padding")
    pv = A.value(pad_arg, 0) if A.known(pad_arg) else None
    if pv == "valid":
        pad = [0] * nd
    elif pv == "same":  # output size = input size (PyTorch allows 'same' with stride 1 only)
        pad = None
    else:
        pad = A.ints(pad_arg, nd, 0)
    if stride is None or dil is None or out_pad is None or (pad is None and pv != "same"):
        return None
    out_sp = list(ins) if pv == "same" else conv_out_spatial(ins, k, stride, pad, dil, transposed, out_pad)
    if any(o <= 0 for o in out_sp):
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
    sw = A.shape(w)
    conv_pts = prod(ins) if transposed else prod(out[-len(ins):])
    macs = n * conv_pts * prod(sw)
    dt = A.compute_dtype(call.cdtype, x, w)
    nx, nw, ny = A.numel(A.shape(x)), prod(sw), prod(out)
    nb = A.numel(A.shape(bias)) if bias is not None else 0
    # implicit-GEMM view for the tensor-core note: M = N*out points, N = C_out, K = C_in/g * prod(k)
    note = _tc_note(dt, [sw[1], sw[0]]) if not transposed else _tc_note(dt, [sw[0], sw[1]])
    if call.direction == "bprop":
        flops, byts = 0.0, 0.0
        if A.requires_grad(x):  # dX: read dY and W, write dX
            flops, byts = flops + 2 * macs, byts + ny + nw + nx
        if A.requires_grad(w):  # dW: read X and dY, write dW
            flops, byts = flops + 2 * macs, byts + nx + ny + nw
        if bias is not None and A.requires_grad(bias):  # db: read dY, write db
            byts += ny + nb
        return Cost(flops, A.sized(int(byts), dt), dt, tensor_op=True, note=note)
    return Cost(2.0 * macs, A.sized(nx + nw + nb + ny, dt), dt, tensor_op=True, note=note)
