"""Attention family: ``scaled_dot_product_attention`` and the fused kernels behind it
(flash, memory-efficient, cuDNN, the CPU flash kernel, the math fallback).

With queries ``[..., L, E]`` (``B`` = product of the leading dims, heads included), keys ``[..., S, E]``
and values ``[..., S, Ev]``:

* forward FLOPs = ``2·B·L·S·E`` (scores ``Q·Kᵀ``) + ``2·B·L·S·Ev`` (``P·V``);
* backward FLOPs = ``2·B·L·S·(3·E + 2·Ev)``: the scores are recomputed (``Q·Kᵀ``), then ``dP = dO·Vᵀ``,
  ``dV = Pᵀ·dO``, ``dQ = dS·K``, ``dK = dSᵀ·Q``.

The backward kernels themselves (:data:`BACKWARD`), which a compiled region's backward graph calls
directly with no forward op to link to, are priced by the backward formula whatever the direction of
their record, from their own ``query``/``key``/``value``.

These are FlopCounterMode's formulas for a dense mask. Softmax, scaling and masking are O(B·L·S) and
not counted. A causal call (``is_causal=True``, or the memory-efficient kernel's causal mask types)
counts **half** of that: fused kernels skip the tiles above the diagonal, so half is the work they
execute (FlopCounterMode counts causal attention dense; halve its attention figure to compare). An
explicit ``attn_mask`` is priced dense: its pattern is not known from shapes. Grouped-query attention
(fewer key/value heads) prices the products per query head, as the kernels broadcast K/V.

Bytes are the ideal (flash) traffic: Q, K, V (and a mask) read once, O written once; backward reads
Q, K, V, O, dO and writes dQ, dK, dV. The ``[L, S]`` score matrix is never counted (the math fallback
does materialise it: its bytes are then an underestimate).
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register
from pyprof.prof.ops.schema import param_names

FORWARD = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
           "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
           "_flash_attention_forward", "_efficient_attention_forward")
#: The backward ops, priced as the backward of the products above from their own arguments.
BACKWARD = ("_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
            "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_backward",
            "_efficient_attention_backward")
# The kernels that take [batch, seq, heads, dim] ("bshd"); the others take [..., seq, dim] ("bhsd").
_BSHD = {"_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
         "_efficient_attention_backward"}


def attention_dims(q: list[int], k: list[int], v: list[int], layout: str):
    """-> (B·H_q, L, S, E, Ev) or ``None`` when the shapes do not fit together."""
    if len(q) < 2 or len(k) != len(q) or len(v) != len(q):
        return None
    if layout == "bshd":
        if len(q) != 4:
            return None
        (b, sl, h, e), (_, ss, hk, ek), (_, sv, hv, ev) = q, k, v
        if ek != e or sv != ss or hv != hk or hk == 0 or h % hk:
            return None
        return b * h, sl, ss, e, ev
    *bq, sl, e = q
    *bk, ss, ek = k
    *bv, sv, ev = v
    if ek != e or sv != ss or bk != bv or len(bq) != len(bk):
        return None
    if any(dk == 0 or dq % dk for dq, dk in zip(bq, bk, strict=True)):  # GQA: query heads a multiple of K/V's
        return None
    return prod(bq), sl, ss, e, ev


@register(*FORWARD, *BACKWARD)
def _sdpa(call: OpCall) -> Cost | None:
    b = A.bind(call.args, param_names(call.op))  # by position: a call that stops after q, k, v prices too
    q, k, v = b.get("query"), b.get("key"), b.get("value")
    sq, sk, sv = A.shape(q), A.shape(k), A.shape(v)
    if sq is None or sk is None or sv is None:
        return None
    d = attention_dims(sq, sk, sv, "bshd" if call.op in _BSHD else "bhsd")
    if d is None:
        return None
    bh, sl, ss, e, ev = d
    dt = A.compute_dtype(call.cdtype, q, k, v)
    nq, nk, nv = prod(sq), prod(sk), prod(sv)
    no = bh * sl * ev
    mask = b.get("attn_mask") or b.get("attn_bias") or b.get("bias")
    mask_bytes = A.nbytes(mask) if A.is_tensor(mask) else 0  # a bool mask is 1 byte per element
    causal = A.value(b.get("is_causal"), False) is True or A.value(b.get("custom_mask_type"), 0) in (1, 2)
    share = 0.5 if causal else 1.0  # the causal half: the work a fused kernel executes
    note = "causal: half the dense FLOPs" if causal else ""
    if call.direction == "bprop" or call.op in BACKWARD:
        flops = share * 2.0 * bh * sl * ss * (3 * e + 2 * ev)
        byts = A.total(A.sized(nq + nk + nv + no + no + nq + nk + nv, dt), mask_bytes)
        return Cost(flops, byts, dt, tensor_op=True, note=note)
    flops = share * 2.0 * bh * sl * ss * (e + ev)
    return Cost(flops, A.total(A.sized(nq + nk + nv + no, dt), mask_bytes), dt, tensor_op=True, note=note)
