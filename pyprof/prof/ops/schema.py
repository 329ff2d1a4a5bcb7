"""One argument form: an op's recorded arguments bound to the aten schema of the overload that ran.

Arguments reach prof in several forms: a pyprof marker names what the Python call named (``input``,
``other``; nothing for ``torch.einsum(eq, *operands)``), a torch.profiler trace lists an aten op's
inputs by position without names, emit_nvtx and NVIDIA PyProf markers carry sizes. :func:`normalize`
turns any of them, once per distinct call, into the one form cost models read: a dict from the aten
schema's argument names to argument dicts (:mod:`pyprof.markers` format), every argument of the
schema present (absent ones carry the schema's default), together with the overload chosen and what
could not be placed, and why.

The schemas are data (``pyprof/data/aten_schemas.txt``, written by ``scripts/gen_aten_schemas.py``
from torch's own registry), so prof needs no torch. Python spellings whose aten op has another name
or other argument names map to it in :data:`PYTHON`; everything else is named as in aten already.

How an overload is chosen: each overload of the aten op is tried; arguments the call named bind by
name (``input`` and ``self`` are one), the others by position; consecutive tensors (``einsum``'s
operands, ``torch.cat``'s list) fill a ``Tensor[]`` parameter and consecutive ints an ``int[]`` one
(``x.view(2, 3)``); a parameter the call left out takes its default, and an overload missing a
required argument, or with an argument of the wrong kind (a tensor where an int belongs), is out. Of
the overloads left, the one with fewest conversions wins (an int for a float, a 0-d tensor for a
number), then the first in torch's registry order, as torch resolves them (a Python number fits a
``Tensor``: ``torch.add(x, 2)`` runs ``add.Tensor``, listed before ``add.Scalar``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from pyprof.prof.ops._args import scalar_arg

Arg = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """One argument of an aten schema."""

    name: str
    kind: str  # Tensor, Tensor?, Tensor[], Tensor?[], int, int[], float, float[], bool, bool[], Scalar, str, other
    optional: bool  # ``T?``: None is a valid value
    has_default: bool
    default: Any
    kwarg_only: bool


@dataclass(frozen=True)
class Schema:
    name: str  # aten op name without namespace or overload: ``addmm``
    overload: str  # ``""`` for the default overload
    params: tuple[Param, ...]
    varargs: bool  # ``...``: the schema takes any further arguments (einsum.sublist)

    @property
    def full(self) -> str:
        return f"aten::{self.name}" + (f".{self.overload}" if self.overload else "")


@dataclass
class Bound:
    """A call bound to a schema: ``args`` maps every schema argument name to its argument dict."""

    schema: Schema | None
    args: dict[str, Arg] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # what the call had that the schema has not
    problem: str = ""  # why no overload fits ("" when one did)

    @property
    def overload(self) -> str | None:
        return self.schema.full if self.schema else None


# Python spellings whose aten op has another name, or whose arguments are named otherwise:
# canonical Python name -> (aten op, {python argument name: aten argument name}). ``input`` and ``self``
# need no entry: binding takes either for the other.
PYTHON: dict[str, tuple[str, dict[str, str]]] = {
    "cross_entropy": ("cross_entropy_loss", {}),
    "embedding": ("embedding", {"input": "indices"}),
    "dropout": ("dropout", {"training": "train"}),
    "alpha_dropout": ("alpha_dropout", {"training": "train"}),
    "feature_alpha_dropout": ("feature_alpha_dropout", {"training": "train"}),
    "dropout1d": ("feature_dropout", {"training": "train"}),
    "dropout2d": ("feature_dropout", {"training": "train"}),
    "dropout3d": ("feature_dropout", {"training": "train"}),
    "split": ("split", {"tensor": "self", "split_size_or_sections": "split_size"}),
    "_segment_reduce": ("segment_reduce", {}),
    "rmatmul": ("matmul", {}),  # Tensor.__rmatmul__(self, other) is other @ self: the model swaps them
}
# Python values of arguments aten spells as ints.
_REDUCTION = {"none": 0, "mean": 1, "sum": 2, "batchmean": 1}

_LINE = re.compile(r"^aten::([\w]+)(?:\.([\w]+))?\((.*)\) -> (.*)$")
_ALIAS = re.compile(r"\([a-z0-9!|*\s>-]*\)")  # (a), (a!), (a -> *)


def _split(text: str) -> list[str]:
    """Split at top-level commas (not inside brackets or quotes)."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _kind(typ: str) -> tuple[str, bool]:
    """A schema type -> (kind, optional). ``SymInt[2]?`` -> (``int[]``, True)."""
    t = _ALIAS.sub("", typ).strip()
    optional = t.endswith("?")
    t = t.rstrip("?")
    lst = ""
    m = re.match(r"^(.*?)\[\d*\]$", t)
    if m:
        t, lst = m.group(1), "[]"
    inner_opt = t.endswith("?")
    t = t.rstrip("?")
    base = {"Tensor": "Tensor", "SymInt": "int", "int": "int", "float": "float", "bool": "bool",
            "Scalar": "Scalar", "str": "str", "ScalarType": "dtype", "Layout": "other", "Device": "other",
            "MemoryFormat": "other", "Generator": "other", "Dimname": "str", "complex": "Scalar"}.get(t, "other")
    if base == "Tensor" and inner_opt and lst:
        return "Tensor?[]", optional
    return base + lst, optional


def _default(text: str) -> Any:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text[:1] in "'\"":
        return text[1:-1]
    if text.startswith("["):
        inner = text[1:-1].strip()
        return [_default(x.strip()) for x in inner.split(",")] if inner else []
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text  # contiguous_format, long, ...


def parse_schema(line: str) -> Schema | None:
    """One line of ``aten_schemas.txt`` -> :class:`Schema` (None if it is not a schema line)."""
    m = _LINE.match(line.strip())
    if not m:
        return None
    name, overload, body = m.group(1), m.group(2) or "", m.group(3)
    params: list[Param] = []
    kw = varargs = False
    for part in _split(body):
        if part == "*":
            kw = True
            continue
        if part == "...":
            varargs = True
            continue
        decl, eq, dflt = part.partition("=")
        typ, _, pname = decl.strip().rpartition(" ")
        kind, optional = _kind(typ)
        params.append(Param(pname, kind, optional, bool(eq), _default(dflt.strip()) if eq else None, kw))
    return Schema(name, overload, tuple(params), varargs)


@lru_cache(maxsize=1)
def _text() -> str:
    return resources.files("pyprof").joinpath("data/aten_schemas.txt").read_text()


@lru_cache(maxsize=1)
def schemas() -> dict[str, tuple[Schema, ...]]:
    """Every aten op of the data file -> its overloads, in torch's order (the default one first)."""
    out: dict[str, list[Schema]] = {}
    for line in _text().splitlines():  # comment and blank lines parse as None
        s = parse_schema(line)
        if s is not None:
            out.setdefault(s.name, []).append(s)
    return {k: tuple(v) for k, v in out.items()}


@lru_cache(maxsize=1)
def pointwise_ops() -> frozenset[str]:
    """The aten ops torch tags ``pointwise`` (every overload), from the data file's second line."""
    for line in _text().splitlines()[:3]:
        if line.startswith("# pointwise:"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@lru_cache(maxsize=1)
def view_ops() -> frozenset[str]:
    """The aten ops every overload of which returns a view of an argument (``Tensor(a)``, not written)."""
    verdict: dict[str, bool] = {}
    for line in _text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        ret = m.group(4)
        is_view = bool(re.match(r"^\(?Tensor(\[\])?\([a-z]+\)", ret)) and "!" not in ret
        verdict[m.group(1)] = verdict.get(m.group(1), True) and is_view
    return frozenset(k for k, v in verdict.items() if v)


def param_names(op: str, overload: str | None = None) -> tuple[str, ...]:
    """The parameter names, in order, of aten op ``op``'s ``overload`` (None: the default, first, one); ()
    for no such op."""
    cands = [s for s in schemas().get(op, ()) if overload is None or s.overload == overload]
    return tuple(p.name for p in cands[0].params) if cands else ()


def torch_version() -> str:
    """The torch version the data file was written from."""
    m = re.search(r"torch (\S+)", _text().split("\n", 1)[0])
    return m.group(1) if m else ""


# ------------------------------------------------------------------------------------ binding

_SCALAR_TYPES = {"int", "float", "bool", "complex"}


#: kind -> (argument types that are it, types torch accepts for it anyway; "0-d": a 0-d tensor for a number)
_FIT: dict[str, tuple[set[str], set[str]]] = {
    "Tensor": ({"tensor", *_SCALAR_TYPES}, set()),  # torch wraps a number
    "Tensor?": ({"tensor"}, set()), "Tensor[]": ({"tensorlist"}, set()), "Tensor?[]": ({"tensorlist"}, set()),
    "Scalar": (_SCALAR_TYPES, {"0-d"}), "int": ({"int"}, {"bool", "0-d"}),
    "float": ({"float"}, {"int", "bool", "0-d"}), "bool": ({"bool"}, {"0-d"}),
    "str": ({"str"}, set()), "dtype": ({"dtype", "int", "str"}, set()),
}
#: int[], float[], bool[]: a list, or one number (int[1] dim=1, int[2] stride=2)
_LIST_FIT = ({"list", "tuple"}, {"int", "float", "bool"})


def _fits(kind: str, optional: bool, a: Arg) -> int | None:
    """0 if argument ``a`` is of the parameter's kind, 1 if torch would accept it anyway (a Python
    number for a Tensor, an int for a float), None if it cannot be that argument."""
    t = a.get("type")
    if t == "unknown":  # a value the source did not record: fits anything but a tensor with a shape
        return 0 if not kind.startswith("Tensor") or kind.endswith("?") or optional else 1
    if t == "NoneType":
        return 0 if optional or kind in ("Tensor?", "other") else None
    if kind not in _FIT and not kind.endswith("[]"):
        return 0 if t not in ("tensor", "tensorlist") else None
    exact, near = _FIT.get(kind, _LIST_FIT)
    if t in exact:
        return 0
    return 1 if t in near or ("0-d" in near and t == "tensor" and a.get("shape") == []) else None


def _convert(p: Param, a: Arg) -> Arg:
    """``a`` renamed to the parameter; Python values aten spells otherwise converted."""
    out = dict(a)
    out["name"] = p.name
    if p.name == "reduction" and p.kind == "int" and a.get("type") == "str":
        v = _REDUCTION.get(str(a.get("value")))
        if v is not None:
            out["type"], out["value"] = "int", v
    return out


def _default_arg(p: Param) -> Arg:
    return {**scalar_arg(p.default, p.name), "default": True}


def _pack(items: list[Arg], kind: str) -> tuple[Arg, int]:
    """Pack leading items into one list argument of ``kind`` (varargs: ``einsum(eq, a, b)``,
    ``x.view(2, 3)``); returns (the argument, how many items it took)."""
    if kind in ("Tensor[]", "Tensor?[]"):
        n = 0
        while n < len(items) and items[n].get("type") == "tensor" and not items[n].get("name"):
            n += 1
        return {"name": "", "type": "tensorlist", "items": items[:n]}, n
    n = 0
    while n < len(items) and items[n].get("type") == "int" and (n == 0 or not items[n].get("name")):
        n += 1
    return {"name": "", "type": "list", "value": [x.get("value") for x in items[:n]]}, n


def _split_args(args: list[Arg], names: dict[str, Param], positional: list[Param],
                renames: dict[str, str]) -> tuple[list[Arg], dict[str, Arg], list[str]]:
    """A call's arguments as the overload whose parameters are ``names`` takes them: (positional ones,
    keyword ones by parameter name, names it has no parameter for). A name is read through ``renames``
    (a Python spelling's argument names) and ``input``/``self`` stand for each other; a named argument
    standing where its parameter's position is, or before unnamed ones, is taken as positional."""
    slot = {p.name: i for i, p in enumerate(positional)}
    pos_args: list[Arg] = []
    kw_args: dict[str, Arg] = {}
    dropped: list[str] = []
    for i, a in enumerate(args):
        name = a.get("name") or ""
        name = renames.get(name, name)
        if name and name not in names:
            alt = {"input": "self", "self": "input"}.get(name)
            name = alt if alt in names else name
        if not name:
            pos_args.append(a)
        elif name in names and not kw_args and slot.get(name, -1) == len(pos_args):
            pos_args.append({**a, "name": ""})  # a leading argument the marker named by its position
        elif name in names:
            kw_args[name] = a
        elif not kw_args and any(not (x.get("name") or "") for x in args[i + 1:]):
            pos_args.append({**a, "name": ""})  # a leading name from the wrong signature (einsum's ``a``)
        elif not kw_args and len(pos_args) < len(positional) and positional[len(pos_args)].name not in kw_args:
            pos_args.append({**a, "name": ""})
        else:
            dropped.append(name)
    return pos_args, kw_args, dropped


def _bind_positional(s: Schema, positional: list[Param], pos_args: list[Arg], keywords: set[str], trace_form: bool,
                     pack_ints: bool, out: dict[str, Arg]) -> int | None:
    """Bind the positional arguments into ``out``: their mismatch score, or None when they cannot be."""
    score = pi = k = 0
    while k < len(pos_args):
        if pi >= len(positional) and not s.varargs:
            return None  # more positional arguments than the overload takes
        if pi >= len(positional):
            out[f"*{k}"] = pos_args[k]
            k += 1
            continue
        p = positional[pi]
        if p.name in keywords:
            return None
        a = _convert(p, pos_args[k])
        fit = _fits(p.kind, p.optional, a)
        if fit is None and trace_form and a.get("type") in ("NoneType", "other") and not p.kind.startswith("Tensor"):
            # a trace writes an argument it recorded no value of as it writes None (einsum's equation), or
            # by its type name ("Scalar": kineto without Concrete Inputs)
            a, fit = {"name": p.name, "type": "unknown"}, 1
        more = pack_ints and k + 1 < len(pos_args) and pos_args[k + 1].get("type") == "int" and a.get("type") == "int"
        packed, n = _pack(pos_args[k:], p.kind) if (fit is None or more) and p.kind.endswith("[]") else ({}, 0)
        if n:
            a, fit = _convert(p, packed), 0
        elif fit is None:
            return None
        score += fit
        out[p.name] = a
        k += max(n, 1)
        pi += 1
    return score


def bind_schema(s: Schema, args: list[Arg], renames: dict[str, str] | None = None,
                pack_ints: bool = False) -> tuple[Bound, int] | None:
    """Bind ``args`` to overload ``s``; (the binding, its mismatch score) or None when it cannot be.
    ``pack_ints``: consecutive ints fill one ``int[]`` parameter (``x.view(2, 3)``; tried only when no
    overload takes the call as it is, since ``max_pool2d(x, 2, 2)`` is a kernel size then a stride)."""
    names = {p.name: p for p in s.params}
    # a trace (no names at all) lists keyword-only arguments in place (addmm's beta); a Python call cannot
    trace_form = all(not (a.get("name") or "") for a in args)
    positional = [p for p in s.params if trace_form or not p.kwarg_only]
    pos_args, kw_args, dropped = _split_args(args, names, positional, renames or {})
    out: dict[str, Arg] = {}
    score = _bind_positional(s, positional, pos_args, set(kw_args), trace_form, pack_ints, out)
    if score is None:
        return None
    for name, a in kw_args.items():
        out[name] = _convert(names[name], a)
        fit = _fits(names[name].kind, names[name].optional, out[name])
        if fit is None:
            return None
        score += fit
    for p in s.params:
        if p.name not in out and not p.has_default:
            return None  # a required argument the call lacks
        out.setdefault(p.name, _default_arg(p))
    return Bound(s, out, dropped), score + len(dropped)


def aten_name(op: str) -> tuple[str, dict[str, str]]:
    """The aten op a canonical op name runs, and its argument renames."""
    return PYTHON.get(op, (op, {}))


def _best(cands: tuple[Schema, ...], args: list[Arg], renames: dict[str, str],
          pack: bool) -> tuple[Bound, int] | None:
    """The binding of ``args`` to one of ``cands`` with the lowest mismatch score (the first of equals),
    or None."""
    def bind(s: Schema) -> tuple[Bound, int] | None:
        try:
            return bind_schema(s, args, renames, pack)
        except (TypeError, ValueError, AttributeError, LookupError):
            return None

    return min(filter(None, map(bind, cands)), key=lambda r: r[1], default=None)


def normalize(op: str, args: list[Arg], inplace: bool = False) -> Bound:
    """Bind ``args`` of canonical op ``op`` to the aten overload that ran (see module docstring).

    ``inplace`` tries the in-place op's schemas (``add_``) first. Never raises: a call that fits no
    overload gives a :class:`Bound` with ``schema`` None and ``problem`` saying why."""
    name, renames = aten_name(op)
    table = schemas()
    cands = (table.get(name + "_", ()) if inplace else ()) + table.get(name, ())
    if not cands:
        return Bound(None, problem=f"no aten schema named {name!r}")
    best = _best(cands, args, renames, False) or _best(cands, args, renames, True)
    if best is None and args and args[-1].get("type") == "tensor" and all(not (a.get("name") or "") for a in args):
        # an out= call recorded by a trace (Inductor's extern_kernels.addmm(..., out=buf)): the output
        # last, an overload (.out) the table leaves out; the op without it is what ran
        best = _best(cands, args[:-1], renames, False)
    if best is None:
        kinds = ", ".join(f"{a.get('name') or '_'}:{a.get('type')}" for a in args)
        return Bound(None, problem=f"arguments ({kinds}) fit no overload of aten::{name}")
    return best[0]


@lru_cache(maxsize=65536)
def _normalize_cached(op: str, args_json: str, inplace: bool) -> Bound:
    return normalize(op, json.loads(args_json), inplace)


def normalize_cached(op: str, args: list[Arg], inplace: bool = False) -> Bound:
    """:func:`normalize`, remembered per distinct (op, arguments): their JSON text is the key."""
    try:
        key = json.dumps(args)
    except (TypeError, ValueError):  # a value JSON cannot write
        return normalize(op, args, inplace)
    return _normalize_cached(op, key, inplace)
