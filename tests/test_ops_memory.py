"""Data-movement families: concat, copy, fill and indexing, worked by hand."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T
from pyprof.prof.ops._args import tensorlist_arg as L


def cost(op, args, direction="fprop", cdtype=None, mod="torch"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


# ----------------------------------------------------------------------------- cat / stack
def test_cat_tensorlist_and_legacy_spread_arguments():
    a, b = T([2, 3], "float16"), T([4, 3], "float16")
    c = cost("cat", [L([a, b]), S(0, "dim")])
    assert c.flops == 0 and c.bytes == (6 + 12) * 2 * 2  # read both, write 18 elements
    assert cost("cat", [a, b, S(0, "dim")]) == c  # old PyProf markers spread the list
    st = cost("stack", [L([T([5]), T([5]), T([5])])])
    assert st.bytes == 15 * 4 * 2
    bw = cost("cat", [L([a, T([4, 3], "float16", grad=False)])], "bprop")
    assert bw.flops == 0 and bw.bytes == (18 + 6) * 2  # read dY, write the one gradient


# ----------------------------------------------------------------------------- copies
def test_casts_and_moves():
    x = T([10, 10], "float16", device="cuda:0")
    c = cost("to", [x, S("float32", "dtype")], mod="torch.Tensor")
    assert c.flops == 0 and c.bytes == 100 * 2 + 100 * 4 and c.dtype == "float32"
    assert cost("float", [x], mod="torch.Tensor").bytes == 600
    noop = cost("to", [x, {"name": "", "type": "dtype", "value": "float16"}], mod="torch.Tensor")
    assert noop.bytes == 0  # already that dtype: returns self
    move = cost("to", [x, {"name": "", "type": "device", "value": "cpu"}], mod="torch.Tensor")
    assert move.bytes == 400  # device change: 200 read + 200 written
    assert cost("_to_copy", [x], mod="aten").bytes == 400  # _to_copy always copies
    assert cost("to", [x, S("float32", "dtype")], "bprop").bytes == 600  # gradient cast back


def test_contiguous_clone_copy():
    assert cost("contiguous", [T([8, 8], contig=True)], mod="torch.Tensor").bytes == 0
    assert cost("contiguous", [T([8, 8], contig=False)], mod="torch.Tensor").bytes == 64 * 4 * 2
    assert cost("contiguous", [T([8, 8])]) is None  # contiguity unknown: cannot tell
    assert cost("clone", [T([8, 8])]).bytes == 512
    assert cost("clone", [T([8, 8])], "bprop").bytes == 0  # gradient passes through
    # dst[4, 8] fp32 .copy_(src[8] bf16, broadcast): read 8*2, write 32*4
    assert cost("copy_", [T([4, 8], name="self"), T([8], "bfloat16")], mod="torch.Tensor").bytes == 16 + 128


# ----------------------------------------------------------------------------- fills
def test_fill_zero_and_factories():
    assert cost("fill_", [T([3, 4], "float16"), S(1.0)], mod="torch.Tensor").bytes == 24
    assert cost("zero_", [T([3, 4])], mod="torch.Tensor").bytes == 48
    assert cost("zeros_like", [T([3, 4], "int8")]).bytes == 12
    assert cost("zeros", [S(2, "size"), S(5)]).bytes == 40  # default float32
    assert cost("zeros", [S([2, 5]), {"name": "dtype", "type": "dtype", "value": "float16"}]).bytes == 20
    assert cost("full", [S([3]), S(7)]).bytes == 24  # integer fill value -> int64
    assert cost("fill_", [T([3, 4]), S(1.0)]).flops == 0
    assert cost("fill_", [T([3, 4]), S(1.0)], "bprop").bytes == 0


# ----------------------------------------------------------------------------- indexing
def test_gather_and_its_backward():
    x, idx = T([10, 20]), T([10, 5], "int64", grad=False)
    c = cost("gather", [x, S(1), idx])
    assert c.flops == 0 and c.bytes == 50 * 8 + 50 * 4 * 2  # indices, selected reads, output
    b = cost("gather", [x, S(1), idx], "bprop")
    assert b.flops == 50 and b.bytes == 50 * 4 + 50 * 8 + 200 * 4  # dY, indices, whole dX


def test_index_select_and_aten_index():
    c = cost("index_select", [T([100, 16]), S(0), T([7], "int64")])
    assert c.bytes == 7 * 8 + 7 * 16 * 4 * 2
    # x[idx] with idx [3, 2] on x [100, 16] -> [3, 2, 16]
    d = cost("aten::index", [T([100, 16]), L([T([3, 2], "int64")])], mod="aten")
    assert d.bytes == 6 * 8 + 96 * 4 * 2
    assert cost("__getitem__", [T([100, 16], name="self"), T([3, 2], "int64", name="key")],
                mod="torch.Tensor") == d
    assert cost("__getitem__", [T([100, 16], name="self"), S(0, "key")], mod="torch.Tensor") is None  # a view
    assert cost("aten::index", [T([100, 16]), L([T([100], "bool")])], mod="aten") is None  # data dependent


def test_scatter_family():
    x, idx, src = T([10, 20]), T([10, 5], "int64"), T([10, 5])
    c = cost("scatter_add_", [x, S(1), idx, src], mod="torch.Tensor")
    assert c.flops == 50  # one add per source element
    assert c.bytes == 50 * 8 + 50 * 4 + 50 * 4  # indices, source, updated elements
    assert cost("scatter", [x, S(1), idx, src]).flops == 0  # plain scatter overwrites
    assert cost("index_add_", [x, S(0), T([3], "int64"), T([3, 20])], mod="torch.Tensor").flops == 60
    m = cost("masked_fill", [T([4, 4]), T([4, 4], "bool"), S(0.0)])
    assert m.flops == 16 and m.bytes == 64 + 16 + 64


# ----------------------------------------------------------------------------- views and ranges
def test_views_are_known_zeros_and_reshape_copies_only_when_it_must():
    x = T([4, 6], contig=False, name="self")
    for op in ("view", "transpose", "permute", "expand", "squeeze", "unsqueeze", "split", "t"):
        c = cost(op, [x, S(0)], mod="torch.Tensor")
        assert c.flops == 0 and c.bytes == 0, op
    assert cost("reshape", [T([4, 6], contig=True), S(24)], mod="torch.Tensor").bytes == 0
    assert cost("reshape", [x, S(24)], mod="torch.Tensor").bytes == 24 * 4 * 2  # the copy it made
    assert cost("flatten", [x, S(0)]).bytes == 24 * 4 * 2


def test_arange_and_linspace():
    assert cost("arange", [S(16)]).bytes == 16 * 8  # int64
    assert cost("arange", [S(0), S(10), S(3)]).bytes == 4 * 8  # 0, 3, 6, 9
    assert cost("arange", [S(1.0), S(2.0), S(0.25)]).bytes == 4 * 4  # float32
    assert cost("linspace", [S(0.0), S(1.0), S(5)]).bytes == 5 * 4


def test_to_device_string_and_scatter_backward():
    x = T([10], "float32", device="cpu")
    assert cost("to", [x, S("cuda:0")], mod="torch.Tensor").bytes == 80  # moved: read 40, write 40
    assert cost("to", [x, S("cpu")], mod="torch.Tensor").bytes == 0
    # scatter_add backward: dY passes to the input (read + write 200), the source gathers dY at the
    # 50 indices (indices 50*8 read, 50 dY read, 50 written)
    b = cost("scatter_add", [T([10, 20]), S(1), T([10, 5], "int64", grad=False), T([10, 5])], "bprop")
    assert b.flops == 0 and b.bytes == 200 * 4 * 2 + 50 * 8 + 50 * 4 * 2


def test_reordering_repeat_and_pad():
    assert cost("flip", [T([4, 5]), S([0])]).bytes == 20 * 4 * 2
    # [2, 3].repeat(2, 1, 2) -> [2, 2, 6] = 24 elements: read 6, write 24; backward sums tiles: 24 adds
    assert cost("repeat", [T([2, 3], name="self"), S(2, "repeats"), S(1), S(2)], mod="torch.Tensor").bytes == 30 * 4
    assert cost("repeat", [T([2, 3], name="self"), S([2, 1, 2])], "bprop").flops == 24
    # F.pad([1, 3, 8, 8], (1, 1, 2, 0)) -> [1, 3, 10, 10]: read 192, write 300
    assert cost("pad", [T([1, 3, 8, 8]), S([1, 1, 2, 0])], mod="torch.nn.functional").bytes == (192 + 300) * 4
    assert cost("pad", [T([1, 3, 8, 8]), S([1, 1, 2])], mod="torch.nn.functional") is None  # odd pad list


@pytest.mark.torch
def test_output_sizes_match_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    x = torch.randn(2, 3, 4)
    y = x.repeat(2, 1, 1, 3)
    assert cost("repeat", [T([2, 3, 4], name="self"), S([2, 1, 1, 3])]).bytes == (x.numel() + y.numel()) * 4
    y = F.pad(x, (2, 1, 0, 3))
    assert cost("pad", [T([2, 3, 4]), S([2, 1, 0, 3])]).bytes == (x.numel() + y.numel()) * 4
    y = torch.index_select(x, 1, torch.tensor([0, 2, 2, 1]))
    assert cost("index_select", [T([2, 3, 4]), S(1), T([4], "int64")]).bytes == 4 * 8 + y.numel() * 4 * 2
    y = torch.cat([x, x[:, :1]], dim=1)
    assert cost("cat", [L([T([2, 3, 4]), T([2, 1, 4])]), S(1)]).bytes == (x.numel() + 8 + y.numel()) * 4


def test_view_backward_is_free_and_reshape_backward_copies_like_forward():
    assert cost("transpose", [T([4, 6]), S(0), S(1)], "bprop").bytes == 0
    assert cost("reshape", [T([4, 6], contig=False), S(24)], "bprop").bytes == 24 * 4 * 2


def test_new_tensors_read_by_schema_name():
    """``zeros(2, 3)`` (varargs), ``new_zeros(x, [2, 3])`` and a trace's ``aten::zeros`` bind alike; empty
    allocates only."""
    from pyprof.prof.ops import OpCall, estimate
    from pyprof.prof.ops._args import scalar_arg, tensor_arg

    assert estimate(OpCall("zeros", [scalar_arg(2, "size"), scalar_arg(3)])).bytes == 6 * 4
    x = tensor_arg([5], "float16", name="self")
    assert estimate(OpCall("new_zeros", [x, scalar_arg([2, 3], "size")], mod="torch.Tensor")).bytes == 6 * 2
    trace = [{"name": None, "type": "list", "value": [2, 3]}] + [{"name": None, "type": "NoneType", "value": None}] * 4
    assert estimate(OpCall("aten::zeros", trace)).bytes == 6 * 4
    assert estimate(OpCall("full", [scalar_arg([4], "size"), scalar_arg(3, "fill_value")])).bytes == 4 * 8  # int64
    e = estimate(OpCall("empty", [scalar_arg([4, 4], "size")]))
    assert (e.flops, e.bytes) == (0, 0)
