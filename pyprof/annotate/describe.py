"""Describe an op's arguments for the payload, in PyProf's argument format (see pyprof.markers).

Fast paths first: tensors (shape, dtype, device, contiguity, requires_grad) with dtype and device
names cached, then plain scalars. Nothing here reads tensor *values* (no ``.item()``, no printing), so
describing an argument never synchronises a GPU.
"""

from __future__ import annotations

import torch

_Tensor = torch.Tensor
_dtype_names: dict = {}
_device_names: dict = {}
_SCALARS = {int: "int", float: "float", bool: "bool", str: "str", complex: "complex"}
_SIMPLE = {torch.dtype: "dtype", torch.device: "device", torch.layout: "layout",
           torch.memory_format: "memory_format"}


def dtype_name(dt) -> str:
    s = _dtype_names.get(dt)
    if s is None:
        s = _dtype_names[dt] = str(dt).replace("torch.", "")
    return s


def _device_name(dev) -> str:
    s = _device_names.get(dev)
    if s is None:
        s = _device_names[dev] = str(dev)
    return s


def tensor(t, name: str = "") -> dict:
    try:
        contig = t.is_contiguous()
    except RuntimeError:  # sparse and other layouts without strides
        contig = False
    dt = t.dtype
    dts = _dtype_names.get(dt)
    if dts is None:
        dts = dtype_name(dt)
    dev = t.device
    devs = _device_names.get(dev)
    if devs is None:
        devs = _device_name(dev)
    return {"name": name, "type": "tensor", "shape": [*t.shape], "dtype": dts,
            "device": devs, "contig": contig, "grad": t.requires_grad}


def _plain(v):
    """A JSON-able value for list items (scalars, None, nested lists); None if not plain."""
    t = type(v)
    if t in _SCALARS or v is None:
        if t is complex:
            return [v.real, v.imag]
        return v
    if t in (list, tuple, torch.Size):
        items = [_plain(x) for x in v]
        return items
    if t in _SIMPLE:
        return str(v).replace("torch.", "")
    return _Unplain


class _Unplain:
    pass


def arg(v, name: str = "") -> dict:
    """One argument -> ``{"name", "type", ...}``."""
    if isinstance(v, _Tensor):
        return tensor(v, name)
    t = type(v)
    kind = _SCALARS.get(t)
    if kind is not None:
        if t is complex:
            return {"name": name, "type": kind, "value": [v.real, v.imag]}
        return {"name": name, "type": kind, "value": v}
    if v is None:
        return {"name": name, "type": "NoneType", "value": None}
    kind = _SIMPLE.get(t)
    if kind is not None:
        return {"name": name, "type": kind, "value": str(v).replace("torch.", "")}
    if t in (list, tuple, torch.Size):
        if any(isinstance(x, _Tensor) for x in v):
            return {"name": name, "type": "tensorlist", "items": [arg(x) for x in v]}
        vals = [_plain(x) for x in v]
        if _Unplain not in vals and not any(x is _Unplain for x in _flat(vals)):
            return {"name": name, "type": "tuple" if t is not list else "list", "value": vals}
        return {"name": name, "type": "other", "value": t.__name__}
    if isinstance(v, (int, float, bool)):  # numpy / SymInt-like scalars convertible without sync
        try:
            return {"name": name, "type": type(v).__name__, "value": float(v) if isinstance(v, float) else int(v)}
        except Exception:  # noqa: BLE001
            pass
    return {"name": name, "type": "other", "value": t.__name__}


def _flat(vals):
    for x in vals:
        if isinstance(x, list):
            yield from _flat(x)
        else:
            yield x


def args(a: tuple, kw: dict, names: tuple) -> list[dict]:
    """Describe positional args (named from ``names`` where known) then keyword args."""
    n = len(names)
    out = []
    i = 0
    for v in a:
        if isinstance(v, _Tensor):
            out.append(tensor(v, names[i] if i < n else ""))
        else:
            out.append(arg(v, names[i] if i < n else ""))
        i += 1
    if kw:
        for k, v in kw.items():
            out.append(arg(v, k))
    return out
