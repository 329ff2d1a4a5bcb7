"""FFT family: ``torch.fft``'s transforms (``fft``/``ifft``, ``rfft``/``irfft``, ``hfft``/``ihfft``, their
``2``/``n`` forms) and ``fftshift``/``ifftshift``.

FLOPs: a complex transform of ``N`` points (``N`` the product of the transformed lengths) costs
``5·N·log2(N)`` real FLOPs per batch, the radix-2 Cooley-Tukey count that FFT benchmarks report
against (FFTW's benchFFT "mflops" = 5 N log2(N) / time; Van Loan, *Computational Frameworks for the
Fast Fourier Transform*, 1992, §1.4). A transform with a real input or a real output (``rfft``,
``irfft``, ``hfft``, ``ihfft``) does half: ``2.5·N·log2(N)``, ``N`` being the real signal's length.
The transformed lengths are the ``n``/``s`` arguments where given (the input is zero-padded or trimmed
to them), else the input's, and for a complex-to-real transform the last one is ``2·(m − 1)`` for an
input of ``m`` (the Hermitian half). Over ``B`` batches (the untransformed dims) the count is ``B``
times that.

Bytes: the input read once and the output written once: complex results are ``complex64`` for a
float32 input (``complex128`` for float64); a real-to-complex result keeps ``n//2 + 1`` of its last
dim. Backward: the gradient of a DFT is a DFT of the same size: the same FLOPs; dY read, dX written.
``fftshift``/``ifftshift`` are rolls: a copy, 0 FLOPs, input read and output written.

``stft(x[B?, L], n_fft, hop_length=n_fft//4, win_length, window, center=True)``: frames of ``n_fft``
samples every ``hop_length``: ``1 + (L' − n_fft) // hop`` frames of the padded length ``L'`` (``center``
pads ``n_fft//2`` each side first, else ``L' = L``), each multiplied by the window (``n_fft`` FLOPs) and transformed
(real input: ``2.5·n·log2(n)``, onesided: ``n//2 + 1`` bins kept; a complex input ``5·n·log2(n)``, every
bin). Bytes: the input (the padded copy written and read where ``center``) and the window read, the
complex result written (``return_complex=False``: its real view, the same bytes). Backward per frame:
the inverse transform and the window multiply (the same FLOPs), dY read, dX written.
"""

from __future__ import annotations

from math import log2, prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.copy import reordering_copy
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, one_input, register

_COMPLEX: dict[str | None, str] = {"float32": "complex64", "float16": "complex32", "bfloat16": "complex64", "float64": "complex128"}
_REAL: dict[str | None, str | None] = {v: k for k, v in _COMPLEX.items() if k != "bfloat16"}

# name: kind -- c2c: complex in and out; r2c: real in, half complex out; c2r: the reverse
_KINDS = {"fft": "c2c", "ifft": "c2c", "rfft": "r2c", "ihfft": "r2c", "irfft": "c2r", "hfft": "c2r"}


def _axes(one: bool, b: Bound, nd: int) -> tuple[list[int], list] | None:
    """The transformed dims (non-negative) and the lengths asked for them (None: the input's)."""
    if one:
        dims, sizes = [A.value(b.get("dim"), -1)], [A.value(b.get("n"))]
    else:
        sizes, dims = A.value(b.get("s")), A.value(b.get("dim"))
        sizes = [sizes] if isinstance(sizes, int) else sizes
        if sizes is not None and not isinstance(sizes, list):
            return None
        if dims is None:
            dims = list(range(nd)) if sizes is None else list(range(nd - len(sizes), nd))
        dims = [dims] if isinstance(dims, int) else dims
        sizes = [None] * len(dims) if sizes is None else sizes
    if (not isinstance(dims, list) or not isinstance(sizes, list) or len(dims) != len(sizes) or not nd
            or not all(isinstance(d, int) and -nd <= d < nd for d in dims)):
        return None
    return [d % nd for d in dims], sizes


def _lengths(dims: list[int], sizes: list, shp: list[int], c2r: bool) -> list[int] | None:
    """Each transformed dim's length: as asked, else the input's (a complex-to-real last dim: 2(m - 1))."""
    lengths = []
    for i, (d, s) in enumerate(zip(dims, sizes, strict=True)):
        if s is None or s == -1:
            s = 2 * (shp[d] - 1) if c2r and i == len(dims) - 1 else shp[d]
        if not isinstance(s, int) or s < 1:
            return None
        lengths.append(s)
    return lengths or None


@binds("self")
def _transform(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    if dt is None:
        return None
    base = call.op[len("fft_"):]
    rank = "n" if base.endswith("n") and base[:-1] in _KINDS else ("2" if base.endswith("2") else "1")
    kind = _KINDS[base.rstrip("2n") if rank != "1" else base]
    axes = _axes(rank == "1", b, len(shp))
    lengths = _lengths(*axes, shp, kind == "c2r") if axes else None
    if not axes or not lengths:
        return None
    dims = axes[0]
    batch = prod(x for i, x in enumerate(shp) if i not in dims)
    n = prod(lengths)
    per = 5.0 if kind == "c2c" else 2.5
    flops = per * batch * n * log2(n) if n > 1 else 0.0
    real, cplx = _REAL.get(dt, dt), _COMPLEX.get(dt, dt)
    half = n // lengths[-1] * (lengths[-1] // 2 + 1)
    out_n, out_dt = {"c2c": (n, cplx), "r2c": (half, cplx), "c2r": (n, real)}[kind]
    moved = (flops, A.total(A.nbytes(x), A.sized(batch * out_n, out_dt)))  # backward: a DFT of the same size
    return one_input(call, x, out_dt, moved, moved)


_NAMES = [f"fft_{k}{r}" for k in _KINDS for r in ("", "2", "n")]
register(*_NAMES)(_transform)


# fftshift rolls the data by half along each dim: a copy in another order, as flip and roll
register("fft_fftshift", "fft_ifftshift", family="fft")(reordering_copy)


@register("stft")
def _stft(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "n_fft", "hop_length", "win_length", "window", "center", "pad_mode",
                           "normalized", "onesided", "return_complex"))
    x, n = b.get("input") or b.get("self"), A.value(b.get("n_fft"))
    sx = A.shape(x)
    if sx is None or not 1 <= len(sx) <= 2 or type(n) is not int or n < 1:
        return None
    hop = A.value(b.get("hop_length"), n // 4)
    center = A.value(b.get("center"), True)
    if type(hop) is not int or hop < 1 or not isinstance(center, bool):
        return None
    batch = prod(sx[:-1])
    padded = sx[-1] + 2 * (n // 2) if center else sx[-1]
    if padded < n:
        return None
    frames = 1 + (padded - n) // hop
    cplx = A.dtype(x) in _REAL
    onesided = A.value(b.get("onesided"), not cplx)
    bins = n // 2 + 1 if onesided else n
    per = (5.0 if cplx else 2.5) * n * log2(n) if n > 1 else 0.0
    flops = batch * frames * (per + n)
    dt = A.dtype(x)
    out_dt = _COMPLEX.get(_REAL.get(dt, dt))
    w = b.get("window") if A.is_tensor(b.get("window")) else None
    if out_dt is None:
        return None
    out = A.sized(batch * bins * frames, out_dt)
    pad_bytes = 2 * cast(float, A.sized(batch * padded, dt)) if center else 0  # dt is known: out_dt was found
    return one_input(call, x, dt, (flops, A.total(A.nbytes(x), pad_bytes, A.nbytes(w) if w else 0, out)),
                     (flops, A.total(out, A.nbytes(x))))
