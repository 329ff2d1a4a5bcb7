"""The single source of truth for operator cost models: a registry filled by a decorator.

A model is a pure function of an :class:`OpCall` (op name, arguments as shapes/dtypes/scalars,
direction, compute dtype) returning a :class:`Cost`. ``@register("mm", "matmul")`` refuses a name
registered twice, so there is never a second table beside the decorators. :func:`estimate` returns
``None`` for an op without a model: prof shows ``n/a`` for it and counts it in one warning; it is
never a 0-FLOP measurement.

The registry is full whenever it can be used: importing this module (or any family) first runs the
package's ``__init__``, which imports every family module (this module imports none of them).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.schema import normalize_cached

Direction = str  # "fprop" | "bprop" | "optim"


@dataclass(frozen=True)
class OpCall:
    """What a cost model sees of one op instance."""

    op: str  # canonical name (see canonical())
    args: list[dict[str, Any]] = field(default_factory=list)  # pyprof.markers argument dicts
    direction: Direction = "fprop"
    cdtype: str | None = None  # compute dtype under autocast, else None
    mod: str | None = None  # namespace the user called (torch.nn.functional, torch.Tensor, aten, ...)
    # the arguments in the one form (:mod:`pyprof.prof.ops.schema`), filled by :func:`estimate`: aten
    # schema name -> argument dict, every argument of the overload that ran (defaults filled in); None
    # where no overload fits (``problem`` says why)
    schema: dict[str, dict[str, Any]] | None = None
    overload: str | None = None  # aten::addmm, aten::add.Tensor, ...
    problem: str = ""


@dataclass(frozen=True)
class Cost:
    """The work of one op instance in one direction (all its kernels together)."""

    flops: float | None  # floating-point operations (a multiply-add is 2), None if unknown
    bytes: float | None  # bytes read + written from/to memory, ideal (each tensor once), None if unknown
    dtype: str | None  # dtype the math runs in, for the peak lookup ("bfloat16", "float32", ...)
    tensor_op: bool = False  # GEMM/conv/attention-like: eligible for tensor cores
    note: str = ""  # e.g. a tensor-core eligibility remark


Model = Callable[[OpCall], "Cost | None"]
_MODELS: dict[str, Model] = {}
_FAMILY: dict[str, str] = {}


def register(*names: str, family: str | None = None) -> Callable[[Model], Model]:
    """Register ``fn`` as the model of each canonical op name; refuse duplicates.

    ``family`` (``gemm``, ``conv``, ``attention``, ``pointwise``, ...) defaults to the name of the module
    defining the model: one module per operator family, so the family is where the model lives.
    """

    def deco(fn: Model) -> Model:
        fam = family or fn.__module__.rsplit(".", 1)[-1]
        for name in names:
            if name in _MODELS:
                raise ValueError(f"cost model for {name!r} registered twice ({_MODELS[name].__qualname__}, {fn.__qualname__})")
            _MODELS[name] = fn
            _FAMILY[name] = fam
        return fn

    return deco


# Python operator spellings whose op name differs from the name of the torch function doing the work.
# (This maps spellings to names; it holds no costs.) ``__iadd__``/``__radd__`` reduce to ``add`` by rule.
_DUNDER = {
    "truediv": "div", "floordiv": "floor_divide", "mod": "remainder", "getitem": "getitem",
    "setitem": "index_put", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "invert": "bitwise_not", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
    "pos": "positive", "div": "div", "rmatmul": "rmatmul",  # operand order matters for a GEMM's shape
}
# Binary operators with reflected (``__radd__``) and in-place (``__iadd__``) forms.
_BINARY = {"add", "sub", "mul", "div", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
           "lshift", "rshift"}
# Namespaces whose functions are spelled with a prefix in aten (``torch.linalg.vector_norm`` is
# ``aten::linalg_vector_norm``).
_NS_PREFIX = {"torch.linalg": "linalg_", "torch.special": "special_", "torch.fft": "fft_"}
# Old PyProf markers name namespaces without the ``torch.`` prefix.
_MOD_ALIAS: dict[str | None, str | None] = {"Tensor": "torch.Tensor", "nn.functional": "torch.nn.functional"}


def canonical(op: str, mod: str | None = None) -> str:
    """Map the many spellings of an op to the one name its model is registered under.

    * namespaces and overloads: ``aten::add.Tensor`` -> ``add``, ``torch.nn.functional.conv2d`` ->
      ``conv2d``, ``Tensor.__matmul__`` -> ``matmul``; ``linalg.vector_norm`` (or ``mod="torch.linalg"``)
      -> ``linalg_vector_norm``;
    * Python operators: ``__add__``/``__radd__``/``__iadd__`` -> ``add``, ``__truediv__`` -> ``div``,
      ``__rsub__`` -> ``sub``, ``__matmul__`` -> ``matmul``;
    * in-place and out-of-place forms share a model: ``relu_`` -> ``relu``, ``add_`` -> ``add``,
      ``aten::_foreach_add_`` -> ``_foreach_add``, ``aten::_fused_adamw_`` -> ``_fused_adamw``;
    * optimizer classes (``k: "optim"`` markers): ``AdamW`` -> ``adamw``.

    Works for op names without a model too (the result is then simply not registered).
    """
    name = op.strip()
    if "::" in name:  # aten::add.Tensor, aten::_foreach_add_.List, torch::autograd::AccumulateGrad
        name = name.rsplit("::", 1)[-1].split(".", 1)[0]
    elif "." in name:  # torch.nn.functional.conv2d, Tensor.__matmul__, linalg.vector_norm
        head, name = name.rsplit(".", 1)
        if mod is None:
            mod = head if head.startswith("torch") else "torch." + head
    if mod in _NS_PREFIX and not name.startswith(_NS_PREFIX[mod]):
        name = _NS_PREFIX[mod] + name
    if len(name) > 4 and name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core in _DUNDER:
            return _DUNDER[core]
        if core[:1] in ("i", "r") and core[1:] in _BINARY:
            core = _DUNDER.get(core[1:], core[1:])
        return core
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        name = name[:-1]  # in-place variant
    if name[:1].isupper():  # optimizer classes: AdamW -> adamw (op names are otherwise lower case)
        return name.lower()
    return name


def lookup(op: str, mod: str | None = None) -> Model | None:
    return _MODELS.get(canonical(op, mod))


def family(op: str, mod: str | None = None) -> str | None:
    """The operator family (the model's module: ``gemm``, ``conv``, ``attention``, ...) or ``None``."""
    return _FAMILY.get(canonical(op, mod))


def covered_ops() -> set[str]:
    return set(_MODELS)


def _inplace(op: str) -> bool:
    """Whether a spelling names an in-place op (``add_``, ``aten::add_.Tensor``, ``__iadd__``)."""
    base = op.rsplit("::", 1)[-1].split(".", 1)[0] if "::" in op else op.rsplit(".", 1)[-1]
    return (base.endswith("_") and not base.endswith("__")) or (base.startswith("__i") and base.endswith("__"))


def bound(call: OpCall) -> dict[str, dict[str, Any]] | None:
    """The call's arguments by aten schema name (:mod:`pyprof.prof.ops.schema`): ``call.schema`` when
    :func:`estimate` filled it, else normalised here (a model called directly)."""
    if call.schema is not None or call.problem:
        return call.schema
    b = normalize_cached(canonical(call.op, call.mod), call.args, inplace=_inplace(call.op))
    return b.args if b.schema else None


Bound = dict[str, dict[str, Any]]  # a call's arguments by aten schema name (:func:`bound`)


def binds(subject: str | Callable[[str], str] | None = None) -> Callable[[Callable[..., Cost | None]], Model]:
    """The opening most models share, as a decorator: the model is called with the call's arguments
    bound (:func:`bound`), ``model(call, b)``; with ``subject`` (an argument's name, ``"self"``, or a
    function of the op's name giving it) also with that argument, its shape and its dtype,
    ``model(call, b, x, shape, dtype)``. The cost is unknown (None) where the call does not bind or
    the subject's shape is unknown."""

    def deco(model: Callable[..., Cost | None]) -> Model:
        @functools.wraps(model)
        def opened(call: OpCall) -> Cost | None:
            b = bound(call)
            if b is None:
                return None
            if subject is None:
                return model(call, b)
            x = b.get(subject if isinstance(subject, str) else subject(call.op))
            shp = A.shape(x)
            return None if shp is None else model(call, b, x, shp, A.dtype(x))

        return opened

    return deco


def out_of_place(call: OpCall) -> bool:
    """Whether the overload that ran is out of place (``put``, ``normal.Tensor_float``; not ``put_``)."""
    base = (call.overload or "").rsplit("::", 1)[-1].split(".", 1)[0]
    return bool(base) and not base.endswith("_")


def one_input(call: OpCall, x: A.Arg | None, dt: str | None, fwd: tuple[float, float | None],
              bwd: tuple[float, float | None]) -> Cost:
    """The cost of an op whose one tensor input ``x`` may need a gradient: ``fwd`` (FLOPs, bytes), in
    backward ``bwd``, or nothing (0, 0) where ``x`` needs no gradient."""
    if call.direction != "bprop":
        return Cost(fwd[0], fwd[1], dt)
    return Cost(bwd[0], bwd[1], dt) if A.requires_grad(x) else Cost(0.0, 0, dt)


def strict() -> bool:
    """``PYPROF_STRICT=1``: a model's exception is raised, with its traceback (for developers), not n/a."""
    return os.environ.get("PYPROF_STRICT") == "1"


def estimate(call: OpCall, quiet: bool = True) -> Cost | None:
    """The op call's cost, or ``None`` when no model covers the op (or its arguments are unknown).

    ``call.op`` may be any spelling (it goes through :func:`canonical`); the model sees the canonical
    name in ``call.op`` and a normalised ``call.mod`` (``Tensor`` -> ``torch.Tensor``; ``aten`` for an
    ``aten::`` name without a namespace). Arguments a model cannot make sense of (a stride of 0, a string
    where a size belongs) give ``None`` (unknown), or the model's exception if not ``quiet`` or :func:`strict`.
    """
    name = canonical(call.op, call.mod)
    model = _MODELS.get(name)
    if model is None:
        return None
    mod = _MOD_ALIAS.get(call.mod, call.mod)
    if mod is None and call.op.startswith("aten::"):
        mod = "aten"  # aten signatures differ from torch.nn.functional's (mse_loss, batch_norm, ...)
    if call.schema is None and not call.problem:
        b = normalize_cached(name, call.args, inplace=_inplace(call.op))
        call = replace(call, schema=b.args if b.schema else None, overload=b.overload, problem=b.problem)
    if name != call.op or mod != call.mod:
        call = replace(call, op=name, mod=mod)
    try:
        cost = model(call)
    except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError):
        if not quiet or strict():
            raise
        return None  # arguments the model cannot make sense of: unknown, never a crash of the report
    if cost is not None and ((cost.flops is not None and cost.flops < 0) or (cost.bytes is not None and cost.bytes < 0)):
        return None
    return _batched(call, cost) if cost is not None else None


def _batched(call: OpCall, cost: Cost) -> Cost:
    """``cost`` (of one sample) of a call under ``torch.func.vmap``, its arguments' ``vmap`` levels ``B``
    samples in all (a GEMM's: its products' operands', not a bias's): ``B`` times the FLOPs and bytes, but
    an argument batched at fewer levels (a shared weight) read once per its own batch. Under forward-mode
    AD (an argument with a ``tangent``) each operand's tangent term runs too (torch's formulas use zeros
    for a missing tangent): the op again per operand, that operand at its tangent's levels."""
    args = A.tensors(call.args)
    if not any(a.get("vmap") or "tangent" in a for a in args):
        return cost
    added = {"bias", "self"} if call.op.startswith(("add", "baddbmm")) else {"bias"}  # (addmm's self: a bias)
    work = A.tensors([a for k, a in call.schema.items() if k not in added] if cost.tensor_op and call.schema else args)

    def term(x=None) -> tuple[int, float | None]:  # samples and bytes, operand ``x`` (or an equal dict) its tangent
        def lv(a): return (a.get("tangent", a.get("vmap")) if a == x else a.get("vmap")) or ()
        n, nbytes = prod({lvl: size for a in work for lvl, size in lv(a)}.values()), cost.bytes
        for a in args if nbytes is not None else ():
            b = A.nbytes(a)
            nbytes = None if b is None else nbytes - b * (n - prod(size for _, size in lv(a))) / n
        return n, None if nbytes is None else max(nbytes, 0) * n
    terms = [term(), *(map(term, work) if any("tangent" in a for a in args) else ())]
    return Cost(None if cost.flops is None else cost.flops * sum(n for n, _ in terms),
                None if any(b is None for _, b in terms) else sum(b for _, b in terms),
                cost.dtype, cost.tensor_op, cost.note)
