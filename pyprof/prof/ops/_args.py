"""Reading marker argument dicts: binding to an op's signature, tensor shapes, dtypes and sizes.

Every cost model sees the op's arguments as :mod:`pyprof.markers` argument dicts (PyProf's format):
positional ones have ``name == ""``, keyword ones carry their name. :func:`bind` maps them onto the
op's real parameter names so a model reads ``b["weight"]`` whichever way the user passed it. The
helpers here return ``None`` for anything unknown (a tensor seen only as sizes has dtype ``None``,
so its bytes are ``None``), never a made-up 0.

No torch import: these are pure functions over JSON-like dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod
from typing import Any, TypeGuard, overload

Arg = dict[str, Any]

# Bytes per element, by the dtype names the markers carry (``str(torch.dtype)`` without ``torch.``),
# plus the short names seen in emit_nvtx/kineto traces and old PyProf markers.
ITEMSIZE: dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "quint8": 1, "qint8": 1,
    "int16": 2, "uint16": 2, "float16": 2, "half": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "float": 4, "qint32": 4, "complex32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "double": 8, "long": 8, "complex64": 8,
    "complex128": 16, "cfloat": 8, "cdouble": 16,
}
# Canonical names for aliases, so Cost.dtype is always one spelling.
_DTYPE_ALIAS = {"half": "float16", "float": "float32", "double": "float64", "long": "int64",
                "int": "int32", "cfloat": "complex64", "cdouble": "complex128"}

# Type-promotion rank (higher wins) for mixing tensor dtypes in pointwise ops.
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
         "float8_e4m3fn": 5, "float8_e5m2": 5, "float16": 6, "bfloat16": 6, "float32": 7, "float64": 8,
         "complex64": 9, "complex128": 10}
FLOATING = frozenset(k for k, v in _RANK.items() if v >= 5)


def norm_dtype(dtype: str | None) -> str | None:
    """``torch.float16`` / ``half`` / ``float16`` -> ``float16``; ``None`` stays ``None``."""
    if dtype is None:
        return None
    d = str(dtype).replace("torch.", "")
    return _DTYPE_ALIAS.get(d, d)


def itemsize(dtype: str | None) -> int | None:
    """Bytes per element of a dtype name, or ``None`` when unknown."""
    d = norm_dtype(dtype)
    return ITEMSIZE.get(d) if d is not None else None


def promote(dtypes: Iterable[str | None]) -> str | None:
    """The result dtype of mixing tensors (torch's promotion, for the common cases).

    ``float16`` with ``bfloat16`` gives ``float32``; any unknown dtype makes the result unknown.
    """
    best: str | None = None
    for d in dtypes:
        d = norm_dtype(d)
        if d is None or d not in _RANK:
            return None
        if best is None or _RANK[d] > _RANK[best]:
            best = d
        elif _RANK[d] == _RANK[best] and d != best:
            best = "float32" if _RANK[d] == 6 else best
    return best


# --------------------------------------------------------------------------- binding

# ``self`` (Tensor methods) and ``input`` (torch functions) name the same first parameter.
_FIRST = {"self": "input", "input": "self"}


def bind(args: Sequence[Arg], params: Sequence[str]) -> dict[str, Arg]:
    """Map positional (``name == ""``) and named arguments onto ``params`` (the op's signature).

    A named argument takes its parameter's slot and later positional ones continue after it (the
    instrumentation names the leading arguments it can and leaves varargs unnamed: ``permute(self,
    dims=2, 0, 1)``); ``self`` and ``input`` are the same first parameter. Extra positional arguments
    beyond ``params`` are kept under ``"*0"``, ``"*1"``, ...; named arguments not in ``params`` keep their
    name. A parameter absent from the call is absent from the result (the model applies the default).
    """
    out: dict[str, Arg] = {}
    pos = 0
    for a in args:
        name = a.get("name") or ""
        if name:
            if name not in params and _FIRST.get(name) in params:
                name = _FIRST[name]
            out[name] = a
            if name in params:
                pos = max(pos, params.index(name) + 1)
            continue
        key = params[pos] if pos < len(params) else f"*{pos - len(params)}"
        out[key] = a
        pos += 1
    return out


def is_tensor(a: Arg | None) -> TypeGuard[Arg]:
    return a is not None and bool(a) and a.get("type") == "tensor"


def tensors(args: Iterable[Arg]) -> list[Arg]:
    """All tensor arguments, tensorlists flattened, in order."""
    return [t for a in args for t in tensorlist(a) or ()]


def tensorlist(a: Arg | None) -> list[Arg] | None:
    """The tensors of a ``tensorlist`` argument (or a lone tensor as a list of one); else ``None``."""
    if a is None:
        return None
    if a.get("type") == "tensorlist":
        return [x for x in a.get("items", []) if x.get("type") == "tensor"]
    if a.get("type") == "tensor":
        return [a]
    return None


def shape(a: Arg | None) -> list[int] | None:
    if not is_tensor(a) or not isinstance(a.get("shape"), (list, tuple)):
        return None
    shp = [int(x) for x in a["shape"]]
    return shp if all(d >= 0 for d in shp) else None


def dtype(a: Arg | None) -> str | None:
    return norm_dtype(a.get("dtype")) if is_tensor(a) else None


@overload
def numel(shp: Sequence[int]) -> int: ...
@overload
def numel(shp: Sequence[int] | None) -> int | None: ...
def numel(shp: Sequence[int] | None) -> int | None:
    return None if shp is None else prod(shp)


def nbytes(a: Arg | None) -> int | None:
    """Bytes of a tensor argument, ``None`` if its shape or dtype is unknown."""
    n = numel(shape(a))
    s = itemsize(dtype(a))
    return None if n is None or s is None else n * s


def sized(n: float | None, dt: str | None) -> float | None:
    """``n`` elements of dtype ``dt`` in bytes, or ``None``."""
    s = itemsize(dt)
    return None if n is None or s is None else n * s


@overload
def total(*parts: float) -> float: ...
@overload
def total(*parts: float | None) -> float | None: ...
def total(*parts: float | None) -> float | None:
    """Sum, unknown if any part is unknown (an unknown term never silently counts as 0)."""
    acc = 0.0
    for p in parts:
        if p is None:
            return None
        acc += p
    return acc


def requires_grad(a: Arg | None) -> bool:
    """Whether a tensor argument takes part in backward: its ``grad`` flag; assumed true when absent."""
    return is_tensor(a) and a.get("grad", True) is not False


def value(a: Arg | None, default: Any = None) -> Any:
    """A scalar/list argument's value; ``default`` when the argument is absent or ``None``."""
    v = None if a is None or a.get("type") == "NoneType" else a.get("value")
    return default if v is None else v


def known(a: Arg | None) -> bool:
    """False for an argument whose value was not captured (sizes-only sources)."""
    return a is None or a.get("type") != "unknown"


def known_value(a: Arg | None, default: Any = None) -> Any:
    """:func:`value`, or None for an argument whose value was not captured."""
    return value(a, default) if known(a) else None


def ints(a: Arg | None, n: int, default: Sequence[int] | int | None, minimum: int = 0) -> list[int] | None:
    """An int-or-list argument expanded to ``n`` ints (``stride=2`` -> ``[2, 2]``).

    ``default`` applies when the argument is absent; ``None`` is returned when it is present but its
    value is unknown or malformed, or below ``minimum`` (a stride of 0 is not a stride).
    """
    v = value(a, default) if known(a) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = [v]
    if (not isinstance(v, (list, tuple)) or len(v) not in (1, n)
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)):
        return None
    out = [int(x) for x in v] * (n if len(v) == 1 else 1)  # one number stands for every dim
    return None if any(x < minimum for x in out) else out


def broadcast(*shapes: Sequence[int] | None) -> list[int] | None:
    """Broadcast shapes (numpy rules); ``None`` if any is unknown or they do not broadcast."""
    known = [list(s) for s in shapes if s is not None]
    if len(known) < len(shapes):
        return None
    nd = max((len(s) for s in known), default=0)
    out: list[int] = []
    for dims in zip(*[[1] * (nd - len(s)) + s for s in known], strict=True):  # aligned from the right
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def from_sizes(sizes: Sequence[Any], dtypes: Sequence[str | None] | None = None) -> list[Arg]:
    """Arguments from an aten op's input sizes (emit_nvtx ``sizes = [[..], [], ..]``, kineto ``Input Dims``).

    A non-empty list of ints becomes a tensor with that shape (dtype from ``dtypes`` when given, else
    ``None`` so its bytes are unknown); an empty list is an argument whose value was not captured
    (a scalar, or a 0-d tensor) and reads as unknown. A list of lists is a tensorlist.
    """
    out: list[Arg] = []
    for i, s in enumerate(sizes):
        dt = dtypes[i] if dtypes is not None and i < len(dtypes) else None
        if isinstance(s, (list, tuple)) and s and all(isinstance(x, (list, tuple)) for x in s):
            out.append(tensorlist_arg([tensor_arg(x, dt) for x in s]))
        elif isinstance(s, (list, tuple)) and s:
            out.append(tensor_arg([int(x) for x in s], dt))
        else:
            out.append({"name": "", "type": "unknown", "value": None})
    return out


def compute_dtype(cdtype: str | None, *args: Arg | None) -> str | None:
    """The dtype the math runs in: the autocast dtype if given, else the promoted dtype of the floating
    tensor arguments (integer index tensors do not count), else of all tensor arguments. As in torch's
    type promotion, a 0-dim tensor does not promote a dimensioned one of the same kind: a bfloat16
    activation times a 0-dim float64 tensor computes in bfloat16."""
    if cdtype:
        return norm_dtype(cdtype)
    ts = [a for a in args if is_tensor(a)]
    if not ts:
        return None
    fl = [a for a in ts if dtype(a) in FLOATING]
    pool = fl or ts
    dimensioned = [a for a in pool if shape(a)]  # shape [] (0-dim) or unknown: left out when others exist
    return promote(dtype(a) for a in (dimensioned or pool))


def out_dtype(b: dict[str, Arg], default: str | None) -> str | None:
    """The dtype an op's ``dtype=`` argument (in ``b``, from :func:`bind`) asks for, else ``default``."""
    want = value(b.get("dtype"))
    return norm_dtype(want) if isinstance(want, str) else default


def dtype_kwarg(args: Sequence[Arg], default: str | None) -> str | None:
    """The dtype the call's ``dtype`` argument asks for, found by its name or its type in ``args`` (not
    bound to a schema), else ``default``."""
    for a in args:
        if a.get("name") == "dtype" or a.get("type") == "dtype":
            return norm_dtype(value(a)) or default
    return default


def tensor_arg(shape: Sequence[int], dtype: str | None = "float32", grad: bool | None = None, name: str = "",
               **extra: Any) -> Arg:
    """Build a tensor argument dict (for callers that price ops they describe themselves, and tests)."""
    a: Arg = {"name": name, "type": "tensor", "shape": list(shape), "dtype": dtype}
    if grad is not None:
        a["grad"] = grad
    a.update(extra)
    return a


def scalar_arg(value: Any, name: str = "") -> Arg:
    """Build a scalar/list/None argument dict in the markers' format."""
    if value is None:
        return {"name": name, "type": "NoneType", "value": None}
    kind = {bool: "bool", int: "int", float: "float", str: "str", list: "list", tuple: "tuple"}.get(type(value), "other")
    return {"name": name, "type": kind, "value": list(value) if isinstance(value, tuple) else value}


def tensorlist_arg(items: Sequence[Arg], name: str = "") -> Arg:
    return {"name": name, "type": "tensorlist", "items": list(items)}
