"""Describe an op's arguments for the payload, in PyProf's argument format (see pyprof.markers).

Two forms: :func:`arg` / :func:`tensor` build the argument dicts; :func:`args_json` writes the same
arguments straight as JSON text, byte-identical to ``orjson.dumps`` of those dicts, because building
dicts and serialising them was most of the per-op cost. The text path covers plain tensors
(``torch.Tensor`` / ``nn.Parameter``: text cached per (shape, dtype, device, contiguity, requires_grad)),
``int``/``float``/``bool``/``None`` scalars and lists/tuples of ints; anything else goes through the
dict form and orjson (so what orjson rejects still raises). Nothing here reads tensor *values* (no
``.item()``, no printing), so describing an argument never synchronises a GPU.

Tensors of other kinds (nested, sparse, mkldnn, quantized, and Python subclasses such as DTensor,
FakeTensor or a jagged nested tensor) are described by :func:`_odd_tensor`, with a ``"kind"`` field
(and ``"cls"`` for a subclass): a nested tensor's shape may raise, a sparse or quantized tensor's dtype
and shape say nothing of its storage, and a subclass answers through its own ``__torch_function__``,
so each fact is read on its own and one that cannot be read is written ``null`` instead of losing
the marker. Plain strided tensors, meta ones included, take the cached path.
"""

from __future__ import annotations

import orjson
import torch

from pyprof import torch_private

_Tensor = torch.Tensor
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # exact types: subclasses are other kinds
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


_STRIDED = torch.strided
#: The quantized dtypes: a tensor of one of these is quantized (and only such a tensor has one), so
#: the dtype the text caches are keyed by already tells a quantized tensor apart. The C accelerator
#: hands tensors of these dtypes to :func:`_tensor_json` (see fastpath.py).
QUANTIZED_DTYPES = frozenset({torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4})


def tensor(t, name: str = "") -> dict:
    """A tensor argument's dict (see :mod:`pyprof.markers`); other kinds than plain strided
    ``torch.Tensor``/``nn.Parameter`` go to :func:`_odd_tensor`."""
    if type(t) not in _PLAIN_TENSORS:
        return _odd_tensor(t, name)
    try:
        shape = [*t.shape]
    except RuntimeError:  # a nested tensor has no sizes
        return _odd_tensor(t, name)
    dt = t.dtype
    if t.layout is not _STRIDED or dt in QUANTIZED_DTYPES:
        return _odd_tensor(t, name)
    try:
        contig = t.is_contiguous()
    except RuntimeError:  # layouts without strides
        contig = False
    return {"name": name, "type": "tensor", "shape": shape, "dtype": dtype_name(dt),
            "device": _device_name(t.device), "contig": contig, "grad": t.requires_grad}


def tensor_kind(t) -> str:
    """What kind of tensor ``t`` is, for the ``"kind"`` field of :func:`_odd_tensor`: ``nested``,
    the layout's name for other layouts (``sparse_coo``, ``sparse_csr``, ``sparse_csc``,
    ``sparse_bsr``, ``sparse_bsc``; ``mkldnn``), ``quantized``, else ``subclass`` for a Python subclass
    and ``strided`` for a plain tensor (one whose shape could not be read). Reads flags only."""
    try:
        if t.is_nested:
            return "nested"
        layout = t.layout
        if layout is not _STRIDED:
            return "mkldnn" if t.is_mkldnn else str(layout).replace("torch.", "")
        if t.is_quantized:
            return "quantized"
    except Exception:  # noqa: BLE001 - a subclass's __torch_function__ may refuse: keep the marker
        pass
    return "strided" if type(t) in _PLAIN_TENSORS else "subclass"


def _read(t, fact: str):
    """``getattr(t, fact)``, or None where reading it raises (a subclass's ``__torch_function__``,
    an uninitialized parameter): one unreadable fact must not cost the whole marker."""
    try:
        return getattr(t, fact)
    except Exception:  # noqa: BLE001
        return None


def _odd_tensor(t, name: str) -> dict:
    """The dict of a tensor that is not a plain strided ``torch.Tensor``/``nn.Parameter``: the usual
    fields, each read on its own and ``null`` where it cannot be read, then ``"kind"`` (see
    :func:`tensor_kind`) and, for a Python subclass, ``"cls"`` (its class name). ``shape`` is null
    where a dim is not a plain int: a nested tensor's ragged dims (a strided nested tensor has no
    sizes at all; a jagged one has a symbolic "nested int"), or symbolic sizes. No value is read."""
    kind = tensor_kind(t)
    try:  # (a strided nested tensor's shape raises)
        shape = [*t.shape] if kind != "nested" or type(t) not in _PLAIN_TENSORS else None
    except Exception:  # noqa: BLE001 - unreadable, or not a sequence
        shape = None
    if shape is not None and any(type(d) is not int for d in shape):
        shape = None
    dt = _read(t, "dtype")
    dev = _read(t, "device")
    try:
        contig = t.is_contiguous()
    except RuntimeError:  # sparse and other layouts without strides (as for plain tensors)
        contig = False
    except Exception:  # noqa: BLE001
        contig = None
    grad = _read(t, "requires_grad")
    d = {"name": name, "type": "tensor", "shape": shape,
         "dtype": dtype_name(dt) if isinstance(dt, torch.dtype) else None,
         "device": _device_name(dev) if isinstance(dev, torch.device) else None,
         "contig": contig if type(contig) is bool else None,
         "grad": grad if type(grad) is bool else None, "kind": kind}
    if type(t) not in _PLAIN_TENSORS:
        d["cls"] = type(t).__name__
    return d


_F = torch_private.functorch
unpack_dual = torch.autograd.forward_ad.unpack_dual


def vmapped(d: dict, t, under_grad: bool = False, jvp: frozenset = frozenset()) -> dict:
    """A tensor argument's dict with ``"vmap"``: ``[[level, batch size], ...]`` of the ``torch.func.vmap``
    levels ``t`` is batched at (its shape: the per-sample one the op sees), where there are any; one wrapped
    at a ``jvp`` level (in ``jvp``) ``"tangent"``: its tangent's levels (those of an inner wrapper, out of
    ``unpack_dual``'s reach, taken as the levels above). Under ``torch.func.grad`` (``under_grad``) a tensor
    no transform wraps (captured) is a constant: ``grad`` false."""
    levels, bare, tangent, top = [], not _F.is_functorch_wrapped_tensor(t), None, t
    while _F.is_functorch_wrapped_tensor(t):
        u = _F.get_unwrapped(t)
        if _F.is_batchedtensor(t):
            levels.append([_F.maybe_get_level(t), u.shape[_F.maybe_get_bdim(t)]])
        elif tangent is None and _F.maybe_get_level(t) in jvp:
            dual = unpack_dual(t).tangent
            tangent = [*levels, *vmapped({}, dual).get("vmap", ())] if dual is not None else (
                None if t is top else [*levels])
        t = u
    d = d if tangent is None else {**d, "tangent": tangent}
    return {**d, "vmap": levels} if levels else {**d, "grad": False} if bare and under_grad and d.get("grad") else d


def _plain(v):
    """A JSON-able value for list items (scalars, None, nested lists); raises :class:`_Unplain` for
    anything else."""
    t = type(v)
    if t in _SCALARS or v is None:
        return [v.real, v.imag] if t is complex else v
    if t in (list, tuple, torch.Size):
        return [_plain(x) for x in v]
    if t in _SIMPLE:
        return str(v).replace("torch.", "")
    raise _Unplain


class _Unplain(Exception):
    """A list item :func:`_plain` cannot write as JSON."""


def arg(v, name: str = "") -> dict:
    """One argument -> ``{"name", "type", ...}``."""
    if isinstance(v, _Tensor):
        return tensor(v, name)
    t = type(v)
    kind = _SCALARS.get(t) or _SIMPLE.get(t)
    if kind is not None:  # (a complex as [real, imag]; a dtype, device... as its name)
        return {"name": name, "type": kind, "value": _plain(v)}
    if v is None:
        return {"name": name, "type": "NoneType", "value": None}
    if t in (list, tuple, torch.Size):
        if any(isinstance(x, _Tensor) for x in v):
            return {"name": name, "type": "tensorlist", "items": [arg(x) for x in v]}
        try:
            return {"name": name, "type": "tuple" if t is not list else "list", "value": _plain(v)}
        except _Unplain:
            return {"name": name, "type": "other", "value": t.__name__}
    if isinstance(v, (int, float, bool)):  # numpy / SymInt-like scalars convertible without sync
        try:
            return {"name": name, "type": type(v).__name__, "value": float(v) if isinstance(v, float) else int(v)}
        except Exception:  # noqa: BLE001
            pass
    return {"name": name, "type": "other", "value": t.__name__}


def args(a: tuple, kw: dict, names: tuple) -> list[dict]:
    """Describe positional args (named from ``names`` where known) then keyword args."""
    return [arg(v, names[i] if i < len(names) else "") for i, v in enumerate(a)] + [arg(v, k) for k, v in kw.items()]


# -- JSON text form (see module docstring) -------------------------------------------------------
_dumps = orjson.dumps
_tensor_txt: dict = {}  # (shape, dtype, device, contig, grad) -> '"tensor","shape":[4,16],...}'
_ints_txt: dict = {}    # tuple of ints -> "1,1"
_name_txt: dict = {}    # argument name -> '{"name":"input","type":'
_float_txt: dict = {}   # float -> its orjson text (filled by the C accelerator, see fastpath.py)
_dtype_json: dict = {}  # dtype -> '"float32"' (see dtype_json; the C accelerator reads it)
_device_json: dict = {} # device -> '"cpu"' (see device_json; the C accelerator reads it)
_MAX_CACHED = 8192      # entries per cache (cleared when full: shapes can vary without bound)
_I64_MIN, _U64_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integer range


def name_head(name: str) -> str:
    """``{"name":<name>,"type":`` for ``name`` (cached)."""
    h = _name_txt.get(name)
    if h is None:
        h = _name_txt[name] = '{"name":' + _dumps(name).decode() + ',"type":'
    return h


def _tensor_json(t, head: str) -> str:
    """:func:`tensor` of a ``torch.Tensor``/``nn.Parameter`` as JSON text after ``head``: plain strided
    tensors' texts cached, other kinds' from :func:`_odd_tensor`, uncached (the C accelerator hands
    these same kinds over, see ``put_tensor`` in ``_fastpayload.c``)."""
    try:
        shape = t.shape
    except RuntimeError:  # a nested tensor has no sizes
        return _odd_json(t, head)
    dt = t.dtype
    if t.layout is not _STRIDED or dt in QUANTIZED_DTYPES:
        return _odd_json(t, head)
    try:
        contig = t.is_contiguous()
    except RuntimeError:  # layouts without strides
        contig = False
    key = (shape, dt, t.device, contig, t.requires_grad)
    s = _tensor_txt.get(key)
    if s is None:
        if len(_tensor_txt) >= _MAX_CACHED:
            _tensor_txt.clear()
        shape = ",".join([str(int(d)) for d in key[0]])
        dts = dtype_json(key[1])
        devs = device_json(key[2])
        s = _tensor_txt[key] = (f'"tensor","shape":[{shape}],"dtype":{dts},"device":{devs},'
                                f'"contig":{"true" if contig else "false"},"grad":{"true" if key[4] else "false"}}}')
    return head + s


def _odd_json(t, head: str) -> str:
    """:func:`_odd_tensor` as JSON text after ``head`` (orjson's text, the name's part replaced)."""
    return head + _dumps(_odd_tensor(t, "")).decode()[len(_NO_NAME):]


def dtype_json(dt) -> str:
    """A dtype's name as JSON text (``"float32"``), cached in :data:`_dtype_json` (read by the C path)."""
    s = _dtype_json.get(dt)
    if s is None:
        s = _dtype_json[dt] = _dumps(dtype_name(dt)).decode()
    return s


def device_json(dev) -> str:
    """A device as JSON text (``"cuda:0"``), cached in :data:`_device_json` (read by the C path)."""
    s = _device_json.get(dev)
    if s is None:
        s = _device_json[dev] = _dumps(_device_name(dev)).decode()
    return s


def float_json(v: float) -> str:
    """A float as orjson writes it (``1e-5``, ``0.1``, ``null`` for NaN)."""
    return _dumps(v).decode()


def _ints_json(v) -> str | None:
    """``1,2,3`` for a list/tuple of plain ints in orjson's range, else None (cached for tuples)."""
    for x in v:  # first: a tuple holding a slice cannot be hashed, and (True,) == (1,) == (1.0,)
        if type(x) is not int:
            return None
    cache = type(v) is tuple
    if cache:
        s = _ints_txt.get(v)
        if s is not None:
            return s
    for x in v:
        if not _I64_MIN <= x <= _U64_MAX:
            return None
    s = ",".join(map(str, v))
    if cache:
        if len(_ints_txt) >= _MAX_CACHED:
            _ints_txt.clear()
        _ints_txt[v] = s
    return s


def arg_json(v, head: str, name: str) -> str:
    """One argument as JSON text; ``head`` is :func:`name_head` of ``name``."""
    t = type(v)
    if t in _PLAIN_TENSORS:
        return _tensor_json(v, head)
    if t is float:
        return f'{head}"float","value":{_dumps(v).decode()}}}'
    if t is int and _I64_MIN <= v <= _U64_MAX:
        return f'{head}"int","value":{v}}}'
    if t is bool:
        return f'{head}"bool","value":{"true" if v else "false"}}}'
    if v is None:
        return head + '"NoneType","value":null}'
    if t is tuple or t is list or t is torch.Size:  # stride=(1, 1), dim=[0, 1], size=torch.Size(...)
        ints = _ints_json(v)
        if ints is not None:
            return f'{head}"{"list" if t is list else "tuple"}","value":[{ints}]}}'
    return _dumps(arg(v, name)).decode()


def args_json(a: tuple, kw: dict, heads: tuple, names: tuple) -> str:
    """:func:`args` as JSON text (without the brackets): ``heads`` are :func:`name_head` of ``names``."""
    n = len(heads)
    parts = []
    for i, v in enumerate(a):
        head = heads[i] if i < n else _NO_NAME
        if type(v) in _PLAIN_TENSORS:
            parts.append(_tensor_json(v, head))
        else:
            parts.append(arg_json(v, head, names[i] if i < n else ""))
    if kw:
        for k, v in kw.items():
            parts.append(arg_json(v, name_head(k), k))
    return ",".join(parts)


_NO_NAME = name_head("")
