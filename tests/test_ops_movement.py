"""View copies, scatters, tensors from Python values, FFTs, sorting and the reductions read by schema:
worked by hand.

The OpInfo samples of the same ops, against torch's dispatch-level byte count, are in
tests/test_opinfo_coverage.py.
"""

from __future__ import annotations

from math import log2

from pyprof.prof.ops import OpCall, estimate, family
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", mod="torch"):
    return estimate(OpCall(op, args, direction, None, mod))


def test_view_copies_read_the_view_and_write_it():
    assert family("t_copy") == "viewcopy"
    c = cost("t_copy", [T([3, 4])])
    assert c.flops == 0 and c.bytes == (12 + 12) * 4
    # expand: the input read once, the expanded result written
    c = cost("expand_copy", [T([5, 1, 1]), S([5, 5, 5], "size")])
    assert c.bytes == (5 + 125) * 4
    assert cost("expand_copy", [T([5, 1, 1]), S([5, 5, 5], "size")], "bprop").flops == 125  # sums the copies
    # narrow: 2 of 5 along dim 1 of [5, 5, 5]: 50 elements read, 50 written
    assert cost("narrow_copy", [T([5, 5, 5]), S(1), S(2), S(2)]).bytes == 100 * 4
    # the diagonal of [4, 6] at offset 3: 3 elements; at offset -2: 2
    assert cost("diagonal_copy", [T([4, 6]), S(3)]).bytes == 6 * 4
    assert cost("diagonal_copy", [T([4, 6]), S(-2)]).bytes == 4 * 4
    # windows of 3, step 2, along a dim of 7: 3 windows of 3, times the other dim's 2, written; the
    # overlapping windows cover the 14 input elements, each read once
    assert cost("unfold_copy", [T([2, 7]), S(1), S(3), S(2)]).bytes == (14 + 18) * 4
    assert cost("as_strided_copy", [T([10]), S([2, 3], "size"), S([1, 2], "stride")]).bytes == 12 * 4


def test_scatters_read_self_and_src_and_write_self():
    c = cost("slice_scatter", [T([8, 4]), T([2, 4]), S(0), S(0), S(2)])
    assert c.flops == 0 and c.bytes == (32 + 8 + 32) * 4
    b = cost("slice_scatter", [T([8, 4]), T([2, 4], grad=False), S(0), S(0), S(2)], "bprop")
    assert b.bytes == 2 * 32 * 4  # only self's gradient: dY read, written with the slice zeroed


def test_tensors_from_python_values():
    assert cost("tensor", [S([[1.0, 2.0], [3.0, 4.0]])]).bytes == 4 * 4  # float32 by default
    assert cost("tensor", [S([1, 2, 3])]).bytes == 3 * 8  # integers: int64
    assert cost("tensor", [S(2.0), S("float64", "dtype")]).bytes == 8
    # inf cannot be written in JSON: the marker holds a float without its value, still one number
    assert cost("tensor", [{"name": "", "type": "float", "value": None}]).bytes == 4
    assert cost("scalar_tensor", [S(-5)]).bytes == 4  # float32 unless dtype
    assert cost("item", [T([], "float64")]).bytes == 8


def test_fft_is_five_n_log_n():
    # a complex transform of 8 points over 3 batches: 5·8·log2(8) each
    c = cost("fft", [T([3, 8], "complex64")], mod="torch.fft")
    assert c.flops == 3 * 5 * 8 * 3 and c.bytes == 2 * 24 * 8
    # a real input padded to n=16 along dim 0 of [10, 2]: 2 batches; the output is complex
    c = cost("fft", [T([10, 2]), S(16, "n"), S(0, "dim")], mod="torch.fft")
    assert c.flops == 2 * 5 * 16 * 4 and c.bytes == 20 * 4 + 32 * 8
    # real to complex: half the work, n//2+1 outputs
    c = cost("rfft", [T([4, 6])], mod="torch.fft")
    assert c.flops == 4 * 2.5 * 6 * log2(6) and c.bytes == 24 * 4 + 4 * 4 * 8
    # complex to real: the last length is 2(m-1)
    c = cost("irfft", [T([4, 5], "complex64")], mod="torch.fft")
    assert c.flops == 4 * 2.5 * 8 * 3 and c.bytes == 20 * 8 + 32 * 4
    # 2-D over the last two dims of [2, 4, 8]: N = 32
    assert cost("fft2", [T([2, 4, 8], "complex64")], mod="torch.fft").flops == 2 * 5 * 32 * 5
    assert cost("fftshift", [T([9, 10])], mod="torch.fft").bytes == 2 * 90 * 4


def test_reductions_read_by_schema():
    # var(x, True): the bool is unbiased, so everything is reduced
    assert cost("var", [T([5, 5]), S(True)]).bytes == (25 + 1) * 4
    c = cost("sum_to_size", [T([4, 3]), S([1, 3], "size")], mod="torch.Tensor")
    assert c.flops == 12 and c.bytes == (12 + 3) * 4
    assert cost("sum_to_size", [T([4, 3]), S([4, 3], "size")], mod="torch.Tensor").bytes == 0  # returns self


def test_split_binds_to_its_schema_and_is_a_view():
    from pyprof.prof.ops.schema import normalize

    b = normalize("split", [T([5, 5], name="tensor"), S([2, 3], "split_size_or_sections")])
    assert b.overload == "aten::split.sizes" and b.args["split_size"]["value"] == [2, 3]
    assert cost("split", [T([5, 5], name="tensor"), S(2, "split_size_or_sections")]).bytes == 0
    assert cost("repeat", [T([]), S([], "repeats")], mod="torch.Tensor").bytes == 2 * 4  # a 0-d tensor


def test_sorting_moves_data_and_counts_no_flops():
    c = cost("sort", [T([4, 10])])
    assert c.flops == 0 and c.bytes == 40 * 4 + 40 * 4 + 40 * 8  # values and int64 indices
    assert cost("argsort", [T([4, 10])]).bytes == c.bytes  # runs sort: both written
    c = cost("topk", [T([4, 10]), S(3)])
    assert c.bytes == 40 * 4 + 12 * 4 + 12 * 8  # 3 per slice of the last dim
    assert cost("topk", [T([4, 10]), S(3)], "bprop").bytes == 12 * 4 + 12 * 8 + 40 * 4  # dY, indices; dX
    assert cost("median", [T([4, 10])]).bytes == 40 * 4 + 4  # the whole tensor: one value
    assert cost("kthvalue", [T([4, 10]), S(2), S(0)]).bytes == 40 * 4 + 10 * 4 + 10 * 8
    c = cost("quantile", [T([4, 10]), T([3]), S(1)])
    assert c.flops == 3 * 12 and c.bytes == (40 + 3 + 12) * 4  # 3 quantiles of 4 rows: interpolated
    c = cost("searchsorted", [T([16]), T([5, 5])])
    assert c.flops == 0 and c.bytes == 16 * 4 + 25 * 4 + 25 * 8
    assert cost("isin", [T([10]), T([3])]).bytes == 13 * 4 + 10  # one bool per element


def test_layouts_write_the_result_in_full():
    assert cost("diag", [T([5])]).bytes == (5 + 25) * 4  # a vector becomes a 5x5 matrix
    assert cost("diag", [T([5]), S(2)]).bytes == (5 + 49) * 4  # off the diagonal: 7x7
    assert cost("diag", [T([4, 6])]).bytes == 2 * 4 * 4  # a matrix's diagonal: read and written
    assert cost("diag_embed", [T([3, 4])]).bytes == (12 + 3 * 16) * 4
    assert cost("block_diag", [T([2, 3]), T([4]), T([])]).bytes == (6 + 4 + 1 + (2 + 1 + 1) * (3 + 4 + 1)) * 4
    assert cost("pixel_shuffle", [T([1, 8, 3, 3]), S(2)], mod="torch.nn.functional").bytes == 2 * 72 * 4
    c = cost("cross", [T([10, 3]), T([10, 3])])
    assert c.flops == 3 * 30 and c.bytes == 3 * 30 * 4
    c = cost("diff", [T([4, 6]), S(2)])  # second difference along the last dim: 5 then 4 per row
    assert c.flops == (5 + 4) * 4 and c.bytes == (24 + 16) * 4
    c = cost("trace", [T([3, 5])])
    assert c.flops == 3 and c.bytes == (3 + 1) * 4
    c = cost("kron", [T([2, 3]), T([4, 5])])
    assert c.flops == 120 and c.bytes == (6 + 20 + 120) * 4


def test_index_ops_of_a_0d_tensor():
    c = cost("index_select", [T([]), S(0), T([1], "int64")])
    assert c.bytes == 8 + 2 * 4  # the index, one element read and written
    c = cost("index_add", [T([]), S(0), T([1], "int64"), T([])])
    assert c.flops == 1  # one add


def test_closeness_eye_logspace_glu():
    assert cost("isclose", [T([4, 5]), T([4, 5])]).bytes == (20 + 20) * 4 + 20  # a bool per element
    assert cost("isclose", [T([4, 5]), T([4, 5])]).flops == 6 * 20
    c = cost("allclose", [T([4, 5]), T([5])])
    assert c.flops == 7 * 20 and c.bytes == (20 + 5) * 4 + 1
    assert cost("equal", [T([4, 5]), T([4, 5])]).flops == 2 * 20
    assert cost("eye", [S(3, "n"), S(4, "m")]).bytes == 12 * 4
    assert cost("eye", [S(3), S("float64", "dtype")]).bytes == 9 * 8
    c = cost("logspace", [S(0.0), S(2.0), S(5)])
    assert c.flops == 10 and c.bytes == 5 * 4
    c = cost("glu", [T([6, 8])], mod="torch.nn.functional")  # halves of 4 along the last dim
    assert c.flops == 5 * 24 and c.bytes == (48 + 24) * 4


def test_upsample_spellings_and_safe_softmax():
    x = T([1, 2, 3, 3])
    c = cost("upsample_bilinear", [x, S(None, "size"), S(2, "scale_factor")], mod="torch.nn.functional")
    assert c.flops == 2 * 36 * (2 * 4 - 1)  # 4 taps per output of [1, 2, 6, 6]
    assert cost("upsample_nearest", [x, S(None, "size"), S(2, "scale_factor")], mod="torch.nn.functional").flops == 0
    assert cost("_safe_softmax", [T([4, 5]), S(1)], mod="aten").flops == cost("softmax", [T([4, 5]), S(1)]).flops
