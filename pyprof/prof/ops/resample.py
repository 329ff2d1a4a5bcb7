"""Resampling family: F.interpolate / upsample (nearest, linear, bilinear, bicubic, trilinear, area),
F.upsample_nearest / F.upsample_bilinear (their modes) and the aten ``upsample_*`` kernels.

Output spatial size: ``size`` when given, else ``floor(in · scale_factor)`` per dim. Each output
element blends ``taps`` input elements (nearest 1, linear 2, bilinear 4, bicubic 16, trilinear 8):
forward ``2·taps − 1`` FLOPs (a multiply per tap, adds between), nearest 0 (a copy: known zero).
Backward scatters ``dY`` onto the taps: ``2·taps`` FLOPs per output element (multiply and add), nearest
1 (an add). Bytes: input read, output written; backward reads dY and writes dX. ``mode='area'`` is
adaptive average pooling and priced as ``adaptive_avg_pool``'s one add per input element plus a divide
per output (approximated here as ``in/out`` taps per output).
"""

from __future__ import annotations

from math import floor, prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register

TAPS = {"nearest": 1, "nearest-exact": 1, "linear": 2, "bilinear": 4, "bicubic": 16, "trilinear": 8}
# aten kernel: (mode, spatial dims, params)
_ATEN: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "upsample_nearest1d": ("nearest", 1, ("input", "output_size", "scales")),
    "upsample_nearest2d": ("nearest", 2, ("input", "output_size", "scales_h", "scales_w")),
    "upsample_nearest3d": ("nearest", 3, ("input", "output_size", "scales_d", "scales_h", "scales_w")),
    "_upsample_nearest_exact2d": ("nearest", 2, ("input", "output_size", "scales_h", "scales_w")),
    "upsample_linear1d": ("linear", 1, ("input", "output_size", "align_corners", "scales")),
    "upsample_bilinear2d": ("bilinear", 2, ("input", "output_size", "align_corners", "scales_h", "scales_w")),
    "upsample_bicubic2d": ("bicubic", 2, ("input", "output_size", "align_corners", "scales_h", "scales_w")),
    "upsample_trilinear3d": ("trilinear", 3, ("input", "output_size", "align_corners", "scales_d", "scales_h",
                                              "scales_w")),
}
_INTERP = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")


def _out_spatial(ins: list[int], size, scale) -> list[int] | None:
    nd = len(ins)
    out = None
    if size is not None:
        sz = [size] * nd if isinstance(size, int) else size
        if isinstance(sz, list) and len(sz) == nd and all(isinstance(s, int) for s in sz):
            out = sz
    elif scale is not None:
        sc = [scale] * nd if isinstance(scale, (int, float)) else scale
        if isinstance(sc, list) and len(sc) == nd and all(isinstance(s, (int, float)) for s in sc):
            out = [floor(i * s) for i, s in zip(ins, sc, strict=True)]
    if out is None or any(isinstance(o, bool) or o <= 0 for o in out):
        return None
    return out


@register("interpolate", "upsample", "upsample_nearest", "upsample_bilinear", *_ATEN)
def _resample(call: OpCall) -> Cost | None:
    if call.op in _ATEN:
        mode, nd, params = _ATEN[call.op]
        b = A.bind(call.args, params)
        scales = [A.value(b.get(k)) for k in params if k.startswith("scales")]
        scale = scales if scales and all(isinstance(s, (int, float)) for s in scales) else None
        size, ok = A.value(b.get("output_size")), A.known(b.get("output_size"))
    else:
        b = A.bind(call.args, _INTERP)
        mode = A.value(b.get("mode"), "bilinear" if call.op == "upsample_bilinear" else "nearest")
        nd = None
        size, scale, ok = A.value(b.get("size")), A.value(b.get("scale_factor")), A.known(b.get("size"))
    x = b.get("input")
    sx = A.shape(x)
    if sx is None or not ok or not isinstance(mode, str) or (mode not in TAPS and mode != "area"):
        return None
    nd = nd or len(sx) - 2
    if nd < 1:
        return None
    out_sp = _out_spatial(sx[-nd:], size, scale)
    if out_sp is None:
        return None
    n_in, n_out = prod(sx), prod(sx[:-nd]) * prod(out_sp)
    taps = TAPS.get(mode) or max(1, -(-prod(sx[-nd:]) // prod(out_sp)))
    dt = A.compute_dtype(call.cdtype, x)
    nearest = mode.startswith("nearest")
    if call.direction == "bprop":
        if not A.requires_grad(x):
            return Cost(0.0, 0, dt)
        return Cost(float(n_out * (1 if nearest else 2 * taps)), A.sized(n_in + n_out, dt), dt)
    flops = 0 if nearest else n_out * (2 * taps - 1)
    return Cost(float(flops), A.sized(n_in + n_out, dt), dt)
