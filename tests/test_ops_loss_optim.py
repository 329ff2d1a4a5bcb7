"""Loss and optimizer families, worked by hand."""

from __future__ import annotations

from pyprof.prof.ops import OpCall, estimate
from pyprof.prof.ops._args import scalar_arg as S
from pyprof.prof.ops._args import tensor_arg as T
from pyprof.prof.ops._args import tensorlist_arg as L


def cost(op, args, direction="fprop", cdtype=None, mod="torch.nn.functional"):
    return estimate(OpCall(op, args, direction, cdtype, mod))


# ----------------------------------------------------------------------------- losses
def test_cross_entropy_class_indices():
    x, t = T([32, 1000]), T([32], "int64", grad=False)
    c = cost("cross_entropy", [x, t])
    assert c.flops == 5 * 32_000 + 32  # log_softmax + pick/sum per sample
    assert c.bytes == 32_000 * 4 + 32 * 8 + 4  # logits, targets, scalar loss
    b = cost("cross_entropy", [x, t], "bprop")
    assert b.flops == 3 * 32_000
    assert b.bytes == 4 + 32_000 * 4 + 32 * 8 + 32_000 * 4  # dY, x, target, dX


def test_cross_entropy_probabilities_and_no_reduction():
    x, p = T([8, 10]), T([8, 10], grad=False)
    assert cost("cross_entropy", [x, p]).flops == 5 * 80 + 2 * 80
    c = cost("cross_entropy", [x, T([8], "int64"), S(None), S(None), S(-100), S(None), S("none")])
    assert c.bytes == 80 * 4 + 8 * 8 + 8 * 4  # per-sample losses written


def test_nll_and_mse():
    x, t = T([16, 5]), T([16], "int64")
    c = cost("nll_loss", [x, t])
    assert c.flops == 16 and c.bytes == 16 * 4 + 16 * 8 + 4
    assert cost("nll_loss", [x, t], "bprop").bytes == 4 + 16 * 8 + 80 * 4  # dY, target, full dX
    a, b = T([4, 25]), T([4, 25], grad=False)
    assert cost("mse_loss", [a, b]).flops == 3 * 100
    assert cost("mse_loss", [a, b, S(None), S(None), S("none")]).flops == 2 * 100
    assert cost("mse_loss", [a, b], "bprop").flops == 3 * 100  # only the input needs a gradient
    assert cost("aten::mse_loss", [a, b, S(0)], mod="aten").flops == 2 * 100  # aten enum 0 = none


# ----------------------------------------------------------------------------- optimizers
P = [T([1000]), T([24])]  # 1024 parameter elements, fp32


def test_foreach_ops():
    c = cost("aten::_foreach_add_", [L(P), L(P), S(0.5, "alpha")], "optim", mod="aten")
    assert c.flops == 2 * 1024  # multiply by alpha and add
    assert c.bytes == 1024 * 4 * 3  # two lists read, one written
    d = cost("_foreach_addcdiv_", [L(P), L(P), L(P)], "optim", mod="aten")
    assert d.flops == 3 * 1024 and d.bytes == 1024 * 4 * 4
    assert cost("_foreach_sqrt", [L(P)], "optim").flops == 1024
    assert cost("_foreach_zero_", [L(P)], "optim").bytes == 4096
    assert cost("_foreach_norm", [L(P)], "optim").flops == 2048


def test_fused_adamw_by_hand():
    args = [L(P), L(P), L(P), L(P), L([]), L([T([], "float32"), T([], "float32")]),
            S(1e-3, "lr"), S(0.9, "beta1"), S(0.999, "beta2"), S(0.01, "weight_decay"), S(1e-8, "eps"),
            S(False, "amsgrad"), S(False, "maximize")]
    c = cost("aten::_fused_adamw_", args, "optim", mod="aten")
    assert c.flops == (13 + 1) * 1024  # Adam's 13 + decoupled decay 1
    assert c.bytes == 1024 * 4 * 7  # p, g, m, v read; p, m, v written
    assert cost("_fused_adam", args, "optim").flops == (13 + 2) * 1024  # L2 decay folded into g: 2


def test_fused_sgd_by_hand():
    plain = cost("_fused_sgd_", [L(P), L(P), L([]), S(0.0, "weight_decay"), S(0.0, "momentum")], "optim")
    assert plain.flops == 2 * 1024 and plain.bytes == 1024 * 4 * 3
    mom = cost("_fused_sgd_", [L(P), L(P), L(P), S(0.0, "weight_decay"), S(0.9, "momentum")], "optim")
    assert mom.flops == (2 + 3) * 1024 and mom.bytes == 1024 * 4 * 5


def test_whole_step_from_param_list():
    adamw = cost("AdamW", [L(P, "params"), S(0.01, "weight_decay")], "optim", mod="optim")
    assert adamw.flops == 14 * 1024 and adamw.bytes == 7 * 4096
    sgd = cost("SGD", [L(P, "params"), S(0.9, "momentum"), S(True, "nesterov")], "optim", mod="optim")
    assert sgd.flops == (2 + 3 + 2) * 1024 and sgd.bytes == 5 * 4096
    assert cost("Adam", [], "optim", mod="optim") is None  # no parameter list: unknown


def test_single_tensor_optimizer_ops_are_pointwise():
    # Adam's single-tensor path: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    assert cost("mul_", [T([1024]), S(0.9)], "optim", mod="torch.Tensor").flops == 1024
    assert cost("add_", [T([1024]), T([1024]), S(0.1, "alpha")], "optim", mod="torch.Tensor").flops == 2048
    assert cost("addcdiv_", [T([1024]), T([1024]), T([1024]), S(-1e-3, "value")], "optim").flops == 3 * 1024


def test_other_elementwise_losses():
    a, t = T([10]), T([10], grad=False)
    assert cost("l1_loss", [a, t]).flops == 30 and cost("l1_loss", [a, t], "bprop").flops == 20
    assert cost("smooth_l1_loss", [a, t]).flops == 40 and cost("smooth_l1_loss", [a, t], "bprop").flops == 30
    assert cost("binary_cross_entropy", [a, t]).flops == 80
    assert cost("binary_cross_entropy_with_logits", [a, t], "bprop").flops == 60
    # bytes: input, target, scalar loss
    assert cost("l1_loss", [a, t]).bytes == 40 + 40 + 4


def test_margin_and_divergence_losses():
    x, t = T([8, 5]), T([8, 5])
    c = cost("soft_margin_loss", [x, t])
    assert c.flops == 6 * 40 and c.bytes == (40 + 40 + 1) * 4  # reduced to a scalar
    assert cost("soft_margin_loss", [x, t, S("none", "reduction")]).flops == 5 * 40  # no sum
    assert cost("kl_div", [x, t], "bprop").flops == 2 * 40 * 2  # both need a gradient
    assert cost("hinge_embedding_loss", [x, t, S(1.0)]).flops == 4 * 40
    assert cost("poisson_nll_loss", [x, t]).flops == 4 * 40
