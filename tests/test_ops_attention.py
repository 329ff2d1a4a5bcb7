"""Attention family formulas, worked by hand; cross-checked against FlopCounterMode's formulas."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod="torch.nn.functional"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


Q, K, V = T([2, 8, 128, 64], "bfloat16"), T([2, 8, 256, 64], "bfloat16"), T([2, 8, 256, 32], "bfloat16")


def test_sdpa_forward_by_hand():
    c = cost("scaled_dot_product_attention", [Q, K, V])
    # B·H = 16, L = 128, S = 256, E = 64, Ev = 32: 2·16·128·256·64 + 2·16·128·256·32
    assert c.flops == 67_108_864 + 33_554_432
    # Q 131072 + K 262144 + V 131072 + O (16·128·32 = 65536) elements, bf16
    assert c.bytes == (131_072 + 262_144 + 131_072 + 65_536) * 2
    assert c.tensor_op and c.dtype == "bfloat16" and c.note == ""


def test_sdpa_backward_by_hand():
    c = cost("scaled_dot_product_attention", [Q, K, V], "bprop")
    # 2·B·H·L·S·(3E + 2Ev) = 2·16·128·256·(192 + 64) = 268_435_456
    assert c.flops == 268_435_456
    # read Q, K, V, O, dO; write dQ, dK, dV
    assert c.bytes == (131_072 + 262_144 + 131_072 + 65_536 * 2 + 131_072 + 262_144 + 131_072) * 2


def test_causal_counts_the_causal_half_with_a_note():
    """Fused kernels skip the tiles above the diagonal: a causal call does half the dense work."""
    for direction in ("fprop", "bprop"):
        dense = cost("scaled_dot_product_attention", [Q, K, V], direction)
        causal = cost("scaled_dot_product_attention", [Q, K, V, S(None), S(0.0), S(True)], direction)
        assert causal.flops == dense.flops / 2 and "causal" in causal.note
        assert causal.bytes == dense.bytes  # the tensors are read and written whole either way


def test_mask_bytes_use_the_mask_dtype():
    mask = T([128, 256], "bool", name="attn_mask")
    c = cost("scaled_dot_product_attention", [Q, K, V, mask])
    assert c.bytes == (131_072 + 262_144 + 131_072 + 65_536) * 2 + 128 * 256  # bool mask: 1 byte/elem


def test_fused_kernel_spellings():
    want = 67_108_864 + 33_554_432
    for op in ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
               "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"):
        assert cost(op, [Q, K, V], mod="aten").flops == want, op
    # _flash_attention_forward takes [batch, seq, heads, dim]
    q, k, v = T([2, 128, 8, 64]), T([2, 256, 8, 64]), T([2, 256, 8, 32])
    assert cost("aten::_flash_attention_forward", [q, k, v], mod="aten").flops == want


def test_grouped_query_attention_prices_per_query_head():
    # 8 query heads, 2 key/value heads: products per query head: 2·16·128·256·64·2 (E = Ev = 64)
    q, k, v = T([2, 8, 128, 64]), T([2, 2, 256, 64]), T([2, 2, 256, 64])
    assert cost("scaled_dot_product_attention", [q, k, v, S(True, "enable_gqa")]).flops == 134_217_728
    assert cost("scaled_dot_product_attention", [q, T([2, 3, 256, 64]), T([2, 3, 256, 64])]) is None


@pytest.mark.torch
@pytest.mark.parametrize("qs, ks, vs", [([2, 4, 16, 8], [2, 4, 24, 8], [2, 4, 24, 12]),
                                        ([1, 3, 10, 16], [1, 3, 10, 16], [1, 3, 10, 16])])
def test_sdpa_matches_flopcountermode_formulas(qs, ks, vs):
    pytest.importorskip("torch")
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    assert cost("scaled_dot_product_attention", [T(qs), T(ks), T(vs)]).flops == sdpa_flop_count(qs, ks, vs)
    go = qs[:-1] + vs[-1:]
    assert cost("scaled_dot_product_attention", [T(qs), T(ks), T(vs)], "bprop").flops == \
        sdpa_backward_flop_count(go, qs, ks, vs)


def test_attention_backward_kernels_are_priced_as_the_backward():
    """A compiled region's backward graph calls the SDPA backward ops directly: their own query, key
    and value give the backward formula, whatever the record's direction; causal halves it."""
    want = cost("scaled_dot_product_attention", [Q, K, V], "bprop")
    out, dO, lse = T([2, 8, 128, 32], "bfloat16"), T([2, 8, 128, 32], "bfloat16"), T([2, 8, 128], "float32")
    cpu = [dO, Q, K, V, out, lse, S(0.0), S(False)]
    for direction in ("fprop", "bprop"):
        got = cost("_scaled_dot_product_flash_attention_for_cpu_backward", cpu, direction, mod="aten")
        assert (got.flops, got.bytes) == (want.flops, want.bytes)
    causal = cost("_scaled_dot_product_flash_attention_for_cpu_backward", [*cpu[:7], S(True)], mod="aten")
    assert causal.flops == want.flops / 2
    # the CUDA kernels' layouts: flash (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, ...),
    # memory-efficient (grad_out, q, k, v, attn_bias, out, ...)
    flash = cost("_scaled_dot_product_flash_attention_backward", [dO, Q, K, V, out, lse], mod="aten")
    eff = cost("_scaled_dot_product_efficient_attention_backward", [dO, Q, K, V, S(None), out, lse], mod="aten")
    assert flash.flops == eff.flops == want.flops
