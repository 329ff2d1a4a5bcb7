"""Compact text for an op's arguments (the ``params`` column) and the dtype an op computes in.

``params`` renders each argument of the pyprof/PyProf argument format (see :mod:`pyprof.markers`) as
``name=value``, arguments separated by ``;``: a tensor is ``input=(8,3,32,32),float32``, a list of tensors
``tensors=[(4,4),(4,4)],float16``, a scalar ``alpha=1``, a list ``stride=(1,1)``; ``None`` arguments are left
out. An argument without a name is written as ``T=`` (tensor) or its bare value. No spaces, so the
default space-separated output stays one field per column.
"""

from __future__ import annotations

from typing import Any


def _dt(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.") if dtype is not None else "?"


def _shape(shape: Any) -> str:
    return "(?)" if shape is None else "(" + ",".join(str(x) for x in shape) + ")"


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_value(v) for v in value) + ")"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    return str(value).replace(" ", "")


def _tensorlist(items: list) -> str:
    """``[shape,shape],dtype/dtype``."""
    tensors = [t for t in items if isinstance(t, dict)]
    dtypes = {_dt(t.get("dtype")) for t in tensors}
    return "[" + ",".join(_shape(t.get("shape")) for t in tensors) + "]" + ("," + "/".join(sorted(dtypes)) if dtypes else "")


def render_arg(arg: Any) -> str | None:
    """One argument as text, or None to leave it out."""
    if not isinstance(arg, dict):
        return _value(arg)
    kind = arg.get("type")
    name = arg.get("name")
    if kind == "tensor":
        return f"{name or 'T'}={_shape(arg.get('shape'))},{_dt(arg.get('dtype'))}"
    if kind == "tensorlist":
        return f"{name or 'T'}={_tensorlist(arg.get('items') or [])}"
    if kind == "NoneType" or ("value" in arg and arg.get("value") is None and kind != "other"):
        return None
    if "value" in arg:
        text = _value(arg["value"]) if kind != "dtype" else _dt(arg["value"])
        return f"{name}={text}" if name else text
    if "shape" in arg:  # old PyProf tensors may lack "type"
        return f"{name or 'T'}={_shape(arg.get('shape'))},{_dt(arg.get('dtype'))}"
    return None


def render(args: Any) -> str:
    """All arguments as one compact string (``""`` when there are none or they are unknown)."""
    if not args:
        return ""
    if isinstance(args, dict):
        args = [args]
    parts = [p for p in (render_arg(a) for a in args) if p]
    return ";".join(parts).replace(" ", "")


def first_dtype(args: Any) -> str | None:
    """The dtype of the first tensor argument (``float32``), else None."""
    for arg in args or ():
        if not isinstance(arg, dict):
            continue
        if arg.get("type") == "tensor" or ("shape" in arg and "dtype" in arg):
            if arg.get("dtype"):
                return _dt(arg["dtype"])
        if arg.get("type") == "tensorlist":
            for t in arg.get("items") or ():
                if isinstance(t, dict) and t.get("dtype"):
                    return _dt(t["dtype"])
    return None
