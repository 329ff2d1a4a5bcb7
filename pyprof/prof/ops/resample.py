"""Resampling family: F.interpolate / upsample (nearest, linear, bilinear, bicubic, trilinear, area),
F.upsample_nearest / F.upsample_bilinear (their modes) and the aten ``upsample_*`` kernels.

Output spatial size: ``size`` when given, else ``floor(in · scale_factor)`` per dim. Each output
element blends ``taps`` input elements (nearest 1, linear 2, bilinear 4, bicubic 16, trilinear 8):
forward ``2·taps − 1`` FLOPs (a multiply per tap, adds between), nearest 0 (a copy: known zero).
Backward scatters ``dY`` onto the taps: ``2·taps`` FLOPs per output element (multiply and add), nearest
1 (an add). Bytes: input read, output written; backward reads dY and writes dX. ``mode='area'`` is
adaptive average pooling and priced as ``adaptive_avg_pool``'s one add per input element plus a divide
per output (approximated here as ``in/out`` taps per output).

``_upsample_bilinear2d_aa`` (``antialias=True``; its ``.vec`` form's scale factors give
``floor(in·scale)``) filters over ``2·ceil(max(in/out, 1)) + 1`` taps per
dim, in two separable passes (rows, then columns): ``2·taps`` FLOPs per element each pass writes;
backward the same passes transposed. ``grid_sample``/``grid_sampler_2d``/``_3d`` read ``input`` at the
points of ``grid[N, *out, nd]``: per output element ``2·taps − 1`` as above (bilinear 4 taps in 2-d, 8
in 3-d; nearest 1, 0 FLOPs; bicubic 16), plus ``4·nd`` per grid point (unnormalise, floor, weights);
backward ``2·taps`` per output element for the input's gradient and ``3·taps`` for the grid's. Bytes:
input and grid read, output written; backward dY, input and grid read, each gradient written.
"""

from __future__ import annotations

from math import ceil, floor, prod
from typing import Any

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, one_input, register

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
    """The output's spatial sizes: ``size`` (ints), else ``ins`` times ``scale``; one number for every dim."""
    nd = len(ins)
    given, kind = (size, int) if size is not None else (scale, (int, float))
    v = [given] * nd if isinstance(given, kind) else given
    if not isinstance(v, list) or len(v) != nd or not all(isinstance(s, kind) for s in v):
        return None
    out = v if size is not None else [floor(i * s) for i, s in zip(ins, v, strict=True)]
    return None if any(isinstance(o, bool) or o <= 0 for o in out) else out


def _resample_args(call: OpCall) -> tuple[dict, Any, int | None, Any, Any, bool]:
    """(arguments, mode, spatial dims (None: the input's), size, scale, whether the size is known)."""
    if call.op in _ATEN:
        mode, nd, params = _ATEN[call.op]
        b = A.bind(call.args, params)
        scales = [A.value(b.get(k)) for k in params if k.startswith("scales")]
        scale = scales if scales and all(isinstance(s, (int, float)) for s in scales) else None
        return b, mode, nd, A.value(b.get("output_size")), scale, A.known(b.get("output_size"))
    b = A.bind(call.args, _INTERP)
    mode = A.value(b.get("mode"), "bilinear" if call.op == "upsample_bilinear" else "nearest")
    return b, mode, None, A.value(b.get("size")), A.value(b.get("scale_factor")), A.known(b.get("size"))


@register("interpolate", "upsample", "upsample_nearest", "upsample_bilinear", *_ATEN)
def _resample(call: OpCall) -> Cost | None:
    b, mode, nd, size, scale, ok = _resample_args(call)
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
    flops = 0 if nearest else n_out * (2 * taps - 1)
    return one_input(call, x, dt, (float(flops), A.sized(n_in + n_out, dt)),
                     (float(n_out * (1 if nearest else 2 * taps)), A.sized(n_in + n_out, dt)))


@register("_upsample_bilinear2d_aa")
def _upsample_aa(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "output_size", "align_corners", "scales_h", "scales_w"))
    x, size = b.get("input") or b.get("self"), A.value(b.get("output_size"))
    sx = A.shape(x)
    if sx is None or len(sx) != 4:
        return None
    if size is None:  # the .vec overload: scale factors (a list, or its text where the trace kept that)
        scales = A.value(b.get("scales_h"))
        if isinstance(scales, str):
            try:
                scales = [float(v) for v in scales.strip("[]").split(",")]
            except ValueError:
                return None
        size = _out_spatial(sx[2:], None, scales)
    if not isinstance(size, list) or len(size) != 2 or not all(isinstance(o, int) and o > 0 for o in size):
        return None
    (h, w), (ho, wo), nc = sx[2:], size, sx[0] * sx[1]
    taps_h, taps_w = (2 * ceil(max(i / o, 1)) + 1 for i, o in ((h, ho), (w, wo)))
    flops = 2.0 * nc * (h * wo * taps_w + ho * wo * taps_h)
    n_in, n_out, dt = prod(sx), nc * ho * wo, A.compute_dtype(call.cdtype, x)
    moved = (flops, A.sized(n_in + n_out, dt))
    return one_input(call, x, dt, moved, moved)


_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}


@register("grid_sample", "grid_sampler", "grid_sampler_2d", "grid_sampler_3d")
def _grid_sample(call: OpCall) -> Cost | None:
    if call.op == "grid_sample":
        b = A.bind(call.args, ("input", "grid", "mode", "padding_mode", "align_corners"))
        mode = A.value(b.get("mode"), "bilinear")
    else:
        b = A.bind(call.args, ("input", "grid", "interpolation_mode", "padding_mode", "align_corners"))
        code = A.value(b.get("interpolation_mode"), 0)
        mode = _GRID_MODES.get(code) if isinstance(code, int) else None
    x, grid = b.get("input") or b.get("self"), b.get("grid")
    sx, sg = A.shape(x), A.shape(grid)
    if sx is None or sg is None or len(sx) not in (4, 5) or len(sg) != len(sx) or not isinstance(mode, str):
        return None
    nd = len(sx) - 2
    taps = {"bilinear": 2 ** nd, "nearest": 1, "bicubic": 16}.get(mode)
    if taps is None or sg[-1] != nd:
        return None
    points = prod(sg[:-1])
    n_out = points * sx[1]
    dt = A.compute_dtype(call.cdtype, x, grid)
    if call.direction == "bprop":  # dY, x and grid read; per gradient 2 (dx) or 3 (dgrid) per tap, it written
        gx, gg = A.requires_grad(x), A.requires_grad(grid)
        byts = A.total(A.sized(n_out, dt), A.nbytes(x), A.nbytes(grid), A.nbytes(x) if gx else 0,
                       A.nbytes(grid) if gg else 0)
        return Cost(float((2 * gx + 3 * gg) * taps * n_out), byts, dt)
    per = 0 if mode == "nearest" else 2 * taps - 1
    return Cost(float(per * n_out + 4 * nd * points), A.total(A.nbytes(x), A.nbytes(grid), A.sized(n_out, dt)), dt)
