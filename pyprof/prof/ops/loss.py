"""Loss family: cross_entropy, nll_loss (nll_loss2d, nll_loss_nd), mse_loss, l1_loss, smooth_l1_loss,
huber_loss, binary_cross_entropy(_with_logits), soft_margin_loss, hinge_embedding_loss, kl_div,
poisson_nll_loss.

``N`` = samples (the target's element count for class-index targets), ``E`` = elements of the input.
Forward FLOPs: cross_entropy = log_softmax (5·E) + picking and summing the target log-probabilities
(1 per sample; with probability targets or label smoothing 2·E: multiply and add); nll_loss 1 per sample
(+1 with class weights); mse 3·E (subtract, square, sum; 2·E with ``reduction='none'``); l1 3·E;
smooth_l1/huber 4·E; binary_cross_entropy 8·E; with logits 8·E; soft_margin 6·E; hinge_embedding,
kl_div and poisson_nll 4·E (each formula's operations at :data:`ELEMENTWISE`). Backward per input element:
cross_entropy ``(softmax − target)·dY/N`` = 3; nll_loss 1 per sample (scatter into a zeroed gradient);
mse 3 (``2·(x − t)·dY/N``); l1 2; smooth_l1/huber 3; bce 5; with logits 6; soft_margin 4;
hinge_embedding and kl_div 2; poisson_nll 3.
Bytes: inputs read once, the loss written (a scalar, or per element with ``reduction='none'``);
backward reads dY, the input and the target, and writes dX. ``reduction`` may be a string or aten's
enum (0 none, 1 mean, 2 sum).

Losses over rows (:data:`ROWS`; ``E`` the elements of the broadcast inputs, ``R`` the rows: samples,
the leading dim of a 2-d input, else 1; elementwise ones have ``R = E``): forward ``f·E + r·R``, plus
``R`` to reduce the per-row losses unless ``reduction='none'`` (which writes ``R`` results); backward
``b·E`` per floating input that needs a gradient. margin_ranking ``max(0, −t·(x1 − x2) + margin)``:
f 4, b 2; multi_margin ``max(0, margin − x[y] + x_i)^p`` (× weight): f 4, r 1, b 3;
multilabel_soft_margin (binary_cross_entropy_with_logits averaged over classes): f 8, r 1, b 6;
cosine_embedding (cosine similarity, then ``1 − cos`` or ``max(0, cos − margin)``): f 6, r 7, b 6;
triplet_margin (two pairwise distances, 4 per element each, then ``max(0, d_ap − d_an + margin)``):
f 8, r 5, b 4 per distance an input is in; ``swap`` adds the positive-negative distance (f 12, r 7);
triplet_margin_with_distance priced alike where its distance is the default pairwise distance;
gaussian_nll ``½(log(max(var, eps)) + (x − t)²/var)``: f 7, b 4.
``multilabel_margin_loss`` compares each sample's target classes (its target up to the first −1) with
every other class: the count depends on the target's values, not in the record: no model. Nor has
``ctc_loss``, whose alignment lattice's size is set by the target lengths' values.
"""

from __future__ import annotations

from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, one_input, register
from pyprof.prof.ops.schema import param_names

_CE = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
_NLL = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction")
_ELEM = ("input", "target", "size_average", "reduce", "reduction")
# name: (params, forward per element, backward per element)
ELEMENTWISE: dict[str, tuple[tuple[str, ...], int, int]] = {
    "mse_loss": (_ELEM, 3, 3), "l1_loss": (_ELEM, 3, 2), "smooth_l1_loss": (_ELEM, 4, 3),
    "huber_loss": (("input", "target", "reduction", "delta"), 4, 3),
    "binary_cross_entropy": (("input", "target", "weight", "size_average", "reduce", "reduction"), 8, 5),
    "binary_cross_entropy_with_logits": (("input", "target", "weight", "size_average", "reduce", "reduction",
                                          "pos_weight"), 8, 6),
    # log(1 + exp(−t·x)): multiply, negate, exp, add, log, sum; backward −t·σ(−t·x)·dY/N
    "soft_margin_loss": (_ELEM, 6, 4),
    # x where t = 1, max(0, margin − x) where t = −1: subtract, clamp, select, sum; backward select, scale
    "hinge_embedding_loss": (("input", "target", "margin", "size_average", "reduce", "reduction"), 4, 2),
    # t·(log t − x): log, subtract, multiply, sum; backward −t·dY/N
    "kl_div": (("input", "target", "size_average", "reduce", "reduction", "log_target"), 4, 2),
    # exp(x) − t·x (log_input): exp, multiply, subtract, sum; backward (exp(x) − t)·dY/N
    "poisson_nll_loss": (("input", "target", "log_input", "full", "size_average", "eps", "reduce", "reduction"), 4, 3),
}


def _reduced(b: dict) -> bool | None:
    """Whether the loss is reduced to a scalar (``None`` when the argument was not captured)."""
    if not A.known(b.get("reduction")):
        return None
    return A.value(b.get("reduce")) is not False and A.value(b.get("reduction"), "mean") not in ("none", 0)


@register(*ELEMENTWISE)
def _elementwise_loss(call: OpCall) -> Cost | None:
    params, fwd, bwd = ELEMENTWISE[call.op]
    # an aten call (emit_nvtx, kineto) by the schema's names: the reduction enum right after the tensors
    b = A.bind(call.args, param_names(call.op) if call.mod == "aten" else params)
    x, t = b.get("input") or b.get("self"), b.get("target")
    n = A.numel(A.broadcast(A.shape(x), A.shape(t)))
    red = _reduced(b)
    if n is None or red is None:
        return None
    dt = A.compute_dtype(call.cdtype, x, t)
    n_out = 1 if red else n
    if call.direction == "bprop":
        grads = [a for a in (x, t) if A.requires_grad(a) and A.dtype(a) in A.FLOATING | {None}]
        return Cost(float(bwd * n * len(grads)),
                    A.total(A.sized(n_out, dt), A.nbytes(x), A.nbytes(t), *[A.nbytes(g) for g in grads]), dt)
    return Cost(float((fwd if red else fwd - 1) * n), A.total(A.nbytes(x), A.nbytes(t), A.sized(n_out, dt)), dt)


def _samples(x: list[int], t: list[int], probs: bool) -> int | None:
    """Samples: the target's elements (class indices), or the input's elements over its class dim."""
    if not probs:
        return prod(t)
    classes = x[1] if len(x) > 1 else (x[0] if x else 0)
    return prod(x) // classes if classes else None


@register("cross_entropy", "cross_entropy_loss")
def _cross_entropy(call: OpCall) -> Cost | None:
    b = A.bind(call.args, param_names("cross_entropy_loss") if call.mod == "aten" else _CE)
    x, t = b.get("input") or b.get("self"), b.get("target")
    sx, st = A.shape(x), A.shape(t)
    red = _reduced(b)
    if sx is None or st is None or red is None or not A.known(b.get("label_smoothing")):
        return None
    probs = st == sx and A.dtype(t) in A.FLOATING | {None} and A.dtype(t) is not None
    e, n = prod(sx), _samples(sx, st, probs)
    ls = A.value(b.get("label_smoothing"), 0.0)
    if not isinstance(ls, (int, float)):
        return None
    smooth = ls > 0
    dt = A.compute_dtype(call.cdtype, x)
    n_out = 1 if red else n
    if call.direction == "bprop":
        if not A.requires_grad(x):
            return Cost(0.0, 0, dt)
        return Cost(3.0 * e, A.total(A.sized(n_out, dt), A.nbytes(x), A.nbytes(t), A.nbytes(x)), dt)
    flops = 5 * e + (2 * e if probs or smooth else cast(int, n))  # None raises TypeError: cost() answers None
    return Cost(float(flops), A.total(A.nbytes(x), A.nbytes(t), A.sized(n_out, dt)), dt)


@register("nll_loss", "nll_loss2d", "nll_loss_nd", "nll_loss_forward", "nll_loss2d_forward")
def _nll(call: OpCall) -> Cost | None:
    b = A.bind(call.args, param_names(call.op) if call.mod == "aten" or call.op.endswith("_forward") else _NLL)
    x, t = b.get("input") or b.get("self"), b.get("target")
    sx, st = A.shape(x), A.shape(t)
    red = _reduced(b)
    if sx is None or st is None or red is None:
        return None
    n = prod(st)
    w = b.get("weight") if A.is_tensor(b.get("weight")) else None
    dt = A.compute_dtype(call.cdtype, x)
    n_out = 1 if red else n
    fwd = (float(n * (2 if w is not None else 1)), A.total(A.sized(n, dt), A.nbytes(t), A.sized(n_out, dt)))
    return one_input(call, x, dt, fwd, (float(n), A.total(A.sized(n_out, dt), A.nbytes(t), A.nbytes(x))))


@register("nll_loss_backward", "nll_loss2d_backward")
def _nll_backward(call: OpCall) -> Cost | None:
    """``nll_loss_backward(dY, input, target, ...)``, the op NllLossBackward0 runs: nll_loss's backward."""
    b = A.bind(call.args, ("grad_output", "self", "target"))
    x, t, st = b.get("self"), b.get("target"), A.shape(b.get("target"))
    return None if A.shape(x) is None or st is None else Cost(
        float(prod(st)), A.total(A.nbytes(b.get("grad_output")), A.nbytes(t), A.nbytes(x)), A.compute_dtype(call.cdtype, x))


# name: (params, the tensors read, f per element, r per row, b per element per gradient)
ROWS: dict[str, tuple[tuple[str, ...], tuple[str, ...], int, int, int]] = {
    "margin_ranking_loss": (("input1", "input2", "target", "margin", "size_average", "reduce", "reduction"),
                            ("input1", "input2", "target"), 4, 0, 2),
    "multi_margin_loss": (("input", "target", "p", "margin", "weight", "size_average", "reduce", "reduction"),
                          ("input", "target", "weight"), 4, 1, 3),
    "multilabel_soft_margin_loss": (("input", "target", "weight", "size_average", "reduce", "reduction"),
                                    ("input", "target", "weight"), 8, 1, 6),
    "cosine_embedding_loss": (("input1", "input2", "target", "margin", "size_average", "reduce", "reduction"),
                              ("input1", "input2", "target"), 6, 7, 6),
    "triplet_margin_loss": (("anchor", "positive", "negative", "margin", "p", "eps", "swap", "size_average",
                             "reduce", "reduction"), ("anchor", "positive", "negative"), 8, 5, 4),
    "triplet_margin_with_distance_loss": (("anchor", "positive", "negative", "distance_function", "margin",
                                           "swap", "reduction"), ("anchor", "positive", "negative"), 8, 5, 4),
    "gaussian_nll_loss": (("input", "target", "var", "full", "eps", "reduction"), ("input", "target", "var"), 7, 0, 4),
}
_ELEMENTWISE_ROWS = {"margin_ranking_loss", "gaussian_nll_loss"}  # one loss per element: R = E


@register(*ROWS)
def _rows_loss(call: OpCall) -> Cost | None:
    params, names, f, r, bwd = ROWS[call.op]
    b = A.bind(call.args, params)
    triplet = call.op.startswith("triplet")
    if triplet and A.value(b.get("distance_function")) not in (None, "PairwiseDistance"):
        return None  # a user's distance function: its work is not this formula's
    ts = [t for t in (b.get(n) or (b.get("self") if n == "input" else None) for n in names) if A.is_tensor(t)]
    floats = [t for t in ts if A.dtype(t) in A.FLOATING]
    out = A.broadcast(*[A.shape(t) for t in floats])  # the loss's elements: its floating inputs broadcast
    red = _reduced(b)
    if not ts or out is None or red is None:
        return None
    main, e = ts[0], prod(out)
    rows = e if call.op in _ELEMENTWISE_ROWS else (out[0] if len(out) == 2 else 1)
    if triplet and A.value(b.get("swap"), False):
        f, r = f + 4, r + 2
    dt = A.compute_dtype(call.cdtype, main)
    n_out = 1 if red else rows
    read = A.total(*[A.nbytes(t) for t in ts])
    if call.direction == "bprop":
        grads = [t for t in floats if A.requires_grad(t)]
        per = [bwd * (2 if triplet and t is main else 1) for t in grads]
        return Cost(float(sum(per) * e), A.total(A.sized(n_out, dt), read, *[A.nbytes(g) for g in grads]), dt)
    return Cost(float(f * e + r * rows + (rows if red else 0)), A.total(read, A.sized(n_out, dt)), dt)
