"""Ops priced by what torch's schemas say of them: pointwise by tag, views by alias, and aliases.

Imported after every family module, it registers only names no family registered:

* **pointwise**: aten ops torch tags ``pointwise`` on every overload (``scripts/gen_aten_schemas.py``
  writes the list into ``pyprof/data/aten_schemas.txt``): special functions, ``logaddexp``,
  ``xlogy``, ``*_backward`` helpers, and the untagged gradient helpers of activations
  (``leaky_relu_backward``, ``softplus_backward``, ...: :data:`_UNTAGGED`). Priced by the pointwise
  family's rule (:func:`pyprof.prof.ops.pointwise.elementwise_cost`) at one FLOP per output element
  forward (a special function counts one) and, backward, one per element per input needing a gradient.
* **views**: aten ops every overload of which returns an alias of an argument (``Tensor(a)``, not
  written: ``mT``, ``broadcast_to``, ``tensor_split``): no kernel, FLOPs 0 and bytes 0.
* **aliases**: Python and aten alias spellings (``divide``, ``arccos``, ``special_expit``) priced by
  the model of the op they name (:data:`ALIASES`).
"""

from __future__ import annotations

from dataclasses import replace

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.pointwise import elementwise_cost
from pyprof.prof.ops.registry import Cost, OpCall, canonical, covered_ops, family, lookup, register
from pyprof.prof.ops.schema import pointwise_ops, view_ops
from pyprof.prof.ops.views import view_cost

ALIASES = {
    "divide": "div", "subtract": "sub", "multiply": "mul", "absolute": "abs", "arccos": "acos",
    "arcsin": "asin", "arctan": "atan", "arctan2": "atan2", "arccosh": "acosh", "arcsinh": "asinh",
    "arctanh": "atanh", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne", "fix": "trunc", "special_erf": "erf", "special_erfc": "erfc",
    "special_erfinv": "erfinv", "special_exp2": "exp2", "special_expm1": "expm1", "special_log1p": "log1p",
    "special_round": "round", "special_sinc": "sinc", "special_xlogy": "xlogy", "special_i0": "i0",
    "special_digamma": "digamma", "special_psi": "digamma", "special_gammaln": "lgamma",
    "special_logit": "logit", "special_polygamma": "polygamma", "special_multigammaln": "mvlgamma",
    "concat": "cat", "concatenate": "cat", "special_log_softmax": "log_softmax", "special_softmax": "softmax",
    "swapdims": "transpose", "moveaxis": "movedim", "matrix_power": "linalg_matrix_power",
    "ger": "outer", "linalg_matmul": "matmul", "inner": "inner", "orgqr": "linalg_householder_product",
}
# Views by their schema that do work: a sparse tensor's coalesce, a copy into pinned memory.
_NOT_VIEWS = {"coalesce", "pin_memory", "_autocast_to_full_precision", "_autocast_to_reduced_precision"}
# Tagged pointwise but not elementwise in their result: equal is one bool for the whole tensors.
_NOT_POINTWISE = {"equal"}
# Elementwise but not tagged: activations' gradient helpers (the ops an activation's double backward runs).
_UNTAGGED = {"leaky_relu_backward", "softplus_backward", "elu_backward", "hardtanh_backward", "hardswish_backward",
             "hardsigmoid_backward", "hardshrink_backward", "softshrink_backward", "log_sigmoid_backward",
             "mish_backward", "rrelu_with_noise_backward", "infinitely_differentiable_gelu_backward"}


def _generic_pointwise(call: OpCall) -> Cost | None:
    return elementwise_cost(call, A.tensors(call.args), (1, 1, True))


def _alias(target: str):
    def model(call: OpCall) -> Cost | None:
        fn = lookup(target)
        if fn is None:
            return None
        return fn(replace(call, op=target, schema=None, problem=""))  # bound again, to the target's schema

    model.__qualname__ = f"alias_of_{target}"
    return model


def _register_all() -> None:
    have = covered_ops()
    pw = sorted(n for n in (pointwise_ops() | _UNTAGGED) - _NOT_POINTWISE if canonical(n) == n and n not in have)
    register(*pw, family="pointwise")(_generic_pointwise)
    have = covered_ops()
    views = sorted(n for n in view_ops() - _NOT_VIEWS if canonical(n) == n and n not in have)
    register(*views, family="views")(view_cost)
    have = covered_ops()
    for name, target in ALIASES.items():
        if name not in have and target in have:
            register(name, family=family(target))(_alias(target))


_register_all()
