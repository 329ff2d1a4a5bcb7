"""Softmax, normalization, dropout and embedding families, worked by hand."""

from __future__ import annotations

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def cost(op, args, direction="fprop", cdtype=None, mod="torch.nn.functional"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


# ----------------------------------------------------------------------------- softmax
def test_softmax_forward_backward():
    x = T([8, 128], "float16")
    c = cost("softmax", [x, S(-1)])
    assert c.flops == 5 * 1024  # max, sub, exp, sum, div per element
    assert c.bytes == 1024 * 2 * 2  # read x, write y
    b = cost("softmax", [x, S(-1)], "bprop")
    assert b.flops == 4 * 1024 and b.bytes == 1024 * 3 * 2  # read y, dY; write dX


def test_log_softmax_output_dtype_argument():
    c = cost("log_softmax", [T([4, 10], "float16"), S(1), S(None), S("float32", "dtype")])
    assert c.flops == 5 * 40
    assert c.bytes == 40 * 2 + 40 * 4  # fp16 in, fp32 out
    assert cost("aten::_softmax", [T([4, 10], "float16"), S(1), S(True)], mod="aten").bytes == 40 * 2 + 40 * 4


# ----------------------------------------------------------------------------- norms
def test_layer_norm_forward_backward():
    x, w, b = T([4, 16, 64]), T([64]), T([64])
    c = cost("layer_norm", [x, S([64]), w, b, S(1e-5)])
    assert c.flops == (5 + 2) * 4096  # statistics 5 + affine 2 per element
    assert c.bytes == (4096 + 64 + 64 + 4096) * 4
    bw = cost("layer_norm", [x, S([64]), w, b], "bprop")
    assert bw.flops == (8 + 2 + 1) * 4096  # dX 8, dw 2, db 1 per element
    # read dY, x, w; write dX, dw, db
    assert bw.bytes == (4096 + 4096 + 64 + 4096 + 64 + 64) * 4


def test_layer_norm_without_affine():
    assert cost("layer_norm", [T([10, 32]), S([32])]).flops == 5 * 320


def test_batch_norm_training_vs_eval_and_argument_orders():
    x, rm, rv, w, b = T([8, 16, 4, 4]), T([16], grad=False), T([16], grad=False), T([16]), T([16])
    n = 8 * 16 * 16  # 2048
    train = cost("batch_norm", [x, rm, rv, w, b, S(True)])  # F.batch_norm order
    assert train.flops == 7 * n
    assert train.bytes == (n + 4 * 16 + n) * 4
    evalc = cost("batch_norm", [x, rm, rv, w, b, S(False)])
    assert evalc.flops == 4 * n  # centre, normalise, affine 2
    # torch.batch_norm(input, weight, bias, running_mean, running_var, training, ...)
    assert cost("batch_norm", [x, w, b, rm, rv, S(True)], mod="torch").flops == 7 * n
    assert cost("aten::cudnn_batch_norm", [x, w, b, rm, rv, S(True)], mod="aten").flops == 7 * n
    assert cost("batch_norm", [x, rm, rv, w, b, S(True)], "bprop").flops == (8 + 3) * n
    assert cost("batch_norm", [x, rm, rv, w, b, S(False)], "bprop").flops == (2 + 3) * n


def test_group_norm_and_rms_norm():
    x = T([2, 32, 8, 8])
    assert cost("group_norm", [x, S(8), T([32]), T([32])]).flops == 7 * 4096
    r = cost("rms_norm", [T([4, 512], "bfloat16"), S([512]), T([512], "bfloat16")])
    assert r.flops == (3 + 1) * 2048  # square, sum, scale + weight
    assert r.bytes == (2048 + 512 + 2048) * 2
    assert cost("rms_norm", [T([4, 512]), S([512]), T([512])], "bprop").flops == (6 + 2) * 2048


# ----------------------------------------------------------------------------- dropout
def test_dropout_training_and_eval():
    x = T([1000], "float16")
    c = cost("dropout", [x, S(0.1), S(True)])
    assert c.flops == 2000
    assert c.bytes == 1000 * (2 + 2 + 1)  # read x, write y, write 1-byte mask
    assert cost("dropout", [x, S(0.1), S(True)], "bprop").bytes == 1000 * (2 + 1 + 2)  # dY, mask, dX
    off = cost("dropout", [x, S(0.1), S(False)])
    assert off.flops == 0 and off.bytes == 0  # returns its input: no kernel
    assert cost("dropout", [x, S(0.0)]).flops == 0
    assert cost("native_dropout", [x, S(0.5), S(True)], mod="aten").flops == 2000


# ----------------------------------------------------------------------------- embedding
def test_embedding_both_argument_orders():
    w, idx = T([1000, 64], "float16"), T([8, 16], "int64", grad=False)
    f = cost("embedding", [idx, w])  # F.embedding(input, weight)
    t = cost("embedding", [w, idx], mod="torch")  # torch.embedding(weight, indices)
    assert f == t
    assert f.flops == 0
    assert f.bytes == 128 * 8 + 128 * 64 * 2 * 2  # indices, rows read, output written
    bw = cost("embedding", [idx, w], "bprop")
    assert bw.flops == 128 * 64  # scatter-add of dY rows
    assert bw.bytes == 128 * 64 * 2 + 128 * 8 + 1000 * 64 * 2  # dY, indices, whole dW written


def test_embedding_bag_sum():
    c = cost("embedding_bag", [T([6, 4], "int64"), T([100, 16]), S(None), S(None), S(2.0), S(False), S("sum")])
    assert c.flops == 24 * 16  # 6 bags of 4 rows of 16: one add per gathered element


def test_more_backward_formulas():
    # log_softmax backward: 4 per element; read y and dY, write dX
    b = cost("log_softmax", [T([4, 10]), S(1)], "bprop")
    assert b.flops == 4 * 40 and b.bytes == 40 * 3 * 4
    # group_norm backward: dX 8 + dw 2 + db 1 per element over [2, 32, 8, 8] = 4096 elements
    assert cost("group_norm", [T([2, 32, 8, 8]), S(8), T([32]), T([32])], "bprop").flops == 11 * 4096
    # embedding_bag backward: scatter-add of 24 gathered rows of 16 = 384 adds; dY (6 bags x 16),
    # indices (24 x 8 bytes) read and the whole [100, 16] gradient written
    eb = cost("embedding_bag", [T([6, 4], "int64"), T([100, 16]), S(None), S(None), S(2.0), S(False), S("sum")],
              "bprop")
    assert eb.flops == 384 and eb.bytes == 96 * 4 + 24 * 8 + 1600 * 4
