"""Kernels of compiled regions (``torch.compile``) tied to the modules and aten ops they came from.

Inside a ``Torch-Compiled Region: F/C`` range a trace shows Inductor's generated kernels (fused Triton
kernels on a GPU: ``triton_poi_fused_add_relu_0``; on the CPU, C++ kernels as ranges of their own,
``graph_0_cpp_fused_relu_0``, where Inductor's ``cpp.enable_kernel_profile`` was on, as ``pyprof.init()``
sets it, else inside the region's own time, not seen apart) and the extern calls of the generated code
(``aten::addmm``, attention, convolution: each an op of its own, priced as that op). The trace gives none
of them a module: every one sits in the compiled module's range.

:func:`attribute` rewrites the plan entries of such kernels (``KinetoSource._plan``) as docs/records.md
("How a kernel finds its op") says: from Inductor's metadata (``pyprofInductor``, which ``pyprof run``
adds to the trace from :mod:`pyprof.annotate.inductor`: per compiled graph, each kernel's origin aten ops,
module chain and call site), else from the kernel's name (Inductor names it by its origin ops). A fused
kernel's ``args`` (:func:`fused_args`: the buffers it reads and writes, its origin nodes' calls) are what
prof prices it by (:mod:`pyprof.prof.ops.fused`); named from its name alone, they are null.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson

from pyprof import records
from pyprof.parse import decode as dec
from pyprof.parse.kineto.schema import COMPILED_REGIONS

TRACE_KEY = "pyprofInductor"  # (pyprof.annotate.inductor.TRACE_KEY)
LINK_INDUCTOR, LINK_KERNEL_NAME = "inductor", "kernel-name"
FUSED_MOD = "inductor"
FUSED_PREFIX = "fused:"
_KERNEL = re.compile(r"^(?:triton_[a-z]+_|cpp_)(?:fused_?)?(?P<body>.*?)(?:_?\d+)?$")
_REGION = dec.COMPILED_REGION + ":"


_GENERATED = re.compile(r"^(?:triton_(?:poi|red|per|tem|for|mix|spl|seg)_|cpp_fused_)")
_PROFILED = re.compile(r"^graph_\d+_(?=cpp_)")  # enable_kernel_profile's range of a C++ kernel


def kernel_name(name: str) -> str:
    """The kernel's name as Inductor generated it: ``graph_0_cpp_fused_relu_0`` (the range a C++ kernel
    opens under Inductor's ``config.cpp.enable_kernel_profile``) -> ``cpp_fused_relu_0``."""
    return _PROFILED.sub("", name, count=1) if name.startswith("graph_") else name


def is_generated(name: str) -> bool:
    """True for a kernel Inductor generated: ``triton_`` and its kind (``poi``ntwise, ``red``uction,
    ``per``sistent reduction, ``tem``plate, ``for``each...), or ``cpp_fused_`` (also as its profiled
    range, ``graph_0_cpp_fused_...``)."""
    return _GENERATED.match(kernel_name(name)) is not None


@lru_cache(maxsize=1)
def _aten_names() -> frozenset:
    """Every aten op name of ``pyprof/data/aten_schemas.txt`` (``native_layer_norm_backward``, ``_to_copy``)."""
    text = resources.files("pyprof").joinpath("data/aten_schemas.txt").read_text()
    return frozenset(m.group(1) for m in re.finditer(r"^aten::([A-Za-z0-9_]+)[.(]", text, re.M))


@lru_cache(maxsize=4096)
def ops_from_name(name: str) -> tuple[str, ...]:
    """The origin ops an Inductor kernel's name lists, longest aten op names first
    (``triton_poi_fused__to_copy_add_native_layer_norm_3`` -> ``_to_copy``, ``add``, ``native_layer_norm``);
    a word no aten op name covers is kept as it is. Empty for another kernel's name."""
    name = kernel_name(name)
    m = _KERNEL.match(name) if is_generated(name) else None
    if m is None or not m.group("body"):
        return ()
    known = _aten_names()
    words = m.group("body").split("_")
    out: list[str] = []
    i = 0
    while i < len(words):
        for j in range(len(words), i, -1):
            cand = "_".join(words[i:j])
            if cand in known:
                break
        else:
            j = i + 1
            cand = words[i]
            while not cand and j < len(words):  # a stray "_": part of the next word
                cand = "_" + words[j]
                j += 1
        if cand and cand not in out:
            out.append(cand)
        i = j
    return tuple(out)


def region_graphs(meta: dict) -> dict[tuple, tuple[dict, dict]]:
    """{(compile id, backward): (fused kernels' calls by name, extern calls by op, each in call order)}
    from a trace's metadata; empty where the trace has none, or none that can be read."""
    raw = meta.get(TRACE_KEY)
    if isinstance(raw, (str, bytes)):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {}
    if not isinstance(raw, dict) or not isinstance(raw.get("graphs"), list):
        return {}
    graphs: dict[tuple, tuple[dict, dict]] = {}
    for g in raw["graphs"]:
        if not isinstance(g, dict) or not isinstance(g.get("kernels"), list):
            continue
        fused: dict[str, list[dict]] = {}
        externs: dict[str, list[dict]] = {}
        for k in g["kernels"]:
            if not isinstance(k, dict) or not isinstance(k.get("name"), str):
                continue
            if is_generated(k["name"]):
                fused.setdefault(k["name"], []).append(k)
            else:
                externs.setdefault(_extern_op(k["name"]), []).append(k)
        graphs[str(g.get("compileId")), bool(g.get("backward"))] = (fused, externs)
    return graphs


def _extern_op(name: str) -> str:
    """``extern_kernels.addmm`` / ``torch.ops.aten.mm.default`` -> ``addmm`` / ``mm``."""
    parts = name.split(".")
    if len(parts) > 3 and parts[-3] == "aten" or parts[-1] in ("default", "Tensor", "out"):
        parts = parts[:-1]
    return parts[-1]


def _op_key(op: str) -> str:
    """A record's op as the graph's extern calls name it (``aten::mm`` -> ``mm``)."""
    return op.rsplit("::", 1)[-1].split(".")[0]


def _region(ix, node: int) -> int | None:
    """The innermost compiled region open at ``node`` (``Torch-Compiled Region: F/C``, or the
    ``CompiledFunction`` / ``CompiledFunctionBackward`` range of its autograd function), else None."""
    if node < 0:
        return None
    for r in reversed(ix.chain[node]):
        name = ix.name[r]
        if name.startswith(dec.COMPILED_REGION) or name in COMPILED_REGIONS:  # (torch 2.4: no "F/C")
            return r
    return None


def _graph(graphs: dict, region_name: str, f: dict) -> tuple | None:
    """The recorded graph a region instance ran: by the compile id its range (or, in the backward pass,
    its forward op: ``Torch-Compiled Region: F/C``) names, else the only graph of its direction."""
    bwd = f["dir"] == "bprop"
    for text in (region_name, f["op"] or ""):
        if text.startswith(_REGION):
            return graphs.get((text[len(_REGION):].strip(), bwd))
    same = [g for (_, b), g in graphs.items() if b == bwd]
    return same[0] if len(same) == 1 else None


def _layer(base: list, chain: list) -> list:
    """``base`` (the compiled module's layer) extended by the module chain below it."""
    if not chain:
        return list(base)
    top = base[-1] if len(base) > 1 else ""
    return [*base, *((f"{top}.{c}" if top else c) for c in chain)]


def attribute(ix, entries: list[tuple], meta: dict) -> dict[str, int]:
    """Rewrite, in place, the plan entries (``(node, ctx, n, pre)``) of kernels in compiled regions:
    see the module docstring. Returns counts (``inductor``, ``kernel-name``, ``extern``, ``unmatched``)."""
    graphs = region_graphs(meta)
    counts = {LINK_INDUCTOR: 0, LINK_KERNEL_NAME: 0, "extern": 0, "unmatched": 0}
    seen: dict[int, dict] = {}  # region range -> {op key: {op instance id: k}}
    new_ctx: dict[tuple, tuple] = {}
    keep: list = []  # the replaced contexts stay alive: new_ctx is keyed by their ids
    for i, (node, ctx, n, pre) in enumerate(entries):
        name = pre["kShortName"] if pre is not None else (ix.name[node] if node >= 0 else "")
        region = _region(ix, node)
        if region is None:
            continue
        f = ctx[0]
        graph = _graph(graphs, ix.name[region], f)
        if is_generated(name):
            # a CUDA graph's replay stays one op instance (the records' linking rule); else each kernel is one
            replay = pre is not None and str(pre.get("apiName") or "").endswith("GraphLaunch")
            info = _fused_call(graph, kernel_name(name), seen.setdefault(region, {}), -1 if replay else i)
            key = (id(ctx), name, replay, id(info))
            got = new_ctx.get(key)
            if got is None:
                got = new_ctx[key] = (_fused_fields(f, name, info), ctx[1] if replay else None, ctx[2])
                keep.append(ctx)
            counts[got[0]["link"]] += 1
            entries[i] = (node, got, n if replay else 0, pre)
            continue
        if graph is None or f["op"] is None or ctx[1] is None or f["mod"] in (dec.COMPILED_MOD, FUSED_MOD):
            continue
        op = _op_key(f["op"])
        calls = graph[1].get(op)
        if not calls:
            continue
        order = seen.setdefault(region, {}).setdefault(op, {})
        k = order.setdefault(ctx[1], len(order))
        if k >= len(calls):
            counts["unmatched"] += 1
            continue
        extern_key = (id(ctx), k)
        got = new_ctx.get(extern_key)
        if got is None:
            info = calls[k]
            g = dict(f, layer=_layer(f["layer"], _strings(info.get("layer"))), link=LINK_INDUCTOR)
            got = new_ctx[extern_key] = (dict(g, trace=g["trace"] or _stack(info)), ctx[1], ctx[2])
            keep.append(ctx)
        counts["extern"] += 1
        entries[i] = (node, got, n, pre)
    return counts


def _fused_fields(f: dict, name: str, info: dict | None) -> dict:
    """The fields of a generated kernel ``name`` of the op instance with fields ``f``: its recorded entry's
    (``info``; else its ops read from its name, link kernel-name)."""
    ops = (_strings(info.get("ops")) if info is not None else None) or list(ops_from_name(name))
    g = dict(f, mod=FUSED_MOD, op=FUSED_PREFIX + ("+".join(ops) if ops else kernel_name(name)),
             args=fused_args(info), link=LINK_INDUCTOR if info is not None else LINK_KERNEL_NAME, opDir=None)
    if info is not None:
        g["layer"] = _layer(f["layer"], _strings(info.get("layer")))
        g["trace"] = _stack(info) or g["trace"]
    return g


def _stack(info: dict) -> list:
    """A recorded entry's call site as a ``trace`` (empty where none)."""
    return [info["stack"]] if isinstance(info.get("stack"), str) and info["stack"] else []


def fused_args(info: dict | None) -> list | None:
    """A generated kernel's ``args`` from its recorded entry: ``buffers`` (a tensor list of the buffers it
    reads and writes, each named by its access; left out where unknown) and its origin nodes' calls
    (arguments of type ``op``), what prof prices it by (``pyprof.prof.ops.fused``); None where nothing
    was recorded."""
    if info is None:
        return None
    args: list = []
    tensors = info.get("tensors")
    if isinstance(tensors, list) and all(isinstance(t, list) and len(t) == 3 for t in tensors):
        args.append({"name": "buffers", "type": "tensorlist",
                     "items": [{"name": acc, "type": "tensor", "shape": sh, "dtype": dt} for sh, dt, acc in tensors]})
    nodes = info.get("nodes")
    if isinstance(nodes, list):
        args.extend(n if isinstance(n, dict) and (n.get("type") == "op" or n.get("name") == "inputs")
                    else _UNKNOWN_NODE for n in nodes)
    # damaged metadata: what the record's checks would reject is unknown (a node: the FLOPs; buffers: bytes)
    ok = records.CHECKS["args"].ok
    return [a if a.get("type") != "op" or ok([a]) else _UNKNOWN_NODE
            for a in args if a.get("type") == "op" or ok([a])] or None


_UNKNOWN_NODE = {"name": None, "type": "op"}  # an origin node whose call is unknown (prof: FLOPs n/a)


def _fused_call(graph: tuple | None, name: str, seen: dict, inst) -> dict | None:
    """The recorded call of fused kernel ``name`` that this one is: Inductor reuses one kernel for identical
    code, so the k-th call of a name in a region instance is the graph's k-th (a kernel recorded once is
    that one at every call). ``seen`` counts the region instance's calls by name
    (``inst``: the entry; -1 for every kernel of a replayed CUDA graph, which replays them as one call)."""
    calls = graph[0].get(name) if graph is not None else None
    if not calls:
        return None
    order = seen.setdefault(("fused", name), {})
    k = order.setdefault(inst, len(order))
    if len(calls) == 1:
        return calls[0]
    return calls[k] if k < len(calls) else None


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
