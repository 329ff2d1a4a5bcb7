"""The single source of truth for operator cost models: a registry filled by a decorator.

A model is a pure function of an :class:`OpCall` (op name, arguments as shapes/dtypes/scalars,
direction, compute dtype) returning a :class:`Cost`. ``@register("mm", "matmul")`` refuses a name
registered twice, so there is never a second table beside the decorators. :func:`estimate` returns
``None`` for an op without a model: prof shows ``n/a`` for it and counts it in one warning; it is
never a 0-FLOP measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Direction = str  # "fprop" | "bprop" | "optim"


@dataclass(frozen=True)
class OpCall:
    """What a cost model sees of one op instance."""

    op: str  # canonical name (see canonical())
    args: list[dict[str, Any]] = field(default_factory=list)  # pyprof.markers argument dicts
    direction: Direction = "fprop"
    cdtype: str | None = None  # compute dtype under autocast, else None
    mod: str | None = None  # namespace the user called (torch.nn.functional, torch.Tensor, aten, ...)


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


def register(*names: str) -> Callable[[Model], Model]:
    """Register ``fn`` as the model of each canonical op name; refuse duplicates."""

    def deco(fn: Model) -> Model:
        for name in names:
            if name in _MODELS:
                raise ValueError(f"cost model for {name!r} registered twice ({_MODELS[name].__qualname__}, {fn.__qualname__})")
            _MODELS[name] = fn
        return fn

    return deco


def canonical(op: str, mod: str | None = None) -> str:
    """Map the many spellings of an op to one name: ``aten::addmm`` -> ``addmm``, ``__iadd__`` -> ``add``,
    ``relu_`` -> ``relu``, ``Tensor.__matmul__`` -> ``matmul``. Filled in by the ops families' author."""
    name = op.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
    return name


def lookup(op: str, mod: str | None = None) -> Model | None:
    return _MODELS.get(canonical(op, mod))


def covered_ops() -> set[str]:
    return set(_MODELS)


def estimate(call: OpCall) -> Cost | None:
    """The op call's cost, or ``None`` when no model covers the op (or its arguments are unknown)."""
    model = _MODELS.get(canonical(call.op, call.mod))
    if model is None:
        return None
    return model(call)
