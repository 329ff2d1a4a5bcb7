"""The op wrapper: what runs instead of an instrumented torch function, method or wrapped callable.

Plain path (no consumer, nested call, compiling, tracing): two reads (pyprof's idle flag and the bool
torch.profiler sets while it records, :data:`pyprof.torch_private.FLAGS`; both plain Python values, so
TorchDynamo traces straight through to the original), then the original. Marker path: build the payload (see
:mod:`pyprof.markers`: namespace, op, described args, call site, autocast compute dtype, autograd
``seq``, instance ``id``), push the range, call the original inside try/finally, pop, then hook the
autograd nodes the call created (:mod:`pyprof.annotate.backward`). The payload is written as JSON
text directly (:func:`build_payload`: the constant head per callable is precomputed in
:class:`OpMeta`, arguments by :func:`pyprof.annotate.describe.args_json`, the call site from
:func:`pyprof.annotate.callsite.call_site_json`), byte-identical to ``markers.encode`` of the payload
dict, because building that dict and serialising it was about half of the per-op cost. Where the
optional C extension was built (:mod:`pyprof.annotate.fastpath`), its ``call`` runs the marker path
instead of :func:`call_marked`: the same steps and the same text, without the interpreter (how it
stays out of TorchDynamo's way: docs/design.md, "The C accelerator of init()'s op path").

Nesting: ops called from inside an instrumented op emit nothing by default (a thread-local flag),
because the outer op already names the work — except inside :data:`COMPOSITES`, functions whose
inner ops are what actually runs and what the cost models price (the parser attributes a kernel to
the innermost op marker). ``init(nested=True)`` emits every level.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from typing import Any

import torch

from pyprof import markers
from pyprof import torch_private as tp
from pyprof.annotate import backward, callsite, describe, fastpath
from pyprof.annotate.autocast import LOWER_PRECISION_OPS, compute_dtype
from pyprof.annotate.emit import NOTHING, NVTX_ONLY, pop, push
from pyprof.annotate.state import S

#: Functions whose inner instrumented calls emit their own op ranges, nested in theirs.
COMPOSITES = frozenset({
    ("torch.nn.functional", "multi_head_attention_forward"),
})

_ids = itertools.count(1)
_tls = threading.local()
_flags, _RECORDING = tp.FLAGS, tp.RECORDING  # ``_flags[_RECORDING]``: is torch.profiler recording?
_is_tracing = tp.is_tracing  # is torch.jit.trace recording?
_grad_enabled = torch.is_grad_enabled
_functorch_active, _F = tp.functorch_active, tp.functorch
_any_autocast = tp.any_autocast
_Tensor = torch.Tensor
_VERSION = markers.VERSION
_dumps = markers.encode  # used for the constant parts; build_payload writes the rest itself

_torch_is_compiling = torch.compiler.is_compiling
_compile_context = tp.compile_context
_tracing_context = tp.tracing_context


def _is_compiling() -> bool:
    """Whether a ``torch.compile`` session (or ``torch.export``) is running on this thread: while
    TorchDynamo traces, and while the ops of the compile itself run for real (fake-tensor propagation,
    AOTAutograd, a backward compiled at its first call), where no marker may be emitted. Newer torch
    holds ``torch.compiler.is_compiling()`` true for all of it; torch 2.4 sets it only for export, so
    the compile and tracing contexts TorchDynamo opens on the thread are asked too."""
    return _torch_is_compiling() or _compile_context() is not None or _tracing_context() is not None

#: What the wrappers ask first (see :func:`make_wrapper`): torch's public check for TorchDynamo tracing.
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling


class OpMeta:
    """Per-callable facts computed once: namespace, name, argument names, flags, and the constant
    head of its payload text (``{"pyprof":1,"k":"op","ns":...,"op":...,"args":[``)."""

    __slots__ = ("ns", "name", "names", "heads", "composite", "lowp", "fn", "head", "packed")

    def __init__(self, ns: str, name: str, fn, composite: bool | None = None):
        self.ns = ns
        self.name = name
        self.fn = fn
        self.names: tuple = ()
        self.heads: tuple = ()
        self.packed: tuple | None = None  # (head, heads, names, lowp, composite) once arg_names() ran
        self.composite = (ns, name) in COMPOSITES if composite is None else composite
        self.lowp = name in LOWER_PRECISION_OPS
        self.head = _dumps({"pyprof": _VERSION, "k": "op", "ns": ns, "op": name})[:-1] + ',"args":['

    def arg_names(self) -> tuple:
        if self.packed is None:
            key = (self.ns, self.name)
            names = _names_cache.get(key)
            if names is None:
                names = _names_cache[key] = _arg_names(self.fn, self.ns, self.name)
            self.names = names
            self.heads = tuple(describe.name_head(n) for n in names)
            self.packed = (self.head, self.heads, self.names, self.lowp, self.composite)
        return self.names


_names_cache: dict = {}  # (ns, name) -> positional names; survives deinit/init


def _signature_names(fn) -> tuple:
    """The leading positional parameter names of ``fn``'s Python signature (none where it has none)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in itertools.takewhile(lambda p: p.kind in positional, params))


def _arg_names(fn, ns: str, name: str) -> tuple:
    """Positional parameter names: from the Python signature, else from the aten schemas when all
    overloads agree on a position (``self`` first for Tensor methods)."""
    own = _signature_names(fn)
    if own:
        return own
    try:
        schemas = tp.jit_schemas("aten::" + name.strip("_").replace("__", ""))
    except Exception:  # noqa: BLE001 - unknown operator
        schemas = []
    if not schemas:
        return ("self",) if ns == "torch.Tensor" else ()
    tensor_first = [s for s in schemas if s.arguments and str(s.arguments[0].type).startswith("Tensor")]
    lists = [[a.name for a in s.arguments if not a.kwarg_only] for s in (tensor_first or schemas)]
    names = [c[0] for c in itertools.takewhile(lambda c: len(set(c)) == 1, zip(*lists, strict=False))]
    if names:  # aten calls the first tensor ``self``; the Python API calls it ``input`` outside methods
        if ns == "torch.Tensor":
            names[0] = "self"
        elif names[0] == "self":
            names[0] = "input"
    return tuple(names)


def _first_device_type(args, kwargs) -> str | None:
    for a in args:
        if isinstance(a, _Tensor):
            return a.device.type
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], _Tensor):
            return a[0].device.type
    for a in kwargs.values():
        if isinstance(a, _Tensor):
            return a.device.type
    return None


def _wants_grad(args, kwargs) -> bool:
    for a in args:
        if isinstance(a, _Tensor):
            if a.requires_grad:
                return True
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, _Tensor) and x.requires_grad:
                    return True
    for a in kwargs.values():
        if isinstance(a, _Tensor) and a.requires_grad:
            return True
    return False


def _vmap_args_json(args, kwargs, names: tuple) -> str:
    """The arguments of a call under a ``torch.func`` transform, tensors with their vmap levels."""
    described, flat = describe.args(args, kwargs, names), [*args, *kwargs.values()]
    stack = [(i.key(), i.level()) for i in _F.get_interpreter_stack() or ()]
    g = any(k == _F.TransformType.Grad for k, _ in stack)  # under torch.func.grad
    j = frozenset(lvl for k, lvl in stack if k == _F.TransformType.Jvp)  # the levels of torch.func.jvp
    return ",".join(_dumps(describe.vmapped(d, v, g, j) if d.get("type") == "tensor" else
                           {**d, "items": [describe.vmapped(x, t, g, j) for x, t in zip(d["items"], v, strict=True)]}
                           if d.get("type") == "tensorlist" else d) for d, v in zip(described, flat, strict=True))


def build_payload(meta: OpMeta, args, kwargs, op_id: int, s0: int | None) -> str:
    """The op payload (see :mod:`pyprof.markers`) as its JSON text, written directly (byte-identical
    to ``markers.encode`` of the payload dict, keys in the same order); under a ``torch.func`` transform
    each batched tensor with its ``vmap`` levels."""
    if meta.packed is None:
        meta.arg_names()
    text = meta.head + (_vmap_args_json(args, kwargs, meta.names) if _functorch_active() else
                        _args_json(args, kwargs, meta.heads, meta.names)) + "]"
    if meta.lowp and _any_autocast():
        text += cdtype_json(meta, args, kwargs)
    if s0 is not None:
        text += f',"seq":[{s0}]'
    return f'{text},"id":{op_id},"trace":{_call_site_json(3, S.stack_depth)}}}'


def cdtype_json(meta: OpMeta, args, kwargs) -> str:
    """``,"cdtype":"bfloat16"`` when autocast runs this op in a lower precision now, else ``""``."""
    dev = _first_device_type(args, kwargs)
    if dev is not None:
        cd = compute_dtype(meta.name, dev)
        if cd is not None:
            return ',"cdtype":' + describe.dtype_json(cd)
    return ""


_args_json = describe.args_json
_call_site_json = callsite.call_site_json
_get_seq = backward.get_seq
_hook_op = backward.hook_op


def call_marked(meta: OpMeta, fn, args, kwargs):
    """The marker path (see module docstring); falls back to the plain call where markers must not be."""
    if _is_compiling():
        return fn(*args, **kwargs)
    tls = _tls
    try:
        busy = tls.busy
    except AttributeError:
        busy = tls.busy = False
    if (busy and not S.nested) or _is_tracing():
        return fn(*args, **kwargs)
    op_id = next(_ids)
    s0 = _get_seq() if (S.backward and _grad_enabled() and _wants_grad(args, kwargs)) else None
    try:
        text = build_payload(meta, args, kwargs, op_id, s0)
    except Exception:  # noqa: BLE001 - describing must never break the user's call
        return fn(*args, **kwargs)
    tok = push(text)
    tls.busy = not meta.composite
    try:
        out = fn(*args, **kwargs)
    finally:
        tls.busy = False
        pop(tok)
    if s0 is not None:
        s1 = _get_seq()
        if s1 > s0:
            _hook_op(out, s0, s1, op_id)
    return out


#: What the C accelerator (:mod:`pyprof.annotate.fastpath`) calls back and reads; ``_fast_call`` (None
#: where it was not built or PYPROF_PURE_PYTHON=1) stands in for :func:`call_marked`, and
#: ``_fast.build`` writes the text :func:`build_payload` would (for the tests).
CALL_SIDE = dict(cdtype_json=cdtype_json, any_autocast=_any_autocast, state=S, ids=_ids,
                 tracing=_is_tracing, grad_enabled=_grad_enabled, get_seq=_get_seq,
                 push=push, pop=pop, nothing=NOTHING, nvtx_only=NVTX_ONLY, profiler=_flags,
                 profiler_flag=_RECORDING, hook_op=_hook_op,
                 build_payload=build_payload, compiling=_is_compiling)
_fast = fastpath.load(**CALL_SIDE)
_fast_call = _fast.call if _fast is not None else None


def _mark_raised() -> None:
    """Right after an op's range closed because its call raised: an empty ``raised`` range, which tells
    the parser that the op's records (a CPU trace's ``aten::mm`` stopped by checkpoint's early stop, say)
    may hold no work. Never lets a failure here replace the user's exception."""
    if _is_compiling():
        return
    with contextlib.suppress(Exception):  # the user's exception is the one to propagate
        pop(push(_RAISED))


_RAISED = markers.RAISED
_INLINE = tp.DYNAMO_INLINE


def make_wrapper(fn, meta: OpMeta):
    """A Python function standing in for ``fn``; ``__wrapped__`` is the original, and so is
    ``torch_private.DYNAMO_INLINE``: the attribute TorchDynamo unwraps (as it does for ``torch.compile``'s own
    wrappers, in every torch since 2.0), so it traces ``fn`` itself, with the rules it has for ``fn``,
    and never the wrapper (whose closure it would otherwise inline, breaking the graph at builtins it
    cannot name, recompiling per closure of the one wrapper code object)."""
    St = S

    def wrapper(*args, **kwargs):
        # the compile check first: TorchDynamo folds it to True and traces straight to the original,
        # reading no pyprof state (it would guard on the idle flag, and recompile the region when a
        # profiler starts or stops, inside the profiled steps)
        if _is_dynamo_compiling() or (St.idle and not _flags[_RECORDING]):
            return fn(*args, **kwargs)
        try:
            if _fast_call is not None and not _functorch_active():  # (the C path writes no vmap levels)
                return _fast_call(meta, fn, args, kwargs)
            return call_marked(meta, fn, args, kwargs)
        except BaseException:
            _mark_raised()
            raise

    marked: Any = wrapper
    try:
        functools.update_wrapper(marked, fn)
    except (AttributeError, TypeError):
        marked.__wrapped__ = fn
    marked.__pyprof_meta__ = meta
    setattr(marked, _INLINE, fn)
    return marked
