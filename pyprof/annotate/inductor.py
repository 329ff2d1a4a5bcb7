"""What each kernel Inductor generates came from, recorded at compile time (``torch.compile``).

A compiled region's kernels (fused Triton kernels on a GPU, C++ kernels on the CPU, and the extern
calls of the generated code: ``mm``, ``addmm``, attention, convolution) run without pyprof's module
ranges, so a trace alone ties them to no module. Inductor knows: each kernel's origin nodes in the
post-grad FX graph, whose ``meta`` holds the module stack (``nn_module_stack``, or
``fwd_nn_module_stack`` for a backward node), the user's ``stack_trace`` and the ``original_aten`` op.

While :func:`install` is in force (``pyprof.init()`` to ``deinit()``), none of which changes the
graph, the kernels or the results:

* Inductor's kernel provenance tracking is on (``config.trace.provenance_tracking_level``, its "basic"
  level 2; torch 2.8 and newer): code generation maps each kernel name to its origin nodes
  (:func:`pyprof.torch_private.inductor_kernel_nodes`) and adds a comment per kernel to the generated
  wrapper. A torch without it (2.4 to 2.7) gets the same map from the scheduler
  (:func:`_wrap_scheduler`); a backward node there carries no module stack and takes the one of the
  forward node with its sequence number (``seq_nr``).
* Inductor's C++ kernels announce themselves to the profiler (``config.cpp.enable_kernel_profile``):
  each opens a record function ``graph_<N>_<kernel name>`` while it runs, so a CPU trace shows each
  kernel's time apart from its compiled region's, for a record function per kernel call while the
  profiler records.
* Inductor's caches are bypassed (``force_disable_caches``): a graph loaded from a cache generates no
  code in this process, so its kernels' origins could not be recorded; compiling takes longer.
* ``GraphLowering.codegen`` is wrapped: :func:`_record` appends one entry per graph to :data:`GRAPHS`
  (compile id, forward or backward, and per kernel its name, origin aten ops, module paths and call
  site; its buffers and ``bytes``, from the wrapper's ``generate_kernel_call``: :func:`_wrap_calls`,
  :func:`_attach_tensors`; and its origin nodes as the calls prof prices: :func:`_origin_calls`,
  :mod:`pyprof.prof.ops.fused`).

Inductor's modules are changed when they are imported (an import hook on its ``config`` and ``graph``
modules): importing them in ``init()`` would cost seconds to every user, compiling or not, and add
attributes to ``torch``. Where a torch cannot bypass Inductor's caches, only kernel profiling is turned
on and :data:`STATE` says why; parse then names fused kernels by their names alone
(:mod:`pyprof.parse.kineto.inductor`). :func:`metadata` is what ``pyprof run`` adds to its trace
(``torch.profiler``'s ``add_metadata_json``, key :data:`TRACE_KEY`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib.abc
import importlib.util
import itertools
import json
import math
import re
import sys
from typing import Any

from pyprof import torch_private as tp
from pyprof.annotate.torchtables import HookedLoader

TRACE_KEY = "pyprofInductor"  # the trace's top-level key (pyprof.parse.kineto.inductor reads it)
VERSION = 1
_GRAPH_MODULE = tp.INDUCTOR_GRAPH
_CONFIG_MODULE = tp.INDUCTOR_CONFIG
_LEVEL = 2  # provenance tracking's "basic" level: kernel -> post-grad nodes, no extra node metadata kept

GRAPHS: list[dict[str, Any]] = []  # one entry per generated graph, in compile order
STATE: dict[str, Any] = {"status": "off", "failures": 0}
_saved: dict[str, Any] = {}
_WRAPPER_MODULE = tp.INDUCTOR_WRAPPER
_origins: dict[str, list[str]] = {}  # without provenance tracking: kernel "name:k" -> origin node names
_forward_chains: dict[str, dict] = {}  # compile id -> forward node's sequence number -> its module chain
_calls: list = []  # (kernel name, its tensor arguments, its arguments' names) per kernel call of the graph
_finder: Any = None
_text: list = [None, ""]  # (what metadata() was built from, its text)
_generation = [0]  # counts every change of GRAPHS
_installed = [False]


def install() -> None:
    """Turn provenance tracking on, bypass Inductor's caches and wrap ``GraphLowering.codegen``: now
    where Inductor's modules are imported, else as each is (nothing of Inductor is imported here). A
    no-op, with :data:`STATE` saying why, where this torch lacks an interface used."""
    global _finder
    if _installed[0]:
        return
    _installed[0] = True
    clear()  # (a new session)
    STATE.update(status="waiting for Inductor", failures=0)
    if _CONFIG_MODULE in sys.modules:
        _configure(sys.modules[_CONFIG_MODULE])
    if _GRAPH_MODULE in sys.modules:
        _wrap(sys.modules[_GRAPH_MODULE])
    if _CONFIG_MODULE not in sys.modules or _GRAPH_MODULE not in sys.modules:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Undo :func:`install`: the configuration, the import hook and the wrapper as they were."""
    _drop_finder()
    _installed[0] = False
    if "profile" in _saved:
        sys.modules[_CONFIG_MODULE].cpp.enable_kernel_profile = _saved.pop("profile")
    config: Any = sys.modules.get(_CONFIG_MODULE)
    if "level" in _saved:
        config.trace.provenance_tracking_level = _saved.pop("level")
    if "caches" in _saved:
        config.force_disable_caches = _saved.pop("caches")
    for attr in ("codegen", "generate_kernel_call", "codegen_extern_call", *_DEFINERS):
        cls, name, orig = _saved.pop(attr, (None, None, None))
        if cls is not None:
            setattr(cls, name, orig)
    _origins.clear()
    STATE.update(status="off")


def _configure(config) -> None:
    """Kernel profiling on (every torch that has it), provenance tracking on and caches bypassed, where
    this torch has both (else :data:`STATE` says so)."""
    cpp_cfg = getattr(config, "cpp", None)
    if cpp_cfg is not None and hasattr(cpp_cfg, "enable_kernel_profile") and "profile" not in _saved:
        _saved["profile"] = cpp_cfg.enable_kernel_profile
        cpp_cfg.enable_kernel_profile = True
    if "caches" in _saved:
        return
    if not hasattr(config, "force_disable_caches"):
        STATE.update(status="unavailable: this torch cannot bypass Inductor's caches (force_disable_caches)")
        return
    trace_cfg = getattr(config, "trace", None)
    if trace_cfg is not None and hasattr(trace_cfg, "provenance_tracking_level"):
        _saved["level"] = trace_cfg.provenance_tracking_level
        if not trace_cfg.provenance_tracking_level:
            trace_cfg.provenance_tracking_level = _LEVEL
    _saved["caches"] = config.force_disable_caches
    config.force_disable_caches = True


def metadata() -> str:
    """The recorded graphs as JSON text (what ``pyprof run`` stores under :data:`TRACE_KEY`)."""
    key = (_generation[0], STATE["status"], STATE["failures"])
    if _text[0] != key:  # (asked at every step: built again only when a graph was added)
        _text[:] = [key, json.dumps({"version": VERSION, "status": STATE["status"], "failures": STATE["failures"],
                                     "graphs": GRAPHS})]
    return _text[1]


def clear() -> None:
    """Forget the graphs recorded so far."""
    GRAPHS.clear()
    _forward_chains.clear()
    _generation[0] += 1


class _Finder(importlib.abc.MetaPathFinder):
    """Configures Inductor once its ``config`` module has been executed, and wraps
    ``GraphLowering.codegen`` once its ``graph`` module has."""

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002 - the finder protocol
        then = {_CONFIG_MODULE: _configure, _GRAPH_MODULE: _wrap}.get(name)
        if then is None:
            return None
        sys.meta_path.remove(self)  # find the real spec, then let it load as usual
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = HookedLoader(spec.loader, functools.partial(_after_exec, then))
        return spec


def _after_exec(then, execute, module) -> None:
    """The module executed by its own loader (``execute``), then ``then(module)`` while installed."""
    execute(module)
    if _installed[0]:
        then(module)


def _wrap(module) -> None:
    if _finder is not None and _CONFIG_MODULE in sys.modules:
        _drop_finder()
    cls: Any = getattr(module, "GraphLowering", None)
    orig = getattr(cls, "codegen", None)
    if "codegen" in _saved or "caches" not in _saved:
        return  # (wrapped already, or Inductor's caches cannot be bypassed)
    if orig is None:
        STATE.update(status="unavailable: no GraphLowering.codegen in this torch")
        return
    own = "level" not in _saved  # no provenance tracking: kernel origins taken from the scheduler

    def codegen(self, *args, **kwargs):
        if own:
            _wrap_scheduler()
            _origins.clear()
        before = _kernel_keys()
        _calls.clear()
        out = orig(self, *args, **kwargs)
        try:
            _record(self, before)
        except Exception:  # noqa: BLE001 - recording must never break a compile
            STATE["failures"] += 1
        return out

    _replace("codegen", cls, "codegen", orig, codegen)
    _wrap_calls(sys.modules.get(_WRAPPER_MODULE))
    STATE.update(status="on: kernel origins from Inductor's scheduler (no provenance tracking in this torch)"
                 if own else "on")


# (key in _saved, module, class, method): where a torch without provenance tracking names a generated
# kernel (``define_kernel`` returns its name; its nodes' ``origins`` are the post-grad nodes it came from)
_DEFINERS = tp.INDUCTOR_DEFINERS


def _wrap_scheduler() -> None:
    """Where this torch has no provenance tracking, keep what it would have mapped: each kernel
    ``define_kernel`` names (C++ and Triton) and each extern call the scheduler generates, with the names
    of its origin nodes, in :data:`_origins` under ``name:k`` (k counts kernels in generation order, as
    the tracker's handles do). Wrapped once, at the first graph generated; ``uninstall`` undoes it.
    The generated code is the same: each wrapper calls the original and reads its arguments."""
    for key, (module_name, cls_name, attr) in _DEFINERS.items():
        if key in _saved:
            continue
        try:
            cls: Any = getattr(importlib.import_module(module_name), cls_name, None)
        except Exception:  # noqa: BLE001 - a backend this install cannot import (no Triton)
            cls = None
        orig = getattr(cls, attr, None) if cls is not None and attr in vars(cls) else None
        if orig is not None:
            _replace(key, cls, attr, orig, _defining(orig))
    scheduler = sys.modules.get(tp.INDUCTOR_SCHEDULER)
    cls = getattr(scheduler, "Scheduler", None)
    orig = getattr(cls, "codegen_extern_call", None)
    if orig is not None and "codegen_extern_call" not in _saved:

        def codegen_extern_call(self, scheduler_node, *args, **kwargs):
            out = orig(self, scheduler_node, *args, **kwargs)
            node = getattr(scheduler_node, "node", None)
            name = getattr(node, "python_kernel_name", None)
            if name:
                _note(str(name), getattr(node, "origins", ()))
            return out

        _replace("codegen_extern_call", cls, "codegen_extern_call", orig, codegen_extern_call)


def _defining(orig):
    def define_kernel(self, src_code, nodes, *args, **kwargs):
        name = orig(self, src_code, nodes, *args, **kwargs)
        try:
            origins: set = set()
            for n in nodes if isinstance(nodes, (list, tuple)) else ():
                for part in n.get_nodes() if hasattr(n, "get_nodes") else (n,):
                    origins |= set(getattr(getattr(part, "node", None), "origins", None) or ())
            _note(name, origins)
        except Exception:  # noqa: BLE001 - recording must never break a compile
            STATE["failures"] += 1
        return name

    return define_kernel


def _replace(key: str, cls: Any, attr: str, orig: Any, fn: Any) -> None:
    """``cls.attr`` (``orig``) replaced by its wrapper ``fn`` (``__wrapped__``: ``orig``), and kept in
    :data:`_saved` under ``key`` for :func:`uninstall`."""
    fn.__wrapped__ = orig
    setattr(cls, attr, fn)
    _saved[key] = (cls, attr, orig)


def _note(name: str, origins) -> None:
    """One kernel of the graph being generated: ``name`` and its origin nodes' names."""
    names = sorted(o.name for o in origins if getattr(o, "op", None) in ("call_function", "placeholder"))
    _origins[f"{name}:{len(_origins) + 1}"] = names


def _wrap_calls(module) -> None:
    """Wrap the Python wrapper's ``generate_kernel_call``: each kernel call's tensor arguments (their
    sizes and dtypes, known as the code is generated) are kept in :data:`_calls` for :func:`_record`.
    Nothing is wrapped where this torch's wrapper has no such method (the kernels' bytes are then
    unknown); the generated code is the same either way."""
    cls: Any = getattr(module, "PythonWrapperCodegen", None) or getattr(module, "WrapperCodeGen", None)
    orig = getattr(cls, "generate_kernel_call", None)
    if orig is None:
        return

    def generate_kernel_call(self, kernel_name, call_args, *args, **kwargs):
        try:
            _calls.append((kernel_name, _tensors(call_args, kwargs.get("arg_types")),
                           [a for a in call_args if isinstance(a, str)]))
        except Exception:  # noqa: BLE001 - recording must never break a compile
            _calls.append((kernel_name, None, []))
        return orig(self, kernel_name, call_args, *args, **kwargs)

    _replace("generate_kernel_call", cls, "generate_kernel_call", orig, generate_kernel_call)


_BUFFER_NAME = re.compile(r"^(?:buf|primals_|arg|tangents_|getitem|reinterpret_tensor|mm|addmm|convolution)")


def _tensors(call_args, arg_types) -> list | None:
    """``[[shape, dtype, access], ...]``: the buffers a kernel call passes (each once), ``access`` ``r``
    (a C++ kernel's ``const T*``), ``w`` (its ``T*``: written; a buffer updated in place is read too,
    which its type does not tell) or ``?`` (a Triton kernel's: not told). None where an argument that
    may be a tensor cannot be resolved to a buffer of static size (a symbolic shape, an expression of
    the generated code): its bytes are then unknown."""
    graph = tp.inductor_graph()
    lookup = getattr(graph, "try_get_buffer", None) or getattr(graph, "get_buffer", None)  # (torch < 2.6)
    out, seen = [], set()
    types = list(arg_types) if arg_types is not None else []
    for i, arg in enumerate(call_args):
        kind = str(types[i]) if i < len(types) else ""
        pointer = kind.endswith("*")
        if not isinstance(arg, str) or arg in seen:
            continue
        buf = lookup(arg) if lookup is not None else None
        if buf is None or not hasattr(buf, "get_size"):
            if pointer or _BUFFER_NAME.match(arg):  # a tensor not resolved (a view's expression...)
                return None
            continue  # a size or a literal
        try:
            shape = [int(d) for d in buf.get_size()]
        except TypeError:
            return None
        seen.add(arg)
        access = ("r" if kind.startswith("const ") else "w") if pointer else "?"
        out.append([shape, str(buf.get_dtype()).removeprefix("torch."), access])
    return out


def _drop_finder() -> None:
    global _finder
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(_finder)
    _finder = None


def _tracker() -> dict:
    """Kernel (``name:k``) -> its origin post-grad nodes' names: Inductor's provenance tracker's, else
    what :func:`_wrap_scheduler` kept for the graph being generated."""
    return _origins if "level" not in _saved else tp.inductor_kernel_nodes()


def _kernel_keys() -> set:
    try:
        return set(_tracker())
    except Exception:  # noqa: BLE001
        return set()


def _record(graph, before: set) -> None:
    """One :data:`GRAPHS` entry for ``graph`` (a ``GraphLowering`` just generated): the kernels the
    provenance tracker added since ``before``, in code generation order."""
    tracked = _tracker()
    stacks = tp.inductor_kernel_stacks()
    fx = getattr(getattr(graph, "module", None), "graph", None) or getattr(graph, "graph", None)
    nodes = {n.name: n for n in getattr(fx, "nodes", ())}
    try:
        cid = tp.current_compile_id()
    except Exception:  # noqa: BLE001
        cid = None
    backward = _is_backward(graph, nodes.values())
    forward_chains = _forward_chains.setdefault(str(cid), {})
    if not backward:  # (its backward, compiled later, finds its forward nodes' modules by sequence number)
        for n in nodes.values():
            chain, seq = _module_chain(n), n.meta.get("seq_nr")
            if chain and seq is not None:
                forward_chains.setdefault(seq, chain)
    fresh = [(key, names) for key, names in tracked.items() if key not in before]
    uses = _node_uses(fresh, nodes)
    kernels = [_kernel_entry(key, names, nodes, uses, (stacks.get(key) or [None])[0], forward_chains)
               for key, names in fresh]
    kernels.sort(key=lambda k: k["order"])
    _attach_tensors(kernels, _pointer_params(graph))
    _name_input_copies(kernels, nodes, forward_chains)
    _generation[0] += 1
    GRAPHS.append({"compileId": None if cid is None else str(cid), "backward": backward, "kernels": kernels})


def _kernel_entry(key, names: list, nodes: dict, uses, stack, forward_chains: dict) -> dict:
    """The entry of the kernel the provenance tracker keys ``key``, made of the graph's nodes ``names``
    (``stack``: its recorded stack trace, or None)."""
    name, order = _split_key(key)
    origins = [nodes[n] for n in names if n in nodes]
    ops = [o for o in dict.fromkeys(_aten_name(n) for n in origins) if o]
    main = [n for n in origins if _aten_name(n) == extern_op(name)] or origins  # an extern: its op's node
    entry = {"name": name, "order": order, "ops": ops, **_placed(main, forward_chains),
             "stack": _last_frame(stack) if stack else None}
    if _generated(name):
        entry["nodes"] = _origin_calls(names, nodes, uses)
    return entry


def _name_input_copies(kernels: list[dict], nodes: dict, forward_chains: dict) -> None:
    """A generated kernel with no origin op (``cpp_fused_0``) copies graph inputs into the layout an op
    needs (e.g. a convolution's input and weights to channels-last): its op is ``copy`` and its modules
    are those of the ops that take the inputs it reads (the k-th call of its name, in :data:`_calls`).
    Left as it is where its arguments name no graph input."""
    for k, call in _kernel_calls(kernels):
        if k["ops"]:
            continue
        inputs = [nodes[a] for a in (call[1] if call else ()) if getattr(nodes.get(a), "op", "") == "placeholder"]
        users = [u for n in inputs for u in n.users if _aten_name(u)]
        if not users:
            continue
        k.update(ops=["copy"], **_placed(users, forward_chains))


def _placed(nodes: list, forward_chains: dict) -> dict:
    """A kernel's ``layer`` (the modules all of ``nodes`` ran in) and ``modules`` (each one's innermost); a
    backward node takes its forward node's module chain, by sequence number (``forward_chains``)."""
    chains = [_module_chain(n) or forward_chains.get(n.meta.get("seq_nr"), []) for n in nodes]
    return {"layer": _common(chains), "modules": list(dict.fromkeys(c[-1] if c else "" for c in chains))}


def _is_backward(graph, nodes) -> bool:
    """True for a backward graph: Inductor says so (``is_backward``, torch 2.5+), else AOTAutograd's
    backward takes the output gradients as inputs named ``tangents_N``."""
    flag = getattr(graph, "is_backward", None)
    if flag is not None:
        return bool(flag)
    return any(n.op == "placeholder" and n.name.startswith("tangents_") for n in nodes)


def _split_key(key: str) -> tuple[str, int]:
    """(kernel name, order) of a tracked kernel's key ``NAME:ORDER`` (:func:`_note`; order 0 where the
    key has none)."""
    name, _, handle = key.rpartition(":")
    return (name, int(handle)) if handle.isdigit() else (key, 0)


def _generated(name: str) -> bool:
    """Whether a kernel of the graph is one Inductor generated (C++ or Triton), not an extern call."""
    return name.startswith(("cpp_", "triton_"))


def _node_uses(fresh: list, nodes: dict) -> tuple[set, dict]:
    """(the nodes an extern call of the graph came from, how many generated kernels list each node) of
    a graph's ``(kernel key, origin node names)``: such a node's work is priced at its extern call (an
    ``addmm`` whose bias add Inductor fused into a kernel), and a node computed by several kernels (a
    reduction split in two) counts a share in each, so that no FLOP is counted twice. An extern call's
    nodes are those of its own aten op (torch 2.4's ``origins`` of an extern call also name the
    pointwise nodes of its inputs, which their own kernel computes)."""
    externs: set = set()
    counts: collections.Counter = collections.Counter()
    for key, names in fresh:
        name = _split_key(key)[0]
        if _generated(name):
            counts.update(set(names))
        else:
            op = extern_op(name)
            externs.update(n for n in names if n in nodes and _aten_name(nodes[n]) == op)
    return externs, counts


def _origin_calls(names, nodes: dict, uses: tuple[set, dict]) -> list[dict]:
    """A generated kernel's origin nodes as the calls prof prices (``pyprof.prof.ops.fused``): per node
    that computes (not a placeholder, nor a Python builtin such as ``getitem``) an argument object
    ``{"name": "aten::add.Tensor", "type": "op", "items": [its arguments]}``, the arguments in aten's
    order as :func:`_node_arg` gives them (``items`` null where a size is unknown), ``share`` k where k
    kernels list the node, ``extern`` true where an extern call came from it too. A node the graph does
    not hold is ``{"name": null, "type": "op"}``: the kernel's FLOPs are then unknown. A kernel whose
    nodes are graph inputs only (a copy into another layout) gets ``{"name": "inputs", "type": "int",
    "value": k}`` instead: it computes nothing."""
    externs, counts = uses
    out: list[dict] = []
    inputs = 0
    for nm in dict.fromkeys(names):
        node = nodes.get(nm)
        if node is None:
            out.append({"name": None, "type": "op"})
            continue
        target = node.target
        namespace = getattr(target, "namespace", None)
        if node.op in ("placeholder", "get_attr"):
            inputs += 1
            continue
        if node.op != "call_function" or namespace is None:
            continue  # (no work of its own: getitem)
        op = str(target)
        op = op.replace(".", "::", 1) if op.startswith(namespace + ".") else f"{namespace}::{op}"
        try:
            items = [_node_arg(a) for a in node.args] + [_node_arg(v, k) for k, v in node.kwargs.items()]
        except _Unknown:
            items = None
        call: dict[str, Any] = {"name": op, "type": "op", "items": items}
        if counts.get(nm, 1) > 1:
            call["share"] = counts[nm]
        if nm in externs:
            call["extern"] = True
        out.append(call)
    if inputs and not out:  # a copy of graph inputs (into another layout): computes nothing
        out.append({"name": "inputs", "type": "int", "value": inputs})
    return out


class _Unknown(Exception):
    """An argument whose size or value cannot be told at compile time (a symbolic size)."""


def _node_arg(value, name: str | None = None) -> dict:
    """One argument of an FX node in the argument format of :mod:`pyprof.markers` (unnamed where
    positional): another node is the tensor (or number) its ``meta['val']`` holds; a non-finite float
    (``-inf`` of a mask) is its text, as JSON has no such number. Raises :class:`_Unknown` for a
    symbolic size or a value that holds none."""
    import torch

    arg: dict[str, Any] = {"name": name} if name else {}
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
        if isinstance(value, torch.Tensor):
            if not all(type(d) is int for d in value.shape):  # a symbolic size
                raise _Unknown
            return {**arg, "type": "tensor", "shape": list(value.shape),
                    "dtype": str(value.dtype).removeprefix("torch.")}
        if value is None or not isinstance(value, (bool, int, float)):
            raise _Unknown
    if isinstance(value, float) and not math.isfinite(value):
        return {**arg, "type": "other", "value": str(value)}
    for kind in (type(None), bool, int, float, str):
        if isinstance(value, kind):
            return {**arg, "type": kind.__name__, "value": value}
    if isinstance(value, torch.dtype):
        return {**arg, "type": "dtype", "value": str(value).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return {**arg, **_list_arg([_node_arg(v) for v in value])}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Unknown
    return {**arg, "type": "other", "value": str(value)}  # a device, layout or memory format


def _list_arg(items: list[dict]) -> dict:
    """A list argument from its ``items`` (:func:`_node_arg`'s): a tensor list, or a list of numbers;
    :class:`_Unknown` for anything else."""
    if items and all(i["type"] == "tensor" for i in items):
        return {"type": "tensorlist", "items": items}
    if all(i["type"] in ("int", "float", "bool") for i in items):
        return {"type": "list", "value": [i["value"] for i in items]}
    raise _Unknown


def _kernel_calls(kernels: list[dict]):
    """``(kernel, call)`` for each generated kernel of ``kernels`` (code generation order), ``call`` its
    ``(tensors, argument names)`` in :data:`_calls` or None: the k-th call of a kernel name is the k-th
    kernel of that name (an extern call is left out: priced as its op)."""
    calls: dict[str, list] = {}
    for name, tensors, args in _calls:
        calls.setdefault(name, []).append((tensors, args))
    unmatched = {name: iter(got) for name, got in calls.items()}
    for k in kernels:
        if _generated(k["name"]):
            yield k, next(unmatched.get(k["name"], iter(())), None)


def _attach_tensors(kernels: list[dict], params: dict[str, list[str]] | None = None) -> None:
    """Each generated kernel's tensors (``tensors``: see :func:`_tensors`; accesses: :func:`_access`) and
    ``bytes`` (their sum, each buffer once, one updated in place twice; null where unknown), from its
    call (:func:`_kernel_calls`)."""
    for k, call in _kernel_calls(kernels):
        tensors = _access(call[0], (params or {}).get(k["name"])) if call is not None else None
        sizes = None if tensors is None else [_nbytes(shape, dtype, 2 if acc == "rw" else 1)
                                               for shape, dtype, acc in tensors]
        k["tensors"] = tensors
        k["bytes"] = None if sizes is None or None in sizes else sum(s for s in sizes if s is not None)


_SIGNATURE = re.compile(r"(?:\bvoid|\bdef)\s+[\w.{}]+\s*\(([^)]*)\)")  # (its name: Placeholder.KERNEL_NAME)
_POINTER = re.compile(r"\b(in_out_ptr|in_ptr|out_ptr)\d+\b")
_ACCESS = {"in_out_ptr": "rw", "in_ptr": "r", "out_ptr": "w"}


def _pointer_params(graph) -> dict[str, list[str]]:
    """{kernel name: the kind of each buffer parameter of its signature, in order} of the kernels
    ``graph`` generated, read from their source (the wrapper's ``src_to_kernel``): Inductor names a
    kernel's buffers ``in_ptrN`` (read), ``out_ptrN`` (written) and ``in_out_ptrN`` (updated in place),
    in a C++ kernel's ``void kernel(...)`` and a Triton kernel's ``def triton_...(...)`` alike."""
    sources = getattr(getattr(graph, "wrapper_code", None), "src_to_kernel", None) or {}
    out: dict[str, list[str]] = {}
    for src, name in list(sources.items()):
        m = _SIGNATURE.search(src) if isinstance(src, str) and isinstance(name, str) else None
        if m is not None:
            out[name] = [p.group(1) for p in _POINTER.finditer(m.group(1))]
    return out


def _access(tensors: list | None, params: list[str] | None) -> list | None:
    """``tensors`` with each buffer's access from the kernel's signature (``params``, one per buffer:
    ``in_out_ptr`` is ``rw``, read then written, its bytes counted twice); where the signature is not
    known or does not match, a C++ kernel's ``in_out_ptr`` buffers are told by their place: Inductor
    passes them first, as ``T*``, before the ``const T*`` inputs, so a written buffer before the first
    read one is one (a kernel that reads no other buffer cannot be told apart then: its stay ``w``)."""
    if not tensors:
        return tensors
    if params is not None and len(params) == len(tensors):
        return [[sh, dt, _ACCESS[p]] for (sh, dt, _), p in zip(tensors, params, strict=True)]
    first_read = next((i for i, t in enumerate(tensors) if t[2] == "r"), 0)
    return [[sh, dt, "rw"] if i < first_read and acc == "w" else [sh, dt, acc]
            for i, (sh, dt, acc) in enumerate(tensors)]


def _nbytes(shape: list[int], dtype: str, times: int = 1) -> int | None:
    """A tensor's bytes, ``times`` over (None: a dtype this torch does not name)."""
    import torch

    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        return None
    return dt.itemsize * times * math.prod(shape)


def _aten_name(node) -> str | None:
    """``addmm``: the aten op a node came from (``original_aten``), else its own target's, without
    namespace or overload; None for a placeholder or a Python builtin (``getitem``)."""
    target = node.meta.get("original_aten") or node.target
    name = getattr(target, "__name__", None) if not isinstance(target, str) else None
    if name is None or getattr(target, "namespace", None) is None:
        return None
    return name.split(".")[0]


_PATH_ITEM = re.compile(r"""\._modules\[['"]([^'"]+)['"]\]|\[['"]([^'"]+)['"]\]|\[(\d+)\]""")


def _module_chain(node) -> list[str]:
    """The modules a node ran in, outermost first, as paths below the compiled module (``["layers.0",
    "layers.0.attn"]``); ``[]``: the compiled module's (or function's) own code."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    out = []
    for value in stack.values():
        path = normalize_path(value[0] if isinstance(value, tuple) else str(value))
        if path and path not in out:
            out.append(path)
    return out


def _common(chains: list[list[str]]) -> list[str]:
    """The longest chain every one of ``chains`` starts with (a kernel fused from two modules' nodes
    belongs to the module holding both)."""
    shared = itertools.takewhile(lambda items: len(set(items)) == 1, zip(*chains, strict=False))
    return [items[0] for items in shared]


def extern_op(name: str) -> str:
    """``extern_kernels.addmm`` / ``torch.ops.aten.mm.default`` -> ``addmm`` / ``mm``: the aten op an
    extern call of the generated code runs (a fused kernel's name gives itself back)."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-1] in ("default", "Tensor", "out") or (len(parts) > 3 and parts[-3] == "aten"):
        parts = parts[:-1]
    return parts[-1]


_GETATTR = re.compile(r"""getattr\(([^(),]*), ['"]([^'"]+)['"]\)""")


def normalize_path(text: str) -> str:
    """Dynamo's source text of a module (``L['self'].layers[0]._modules['attn']``, or torch 2.4's
    ``getattr(L['fn'], '0')``) -> ``layers.0.attn``."""
    while True:  # getattr(X, 'name') -> X.name, innermost first
        text, n = _GETATTR.subn(lambda m: f"{m.group(1)}.{m.group(2)}", text)
        if not n:
            break
    text = re.sub(r"^(?:L|G)\[['\"][^'\"]*['\"]\]", "", text)
    text = _PATH_ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), text)
    return text.strip(".")


def _last_frame(stack: str) -> str | None:
    """``file.py:12`` of the innermost ``File "...", line N`` of a stack trace, else None."""
    found = re.findall(r'File "([^"]+)", line (\d+)', stack)
    if not found:
        return None
    path, line = found[-1]
    return f"{path}:{line}"
