"""Optimizer family: the ``_foreach_*`` kernels, the fused steps (``_fused_adam_``, ``_fused_adamw_``,
``_fused_sgd_``, ``_fused_adagrad_``) and a whole optimizer step (``sgd``, ``adam``, ``adamw``, named by an
``optim`` marker's class) given its parameter tensorlist.

``_foreach_<op>`` applies the pointwise op ``<op>`` to every tensor of its first list: FLOPs are the
pointwise table's per-element count (``pyprof.prof.ops.pointwise.TABLE``) times the list's total
elements (``add``/``sub`` with ``alpha != 1`` one more); ``_foreach_norm`` 2 per element. Bytes: every
tensor list read once and one list written (in place or a new list alike); ``_foreach_zero_`` only
writes.

Whole steps, FLOPs per parameter element (``n`` = total parameter elements):

* Adam: ``m = β1·m + (1−β1)·g`` 3, ``v = β2·v + (1−β2)·g²`` 4, ``denom = √v/√bc2 + ε`` 3,
  ``p −= (lr/bc1)·m/denom`` 3: 13; ``weight_decay`` adds 2 (``g += wd·p``) for Adam, 1 for AdamW
  (``p ·= 1 − lr·wd``); ``amsgrad`` 1 (``max``); ``maximize`` 1; a ``grad_scale`` 1 (unscale).
  Bytes: p, g, m, v read and p, m, v written (amsgrad: the max state read and written too).
* SGD: ``p −= lr·g`` 2; ``weight_decay`` 2; ``momentum`` 3 (``buf = μ·buf + (1−damp)·g``; 0 on the first
  step, where ``buf = g``), ``nesterov`` 2. Bytes: p, g read, p written; with momentum buf read and written.

The whole-step form (``OpCall(op="AdamW", args=[{"name": "params", "type": "tensorlist", ...},
{"name": "weight_decay", "type": "float", "value": 0.01}, ...], direction="optim")``) assumes gradients
and states have the parameters' dtypes (PyTorch's default); the fused forms read each list's own dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.pointwise import TABLE as PW
from pyprof.prof.ops.registry import Cost, OpCall, register

FOREACH = ("add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "rsqrt", "neg", "exp", "log",
           "abs", "reciprocal", "sign", "pow", "maximum", "minimum", "clamp_min", "clamp_max", "sigmoid",
           "tanh", "erf", "expm1", "log1p", "floor", "ceil", "round", "trunc", "frac", "sin", "cos")


def _numel(ts: Sequence[dict | None]) -> int | None:
    return A.total(*[A.numel(A.shape(t)) for t in ts])  # type: ignore[return-value]


def _lists(call: OpCall) -> list[list[dict]]:
    """The call's tensor lists (params, grads, state...), in order."""
    return [cast("list[dict]", A.tensorlist(a)) for a in call.args if a.get("type") == "tensorlist"]


@register(*("_foreach_" + op for op in FOREACH), "_foreach_norm", "_foreach_zero", "_foreach_copy")
def _foreach(call: OpCall) -> Cost | None:
    lists = _lists(call)
    if not lists or not lists[0]:
        return None
    first = lists[0]
    n = _numel(first)
    if n is None:
        return None
    base = call.op[len("_foreach_"):]
    dt = A.compute_dtype(call.cdtype, *first)
    read = A.total(*[A.nbytes(t) for lst in lists for t in lst])
    if base == "norm":  # one scalar per tensor
        return Cost(2.0 * n, A.total(read, A.sized(len(first), dt)), dt)
    if base == "zero":
        return Cost(0.0, A.total(*[A.nbytes(t) for t in first]), dt)
    if base == "copy":  # _foreach_copy_(self, src): src read, self written
        return None if len(lists) < 2 else Cost(0.0, A.total(*[A.nbytes(t) for t in lists[1] + first]), dt)
    alpha = next((a for a in call.args if a.get("name") == "alpha"), None)
    per = PW[base][0] + int(base in ("add", "sub") and A.value(alpha, 1) != 1)  # x + alpha * y: one more
    return Cost(float(per * n), A.total(read, *[A.nbytes(t) for t in first]), dt)


def _flag(call: OpCall, name: str, default=None):
    return next((A.value(a, default) for a in call.args if a.get("name") == name), default)


def _adam_per_elem(call: OpCall, decoupled: bool) -> int:
    """Adam's FLOPs per element, its options' included (module docstring)."""
    scaled = any(a.get("name") == "grad_scale" and A.is_tensor(a) for a in call.args)
    return (13 + (1 if decoupled else 2) * bool(_flag(call, "weight_decay", 0)) + bool(_flag(call, "amsgrad", False))
            + bool(_flag(call, "maximize", False)) + scaled)


def _sgd_per_elem(call: OpCall) -> tuple[int, bool]:
    """SGD's FLOPs per element, its options' included (module docstring), and whether it has momentum."""
    mom = bool(_flag(call, "momentum", 0))
    per = (2 + 2 * bool(_flag(call, "weight_decay", 0)) + 3 * (mom and not _flag(call, "is_first_step", False))
           + 2 * (mom and bool(_flag(call, "nesterov", False))) + bool(_flag(call, "maximize", False)))
    return per, mom


@register("_fused_adam", "_fused_adamw")
def _fused_adam(call: OpCall) -> Cost | None:
    lists = _lists(call)
    if len(lists) < 4 or not lists[0]:
        return None
    p, g, m, v = lists[:4]
    n = _numel(p)
    if n is None:
        return None
    ams = bool(_flag(call, "amsgrad", False)) and len(lists) > 4 and lists[4]
    per = _adam_per_elem(call, decoupled=call.op == "_fused_adamw")
    state = [*m, *v, *(lists[4] if ams else [])]
    dt = A.compute_dtype(call.cdtype, *p)
    note = "" if any(a.get("name") == "weight_decay" for a in call.args) else \
        "hyperparameters not captured: weight decay, amsgrad, maximize not counted"
    return Cost(float(per * n), A.total(*[A.nbytes(t) for t in [*p, *g, *state, *p, *state]]), dt, note=note)


@register("_fused_sgd")
def _fused_sgd(call: OpCall) -> Cost | None:
    lists = _lists(call)
    if len(lists) < 2 or not lists[0]:
        return None
    p, g = lists[:2]
    n = _numel(p)
    if n is None:
        return None
    per, mom = _sgd_per_elem(call)
    buf = list(lists[2]) if mom and len(lists) > 2 and lists[2] else []
    dt = A.compute_dtype(call.cdtype, *p)
    return Cost(float(per * n), A.total(*[A.nbytes(t) for t in [*p, *g, *buf, *p, *buf]]), dt)


@register("_fused_adagrad")
def _fused_adagrad(call: OpCall) -> Cost | None:
    """Adagrad: ``s += g²`` 2, ``p −= lr·g/(√s + ε)`` 4 = 6 per element (+2 weight decay).
    Bytes: p, g, s read; p, s written."""
    lists = _lists(call)
    if len(lists) < 3 or not lists[0]:
        return None
    p, g, s = lists[:3]
    n = _numel(p)
    if n is None:
        return None
    per = 6 + (2 if _flag(call, "weight_decay", 0) else 0)
    return Cost(float(per * n), A.total(*[A.nbytes(t) for t in [*p, *g, *s, *p, *s]]), A.compute_dtype(call.cdtype, *p))


@register("adam", "adamw", "sgd")
def _step(call: OpCall) -> Cost | None:
    """A whole optimizer step from its parameter list (see the module docstring)."""
    params = next((A.tensorlist(a) for a in call.args if a.get("type") == "tensorlist"), None)
    if not params:
        return None
    n = _numel(params)
    pbytes = A.total(*[A.nbytes(t) for t in params])
    if n is None:
        return None
    dt = A.compute_dtype(call.cdtype, *params)
    if call.op == "sgd":
        per, mom = _sgd_per_elem(call)
        tensors_moved = 3 + (2 if mom else 0)  # p, g read, p written (+ buf read, written)
    else:
        per = _adam_per_elem(call, decoupled=call.op == "adamw")
        tensors_moved = 7 + (2 if _flag(call, "amsgrad", False) else 0)
    return Cost(float(per * n), None if pbytes is None else tensors_moved * pbytes, dt)
