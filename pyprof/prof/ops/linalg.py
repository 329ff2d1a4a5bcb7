"""Linear-algebra family: factorisations, solves, inverses, determinants, eigen- and singular-value
decompositions, least squares, matrix norms and ranks (``torch.linalg`` and the older ``torch`` names).

FLOPs are the textbook counts of the LAPACK routine each op runs, per matrix (times the batch):
LAPACK Working Note 41 (Blackford and Dongarra, *Installation Guide for LAPACK*, 1999, §6.4, the
multiplications ``M`` and additions ``A`` of each routine, as MAGMA's ``flops.h`` writes them). A real
FLOP is one multiplication or addition: ``M + A``; complex data counts ``6·M + 2·A`` (a complex multiply
is 6 real FLOPs, a complex add 2), LAWN 41's rule. Each routine's ``(M, A)`` is the function of its name
below (``getrf``, ``getrs``, ``potrf``, ``potrs``, ``potri``, ``sytrf`` with ``sytrs`` as ``potrs``,
``trsm`` left, ``geqrf``, ``orgqr`` forming m×q ``Q`` from k reflectors, ``ormqr`` applying it): LU of a
square matrix ``⅔n³``, Cholesky ``⅓n³``, QR ``2mn² − ⅔n³``, a triangular solve ``n²`` per right-hand side.

For ``A`` m×n, ``k = min(m, n)``, ``r`` right-hand sides, composites are the sum of what torch runs:
``linalg.solve`` = getrf + getrs; ``linalg.inv``/``inverse`` = getrf + getrs against the identity (r = n:
``(8/3)n³``, torch solves against I); ``det``/``slogdet``/``logdet`` = getrf (the product of the
diagonal is left out); ``linalg.lu`` = getrf; ``qr`` = geqrf + orgqr (``mode="r"``: geqrf alone);
``lstsq`` = geqrf + ormqr (r columns) + trsm (CPU's ``gelsy`` pivots its QR, same count);
``cholesky_solve`` = potrs, ``cholesky_inverse`` = potri, ``lu_solve`` = getrs, ``ldl_solve`` = sytrs;
``householder_product``/``orgqr`` and ``ormqr`` as above; ``tensorinv``/``tensorsolve`` as
``inv``/``solve`` of the matrix their dims fold into.

Eigen- and singular-value decompositions are iterative: LAWN 41 gives no count. Golub and Van Loan's
estimates (*Matrix Computations*, 4th ed., §8.3 and §7.5.6, Fig. 8.6.1) are used, ×4 for complex data:
symmetric ``eigh`` ``9n³`` (``eigvalsh`` ``(4/3)n³``); general ``eig`` ``25n³`` (``eigvals``
``10n³``); ``svd`` of m×n (m ≥ n, transposed otherwise) with ``U``, ``V`` full ``4m²n + 8mn² + 9n³``,
reduced ``14mn² + 8n³``, singular values only (``svdvals``) ``4mn² − (4/3)n³``. ``pinv`` = reduced
SVD (``eigh`` where ``hermitian``) + the product ``V·S⁺·Uᴴ`` (``2mnk``); ``matrix_rank`` and
``cond`` (``p`` None, 2, −2) = ``svdvals`` (``eigvalsh`` where ``hermitian``); ``cond`` with another
``p`` = ``inv`` + two matrix norms; ``matrix_norm``/``norm`` of a matrix: ``"fro"`` 2 per element,
1/−1/inf/−inf 2 per element (abs and add), ``"nuc"``/2/−2 ``svdvals``; ``linalg.norm`` of a vector (no
``ord`` or one ``dim``) 2 per element.

Bytes: each input read once and each output written once (factors, pivots as int32, ``tau``, the
solution); a workspace is not counted.

Not modelled, and why: ``matrix_exp``: the degree of its Taylor approximant and the number of squarings
depend on the matrix's norm (the data), which no record holds. Backward: the backward formulas are
composites of GEMMs, triangular solves and elementwise ops; a trace that shows them prices them where
they ran (:mod:`pyprof.prof.backward`); a call priced as a whole in ``bprop`` (the Nsight path) is
unknown (``None``), never a guess.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, Model, OpCall, binds, bound, register

_COMPLEX = ("complex64", "complex128", "complex32")
_REAL_OF: dict[str | None, str | None] = {"complex64": "float32", "complex128": "float64", "complex32": "float16"}
PIVOT_BYTES = 4  # pivots and info are int32


# -- LAWN 41 counts: (multiplications, additions) per matrix ------------------------------------------------

def getrf(m: int, n: int) -> tuple[float, float]:
    if m < n:  # a wide matrix: the count with the roles of m and n swapped
        m, n = n, m
    return (0.5 * m * n * n - n ** 3 / 6 + 0.5 * m * n - 0.5 * n * n + 2 * n / 3,
            0.5 * m * n * n - n ** 3 / 6 - 0.5 * m * n + n / 6)


def getrs(n: int, r: int) -> tuple[float, float]:
    return r * n * n, r * (n * n - n)


def potrf(n: int) -> tuple[float, float]:
    return n ** 3 / 6 + n * n / 2 + n / 3, n ** 3 / 6 - n / 6


def potrs(n: int, r: int) -> tuple[float, float]:
    return r * (n * n + n), r * (n * n - n)


def potri(n: int) -> tuple[float, float]:
    return n ** 3 / 3 + n * n + 2 * n / 3, n ** 3 / 3 - n * n / 2 + n / 6


def sytrf(n: int) -> tuple[float, float]:
    return n ** 3 / 6 + n * n / 2 + 10 * n / 3, n ** 3 / 6 - n / 6


def trsm(n: int, r: int) -> tuple[float, float]:
    return 0.5 * r * n * (n + 1), 0.5 * r * n * (n - 1)


def geqrf(m: int, n: int) -> tuple[float, float]:
    if m >= n:
        return (m * n * n - n ** 3 / 3 + m * n + n * n / 2 + 23 * n / 6,
                m * n * n - n ** 3 / 3 + n * n / 2 + 5 * n / 6)
    return (n * m * m - m ** 3 / 3 + 2 * n * m - m * m / 2 + 23 * m / 6,
            n * m * m - m ** 3 / 3 + n * m - m * m / 2 + 5 * m / 6)


def orgqr(m: int, q: int, k: int) -> tuple[float, float]:
    return (2 * m * q * k - (m + q) * k * k + 2 * k ** 3 / 3 + 2 * q * k - k * k - 5 * k / 3,
            2 * m * q * k - (m + q) * k * k + 2 * k ** 3 / 3 + q * k - m * k + k / 3)


def ormqr(m: int, n: int, k: int, left: bool = True) -> tuple[float, float]:
    if not left:
        m, n = n, m
    return 2 * n * m * k - n * k * k + 2 * n * k, 2 * n * m * k - n * k * k + n * k


def _sum(*parts: tuple[float, float]) -> tuple[float, float]:
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def _flops(ma: tuple[float, float], batch: int, dt: str | None) -> float:
    """LAWN 41's rule: real ``M + A``; complex ``6M + 2A``."""
    m, a = ma
    return batch * (6 * m + 2 * a if dt in _COMPLEX else m + a)


# -- Golub and Van Loan's estimates (iterative decompositions) -------------------------------------------------

def svd_flops(m: int, n: int, uv: bool, full: bool) -> float:
    if m < n:
        m, n = n, m
    if not uv:
        return 4 * m * n * n - 4 * n ** 3 / 3
    return 4 * m * m * n + 8 * m * n * n + 9 * n ** 3 if full else 14 * m * n * n + 8 * n ** 3


def eigh_flops(n: int, vectors: bool) -> float:
    return 9 * n ** 3 if vectors else 4 * n ** 3 / 3


def eig_flops(n: int, vectors: bool) -> float:
    return 25 * n ** 3 if vectors else 10 * n ** 3


# -- argument helpers -------------------------------------------------------------------------------------------

def _matrix(x) -> tuple[int, int, int] | None:
    """(batch, rows, cols) of a tensor of at least 2 dims."""
    s = A.shape(x)
    if s is None or len(s) < 2:
        return None
    return prod(s[:-2]), s[-2], s[-1]


def _n(x) -> int:
    return A.numel(A.shape(x)) or 0


def _bool(b: dict, name: str, default: bool) -> bool:
    v = A.value(b.get(name), default)
    return v if isinstance(v, bool) else default


def _cost(call: OpCall, flops: float, dt: str | None, elems: float, extra_bytes: float = 0.0) -> Cost | None:
    """Forward only: a whole-op call in ``bprop`` is unknown (the backward's ops are priced where they ran)."""
    if call.direction != "fprop":
        return None
    size = A.itemsize(dt)
    if size is None:
        return None
    return Cost(float(flops), float(elems * size + extra_bytes), dt)


def _on_matrix(subject: str | Callable[[str], str]) -> Callable[[Callable[..., Cost | None]], Model]:
    """:func:`binds` for a model of one (batched) matrix argument: it is called as ``model(call, b, x,
    batch, m, n, dtype)``; None where that argument is no matrix (fewer than 2 dims)."""

    def deco(model: Callable[..., Cost | None]) -> Model:
        def opened(call: OpCall, b: Bound, x: A.Arg, shp: list[int], dt: str | None) -> Cost | None:
            mat = _matrix(x)
            return None if mat is None else model(call, b, x, *mat, dt)

        return binds(subject)(functools.wraps(model)(opened))

    return deco


def _real(dt: str | None) -> str | None:
    return _REAL_OF.get(dt, dt)


def _rhs(a_shape: list[int], b_shape: list[int], a_batch: int, left: bool = True) -> tuple[int, int, int] | None:
    """(right-hand sides per system, elements of B, systems) of a solve ``A X = B``: B a vector batch
    when it has one dim fewer than A (torch's rule), else a matrix; the systems are A's ``a_batch`` or
    B's batch, whichever broadcasting makes larger."""
    systems = max(a_batch, prod(b_shape[:-2]) if len(b_shape) > 2 else 1)
    if len(b_shape) == len(a_shape) - 1 or len(b_shape) == 1:
        return 1, prod(b_shape), systems
    if len(b_shape) < 2:
        return None
    return (b_shape[-1] if left else b_shape[-2]), prod(b_shape), systems


# -- models -------------------------------------------------------------------------------------------------------

@register("linalg_cholesky", "linalg_cholesky_ex", "cholesky")
@_on_matrix("self")
def _cholesky(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    info = PIVOT_BYTES * bt if call.op.endswith("_ex") else 0
    return _cost(call, _flops(potrf(n), bt, dt), dt, 2 * _n(x), info)


@register("cholesky_solve", "_cholesky_solve_helper")
@binds()
def _cholesky_solve(call: OpCall, b: Bound) -> Cost | None:
    rhs, fac = b.get("self"), b.get("input2") if call.op == "cholesky_solve" else b.get("A")
    mf, mr = _matrix(fac), _matrix(rhs)
    if mf is None or mr is None:
        return None
    dt = A.dtype(rhs)
    batch = max(mf[0], mr[0])
    return _cost(call, _flops(potrs(mf[1], mr[2]), batch, dt), dt, 2 * _n(rhs) + _n(fac))


@register("cholesky_inverse")
@_on_matrix("self")
def _cholesky_inverse(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    return _cost(call, _flops(potri(n), bt, dt), dt, 2 * _n(x))


@register("linalg_lu_factor", "linalg_lu_factor_ex", "_lu_with_info", "lu")
def _lu_factor(call: OpCall) -> Cost | None:
    b = bound(call)
    if b is not None:
        x = b.get("A" if call.op.startswith("linalg_") else "self")
    else:  # torch.lu(A, pivot, get_infos): Python, no aten schema of its own
        x = next(iter(A.tensors(call.args)), None) if call.op == "lu" else None
    mat = _matrix(x)
    if mat is None:
        return None
    (bt, m, n), dt = mat, A.dtype(x)
    extra = PIVOT_BYTES * bt * (min(m, n) + (1 if call.op != "linalg_lu_factor" else 0))
    return _cost(call, _flops(getrf(m, n), bt, dt), dt, 2 * _n(x), extra)


@register("linalg_lu")
@_on_matrix("A")
def _lu(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    k = min(m, n)
    out = bt * (m * k + k * n + (m * m if _bool(b, "pivot", True) else 0))  # P, L, U
    return _cost(call, _flops(getrf(m, n), bt, dt), dt, _n(x) + out)


@register("lu_unpack")
@_on_matrix("LU_data")
def _lu_unpack(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    k = min(m, n)
    out = bt * ((m * k + k * n) * _bool(b, "unpack_data", True) + m * m * _bool(b, "unpack_pivots", True))
    return _cost(call, 0.0, dt, _n(x) + out, PIVOT_BYTES * bt * k)


@register("linalg_lu_solve", "lu_solve")
@binds()
def _lu_solve(call: OpCall, b: Bound) -> Cost | None:
    lu, rhs = (b.get("LU"), b.get("B")) if call.op == "linalg_lu_solve" else (b.get("LU_data"), b.get("self"))
    ml, sb = _matrix(lu), A.shape(rhs)
    if ml is None or sb is None:
        return None
    got = _rhs(cast("list[int]", A.shape(lu)), sb, ml[0], _bool(b, "left", True))  # _matrix found its shape
    if got is None:
        return None
    r, nb, batch = got
    dt = A.dtype(rhs)
    return _cost(call, _flops(getrs(ml[1], r), batch, dt), dt, _n(lu) + 2 * nb, PIVOT_BYTES * ml[0] * ml[1])


@register("linalg_solve", "linalg_solve_ex", "_linalg_solve_ex")
@_on_matrix("A")
def _solve(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    sb = A.shape(b.get("B"))
    if sb is None:
        return None
    rhs = _rhs(cast("list[int]", A.shape(x)), sb, bt, _bool(b, "left", True))  # _matrix found its shape
    if rhs is None:
        return None
    r, nb, batch = rhs
    extra = PIVOT_BYTES * bt * n * (call.op == "_linalg_solve_ex")  # it also returns LU and pivots
    lu_out = _n(x) if call.op == "_linalg_solve_ex" else 0
    return _cost(call, _flops(_sum(getrf(n, n), getrs(n, r)), batch, dt), dt, _n(x) + 2 * nb + lu_out, extra)


@register("linalg_inv", "linalg_inv_ex", "inverse")
@_on_matrix(lambda op: "self" if op == "inverse" else "A")
def _inv(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    return _cost(call, _flops(_sum(getrf(n, n), getrs(n, n)), bt, dt), dt, 2 * _n(x))


@register("linalg_det", "det", "_linalg_det", "logdet", "linalg_slogdet", "slogdet", "_linalg_slogdet")
@_on_matrix(lambda op: "A" if op in ("linalg_det", "_linalg_det", "linalg_slogdet", "_linalg_slogdet") else "self")
def _det(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    outs = bt * (2 if "slogdet" in call.op else 1)
    lu = _n(x) if call.op.startswith("_linalg") else 0  # the private forms return LU and pivots too
    return _cost(call, _flops(getrf(n, n), bt, dt), dt, _n(x) + outs + lu, PIVOT_BYTES * bt * n * bool(lu))


@register("linalg_qr", "qr")
@_on_matrix(lambda op: "A" if op == "linalg_qr" else "self")
def _qr(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    k = min(m, n)
    if call.op == "linalg_qr":
        mode = A.value(b.get("mode"), "reduced")
    else:
        mode = "reduced" if _bool(b, "some", True) else "complete"
    q = {"reduced": k, "complete": m, "r": 0}.get(mode)
    if q is None:
        return None
    ma = geqrf(m, n) if not q else _sum(geqrf(m, n), orgqr(m, q, k))
    r_rows = m if mode == "complete" else k
    return _cost(call, _flops(ma, bt, dt), dt, _n(x) + bt * (m * q + r_rows * n))


@register("geqrf")
@_on_matrix("self")
def _geqrf(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    return _cost(call, _flops(geqrf(m, n), bt, dt), dt, 2 * _n(x) + bt * min(m, n))


@register("linalg_householder_product", "orgqr")
@_on_matrix(lambda op: "input" if op == "linalg_householder_product" else "self")
def _householder(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    tau = A.shape(b.get("tau") if call.op == "linalg_householder_product" else b.get("input2"))
    if not tau:
        return None
    k = tau[-1]
    return _cost(call, _flops(orgqr(m, n, k), bt, dt), dt, 2 * _n(x) + bt * k)


@register("ormqr")
@_on_matrix("self")
def _ormqr(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    tau, c = A.shape(b.get("input2")), b.get("input3")
    mc = _matrix(c)
    if not tau or mc is None:
        return None
    return _cost(call, _flops(ormqr(mc[1], mc[2], tau[-1], _bool(b, "left", True)), mc[0], dt), dt,
                 _n(x) + bt * tau[-1] + 2 * _n(c))


@register("linalg_solve_triangular", "triangular_solve")
@binds()
def _triangular(call: OpCall, b: Bound) -> Cost | None:
    if call.op == "triangular_solve":
        tri, rhs, left = b.get("A"), b.get("self"), True
    else:
        tri, rhs, left = b.get("self"), b.get("B"), _bool(b, "left", True)
    mt, mr = _matrix(tri), _matrix(rhs)
    if mt is None or mr is None:
        return None
    dt = A.dtype(rhs)
    r = mr[2] if left else mr[1]
    batch = max(mt[0], mr[0])
    clone = _n(tri) if call.op == "triangular_solve" else 0  # it returns a copy of A too
    return _cost(call, _flops(trsm(mt[1], r), batch, dt), dt, _n(tri) + 2 * _n(rhs) + clone)


@register("linalg_ldl_factor", "linalg_ldl_factor_ex")
@_on_matrix("self")
def _ldl(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    extra = PIVOT_BYTES * bt * (n + (call.op.endswith("_ex")))
    return _cost(call, _flops(sytrf(n), bt, dt), dt, 2 * _n(x), extra)


@register("linalg_ldl_solve")
@_on_matrix("LD")
def _ldl_solve(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    rhs = b.get("B")
    mr = _matrix(rhs)
    if mr is None:
        return None
    return _cost(call, _flops(potrs(n, mr[2]), max(bt, mr[0]), dt), dt, _n(x) + 2 * _n(rhs), PIVOT_BYTES * bt * n)


def _gvl(flops: float, batch: int, dt: str | None) -> float:
    return batch * flops * (4 if dt in _COMPLEX else 1)


@register("linalg_eigh", "_linalg_eigh", "linalg_eigvalsh")
@_on_matrix(lambda op: "self" if op != "_linalg_eigh" else "A")
def _eigh(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    vectors = call.op == "linalg_eigh" or (call.op == "_linalg_eigh" and _bool(b, "compute_v", True))
    values = A.sized(bt * n, _real(dt)) or 0  # real eigenvalues
    return _cost(call, _gvl(eigh_flops(n, vectors), bt, dt), dt, _n(x) + (_n(x) if vectors else 0), values)


@register("linalg_eig", "linalg_eigvals", "_linalg_eigvals")
@_on_matrix("self")
def _eig(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    vectors = call.op == "linalg_eig"
    cplx = dt if dt in _COMPLEX else {"float32": "complex64", "float64": "complex128"}.get(dt or "")
    out = A.sized(bt * n + (_n(x) if vectors else 0), cplx) or 0
    return _cost(call, _gvl(eig_flops(n, vectors), bt, dt), dt, _n(x), out)


def _svd_cost(call: OpCall, x, bt: int, m: int, n: int, dt: str | None, uv: bool, full: bool) -> Cost | None:
    k = min(m, n)
    s_elems = bt * k * (A.itemsize(_real(dt)) or 0) / (A.itemsize(dt) or 1)
    uv_elems = bt * ((m * m + n * n) if full else (m * k + k * n)) if uv else 0
    return _cost(call, _gvl(svd_flops(m, n, uv, full), bt, dt), dt, _n(x) + s_elems + uv_elems)


@register("linalg_svd", "_linalg_svd", "svd")
@_on_matrix(lambda op: "self" if op == "svd" else "A")
def _svd(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    if call.op == "svd":
        uv, full = _bool(b, "compute_uv", True), not _bool(b, "some", True)
    else:
        uv = call.op == "linalg_svd" or _bool(b, "compute_uv", True)
        full = _bool(b, "full_matrices", call.op == "linalg_svd")
    return _svd_cost(call, x, bt, m, n, dt, uv, full)


@register("linalg_svdvals", "nuclear_norm")
@_on_matrix(lambda op: "A" if op == "linalg_svdvals" else "self")
def _svdvals(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    return _svd_cost(call, x, bt, m, n, dt, False, False)


def _spectral(call: OpCall, x, bt: int, m: int, n: int, dt: str | None, hermitian: bool) -> Cost | None:
    """Singular values (eigenvalues where hermitian), one scalar written per matrix."""
    flops = _gvl(eigh_flops(n, False), bt, dt) if hermitian and m == n else _gvl(svd_flops(m, n, False, False), bt, dt)
    return _cost(call, flops, dt, _n(x) + bt)


@register("linalg_matrix_rank")
@binds()
def _matrix_rank(call: OpCall, b: Bound) -> Cost | None:
    x = b.get("self") if _matrix(b.get("self")) else b.get("input")  # its overloads name it either way
    mat = _matrix(x)
    return None if mat is None else _spectral(call, x, *mat, A.dtype(x), _bool(b, "hermitian", False))


def _over(x: A.Arg, dim: list[int]) -> tuple[int, int, int]:
    """(matrices, rows, cols) of ``x`` (its shape known) read as matrices over its two dims ``dim``."""
    shp = cast("list[int]", A.shape(x))
    m, n = shp[dim[0]], shp[dim[1]]
    return (_n(x) // (m * n) if m * n else 0), m, n


def nuclear_norm(call: OpCall, x, dim) -> Cost | None:
    """``norm(x, "nuc", dim)`` (the reduction family's ``norm``): the singular values of the matrices over
    ``dim`` (the last two by default), one scalar written per matrix."""
    shp = A.shape(x)
    if not shp or len(shp) < 2:
        return None
    return _spectral(call, x, *_over(x, dim if isinstance(dim, list) and len(dim) == 2 else [-2, -1]),
                     A.dtype(x), False)


@register("linalg_pinv", "pinverse")
@_on_matrix("self")
def _pinv(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    k = min(m, n)
    herm = _bool(b, "hermitian", False) and m == n
    decomp = eigh_flops(n, True) if herm else svd_flops(m, n, True, False)
    flops = _gvl(decomp, bt, dt) + _flops((m * n * k, m * n * k), bt, dt)  # V·S⁺·Uᴴ: a product
    return _cost(call, flops, dt, 2 * _n(x))


def _matrix_norm_flops(ordv, x, bt: int, m: int, n: int, dt: str | None) -> float | None:
    if ordv in ("fro", 1, -1, float("inf"), float("-inf"), "inf", "-inf"):
        return 2.0 * _n(x)
    if ordv in ("nuc", 2, -2):
        return _gvl(svd_flops(m, n, False, False), bt, dt)
    return None


def _matrix_norm_cost(call: OpCall, ordv, x, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    """A matrix norm of order ``ordv`` per matrix, one scalar written each; None for another order."""
    flops = _matrix_norm_flops(ordv, x, bt, m, n, dt)
    return None if flops is None else _cost(call, flops, dt, _n(x) + bt)


@register("linalg_matrix_norm")
@_on_matrix("self")
def _matrix_norm(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    dim = A.value(b.get("dim"), [-2, -1])
    if dim not in ([-2, -1], [-1, -2], (-2, -1)) and not (isinstance(dim, list) and len(dim) == 2):
        return None
    nd = len(cast("list[int]", A.shape(x)))  # _matrix found its shape
    if isinstance(dim, list) and sorted(d % nd for d in dim) != [nd - 2, nd - 1]:
        bt, m, n = _over(x, dim)
    return _matrix_norm_cost(call, A.value(b.get("ord"), "fro"), x, bt, m, n, dt)


@register("linalg_norm")
@binds("self")
def _norm(call: OpCall, b: Bound, x: A.Arg, shp: list[int], dt: str | None) -> Cost | None:
    ordv, dim = A.value(b.get("ord")), A.value(b.get("dim"))
    matrix = (isinstance(dim, list) and len(dim) == 2) or (dim is None and ordv is not None and len(shp) == 2)
    if not matrix:  # a vector norm: square (or abs) and add per element
        out = prod(s for i, s in enumerate(shp) if not isinstance(dim, list) or i not in [d % len(shp) for d in dim]) \
            if dim is not None else 1
        if isinstance(dim, int):
            out = _n(x) // shp[dim] if shp[dim] else 0
        return _cost(call, 2.0 * _n(x), dt, _n(x) + out)
    bt, m, n = _over(x, dim if isinstance(dim, list) else [-2, -1])
    return _matrix_norm_cost(call, "fro" if ordv is None else ordv, x, bt, m, n, dt)


@register("linalg_cond")
@_on_matrix("self")
def _cond(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    p = A.value(b.get("p"))
    if p in (None, 2, -2):
        return _spectral(call, x, bt, m, n, dt, False)
    inv = _flops(_sum(getrf(n, n), getrs(n, n)), bt, dt)
    norms = _matrix_norm_flops(p, x, bt, m, n, dt)
    if norms is None:
        return None
    return _cost(call, inv + 2 * norms, dt, 3 * _n(x) + bt)


@register("linalg_lstsq")
@_on_matrix("self")
def _lstsq(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    sb = A.shape(b.get("b"))
    if sb is None:
        return None
    rhs = _rhs(cast("list[int]", A.shape(x)), sb, bt)  # _matrix found its shape
    if rhs is None:
        return None
    r, nb, batch = rhs
    k = min(m, n)
    ma = _sum(geqrf(m, n), ormqr(m, r, k), trsm(k, r))
    return _cost(call, _flops(ma, batch, dt), dt, _n(x) + 2 * nb)


@register("linalg_tensorinv")
@binds("self")
def _tensorinv(call: OpCall, b: Bound, x: A.Arg, shp: list[int], dt: str | None) -> Cost | None:
    ind = A.value(b.get("ind"), 2)
    if not 0 < ind < len(shp) or prod(shp[:ind]) != prod(shp[ind:]):  # its dims fold into a square matrix
        return None
    n = prod(shp[:ind])
    return _cost(call, _flops(_sum(getrf(n, n), getrs(n, n)), 1, dt), dt, 2 * _n(x))


@register("linalg_tensorsolve")
@binds("self")
def _tensorsolve(call: OpCall, b: Bound, x: A.Arg, sx: list[int], dt: str | None) -> Cost | None:
    sy = A.shape(b.get("other"))
    if sy is None:
        return None
    dims = A.value(b.get("dims"))
    if dims and not isinstance(dims, list):  # the dims named are moved to the end first: the count is the same
        return None
    n = prod(sy)
    if not n or _n(x) != n * n:
        return None
    return _cost(call, _flops(_sum(getrf(n, n), getrs(n, 1)), 1, dt), dt, _n(x) + 2 * n)


@register("_linalg_check_errors")
@binds("info")
def _check_errors(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    """The check after a factorisation: is any ``info`` (int32, one per matrix) non-zero: one compare per
    entry, ``info`` read."""
    n = _n(x)
    return Cost(float(n), float(PIVOT_BYTES * n), "int32") if call.direction == "fprop" else None


# -- GEMM chains: their FLOPs are matrix products only, as the GEMM family counts them ------------------------

def chain_order_macs(dims: list[int]) -> int:
    """The fewest multiply-adds of a product of matrices ``dims[i]×dims[i+1]`` (the classic dynamic
    programme over split points, as ``torch.linalg.multi_dot`` orders its products)."""
    k = len(dims) - 1
    best = [[0] * k for _ in range(k)]
    for span in range(1, k):
        for i in range(k - span):
            j = i + span
            best[i][j] = min(best[i][s] + best[s + 1][j] + dims[i] * dims[s + 1] * dims[j + 1] for s in range(i, j))
    return best[0][k - 1]


@register("linalg_multi_dot", "chain_matmul", family="gemm")
@binds()
def _multi_dot(call: OpCall, b: Bound) -> Cost | None:
    """``2·`` the fewest multiply-adds of the chain (a 1-D first or last operand is a row or column);
    bytes: the operands read, the result written (intermediates are left out, as for a GEMM's)."""
    items = A.tensorlist(b.get("tensors") if call.op == "linalg_multi_dot" else b.get("matrices"))
    if not items or len(items) < 2 and call.op == "linalg_multi_dot":
        return None
    shapes = cast("list[list[int]]", [A.shape(t) for t in items])  # a None among them is refused next
    if any(s is None for s in shapes):
        return None
    first = [1, *shapes[0]] if len(shapes[0]) == 1 else shapes[0]
    last = [*shapes[-1], 1] if len(shapes[-1]) == 1 else shapes[-1]
    mats = [first, *shapes[1:-1], last] if len(shapes) > 1 else [first]
    if any(len(s) != 2 for s in mats) or any(a[1] != c[0] for a, c in zip(mats, mats[1:], strict=False)):
        return None
    dims = [mats[0][0]] + [s[1] for s in mats]
    dt = A.compute_dtype(call.cdtype, *items)
    if call.direction != "fprop":
        return None
    elems = sum(_n(t) for t in items) + dims[0] * dims[-1]
    return Cost(2.0 * chain_order_macs(dims), A.sized(elems, dt), dt, tensor_op=True)


@register("linalg_matrix_power", "matrix_power", family="gemm")
@_on_matrix("self")
def _matrix_power(call: OpCall, b: Bound, x: A.Arg, bt: int, m: int, n: int, dt: str | None) -> Cost | None:
    """torch's binary powering of ``self`` (n×n): ``k = |n|``; ``k`` 2: one product, 3: two, else one
    squaring per bit after the first and one product per set bit after the first; a negative ``n``
    inverts first (getrf + getrs, LAWN 41). Each product ``2n³``; bytes: input read, result written."""
    p = A.value(b.get("n"))
    if not isinstance(p, int) or m != n:
        return None
    k = abs(p)
    products = max(k - 1, 0) if k <= 3 else (k.bit_length() - 1) + (bin(k).count("1") - 1)
    flops = bt * products * 2.0 * n ** 3
    if p < 0:
        flops += _flops(_sum(getrf(n, n), getrs(n, n)), bt, dt)
    if call.direction != "fprop":
        return None
    return Cost(flops, A.sized(2 * _n(x), dt), dt, tensor_op=True)


@register("cov", "corrcoef", family="gemm")
@binds("self")
def _cov(call: OpCall, b: Bound, x: A.Arg | None, shp: list[int], dt: str | None) -> Cost | None:
    """The product of the centred ``self`` (v variables × o observations; 1-D: one variable) with its
    conjugate transpose: ``2·v²·o``; the centring, weighting and (corrcoef) normalisation are O(v·o) and
    left out, as a GEMM's bias is. Bytes: ``self`` (and weights) read, the v×v result written."""
    if len(shp) > 2:
        return None
    # 0-d: one variable, one observation (torch.cov's reading); 1-D: one variable
    v, o = (shp[0], shp[1]) if len(shp) == 2 else (1, shp[0] if shp else 1)
    if call.direction != "fprop":
        return None
    weights = sum(A.nbytes(b.get(k)) or 0 for k in ("fweights", "aweights") if A.is_tensor(b.get(k)))
    size = A.sized(_n(x) + v * v, dt)
    return Cost(2.0 * v * v * o, None if size is None else size + weights, dt, tensor_op=True)
