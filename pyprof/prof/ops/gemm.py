"""GEMM family: mm, bmm, matmul (and ``@``), addmm, addbmm, baddbmm, linear, mv, dot, vdot, einsum.

Every op here is one or more matrix products ``C[M,N] = A[M,K] @ B[K,N]`` (times a batch).

* FLOPs count the products only: ``2·batch·M·N·K`` (a multiply-add is 2), as FlopCounterMode and
  fvcore do. A bias epilogue (``addmm``/``linear``/``baddbmm``'s ``beta·self``) and, in backward, the
  bias gradient's reduction are O(M·N) and left out of FLOPs (they are kept in bytes).
* Backward (``bprop``; the call carries the forward arguments): ``dA = dC·Bᵀ`` if A requires grad and
  ``dB = Aᵀ·dC`` if B requires grad, each the forward's FLOPs. A tensor whose ``grad`` flag is absent is
  assumed to require grad.
* Bytes are the ideal traffic: each operand read once and the result written once, in the compute
  dtype (under autocast the GEMM kernel reads the cast copies); backward reads ``dC`` and the other
  operand and writes the gradient, per gradient.
"""

from __future__ import annotations

import re
from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register


def _tc_note(dt: str | None, dims: list[int]) -> str:
    """Tensor cores want the GEMM dims in multiples of 8 (16-bit) or 16 (8-bit) elements."""
    size = A.itemsize(dt)
    if size is None or size > 2 or dt not in A.FLOATING:
        return ""
    mult = {1: 16, 2: 8}[size]
    bad = [d for d in dims if d % mult]
    return f"dims {bad} not multiples of {mult}: tensor cores may be unused" if bad else ""


def gemm_cost(call: OpCall, a: dict, b: dict, out_shape: list[int] | None, macs: int | None,
              bias: dict | None = None, dims: list[int] | None = None) -> Cost:
    """The cost of ``out = a @ b (+ bias)`` with ``macs`` multiply-adds, forward or backward."""
    dt = A.compute_dtype(call.cdtype, a, b)
    na, nb = A.numel(A.shape(a)), A.numel(A.shape(b))
    nc = A.numel(out_shape)
    nbias = A.numel(A.shape(bias)) if A.is_tensor(bias) else 0
    note = _tc_note(dt, dims or [])
    if call.direction == "bprop":
        flops = 0.0
        bytes_ = 0.0
        if A.requires_grad(a):  # dA = dC @ B^T: read dC and B, write dA
            flops = A.total(flops, None if macs is None else 2 * macs)
            bytes_ = A.total(bytes_, A.sized(A.total(nc, nb, na), dt))
        if A.requires_grad(b):  # dB = A^T @ dC: read A and dC, write dB
            flops = A.total(flops, None if macs is None else 2 * macs)
            bytes_ = A.total(bytes_, A.sized(A.total(na, nc, nb), dt))
        if A.is_tensor(bias) and A.requires_grad(bias):  # dbias = sum(dC): read dC, write dbias
            bytes_ = A.total(bytes_, A.sized(A.total(nc, nbias), dt))
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


def _product(call: OpCall, a: dict | None, b: dict | None, bias: dict | None = None,
             sum_batch: bool = False) -> Cost | None:
    if not (A.is_tensor(a) and A.is_tensor(b)):
        return None
    d = matmul_dims(A.shape(a), A.shape(b))
    if d is None:
        return None
    out, macs, mnk = d
    if sum_batch:  # addbmm: the batch of products is summed into one [M, N]
        out = out[-2:]
    return gemm_cost(call, a, b, out, macs, bias, mnk)


@register("mm", "bmm", "matmul", "mv", "dot", "vdot")
def _mm(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "other"))
    a1 = b.get("input") or b.get("self")
    a2 = b.get("other") or b.get("mat2") or b.get("vec") or b.get("tensor")
    return _product(call, a1, a2)


@register("rmatmul")
def _rmatmul(call: OpCall) -> Cost | None:
    """``Tensor.__rmatmul__(self, other)`` computes ``other @ self``."""
    b = A.bind(call.args, ("self", "other"))
    return _product(call, b.get("other"), b.get("self"))


@register("addmm", "baddbmm")
def _addmm(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "mat1", "mat2"))
    m1 = b.get("mat1") or b.get("batch1")
    m2 = b.get("mat2") or b.get("batch2")
    bias = b.get("input") or b.get("self")
    if A.value(b.get("beta"), 1) == 0:
        bias = None
    return _product(call, m1, m2, bias)


@register("addbmm")
def _addbmm(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "batch1", "batch2"))
    bias = b.get("input") or b.get("self")
    if A.value(b.get("beta"), 1) == 0:
        bias = None
    return _product(call, b.get("batch1"), b.get("batch2"), bias, sum_batch=True)


@register("linear")
def _linear(call: OpCall) -> Cost | None:
    """``linear(input[..., K], weight[N, K], bias[N])``: ``M = prod(input.shape[:-1])``."""
    b = A.bind(call.args, ("input", "weight", "bias"))
    x, w = b.get("input"), b.get("weight")
    sx, sw = A.shape(x), A.shape(w)
    if sx is None or sw is None or not sx or len(sw) not in (1, 2):
        return None
    k = sx[-1]
    n = sw[0] if len(sw) == 2 else 1
    if (sw[-1] if len(sw) == 2 else sw[0]) != k:
        return None
    m = prod(sx[:-1])
    out = sx[:-1] + ([n] if len(sw) == 2 else [])
    bias = b.get("bias") if A.is_tensor(b.get("bias")) else None
    return gemm_cost(call, x, w, out, m * n * k, bias, [m, n, k])


# ----------------------------------------------------------------------------- einsum

_EQ = re.compile(r"\s+")


def _einsum_terms(eq: str, shapes: list[list[int]]):
    """Parse an einsum equation against operand shapes -> (input letter lists, output letters, sizes)."""
    eq = _EQ.sub("", eq)
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    sizes: dict[str, int] = {}
    ins: list[list[str]] = []
    ell_rank = 0
    for t, s in zip(terms, shapes, strict=True):
        n_named = len(t.replace("...", ""))
        if "..." in t:
            ell_rank = max(ell_rank, len(s) - n_named)
    for t, s in zip(terms, shapes, strict=True):
        letters: list[str] = []
        if "..." in t:
            pre, post = t.split("...")
            k = len(s) - len(pre) - len(post)
            letters = list(pre) + [f"#{ell_rank - k + i}" for i in range(k)] + list(post)
        else:
            letters = list(t)
        if len(letters) != len(s):
            return None
        for ch, d in zip(letters, s, strict=True):
            if sizes.get(ch, 1) not in (1, d) and d != 1:
                return None
            sizes[ch] = max(sizes.get(ch, 1), d)
        ins.append(letters)
    if "->" in eq:
        if "..." in rhs:
            pre, post = rhs.split("...")
            out = list(pre) + [f"#{i}" for i in range(ell_rank)] + list(post)
        else:
            out = list(rhs)
    else:  # implicit output: ellipsis dims, then letters used once, alphabetically
        counts: dict[str, int] = {}
        for letters in ins:
            for ch in letters:
                counts[ch] = counts.get(ch, 0) + 1
        out = [f"#{i}" for i in range(ell_rank)] + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("#"))
    if any(ch not in sizes for ch in out):
        return None
    return ins, out, sizes


def einsum_flops(eq: str, shapes: list[list[int]]) -> tuple[list[int], list[int]] | None:
    """FLOPs of each pairwise step (left to right, as torch.einsum does without opt_einsum) and the
    output shape; ``None`` if the equation does not fit the shapes. A step that sums over a letter is a
    (batched) GEMM: ``2·prod(sizes of all its letters)``; a step summing nothing is an elementwise
    product (an outer product, ``i,j->ij``): ``prod(...)`` multiplies, no adds."""
    parsed = _einsum_terms(eq, shapes)
    if parsed is None:
        return None
    ins, out, sizes = parsed
    steps: list[int] = []
    cur = ins[0]
    for i, nxt in enumerate(ins[1:], 1):
        union = list(dict.fromkeys(cur + nxt))
        later = set(out).union(*[set(x) for x in ins[i + 1:]])
        summed = [c for c in union if c not in later and c in cur and c in nxt]
        steps.append((2 if summed else 1) * prod(sizes[c] for c in union))
        cur = [c for c in union if c in later]
    return steps, [sizes[c] for c in out]


@register("einsum")
def _einsum(call: OpCall) -> Cost | None:
    """Pairwise contractions, each ``2·prod(sizes of all letters of both operands)`` FLOPs (see
    :func:`einsum_flops`).

    Backward: with two operands, each operand's gradient is one contraction of the forward's size; with
    more, each pairwise step's backward is priced as two contractions of its size. A single-operand
    einsum (transpose, trace, sum) is not a GEMM and has no model here (``None``).
    """
    b = A.bind(call.args, ("equation",))
    eq = A.value(b.get("equation"))
    ops = [a for k, a in b.items() if k != "equation"]
    operands = A.tensors(ops)
    if not isinstance(eq, str) or len(operands) < 2:
        return None
    shapes = [A.shape(t) for t in operands]
    if any(s is None for s in shapes):
        return None
    res = einsum_flops(eq, shapes)  # type: ignore[arg-type]
    if res is None:
        return None
    steps, out_shape = res
    dt = A.compute_dtype(call.cdtype, *operands)
    n_in = A.total(*[A.numel(s) for s in shapes])
    n_out = prod(out_shape)
    if call.direction == "bprop":
        if len(operands) == 2:
            grads = [t for t in operands if A.requires_grad(t)]
            flops = float(steps[0] * len(grads))
            # per gradient: read dOut and the other operand, write the gradient
            byts = sum(n_out + A.numel(A.shape(operands[1 - operands.index(g)])) + A.numel(A.shape(g))
                       for g in grads)
        else:
            flops = 2.0 * sum(steps)
            byts = n_out + 2 * n_in
        return Cost(flops, A.sized(byts, dt), dt, tensor_op=True)
    return Cost(float(sum(steps)), A.sized(A.total(n_in, n_out), dt), dt, tensor_op=True)
