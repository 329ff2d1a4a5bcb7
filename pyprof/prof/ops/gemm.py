"""GEMM family: mm, bmm, matmul (and ``@``), addmm, addbmm, baddbmm, linear, mv, dot, vdot, einsum,
tensordot (one product of the free dims of each side over the contracted ones).

Every op here is one or more matrix products ``C[M,N] = A[M,K] @ B[K,N]`` (times a batch).

* FLOPs count the products only: ``2·batch·M·N·K`` (a multiply-add is 2), as FlopCounterMode and
  fvcore do. A bias epilogue (``addmm``/``linear``/``baddbmm``'s ``beta·self``) and, in backward, the
  bias gradient's reduction are O(M·N) and left out of FLOPs (they are kept in bytes).
* Backward (``bprop``; the call carries the forward arguments): ``dA = dC·Bᵀ`` if A requires grad and
  ``dB = Aᵀ·dC`` if B requires grad, each the forward's FLOPs. A tensor whose ``grad`` flag is absent is
  assumed to require grad.
* einsum runs as torch runs it: pairwise steps (left to right, or opt_einsum's ``path``), each a bmm
  over the letters both sides sum (letters only one side has are summed out first, no FLOPs), or an
  elementwise product where a step sums nothing (one multiply per element; FlopCounterMode counts
  none, torch runs ``mul``). Backward reruns a step's bmm per side of it that needs a gradient.
* A single-operand einsum is no product: a sum over the letters the output drops (one add per input
  element; input read, result written; backward broadcasts dY back: dY read, dX written, 0 FLOPs),
  or, where it only reorders the letters, a view (0 and 0). A repeated letter (a diagonal) has no model.
* ``inner(a, b)`` is ``tensordot`` over the last dim of each (a 0-d operand: one multiply per element of
  the other, as torch runs ``mul``). ``bilinear(x1[.., I], x2[.., J], W[O, I, J], b)`` runs as torch's
  ``_trilinear``: ``x1·W`` (``N·O·I·J`` multiply-adds), then with ``x2`` (``N·O·J``); backward per
  input that needs a gradient (``x1``, ``x2``, ``W``) the same FLOPs again.
* ``linear_cross_entropy(x[N, D], W[C, D], target, options=...)`` is the logits GEMM (``N·C·D``
  multiply-adds) and a cross entropy over them (``O(N·C)``, left out of FLOPs as a GEMM's epilogue is),
  priced by the path torch takes: without ``options`` (or where the chunked path does not apply:
  K-dimensional ``W``, label smoothing, non-int64 targets) ``linear`` then ``cross_entropy``: forward
  one GEMM, backward one per input (``x``, ``W``) that needs a gradient, the logits written and read.
  With ``options`` and ``reduction`` mean or sum the chunked op computes the gradients in forward (one
  GEMM more per input that needs one) and backward only scales them; with ``reduction='none'``
  forward computes the loss and backward recomputes the logits and the gradients. The chunked
  backward is a Python function whose calls (``mm``, ``addmm``, ``addmm_``, ``mul``) are recorded as
  ops of their own, under ``init()`` as in a plain trace, and priced there: the op's own backward is
  0 and 0. FlopCounterMode sees the chunked forward as one opaque op (0) and counts no ``addmm_``, the
  in-place GEMM accumulating ``dW`` (the OpInfo reference adds both: ``scripts/validation/opinfo.py``).
  In a plain trace the chunked ops themselves (``torch_nn::_linear_cross_entropy_batch_chunked``,
  ``..._no_reduction``) are priced alike, the gradients computed in forward read from their
  ``compute_input_grad``/``compute_linear_weight_grad`` arguments; there the aten ops of the backward
  run under the op's autograd node and are priced by it: the ``..._no_reduction`` op's backward
  recomputes the logits and each gradient (every input taken to need one: the trace records no
  ``requires_grad``), the other's only scales its saved gradients.
* Bytes are the ideal traffic: each operand read once and the result written once, in the compute
  dtype (under autocast the GEMM kernel reads the cast copies); backward reads ``dC`` and the other
  operand and writes the gradient, per gradient.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, register


def _tc_note(dt: str | None, dims: list[int]) -> str:
    """Tensor cores want the GEMM dims in multiples of 8 (16-bit) or 16 (8-bit) elements."""
    size = A.itemsize(dt)
    if size is None or size > 2 or dt not in A.FLOATING:
        return ""
    mult = {1: 16, 2: 8}[size]
    bad = [d for d in dims if d % mult]
    return f"dims {bad} not multiples of {mult}: tensor cores may be unused" if bad else ""


def gemm_cost(call: OpCall, a: dict | None, b: dict | None, out_shape: list[int] | None, macs: int | None,
              bias: dict | None = None, dims: list[int] | None = None) -> Cost:
    """The cost of ``out = a @ b (+ bias)`` with ``macs`` multiply-adds, forward or backward."""
    dt = A.compute_dtype(call.cdtype, a, b)
    na, nb = A.numel(A.shape(a)), A.numel(A.shape(b))
    nc = A.numel(out_shape)
    nbias = A.numel(A.shape(bias)) if A.is_tensor(bias) else 0
    note = _tc_note(dt, dims or [])
    if call.direction == "bprop":
        grads = A.requires_grad(a) + A.requires_grad(b)  # dA = dC·Bᵀ, dB = Aᵀ·dC: dC and the other read
        dbias = A.is_tensor(bias) and A.requires_grad(bias)  # sum(dC): dC read
        flops = 0.0 if not grads else None if macs is None else 2.0 * macs * grads
        bytes_ = A.total(*[A.sized(A.total(na, nb, nc), dt)] * grads, *[A.sized(A.total(nc, nbias), dt)] * dbias)
        return Cost(flops, bytes_, dt, tensor_op=True, note=note)
    flops = None if macs is None else 2.0 * macs
    return Cost(flops, A.sized(A.total(na, nb, nbias, nc), dt), dt, tensor_op=True, note=note)


def matmul_dims(sa: list[int] | None, sb: list[int] | None):
    """``torch.matmul`` semantics -> (out shape, multiply-adds, [M, N, K]); ``None`` if not a valid product."""
    if not sa or not sb:
        return None
    a = sa if len(sa) > 1 else [1, *sa]
    b = sb if len(sb) > 1 else [*sb, 1]
    m, k = a[-2:]
    k2, n = b[-2:]
    if k != k2:
        return None
    batch = A.broadcast(a[:-2], b[:-2])
    if batch is None:
        return None
    out = batch + ([m] if len(sa) > 1 else []) + ([n] if len(sb) > 1 else [])
    return out, prod(batch) * m * n * k, [m, n, k]


# The operands A, B of the product ``A @ B`` by their schema names, per aten op.
_OPERANDS = {"mm": ("self", "mat2"), "bmm": ("self", "mat2"), "matmul": ("self", "other"), "mv": ("self", "vec"),
             "dot": ("self", "tensor"), "vdot": ("self", "other"),
             "rmatmul": ("other", "self"),  # Tensor.__rmatmul__(self, other) computes other @ self
             "addmm": ("mat1", "mat2"), "baddbmm": ("batch1", "batch2"), "addbmm": ("batch1", "batch2"),
             "addmv": ("mat", "vec")}


def _bias(call: OpCall, b: Bound) -> dict | None:
    """The term an ``add*``/``baddbmm`` op adds, ``beta·self`` (none where ``beta`` is 0)."""
    return b.get("self") if call.op.startswith(("add", "baddbmm")) and A.value(b.get("beta"), 1) != 0 else None


@register(*_OPERANDS)
@binds()
def _mm(call: OpCall, b: Bound) -> Cost | None:
    """``A @ B`` (plus the bias of the ``add*`` forms); ``addbmm`` sums its batch of products into one."""
    x, y = (b.get(name) for name in _OPERANDS[call.op])
    d = matmul_dims(A.shape(x), A.shape(y))
    if d is None:
        return None
    out, macs, mnk = d
    return gemm_cost(call, x, y, out[-2:] if call.op == "addbmm" else out, macs, _bias(call, b), mnk)


@register("addr")
@binds()
def _addr(call: OpCall, b: Bound) -> Cost | None:
    """``addr(self, vec1[M], vec2[N])``: an outer product added, one multiply-add per element, ``2·M·N``."""
    v1, v2 = b.get("vec1"), b.get("vec2")
    s1, s2 = A.shape(v1), A.shape(v2)
    if s1 is None or s2 is None or len(s1) != 1 or len(s2) != 1:
        return None
    return gemm_cost(call, v1, v2, [s1[0], s2[0]], s1[0] * s2[0], _bias(call, b), [s1[0], s2[0], 1])


@register("linear")
@binds()
def _linear(call: OpCall, b: Bound) -> Cost | None:
    """``linear(input[..., K], weight[N, K], bias[N])``: ``M = prod(input.shape[:-1])``."""
    x, w = b.get("input"), b.get("weight")
    sx, sw = A.shape(x), A.shape(w)
    if sx is None or sw is None or not sx or len(sw) not in (1, 2):
        return None
    k = sx[-1]
    n = sw[0] if len(sw) == 2 else 1
    if sw[-1] != k:
        return None
    m = prod(sx[:-1])
    out = sx[:-1] + ([n] if len(sw) == 2 else [])
    bias = b.get("bias") if A.is_tensor(b.get("bias")) else None
    return gemm_cost(call, x, w, out, m * n * k, bias, [m, n, k])


# ----------------------------------------------------------------------------- einsum

_EQ = re.compile(r"\s+")


def _letters(term: str, k: int, ell_rank: int) -> list[str]:
    """A term's letters, its ellipsis (``k`` dims) the last ``k`` of the ``ell_rank`` broadcast dims ``#i``."""
    if "..." not in term:
        return list(term)
    pre, post = term.split("...")
    return list(pre) + [f"#{ell_rank - k + i}" for i in range(k)] + list(post)


def _einsum_terms(eq: str, shapes: list[list[int]]):
    """Parse an einsum equation against operand shapes -> (input letter lists, output letters, sizes)."""
    lhs, arrow, rhs = _EQ.sub("", eq).partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    named = [len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes, strict=True)]
    ell_rank = max([0, *(k for t, k in zip(terms, named, strict=True) if "..." in t)])
    sizes: dict[str, int] = {}
    ins: list[list[str]] = []
    for t, s, k in zip(terms, shapes, named, strict=True):
        letters = _letters(t, k, ell_rank)
        if len(letters) != len(s):
            return None
        for ch, d in zip(letters, s, strict=True):
            if sizes.get(ch, 1) not in (1, d) and d != 1:
                return None
            sizes[ch] = max(sizes.get(ch, 1), d)
        ins.append(letters)
    if arrow:
        out = _letters(rhs, ell_rank, ell_rank)
    else:  # implicit output: ellipsis dims, then letters used once, alphabetically
        counts = Counter(ch for letters in ins for ch in letters)
        out = [f"#{i}" for i in range(ell_rank)] + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("#"))
    if any(ch not in sizes for ch in out):
        return None
    return ins, out, sizes


@dataclass
class _Step:
    """One pairwise contraction of an einsum, as torch runs it."""

    flops: int  # 2·batch·M·N·K for a bmm; the element count for a step that sums nothing (a mul)
    gemm: bool  # a bmm (some letter summed over both sides) rather than an elementwise product
    left: int  # elements of the left operand, after letters only it has are summed out
    right: int
    out: int
    grad_left: bool  # does the left operand need a gradient (any operand it was made of does)?
    grad_right: bool


def _summed(a: dict[str, int], b: dict[str, int], counts: Counter, keep: set[str]) -> list[str]:
    """The letters the product of ``a`` and ``b`` sums over (both have them, no later operand does); a letter
    only one side has and nothing later needs is summed out of that side first (dropped from it)."""
    summed: list[str] = []
    for c in list(dict.fromkeys([*a, *b])):
        if c in keep:
            continue
        sa, sb = a.get(c, 1), b.get(c, 1)
        if sa != 1 and sb != 1:
            counts[c] -= 1
            if counts[c] == 1:  # no later operand has it: sum it in this product
                summed.append(c)
                counts[c] = 0
        elif counts[c] == 1:
            (a if sa != 1 else b).pop(c, None)
            counts[c] = 0
    return summed


def _pair_step(a: dict[str, int], b: dict[str, int], summed: list[str], ga: bool, gb: bool) -> tuple[_Step, dict]:
    """The step multiplying ``a`` by ``b`` and summing the letters ``summed``, and its result's letters."""
    size = {**a, **{c: d for c, d in b.items() if d != 1 or c not in a}}
    res = {c: d for c, d in size.items() if c not in summed}
    n_res = prod(res.values())
    flops = 2 * n_res * prod(size[c] for c in summed) if summed else n_res
    return _Step(flops, bool(summed), prod(a.values()), prod(b.values()), n_res, ga, gb), res


def _einsum_steps(eq: str, shapes: list[list[int]], grads: list[bool],
                  path: list[int] | None = None) -> tuple[list[_Step], list[int]] | None:
    """The pairwise steps of ``torch.einsum`` (aten's ``einsum``, Linear.cpp; the module docstring says how
    torch runs them) and the output shape; ``None`` if the equation does not fit the shapes."""
    parsed = _einsum_terms(eq, shapes)
    if parsed is None:
        return None
    ins, out, _ = parsed
    # per operand: letter -> size (letters an operand lacks are size 1 for it)
    ops: list[tuple[dict[str, int], bool]] = [
        ({c: d for c, d in zip(letters, shp, strict=True)}, g) for letters, shp, g in zip(ins, shapes, grads, strict=True)]
    counts = Counter(c for letters in ins for c in set(letters))
    pairs = [(path[i], path[i + 1]) for i in range(0, len(path) - 1, 2)] if path else [(0, 1)] * (len(ops) - 1)
    steps: list[_Step] = []
    for i, j in pairs:
        if i == j or max(i, j) >= len(ops):
            return None
        (a, ga), (b, gb) = ops[i], ops[j]
        for k in sorted((i, j), reverse=True):
            del ops[k]
        summed = _summed(a, b, counts, set(out))
        step, res = _pair_step(a, b, summed, ga, gb)
        steps.append(step)
        ops.insert(len(ops) if path else 0, (res, ga or gb))  # left to right: the result is next's left
    final = ops[-1][0] if ops else {}
    return steps, [final.get(c, 1) for c in out]


@register("einsum")
@binds()
def _einsum(call: OpCall, b: Bound) -> Cost | None:
    """``aten::einsum(equation, tensors, path)``: its pairwise steps (:func:`_einsum_steps`), in backward
    each rerun per side of it that needs a gradient (the left one does when any operand it was made of
    requires grad); one operand: :func:`_einsum_unary`."""
    eq = A.value(b.get("equation"))
    operands = A.tensorlist(b.get("tensors")) or []
    if isinstance(eq, str) and len(operands) == 1:
        return _einsum_unary(call, eq, operands[0])
    if not isinstance(eq, str) or len(operands) < 2:
        return None
    shapes = [A.shape(t) for t in operands]
    if any(s is None for s in shapes):
        return None
    path = A.value(b.get("path"))
    res = _einsum_steps(eq, shapes, [A.requires_grad(t) for t in operands],  # type: ignore[arg-type]
                        path if isinstance(path, list) and all(isinstance(x, int) for x in path) else None)
    if res is None:
        return None
    steps, out_shape = res
    dt = A.compute_dtype(call.cdtype, *operands)
    n_in = A.total(*[A.numel(s) for s in shapes])
    n_out = prod(out_shape)
    if call.direction == "bprop":
        # per gradient: read the step's output gradient and the other side, write the gradient
        flops = float(sum(st.flops * (st.grad_left + st.grad_right) for st in steps))
        byts = float(sum((st.out + st.left + st.right) * (st.grad_left + st.grad_right) for st in steps))
        return Cost(flops, A.sized(byts, dt), dt, tensor_op=True)
    return Cost(float(sum(st.flops for st in steps)), A.sized(A.total(n_in, n_out), dt), dt, tensor_op=True)


def _einsum_unary(call: OpCall, eq: str, x: dict) -> Cost | None:
    """``einsum("ij->i", x)``: a sum over the dropped letters, or a reordering view."""
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    sx = A.shape(x)
    if sx is None or "." in lhs or len(lhs) != len(sx) or len(set(lhs)) != len(lhs):
        return None
    if not arrow:
        out = "".join(sorted(c for c in lhs if lhs.count(c) == 1))
    if not set(out) <= set(lhs) or len(set(out)) != len(out):
        return None
    n, dt = prod(sx), A.compute_dtype(call.cdtype, x)
    n_out = prod(sx[lhs.index(c)] for c in out)
    if len(out) == len(lhs):  # a permutation: a view
        return Cost(0.0, 0, dt)
    if call.direction == "bprop":
        return Cost(0.0, A.sized(n + n_out, dt) if A.requires_grad(x) else 0, dt)
    return Cost(float(n), A.sized(n + n_out, dt), dt)


@register("inner")
@binds()
def _inner(call: OpCall, b: Bound) -> Cost | None:
    x, y = b["self"], b["other"]
    sx, sy = A.shape(x), A.shape(y)
    if sx is None or sy is None:
        return None
    if not sx or not sy:  # a 0-d operand: an elementwise multiply
        n, dt = prod(sx) * prod(sy), A.compute_dtype(call.cdtype, x, y)
        if call.direction == "bprop":
            grads = [t for t in (x, y) if A.requires_grad(t)]
            return Cost(float(n * len(grads)), A.total(A.sized(n, dt), A.nbytes(x), A.nbytes(y),
                                                       *[A.nbytes(g) for g in grads]), dt)
        return Cost(float(n), A.total(A.nbytes(x), A.nbytes(y), A.sized(n, dt)), dt)
    if sx[-1] != sy[-1]:
        return None
    m, n, k = prod(sx[:-1]), prod(sy[:-1]), sx[-1]
    return gemm_cost(call, x, y, sx[:-1] + sy[:-1], m * n * k, dims=[m, n, k])


@register("bilinear")
@binds()
def _bilinear(call: OpCall, b: Bound) -> Cost | None:
    x1, x2, w, bias = b["input1"], b["input2"], b["weight"], b["bias"]
    s1, s2, sw = A.shape(x1), A.shape(x2), A.shape(w)
    if s1 is None or s2 is None or sw is None or len(sw) != 3 or not s1 or not s2:
        return None
    o, i, j = sw
    if s1[-1] != i or s2[-1] != j:
        return None
    rows = prod(s1[:-1])
    macs = rows * o * (i * j + j)
    dt = A.compute_dtype(call.cdtype, x1, x2, w)
    ins = [t for t in (x1, x2, w) if A.is_tensor(t)]
    n_out = rows * o
    bias_b = A.nbytes(bias) if A.is_tensor(bias) else 0
    if call.direction == "bprop":
        grads = [t for t in ins if A.requires_grad(t)]
        read = [A.sized(n_out, dt), *[A.nbytes(t) for t in ins]] if grads else []  # dY and the inputs
        dbias = [A.sized(n_out, dt), bias_b] if A.requires_grad(bias) else []  # dY read, db written
        return Cost(2.0 * macs * len(grads), A.total(*read, *[A.nbytes(g) for g in grads], *dbias), dt, tensor_op=True)
    return Cost(2.0 * macs, A.total(*[A.nbytes(t) for t in ins], bias_b, A.sized(n_out, dt)), dt, tensor_op=True)


def _contracted(call: OpCall, b: dict, rank: int) -> tuple[list, list] | None:
    """tensordot's contracted dims of each side: aten's two lists, or ``dims`` (an int, or two lists)."""
    if "dims_self" in b or "dims_other" in b or len(A.tensors(call.args)) == 2 and "*0" in b:
        ds, do = A.value(b.get("dims_self", b.get("dims"))), A.value(b.get("dims_other", b.get("*0")))
    else:
        dims = A.value(b.get("dims"), 2)
        if isinstance(dims, int) and not isinstance(dims, bool):
            ds, do = list(range(rank - dims, rank)), list(range(dims))
        elif isinstance(dims, list) and len(dims) == 2:
            ds, do = dims
        else:
            return None
    ds, do = [ds] if isinstance(ds, int) else ds, [do] if isinstance(do, int) else do
    return (ds, do) if isinstance(ds, list) and isinstance(do, list) and len(ds) == len(do) else None


@register("tensordot")
def _tensordot(call: OpCall) -> Cost | None:
    """``tensordot(a, b, dims)``: ``dims`` an int (the last ``dims`` of ``a`` with the first of ``b``) or
    two lists; aten's ``tensordot(self, other, dims_self, dims_other)``. One GEMM of ``[free(a),
    contracted] @ [contracted, free(b)]``, as torch runs it (permute and reshape, then ``mm``)."""
    b = A.bind(call.args, ("a", "b", "dims"))
    x, y = b.get("a") or b.get("self"), b.get("b") or b.get("other")
    sx, sy = A.shape(x), A.shape(y)
    if sx is None or sy is None:
        return None
    pair = _contracted(call, b, len(sx))
    if pair is None:
        return None
    ds, do = [d % len(sx) for d in pair[0]] if sx else [], [d % len(sy) for d in pair[1]] if sy else []
    k = prod(sx[d] for d in ds)
    free_x = [s for i, s in enumerate(sx) if i not in ds]
    free_y = [s for i, s in enumerate(sy) if i not in do]
    m, n = prod(free_x), prod(free_y)
    return gemm_cost(call, x, y, free_x + free_y, m * n * k, dims=[m, n, k])


_LCE = ("input", "linear_weight", "target", "linear_bias", "weight", "reduction", "ignore_index",
        "label_smoothing", "options")


@register("linear_cross_entropy")
def _linear_cross_entropy(call: OpCall) -> Cost | None:
    b = A.bind(call.args, _LCE)
    sx, sw, st = A.shape(b.get("input")), A.shape(b.get("linear_weight")), A.shape(b.get("target"))
    if sx is None or sw is None or st is None or not 1 <= len(sx) <= 2 or len(sw) < 2 or sx[-1] != sw[-1]:
        return None
    red, ls = A.value(b.get("reduction"), "mean"), A.value(b.get("label_smoothing"), 0.0)
    opts = b.get("options")
    if not A.known(opts) or not isinstance(red, str) or not isinstance(ls, (int, float)):
        return None
    chunked = (opts is not None and opts.get("type") != "NoneType" and len(sw) == 2 and ls == 0
               and red in ("mean", "sum", "none") and A.dtype(b.get("target")) == "int64")
    return _lce_cost(call, b, sx, sw, red, chunked)


def _lce_cost(call: OpCall, b: Bound, sx: list[int], sw: list[int], red: str, chunked: bool) -> Cost | None:
    """``linear_cross_entropy``'s logits GEMM, and on the chunked path the gradients it computes ahead."""
    x, w, t = b.get("input"), b.get("linear_weight"), b.get("target")
    macs = prod(sx[:-1]) * prod(sw[:-1]) * sx[-1]
    grads = [g for g in (x, w) if A.requires_grad(g)]
    bias = b.get("linear_bias") if A.is_tensor(b.get("linear_bias")) else None
    cw = b.get("weight") if A.is_tensor(b.get("weight")) else None
    dt = A.compute_dtype(call.cdtype, x, w)
    logits = A.sized(prod(sx[:-1]) * prod(sw[:-1]), dt)
    loss = A.sized(prod(sx[:-1]) if red == "none" else 1, dt)
    if logits is None or loss is None:
        return None
    ins = A.total(A.nbytes(x), A.nbytes(w), A.nbytes(t), A.nbytes(bias) if bias else 0, A.nbytes(cw) if cw else 0)
    grad_bytes = A.total(*[A.nbytes(g) for g in grads]) if grads else 0
    note = "chunked path" if chunked else ""
    if call.direction == "bprop" and (not grads or chunked):  # chunked: a Python backward whose ops are priced
        return Cost(0.0, 0, dt, tensor_op=True, note=note)
    if call.direction == "bprop":
        return Cost(2.0 * macs * len(grads), A.total(loss, 2 * logits, ins, grad_bytes), dt, tensor_op=True)
    if chunked:
        extra = len(grads) if red != "none" else 0
        return Cost(2.0 * macs * (1 + extra), A.total(ins, loss, grad_bytes if extra else 0), dt, tensor_op=True,
                    note=note)
    return Cost(2.0 * macs, A.total(ins, 2 * logits, loss), dt, tensor_op=True)


_CHUNKED = ("input", "linear_weight", "target", "linear_bias", "weight", "reduction", "ignore_index",
            "label_smoothing", "batch_chunk_size", "acc_policy", "acc_dtype", "allow_retain_graph",
            "compute_input_grad", "compute_linear_weight_grad", "compute_linear_bias_grad")


@register("_linear_cross_entropy_batch_chunked", "_linear_cross_entropy_batch_chunked_no_reduction")
def _chunked_cross_entropy(call: OpCall) -> Cost | None:
    """torch's chunked ``linear_cross_entropy`` ops, as a plain trace records them (see above)."""
    reduced = call.op.endswith("chunked")
    b = A.bind(call.args, _CHUNKED if reduced else _CHUNKED[:5])
    x, w = b.get("input"), b.get("linear_weight")
    sx, sw = A.shape(x), A.shape(w)
    if sx is None or sw is None or len(sx) != 2 or len(sw) != 2 or sx[1] != sw[1]:
        return None
    flags = [A.value(b.get(k)) for k in ("compute_input_grad", "compute_linear_weight_grad")]
    if reduced and not all(isinstance(f, bool) for f in flags):
        return None
    dt = A.compute_dtype(call.cdtype, x, w)
    if call.direction == "bprop":
        return _chunked_backward(reduced, x, w, flags, 2.0 * sx[0] * sw[0] * sx[1], dt)
    extra = sum(bool(f) for f in flags) if reduced else 0
    grads = A.total(*[A.nbytes(t) for t, f in zip((x, w), flags, strict=True) if f]) if extra else 0
    ins = A.total(*[A.nbytes(t) for t in A.tensors(call.args)])
    return Cost(2.0 * sx[0] * sw[0] * sx[1] * (1 + extra), A.total(ins, A.sized(sx[0], dt), grads), dt,
                tensor_op=True)


def _chunked_backward(reduced: bool, x, w, flags: list, gemm: float, dt: str | None) -> Cost:
    """A chunked op's backward: the saved gradients scaled (reduced), else the logits, then each gradient."""
    if reduced:  # an unknown (None) raises TypeError here: cost() answers None
        return Cost(0.0, cast(float, A.total(*[A.nbytes(t) for t, f in zip((x, w), flags, strict=True) if f] or [0])) * 2,
                    dt, tensor_op=True)
    ng = sum(A.requires_grad(t) for t in (x, w))
    return Cost(gemm * (1 + ng) if ng else 0.0,
                A.total(A.nbytes(x), A.nbytes(w), *[A.nbytes(t) for t in (x, w) if A.requires_grad(t)]),
                dt, tensor_op=True)
