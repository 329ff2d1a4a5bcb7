"""The linear-algebra models against LAPACK Working Note 41's counts, worked by hand from the formulas
of pyprof/prof/ops/linalg.py's docstring (M multiplications + A additions per matrix; complex 6M + 2A).
The GEMM chains are checked against torch's FlopCounterMode in tests/test_opinfo_linalg.py."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate, family, scalar_arg, tensor_arg, tensorlist_arg


def cost(op, *args, direction="fprop", mod="aten"):
    return estimate(OpCall(op, list(args), direction, None, mod))


def test_cholesky_is_potrf():
    # potrf, n = 4: M = 64/6 + 16/2 + 4/3 = 20, A = 64/6 - 4/6 = 10 -> 30 per matrix, two matrices
    c = cost("aten::linalg_cholesky", tensor_arg([2, 4, 4]))
    assert c.flops == pytest.approx(60.0)
    assert c.bytes == 2 * 2 * 16 * 4  # read A, write L
    assert family("linalg_cholesky") == "linalg"
    # complex data: 6M + 2A = 140 per matrix
    assert cost("aten::cholesky", tensor_arg([4, 4], "complex64")).flops == pytest.approx(140.0)


def test_inverse_is_lu_then_solve_against_the_identity():
    # getrf(4, 4): M = 32 - 64/6 + 8 - 8 + 8/3 = 24, A = 32 - 64/6 - 8 + 4/6 = 14 -> 38
    # getrs(4, r=4): M = 4*16 = 64, A = 4*(16 - 4) = 48 -> 112
    assert cost("aten::linalg_inv", tensor_arg([4, 4])).flops == pytest.approx(150.0)
    assert cost("linalg.inv", tensor_arg([4, 4]), mod="torch.linalg").flops == pytest.approx(150.0)
    assert cost("aten::linalg_det", tensor_arg([4, 4])).flops == pytest.approx(38.0)


def test_solve_reads_a_vector_right_hand_side():
    # getrf 38 + getrs(4, r=1): M = 16, A = 12
    c = cost("aten::linalg_solve", tensor_arg([4, 4]), tensor_arg([4]))
    assert c.flops == pytest.approx(66.0)


def test_reduced_qr_is_geqrf_then_orgqr():
    # geqrf(4, 3): M = 36 - 9 + 12 + 4.5 + 11.5 = 55, A = 36 - 9 + 4.5 + 2.5 = 34 -> 89
    # orgqr(4, 3, 3): M = 72 - 63 + 18 + 18 - 9 - 5 = 31, A = 72 - 63 + 18 + 9 - 12 + 1 = 25 -> 56
    assert cost("aten::linalg_qr", tensor_arg([4, 3])).flops == pytest.approx(145.0)
    assert cost("aten::linalg_qr", tensor_arg([4, 3]), scalar_arg("r")).flops == pytest.approx(89.0)
    assert cost("aten::geqrf", tensor_arg([4, 3])).flops == pytest.approx(89.0)


def test_triangular_solve_is_trsm():
    # A 3x3, B 3x2: M = 2*3*4/2 = 12, A = 2*3*2/2 = 6
    c = cost("aten::linalg_solve_triangular", tensor_arg([3, 3]), tensor_arg([3, 2]), scalar_arg(True))
    assert c.flops == pytest.approx(18.0)


def test_multi_dot_takes_the_cheapest_order():
    # 2x3 @ 3x4 @ 4x1: (AB)C = 24 + 8 multiply-adds, A(BC) = 12 + 6: 2 * 18 FLOPs, a GEMM
    chain = tensorlist_arg([tensor_arg([2, 3]), tensor_arg([3, 4]), tensor_arg([4, 1])])
    c = cost("aten::linalg_multi_dot", chain)
    assert c.flops == 36.0 and family("linalg_multi_dot") == "gemm"


def test_matrix_power_counts_torch_s_products():
    # n = 5 = 0b101: two squarings and one more product, each 2 * 3^3
    assert cost("aten::linalg_matrix_power", tensor_arg([3, 3]), scalar_arg(5)).flops == 3 * 54.0
    assert cost("aten::linalg_matrix_power", tensor_arg([3, 3]), scalar_arg(3)).flops == 2 * 54.0


def test_backward_as_a_whole_is_unknown_never_a_guess():
    """A linalg op priced whole in bprop (no trace of what ran) is n/a: its backward is priced where it
    ran (pyprof/prof/backward.py)."""
    assert cost("aten::linalg_cholesky", tensor_arg([4, 4]), direction="bprop") is None
    assert cost("aten::linalg_svd", tensor_arg([4, 4]), direction="bprop") is None


def test_matrix_exp_has_no_model():
    """Its products depend on the matrix's norm, which no record holds (the docstring says so)."""
    assert cost("aten::linalg_matrix_exp", tensor_arg([4, 4])) is None
