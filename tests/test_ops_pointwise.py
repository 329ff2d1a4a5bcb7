"""Pointwise family: per-element counts and the stated backward rule, worked by hand."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T
from pyprof.prof.ops.pointwise import TABLE


def cost(op, args, direction="fprop", cdtype=None, mod="torch"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


def test_add_broadcast_forward():
    # [4, 1, 8] + [3, 8] -> [4, 3, 8] = 96 elements, 1 FLOP each
    c = cost("add", [T([4, 1, 8]), T([3, 8])])
    assert c.flops == 96
    assert c.bytes == (32 + 24 + 96) * 4  # both inputs read, output written


def test_add_backward_reduces_broadcast_inputs():
    # dA: identity on [4,1,8] from [4,3,8] needs a reduction: 96 adds; dB [3,8] also reduced: 96 adds
    c = cost("add", [T([4, 1, 8]), T([3, 8])], "bprop")
    assert c.flops == 96 + 96
    assert c.bytes == (96 + 32 + 24) * 4  # read dY, write dA and dB (add does not need its inputs)
    same = cost("add", [T([10]), T([10])], "bprop")
    assert same.flops == 0 and same.bytes == (10 + 10 + 10) * 4  # pass-through gradients


def test_add_alpha_and_scalar_operand():
    assert cost("add", [T([10]), T([10]), S(2.0, "alpha")]).flops == 20  # a + 2·b: 2 per element
    c = cost("__radd__", [T([10], "float16"), S(1.0)], mod="torch.Tensor")
    assert c.flops == 10 and c.bytes == (10 + 10) * 2


def test_mul_backward_reads_inputs():
    c = cost("mul", [T([5, 6]), T([5, 6])], "bprop")
    assert c.flops == 30 + 30  # dA = dY·B, dB = dY·A
    assert c.bytes == (30 + 30 + 30 + 30 + 30) * 4  # dY, dA, dB, A, B
    one = cost("mul", [T([5, 6]), T([5, 6], grad=False)], "bprop")
    assert one.flops == 30 and one.bytes == (30 + 30 + 30 + 30) * 4  # dY, dA, A, B


def test_activations_forward_and_backward():
    x = T([1000], "bfloat16")
    assert cost("relu", [x]).flops == 1000 and cost("relu", [x], "bprop").flops == 1000
    assert cost("gelu", [x]).flops == 5000 and cost("gelu", [x], "bprop").flops == 11_000
    assert cost("gelu", [x, S("tanh", "approximate")]).flops == 9000
    assert cost("silu", [x]).flops == 5000 and cost("silu", [x], "bprop").flops == 9000
    assert cost("sigmoid", [x]).flops == 4000 and cost("sigmoid", [x], "bprop").flops == 3000
    assert cost("tanh", [x]).flops == 1000 and cost("tanh", [x], "bprop").flops == 3000
    c = cost("relu_", [x], mod="torch.Tensor")  # in place: reads and writes x
    assert c.bytes == 2000 * 2 and c.dtype == "bfloat16"
    # backward of relu: read dY and x, write dX
    assert cost("relu", [x], "bprop").bytes == 3000 * 2


def test_div_pow_and_comparisons():
    assert cost("__truediv__", [T([8]), T([8])], mod="torch.Tensor").flops == 8
    assert cost("div", [T([8]), T([8])], "bprop").flops == 2 * 8 * 2  # 2 per element per input
    assert cost("pow", [T([8]), S(2.0)], "bprop").flops == 3 * 8
    c = cost("gt", [T([8]), T([8])])
    assert c.flops == 8 and c.bytes == 8 * 4 * 2 + 8 * 1  # bool output
    assert cost("gt", [T([8]), T([8])], "bprop").flops == 0  # no gradient through a comparison


def test_integer_division_outputs_float():
    c = cost("div", [T([4], "int64"), T([4], "int64")])
    assert c.bytes == 4 * 8 * 2 + 4 * 4  # int64 inputs, float32 output


def test_where_and_clamp_and_addcmul():
    c = cost("where", [T([6], "bool"), T([6]), T([6])])
    assert c.flops == 6 and c.bytes == 6 * 1 + 6 * 4 * 2 + 6 * 4
    assert cost("clamp", [T([6]), S(0.0), S(1.0)]).flops == 12
    assert cost("addcmul_", [T([6]), T([6]), T([6]), S(0.5, "value")], mod="torch.Tensor").flops == 18


def test_unknown_shapes_give_none():
    assert cost("add", [T([4, 5]), T([3, 5])]) is None  # not broadcastable
    assert cost("add", [S(1.0), S(2.0)]) is None  # no tensor at all
    c = cost("add", [T([4], None), T([4], None)])
    assert c.flops == 4 and c.bytes is None  # sizes-only: FLOPs yes, bytes unknown


@pytest.mark.parametrize("op", sorted(TABLE))
def test_every_table_entry_prices_a_tensor(op):
    c = cost(op, [T([3, 4]), T([3, 4])])
    assert c is not None and c.flops == TABLE[op][0] * 12


def test_outer_and_triangular_masks():
    c = cost("outer", [T([5]), T([7])])
    assert c.flops == 35 and c.bytes == (5 + 7 + 35) * 4
    assert cost("outer", [T([5]), T([7])], "bprop").flops == 2 * 35 * 2  # da and db: multiply-add each
    assert cost("tril", [T([8, 8]), S(0)]).flops == 64


def test_a_0dim_tensor_does_not_promote_a_dimensioned_one():
    """bf16 activations times a 0-dim float64 tensor compute (and are priced) in bf16, as torch promotes."""
    from pyprof.prof.ops import OpCall, estimate, tensor_arg

    x = tensor_arg([1024, 1024], "bfloat16", name="input")
    s = tensor_arg([], "float64", name="other")
    c = estimate(OpCall("mul", [x, s]))
    assert c.dtype == "bfloat16" and c.bytes == 1024 * 1024 * 2 * 2 + 8
