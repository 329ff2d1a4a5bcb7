"""GEMM family formulas, worked by hand; shape rules cross-checked against torch."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod=None):
    return estimate(OpCall(op, args, direction, cdtype, mod))


def test_mm_forward_and_backward():
    a, b = T([64, 32], "float16"), T([32, 128], "float16")
    f = cost("mm", [a, b])
    assert f.flops == 2 * 64 * 128 * 32  # 524_288
    assert f.bytes == (64 * 32 + 32 * 128 + 64 * 128) * 2  # (2048 + 4096 + 8192) * 2 = 28_672
    assert f.dtype == "float16" and f.tensor_op
    bw = cost("mm", [a, b], "bprop")
    assert bw.flops == 2 * 524_288  # dA = dC·Bᵀ and dB = Aᵀ·dC
    # dA: read dC 8192 + B 4096, write dA 2048; dB: read A 2048 + dC 8192, write dB 4096 -> 28_672 elems
    assert bw.bytes == 28_672 * 2


def test_mm_backward_only_for_operands_requiring_grad():
    a, b = T([64, 32], grad=False), T([32, 128], grad=True)
    bw = cost("mm", [a, b], "bprop")
    assert bw.flops == 524_288  # wgrad only
    assert bw.bytes == (2048 + 8192 + 4096) * 4
    none = cost("mm", [T([64, 32], grad=False), T([32, 128], grad=False)], "bprop")
    assert none.flops == 0 and none.bytes == 0  # nothing to compute: a known zero


def test_bmm_and_baddbmm():
    a, b = T([4, 16, 8]), T([4, 8, 32])
    assert cost("bmm", [a, b]).flops == 2 * 4 * 16 * 32 * 8  # 32_768
    c = cost("baddbmm", [T([4, 16, 32]), a, b])
    assert c.flops == 32_768  # the beta·input epilogue is not counted
    assert c.bytes == (4 * 16 * 8 + 4 * 8 * 32 + 4 * 16 * 32 + 4 * 16 * 32) * 4  # a, b, input, out
    assert cost("baddbmm", [T([4, 16, 32]), a, b], "bprop").flops == 65_536


def test_addmm_bias_bytes_and_beta_zero():
    bias, m1, m2 = T([32]), T([16, 8]), T([8, 32])
    c = cost("aten::addmm", [bias, m1, m2])
    assert c.flops == 2 * 16 * 32 * 8  # 8192
    assert c.bytes == (32 + 128 + 256 + 512) * 4  # bias, mat1, mat2, out = 3712
    bw = cost("addmm", [bias, m1, m2], "bprop")
    assert bw.flops == 2 * 8192
    # dm1: 512 + 256 + 128; dm2: 128 + 512 + 256; dbias: read dC 512, write 32 -> 2336 elems
    assert bw.bytes == 2336 * 4
    assert cost("addmm", [bias, m1, m2, S(0, "beta")]).bytes == (128 + 256 + 512) * 4


def test_addbmm_sums_the_batch():
    c = cost("addbmm", [T([16, 32]), T([4, 16, 8]), T([4, 8, 32])])
    assert c.flops == 2 * 4 * 16 * 32 * 8  # 32_768
    assert c.bytes == (512 + 512 + 1024 + 512) * 4  # input, batch1, batch2, out [16, 32]


def test_linear_with_leading_dims():
    x, w, b = T([2, 10, 64], "bfloat16"), T([256, 64], "bfloat16"), T([256], "bfloat16")
    f = cost("linear", [x, w, b], mod="torch.nn.functional")
    assert f.flops == 2 * 20 * 256 * 64  # M = 2*10 = 20 -> 655_360
    assert f.bytes == (1280 + 16384 + 256 + 5120) * 2  # x, w, b, out[2,10,256]
    bw = cost("linear", [x, w, b], "bprop")
    assert bw.flops == 2 * 655_360
    # dX: 5120 + 16384 + 1280; dW: 1280 + 5120 + 16384; db: 5120 + 256 -> 50_944 elems
    assert bw.bytes == 50_944 * 2


def test_linear_input_without_grad_prices_wgrad_only():
    bw = cost("linear", [T([8, 4], grad=False), T([2, 4]), T([2], grad=False)], "bprop")
    assert bw.flops == 2 * 8 * 2 * 4  # 128: dW only; dbias not needed
    assert bw.bytes == (32 + 16 + 8) * 4


def test_matmul_broadcast_and_vectors():
    # [3, 1, 5, 6] @ [4, 6, 7] -> batch [3, 4]: 2 * 12 * 5 * 7 * 6 = 5040
    assert cost("__matmul__", [T([3, 1, 5, 6]), T([4, 6, 7])], mod="torch.Tensor").flops == 5040
    assert cost("matmul", [T([6]), T([6])]).flops == 12  # dot: 2 * 6
    assert cost("matmul", [T([5, 6]), T([6])]).flops == 60  # mv: 2 * 5 * 6
    assert cost("matmul", [T([6]), T([6, 7])]).flops == 84  # vm: 2 * 7 * 6
    assert cost("matmul", [T([5, 6]), T([7, 8])]) is None  # inner dims differ: unknown


def test_rmatmul_swaps_operands():
    # Tensor.__rmatmul__(self=[6, 7], other=[5, 6]) computes other @ self -> 2 * 5 * 7 * 6 = 420
    assert cost("__rmatmul__", [T([6, 7], name="self"), T([5, 6])], mod="torch.Tensor").flops == 420


def test_einsum_contractions():
    q, k = T([2, 4, 16, 8]), T([2, 4, 32, 8])
    c = cost("einsum", [S("bhqd,bhkd->bhqk"), q, k])
    assert c.flops == 2 * 2 * 4 * 16 * 32 * 8  # every letter once: 65_536
    assert c.bytes == (1024 + 2048 + 4096) * 4
    assert cost("einsum", [S("bhqd,bhkd->bhqk"), q, k], "bprop").flops == 2 * 65_536
    # ellipsis and implicit output: '...ij,jk' == batch x [i,k]
    assert cost("einsum", [S("...ij,jk"), T([3, 5, 6]), T([6, 7])]).flops == 2 * 3 * 5 * 6 * 7
    # three operands, left to right: (ij,jk) -> ik costs 2*i*j*k, then (ik,kl) -> il costs 2*i*k*l
    c3 = cost("einsum", [S("ij,jk,kl->il"), T([2, 3]), T([3, 4]), T([4, 5])])
    assert c3.flops == 2 * 2 * 3 * 4 + 2 * 2 * 4 * 5  # 48 + 80
    assert cost("einsum", [S("ii->i"), T([4, 4])]) is None  # single operand: not a GEMM
    # outer product sums nothing: one multiply per output element, 5 * 7 = 35
    assert cost("einsum", [S("i,j->ij"), T([5]), T([7])]).flops == 35


@pytest.mark.torch
@pytest.mark.parametrize("eq, shapes", [
    ("bij,bjk->bik", [[3, 4, 5], [3, 5, 6]]),
    ("bhqd,bhkd->bhqk", [[2, 3, 7, 8], [2, 3, 9, 8]]),
    ("bi,bi->b", [[5, 3], [5, 3]]),
    ("...ij,...jk->...ik", [[2, 3, 4, 5], [2, 3, 5, 6]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]]),
])
def test_einsum_agrees_with_flopcountermode(eq, shapes):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    ts = [torch.randn(*s) for s in shapes]
    with FlopCounterMode(display=False) as fc:
        torch.einsum(eq, *ts)
    assert cost("einsum", [S(eq), *[T(s) for s in shapes]]).flops == fc.get_total_flops()


@pytest.mark.torch
@pytest.mark.parametrize("sa, sb", [([5, 6], [6, 7]), ([3, 5, 6], [6, 7]), ([3, 1, 5, 6], [4, 6, 7]),
                                    ([6], [6, 7]), ([2, 5, 6], [2, 6, 3])])
def test_matmul_agrees_with_flopcountermode_forward_and_backward(sa, sb):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    a, b = torch.randn(*sa, requires_grad=True), torch.randn(*sb, requires_grad=True)
    with FlopCounterMode(display=False) as fc:
        out = a @ b
    fwd = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        out.sum().backward()
    assert cost("matmul", [T(sa), T(sb)]).flops == fwd
    assert cost("matmul", [T(sa), T(sb)], "bprop").flops == fc.get_total_flops()


def test_tensor_core_note_for_odd_dims():
    assert "tensor cores" in cost("mm", [T([30, 64], "float16"), T([64, 64], "float16")]).note
    assert cost("mm", [T([32, 64], "float16"), T([64, 64], "float16")]).note == ""


def test_addmv_and_addr():
    # addmv(self[5], mat[5, 3], vec[3]): 2 * 5 * 3 = 30; backward: d(mat) and d(vec), 30 each
    assert cost("addmv", [T([5]), T([5, 3]), T([3])]).flops == 30
    assert cost("addmv", [T([5]), T([5, 3]), T([3])], "bprop").flops == 60
    assert cost("addmv", [T([5]), T([5, 3], grad=False), T([3])], "bprop").flops == 30  # frozen matrix
    # addr(self[4, 5], vec1[4], vec2[5]): one multiply-add per element, 2 * 4 * 5 = 40
    assert cost("addr", [T([4, 5]), T([4]), T([5])]).flops == 40


def test_an_out_call_recorded_by_a_trace_is_priced_as_the_op():
    """Inductor's generated code calls ``extern_kernels.addmm(bias, x, w, beta=1, alpha=1, out=buf)``;
    a trace lists the arguments in place, the output last (aten's .out overload). x [128, 64] @ w [64, 192]:
    2 * 128 * 64 * 192 = 3,145,728 FLOPs; bytes: bias 192, x 8192, w 12288, out 24576 floats, each once."""
    def t(*shape):
        return {"name": None, "type": "tensor", "shape": list(shape), "dtype": "float32"}

    one = {"name": None, "type": "int", "value": 1}
    c = estimate(OpCall("addmm", [t(192), t(128, 64), t(64, 192), one, one, t(128, 192)], "fprop", None, "aten"))
    assert c.flops == 2 * 128 * 64 * 192 and c.bytes == 4 * (192 + 8192 + 12288 + 24576)
    m = estimate(OpCall("mm", [t(128, 64), t(64, 192), t(128, 192)], "fprop", None, "aten"))
    assert m.flops == 2 * 128 * 64 * 192


def test_tensordot_is_one_gemm_over_the_contracted_dims():
    a, b = T([3, 4, 5], name="a"), T([4, 5, 6], name="b")
    c = cost("tensordot", [a, b, S(2, "dims")], mod="torch")  # contract a's last two with b's first two
    assert c.flops == 2 * 3 * 6 * 20 and c.bytes == (60 + 120 + 18) * 4
    c = cost("tensordot", [a, T([5, 3, 2], name="b"), S([[0, 2], [1, 0]], "dims")], mod="torch")
    assert c.flops == 2 * 4 * 2 * 15  # contracted 3·5; free 4 and 2
    assert cost("tensordot", [a, b, S(2, "dims")], "bprop", mod="torch").flops == 2 * 2 * 3 * 6 * 20
