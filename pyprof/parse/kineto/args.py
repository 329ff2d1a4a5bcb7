"""An ATen op's Kineto ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` as pyprof argument dicts.

Without pyprof markers a torch.profiler trace still records, with ``record_shapes=True``, the shape
and dtype of every tensor input of every op and the value of scalar inputs; this turns them into
the argument format of :mod:`pyprof.markers` so the cost models can price aten-only ops. Arguments
are positional in the ATen schema order (``aten::addmm(self, mat1, mat2, beta, alpha)``); their
``name`` is ``null`` because the trace does not carry parameter names.
"""

from __future__ import annotations

from typing import Any

import orjson

from pyprof.parse.kineto import schema as ks


def _scalar(text: str) -> dict[str, Any]:
    if text in ("True", "False"):
        return {"name": None, "type": "bool", "value": text == "True"}
    try:
        return {"name": None, "type": "int", "value": int(text)}
    except ValueError:
        pass
    try:
        return {"name": None, "type": "float", "value": float(text)}
    except ValueError:
        return {"name": None, "type": "str", "value": text}


def _list(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text.replace("True", "true").replace("False", "false"))
    except orjson.JSONDecodeError:
        return {"name": None, "type": "other", "value": text}
    return {"name": None, "type": "list", "value": value}


def _shape(v) -> bool:
    """Whether ``v`` is a tensor shape: a list of non-negative ints."""
    return isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)


def sizes_value(dims):
    """``Input Dims`` as the ``atenSizes`` field: the list, or None when the trace holds something else."""
    return dims if isinstance(dims, list) else None


def kineto_args(dims, types, concrete) -> list[dict[str, Any]] | None:
    """The op's inputs (its ``Input Dims``, ``Input type`` and ``Concrete Inputs`` values) as pyprof
    argument dicts, or None when the trace has no shapes for it."""
    if not isinstance(dims, list):
        return None
    types = types if isinstance(types, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    pad = [""] * len(dims)  # (for the types and values a trace did not record)
    return [_arg(shape, typ if isinstance(typ, str) else "?", value, bool(types))  # (?: a damaged trace)
            for shape, typ, value in zip(dims, types + pad, concrete + pad, strict=False)]


def _arg(shape, typ: str, value, typed: bool) -> dict[str, Any]:
    """One input of :func:`kineto_args`, from its shape, type and concrete value; ``typed``: whether the
    trace records types (PyTorch 1.8-1.9 traces record shapes only)."""
    if not _shape(shape) and not (typ in ks.TENSORLIST_TYPES and isinstance(shape, list)):
        return {"name": None, "type": "unknown"}  # no shape where one must be: a damaged trace
    if not typed:  # a tensor of unknown dtype; no shape: a scalar, list or None whose value was not recorded
        return {"name": None, "type": "tensor", "shape": shape, "dtype": None} if shape else \
            {"name": None, "type": "unknown"}
    dtype = ks.DTYPES.get(typ)
    if dtype is not None:
        return {"name": None, "type": "tensor", "shape": shape, "dtype": dtype}
    if typ in ks.TENSORLIST_TYPES:
        return {"name": None, "type": "tensorlist",
                "items": [{"name": None, "type": "tensor", "shape": s, "dtype": None} for s in shape if _shape(s)]}
    if typ in ks.SCALAR_TYPES and isinstance(value, str) and value:
        return _scalar(value)
    if typ in ks.LIST_TYPES and isinstance(value, str) and value:
        return _list(value)
    if typ == "" and not value:
        return {"name": None, "type": "NoneType", "value": None}
    return {"name": None, "type": "other", "value": typ or None}
