"""Copy family: copy_, to (and ``_to_copy``, ``type_as``, ``float``/``half``/``bfloat16``/... casts,
``cuda``/``cpu`` moves), contiguous, clone; reordering copies (flip, roll), repeat/tile and pad.

No arithmetic: FLOPs 0. Bytes: the source read once and the destination written once, each in its own
dtype (a cast reads 2 bytes and writes 4 for fp16 -> fp32). A ``to``/cast to the dtype and device the
tensor already has, and ``contiguous`` of a contiguous tensor, return the input and launch nothing:
FLOPs 0 and bytes 0. Backward: a cast's gradient is cast back (dY read, dX written); clone's and
contiguous's gradients pass through (0); copy_'s source gradient is dY converted (read and written).
``repeat_interleave(x, n, dim)`` with an int ``n`` (or an ``output_size``) writes ``n`` copies of each
element: priced as ``repeat``; with a tensor of counts and no ``output_size``, the result's size is
their sum, a value not in the record: no model.
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register

# explicit casts: method name -> target dtype
CASTS = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
         "int": "int32", "long": "int64", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
         "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32"}
_CUDA0: dict[str | None, str | None] = {"cuda": "cuda:0"}  # a device named without an index is device 0


def _move(call: OpCall, x: dict, target_dtype: str | None, target_device: str | None, always: bool) -> Cost:
    src_dt, n = A.dtype(x), A.numel(A.shape(x))
    dst_dt = target_dtype or src_dt
    devices = {_CUDA0.get(d, d) for d in (target_device, x.get("device"))}
    same = dst_dt == src_dt and (target_device is None or len(devices) == 1)
    no_grad = call.direction == "bprop" and (not A.requires_grad(x) or call.op in ("clone", "contiguous"))
    if (same and not always) or no_grad:  # nothing launched, or a gradient passed through or not needed
        return Cost(0.0, 0, src_dt)
    return Cost(0.0, A.total(A.sized(n, src_dt), A.sized(n, dst_dt)), dst_dt)


@register("to", "_to_copy", "type", "type_as", *CASTS, "cuda", "cpu")
def _to(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("self",))
    x = b.get("self") or b.get("input")
    if not A.is_tensor(x) or A.shape(x) is None:
        return None
    dt = CASTS.get(call.op)
    dev = {"cuda": "cuda", "cpu": "cpu"}.get(call.op)
    for key, a in b.items():
        if a is x:
            continue
        t = a.get("type")
        if t == "dtype" or key == "dtype":
            dt = A.norm_dtype(A.value(a)) or dt
        elif t == "device" or key == "device":
            dev = A.value(a) if isinstance(A.value(a), str) else dev
        elif t == "tensor":  # to(other) / type_as(other): other's dtype and device
            dt, dev = A.dtype(a), a.get("device")
        elif t == "str" and call.op == "type":  # x.type("torch.cuda.HalfTensor")
            return None
        elif t == "str":  # x.to("cuda:0")
            dev = A.value(a)
        elif t == "unknown":
            return None
    if call.op == "cuda" and dev is not None and not dev.startswith("cuda"):
        dev = "cuda"
    return _move(call, x, dt, dev, always=call.op == "_to_copy")


@register("flip", "fliplr", "flipud", "roll", "rot90")
@binds("self")
def reordering_copy(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    """Same-size copies in another order: input read, output written; backward the same on dY."""
    moved = (0.0, A.sized(2 * prod(sx), dt))
    return one_input(call, x, dt, moved, moved)


@register("repeat", "tile")
@binds("self")
def _repeat(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    """``x.repeat(*sizes)``: the output is ``x`` tiled; input read once, output written. Backward sums
    the tiles of dY: one add per dY element."""
    reps = A.value(b.get("repeats", b.get("dims")))
    if not isinstance(reps, list) or any(r < 0 for r in reps):  # reps may be []: a 0-d tensor, or tile's ones
        return None
    if call.op == "tile" and len(reps) < len(sx):
        reps = [1] * (len(sx) - len(reps)) + reps
    if len(reps) < len(sx):
        return None
    out = [r * s for r, s in zip(reps, [1] * (len(reps) - len(sx)) + sx, strict=True)]
    n_in, n_out = prod(sx), prod(out)
    return one_input(call, x, dt, (0.0, A.sized(n_in + n_out, dt)), (float(n_out), A.sized(n_out + n_in, dt)))


@register("pad", "constant_pad_nd")
@binds("self")
def _pad(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    """``F.pad(x, (l, r, t, b, ...))``: the last ``len(pad)/2`` dims grow (negative pads crop); input read,
    output written (the border filled). Backward slices dY back: dY's inner part read, dX written."""
    pad = A.value(b["pad"])
    if not isinstance(pad, list) or len(pad) % 2 or len(pad) // 2 > len(sx) or not all(isinstance(p, int) for p in pad):
        return None
    out = list(sx)
    for i in range(len(pad) // 2):
        out[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    if any(o < 0 for o in out):
        return None
    n_in, n_out = prod(sx), prod(out)
    return one_input(call, x, dt, (0.0, A.sized(n_in + n_out, dt)), (0.0, A.sized(2 * n_in, dt)))


@register("contiguous", "clone")
@binds("self")
def _clone(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    """A clone copies; ``contiguous`` copies only a tensor that is not (unknown where the record does not
    say)."""
    if call.op == "contiguous" and "contig" not in x:
        return None
    return _move(call, x, None, None, always=call.op == "clone" or not x["contig"])


@register("copy")
@binds()
def _copy(call: OpCall, b: Bound) -> Cost | None:
    """``dst.copy_(src)``: src read (its dtype), dst written (dst's dtype; src broadcast to dst's shape)."""
    dst, src = b["self"], b.get("src")
    if not (A.is_tensor(dst) and A.is_tensor(src)):
        return None
    n = A.numel(A.shape(dst))
    if call.direction == "bprop":
        if not A.requires_grad(src):
            return Cost(0.0, 0, A.dtype(dst))
        return Cost(0.0, A.total(A.sized(n, A.dtype(dst)), A.nbytes(src)), A.dtype(src))
    return Cost(0.0, A.total(A.nbytes(src), A.sized(n, A.dtype(dst))), A.dtype(dst))


@register("repeat_interleave")
def _repeat_interleave(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "repeats", "dim", "output_size"))
    x, reps = b.get("input") or b.get("self"), b.get("repeats")
    sx, dim, size = A.shape(x), A.value(b.get("dim")), A.value(b.get("output_size"))
    if sx is None or not A.is_tensor(x) or not (dim is None or type(dim) is int):
        return None
    along = prod(sx) if dim is None or not sx else sx[dim % len(sx)]
    count = A.value(reps)
    if type(size) is int and size >= 0:
        n_out = prod(sx) // along * size if along else 0
    elif not A.is_tensor(reps) and type(count) is int and count >= 0:
        n_out = prod(sx) * count
    else:
        return None
    n_in, dt = prod(sx), A.dtype(x)
    read = A.total(A.nbytes(x), A.nbytes(reps) if A.is_tensor(reps) else 0)
    return one_input(call, x, dt, (0.0, A.total(read, A.sized(n_out, dt))), (float(n_out), A.sized(n_out + n_in, dt)))
