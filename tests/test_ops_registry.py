"""The cost-model registry: one name per model, canonical spellings, binding, unknown -> None."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import Cost, OpCall, canonical, covered_ops, estimate, family, registry
from pyprof.prof.ops import _args as A
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T


def test_registry_refuses_a_second_model_for_a_name():
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("mm")(lambda call: None)
    assert registry.lookup("mm").__module__.endswith(".gemm")  # the original stays


def test_required_families_are_covered():
    need = {"mm", "bmm", "matmul", "addmm", "baddbmm", "linear", "einsum", "conv1d", "conv2d", "conv3d",
            "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention",
            "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "add", "sub", "mul", "div", "pow", "relu", "gelu", "silu",
            "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm", "rms_norm",
            "dropout", "embedding", "sum", "mean", "norm", "max", "max_pool2d", "avg_pool2d",
            "adaptive_avg_pool2d", "cat", "stack", "copy", "to", "contiguous", "clone", "index", "gather",
            "scatter", "cross_entropy", "nll_loss", "mse_loss", "sgd", "adam", "adamw", "_foreach_add",
            "_fused_adam", "_fused_adamw", "_fused_sgd", "fill", "zero"}
    assert need <= covered_ops(), need - covered_ops()


@pytest.mark.parametrize("spelling, mod, name", [
    ("aten::addmm", None, "addmm"),
    ("aten::add.Tensor", None, "add"),
    ("aten::cudnn_convolution", None, "cudnn_convolution"),
    ("aten::_scaled_dot_product_flash_attention", None, "_scaled_dot_product_flash_attention"),
    ("aten::_foreach_add_", None, "_foreach_add"),
    ("aten::_foreach_add_.List", None, "_foreach_add"),
    ("aten::_fused_adamw_", None, "_fused_adamw"),
    ("__matmul__", "torch.Tensor", "matmul"),
    ("__rmatmul__", "torch.Tensor", "rmatmul"),
    ("__iadd__", "torch.Tensor", "add"),
    ("__radd__", "Tensor", "add"),
    ("__rsub__", "Tensor", "sub"),
    ("__truediv__", "Tensor", "div"),
    ("__itruediv__", "Tensor", "div"),
    ("__mul__", "Tensor", "mul"),
    ("__pow__", "Tensor", "pow"),
    ("__getitem__", "Tensor", "getitem"),
    ("add_", "torch.Tensor", "add"),
    ("relu_", "torch", "relu"),
    ("conv2d", "torch.nn.functional", "conv2d"),
    ("torch.nn.functional.conv2d", None, "conv2d"),
    ("Tensor.__matmul__", None, "matmul"),
    ("vector_norm", "torch.linalg", "linalg_vector_norm"),
    ("AdamW", "optim", "adamw"),
    ("SGD", None, "sgd"),
])
def test_canonical_spellings(spelling, mod, name):
    assert canonical(spelling, mod) == name


def test_estimate_unknown_op_is_none_not_zero():
    assert estimate(OpCall("frobnicate", [T([4, 4])])) is None
    assert estimate(OpCall("aten::_cudnn_rnn", [T([4, 4])])) is None  # no RNN model (yet): n/a


def test_estimate_with_unknown_arguments_is_none():
    assert estimate(OpCall("mm", [])) is None
    assert estimate(OpCall("conv2d", [T([1, 3, 8, 8])])) is None  # no weight


def test_estimate_accepts_any_spelling_and_family_names_the_module():
    c = estimate(OpCall("aten::mm", [T([2, 3]), T([3, 4])]))
    assert c == estimate(OpCall("mm", [T([2, 3]), T([3, 4])]))
    assert family("aten::cudnn_convolution") == "conv"
    assert family("__matmul__", "torch.Tensor") == "gemm"
    assert family("_scaled_dot_product_efficient_attention") == "attention"
    assert family("relu_") == "pointwise"
    assert family("frobnicate") is None


def test_bind_positional_named_and_self_alias():
    b = A.bind([T([2], name="self"), S(3)], ("input", "dim"))
    assert b["input"]["shape"] == [2] and b["dim"]["value"] == 3
    # a named leading argument moves the positional cursor past it (varargs stay unnamed)
    b = A.bind([T([2], name="self"), S(2, name="dims"), S(0)], ("input", "dims"))
    assert b["dims"]["value"] == 2 and b["*0"]["value"] == 0
    b = A.bind([T([2]), S(1, name="alpha")], ("input", "other"))
    assert "other" not in b and b["alpha"]["value"] == 1


def test_itemsizes_and_promotion():
    assert [A.itemsize(d) for d in ("bool", "uint8", "float8_e4m3fn", "bfloat16", "float16", "float32",
                                     "int32", "float64", "int64", "complex64", "complex128")] == \
        [1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 16]
    assert A.itemsize("torch.half") == 2 and A.itemsize(None) is None and A.itemsize("mystery") is None
    assert A.promote(["float16", "bfloat16"]) == "float32"
    assert A.promote(["int64", "float16"]) == "float16"
    assert A.promote(["float32", None]) is None


def test_sizes_only_arguments_give_flops_but_no_bytes():
    # emit_nvtx: aten::addmm, sizes = [[16], [8, 32], [32, 16], [], []]
    args = A.from_sizes([[16], [8, 32], [32, 16], [], []])
    c = estimate(OpCall("aten::addmm", args))
    assert c.flops == 2 * 8 * 16 * 32  # 8192
    assert c.bytes is None and c.dtype is None


def test_compute_dtype_prefers_autocast_dtype():
    c = estimate(OpCall("mm", [T([8, 8]), T([8, 8])], cdtype="bfloat16"))
    assert c.dtype == "bfloat16"
    assert c.bytes == (64 + 64 + 64) * 2  # operands and result moved in bf16
    assert isinstance(c, Cost) and c.tensor_op


def test_sizes_only_sources_across_families():
    # aten::_scaled_dot_product_flash_attention, sizes = [[1, 2, 8, 4], [1, 2, 8, 4], [1, 2, 8, 4], [], [], [], []]
    sd = estimate(OpCall("aten::_scaled_dot_product_flash_attention",
                         A.from_sizes([[1, 2, 8, 4], [1, 2, 8, 4], [1, 2, 8, 4], [], [], [], []])))
    assert sd.flops == 2 * 2 * 8 * 8 * 4 * 2 and sd.bytes is None  # 2·BH·L·S·(E + Ev) = 2048
    # kineto Input Dims of aten::_fused_adamw_: lists of sizes; max_exp_avg_sqs empty; scalars not captured
    lists = [[[10], [6]]] * 4 + [[], [[], []]]
    fa = estimate(OpCall("aten::_fused_adamw_", A.from_sizes(lists), "optim"))
    assert fa.flops == 13 * 16 and fa.bytes is None and "not captured" in fa.note


def test_models_never_raise_nor_go_negative_on_odd_arguments():
    """Random argument lists for every model (called directly, bypassing estimate's safety net)."""
    import random

    rng = random.Random(7)

    def arg():
        r = rng.random()
        if r < 0.45:
            return T([rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randint(0, 5))],
                     rng.choice(["float32", "int64", "bool", None, "float16"]), grad=rng.choice([True, False, None]))
        choices = [S(rng.choice([0, 1, -1, 2, -5])), S(rng.choice([0.0, 0.5, 2.0])), S(None),
                   S(rng.choice(["none", "mean", "same", "valid", "tanh", "bilinear", "bad"])), S(rng.random() < 0.5),
                   S(rng.choice([[0], [1, 1], [2, 2, 2], [], [0, -1]])), {"name": "", "type": "unknown", "value": None},
                   A.tensorlist_arg([T([rng.randint(0, 4)]) for _ in range(rng.randint(0, 3))])]
        return rng.choice(choices)

    for name in sorted(covered_ops()):
        model = registry.lookup(name)
        for _ in range(25):
            args = [arg() for _ in range(rng.randint(0, 7))]
            for d in ("fprop", "bprop", "optim"):
                mod = rng.choice([None, "aten", "torch", "torch.nn.functional", "torch.Tensor"])
                c = model(OpCall(name, args, d, rng.choice([None, "bfloat16"]), mod))
                assert c is None or ((c.flops is None or c.flops >= 0) and (c.bytes is None or c.bytes >= 0)), \
                    (name, args, d, c)


def test_coverage_table_lists_every_op_once():
    from pyprof.prof.ops.__main__ import markdown

    text = markdown()
    rows = [line.strip("|").split(" | ") for line in text.splitlines()[2:]]
    listed = [o.strip(" `") for _, ops in rows for o in ops.split(", ")]
    assert sorted(listed) == sorted(covered_ops())  # every op once
    assert {fam.strip(" `") for fam, _ in rows} >= {"gemm", "conv", "attention", "pointwise", "optim"}
