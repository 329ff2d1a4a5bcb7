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
    out: list[dict[str, Any]] = []
    for i, shape in enumerate(dims):
        typ = types[i] if i < len(types) else ""
        typ = typ if isinstance(typ, str) else "?"  # (a damaged trace: not a type name)
        value = concrete[i] if i < len(concrete) else ""
        dtype = ks.DTYPES.get(typ)
        if not _shape(shape) and not (typ in ks.TENSORLIST_TYPES and isinstance(shape, list)):
            out.append({"name": None, "type": "unknown"})  # no shape where one must be: a damaged trace
        elif not types and shape:
            # PyTorch 1.8-1.9 traces record shapes without types: a tensor of unknown dtype
            out.append({"name": None, "type": "tensor", "shape": shape, "dtype": None})
        elif not types:  # no shape and no type: a scalar, list or None whose value was not recorded
            out.append({"name": None, "type": "unknown"})
        elif dtype is not None:
            out.append({"name": None, "type": "tensor", "shape": shape, "dtype": dtype})
        elif typ in ks.TENSORLIST_TYPES:
            items = [s for s in shape if _shape(s)]
            out.append({"name": None, "type": "tensorlist",
                        "items": [{"name": None, "type": "tensor", "shape": s, "dtype": None} for s in items]})
        elif typ in ks.SCALAR_TYPES and isinstance(value, str) and value:
            out.append(_scalar(value))
        elif typ in ks.LIST_TYPES and isinstance(value, str) and value:
            out.append(_list(value))
        elif typ == "" and not value:
            out.append({"name": None, "type": "NoneType", "value": None})
        else:
            out.append({"name": None, "type": "other", "value": typ or None})
    return out
