"""Decode the NVTX range texts open at a kernel's launch into record fields, and link backward to forward.

Reused by every source (nsys, nvprof, torch.profiler/Kineto), so it works on plain strings only:
:func:`classify` reads one range text (a pyprof marker, a legacy NVIDIA PyProf ``str(dict)`` marker
read with ``ast.literal_eval``, never ``eval``, an ``emit_nvtx`` op string, a ``layer:NAME`` range, or
a plain user range); :func:`decode` folds the texts open at a launch into record fields, once per
distinct open set; :class:`BackwardLinker` ties backward kernels to their forward op.

emit_nvtx grammar (every form PyTorch has written):
``name`` | ``name, seq = N`` | ``name, stashed seq = N`` | ... ``, op_id = M`` | ``, sizes = [[..], ..]``
| ``, input_op_ids = [...]``; names ``aten::x``, bare ``x`` (PyTorch <= 1.x), autograd nodes
``XBackward``/``XBackward0``, ``torch::autograd::AccumulateGrad``, mangled ``N5torch8autograd14AccumulateGradE``.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeGuard

import orjson

from pyprof import markers
from pyprof.parse import limits
from pyprof.records import BACKWARD_DIRS, CHECKS, SECOND_ORDER  # noqa: F401 (SECOND_ORDER: dec.SECOND_ORDER)

# -- one text ---------------------------------------------------------------------------------------

_KEY = re.compile(r",\s*(stashed seq|seq|op_id|sizes|input_op_ids)\s*=\s*")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAMESPACED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+$")
#: namespaces of PyTorch operators (other ``a::b`` texts, e.g. nvFuser's ``FusionCache::get``, are user ranges)
_OP_NAMESPACES = ("aten::", "prim::", "c10d::", "_c10d_functional::", "torchvision::", "quantized::")
#: autograd node names: CamelCase with something before "Backward" (a user range named "Backward" is a hint)
_BWD_NODE = re.compile(r"^(?:torch::autograd::)?[A-Z][A-Za-z0-9_]*Backward\d*$")
_MANGLED_AUTOGRAD = re.compile(r"^N5torch8autograd\d+([A-Za-z_][A-Za-z0-9_]*)E$")
_EVALUATE = "autograd::engine::evaluate_function: "
#: ``torch::autograd::CppNode<X>``: the backward node of a C++ ``torch::autograd::Function`` X
_CPP_NODE = re.compile(r"^(?:torch::autograd::)?CppNode<(.+)>$")
_NO_LINK_NODES = {"GraphRoot", "AccumulateGrad", "torch::autograd::GraphRoot", "torch::autograd::AccumulateGrad"}
_HINT_BWD = re.compile(r"\b(backward|bwd|backprop)\b", re.I)
_HINT_OPTIM = re.compile(r"optimi[sz]er|\boptim\b|\bopt[._ ]step\b", re.I)
_HINT_FWD = re.compile(r"\b(forward|fwd)\b", re.I)


@dataclass(frozen=True)
class TextInfo:
    """What one range text means. ``kind`` is one of: ``op`` (a marker naming the op the user called),
    ``mod`` (module path), ``bwd``, ``optim``, ``trace``, ``layer``, ``aten`` (emit_nvtx op or autograd
    node), ``hint`` (user range hinting a direction), ``region`` (a torch.compile region), ``plain``."""

    kind: str
    malformed: bool = False
    mod: str | None = None
    op: str | None = None
    args: Any = None
    cdtype: str | None = None
    trace: tuple | None = None
    layer: str | None = None
    name: str | None = None          # aten op name / autograd node name
    seq: int | None = None           # emit_nvtx `seq = N`, pyprof bwd seq
    stashed: int | None = None       # emit_nvtx `stashed seq = N`
    fwd_seqs: tuple = ()             # pyprof op marker's `seq` list
    fwd_keys: tuple = ()             # linker keys a forward op registers: its seqs and id_key(its id)
    link_key: int | None = None      # linker key a backward range looks up (id_key of the forward op's id)
    sizes: Any = None
    is_bwd_node: bool = False
    hint: str | None = None          # fprop / bprop / optim


def _parse_sizes(text: str):
    """emit_nvtx's ``sizes = [[..], ..]`` as a list; None when it is not one (``atenSizes`` is a list)."""
    try:
        sizes = orjson.loads(text.replace("(", "[").replace(")", "]"))
    except orjson.JSONDecodeError:
        return None
    return sizes if isinstance(sizes, list) else None


def _node_name(name: str) -> tuple[str, bool, bool]:
    """An emit_nvtx range's name as (op name, whether an autograd node's, whether a C++ custom autograd
    Function's node: named by its Function, fbgemm's SplitLookupFunction_...)."""
    if name.startswith(_EVALUATE):
        name, node = name[len(_EVALUATE):].strip(), True
    else:
        mangled = _MANGLED_AUTOGRAD.match(name)
        node = bool(mangled) or bool(_BWD_NODE.match(name)) or name.startswith("torch::autograd::")
        if mangled:
            name = "torch::autograd::" + mangled.group(1)
    cpp = _CPP_NODE.match(name)
    return (cpp.group(1).strip(), True, True) if cpp else (name, node, False)


def _emit_nvtx(text: str, bare_names: bool) -> TextInfo | None:
    """Parse an emit_nvtx string; None if ``text`` is not one."""
    matches = list(_KEY.finditer(text))
    name, node, cpp = _node_name((text[: matches[0].start()] if matches else text).strip())
    if not matches and not node:
        if not ((_NAMESPACED.match(name) and name.startswith(_OP_NAMESPACES)) or (bare_names and _IDENT.match(name))):
            return None
    elif not (cpp or _IDENT.match(name) or _NAMESPACED.match(name)):
        return None
    ends = [m.start() for m in matches[1:]] + [len(text)]  # each value runs to the next key, or the end
    values = {m.group(1): text[m.end():end].strip() for m, end in zip(matches, ends, strict=False)}
    try:
        seq, stashed = (int(values[k]) if k in values else None for k in ("seq", "stashed seq"))
    except ValueError:
        return None
    sizes = _parse_sizes(values["sizes"]) if "sizes" in values else None
    return TextInfo("aten", name=name, seq=seq, stashed=stashed, sizes=sizes, is_bwd_node=node)


class _Fields:
    """The fields of one decoded marker, each taken only when it holds a value of the type its record
    field has (:data:`pyprof.records.CHECKS`), so that parse never writes a record its own readers
    reject; ``bad`` counts the fields that did not (the marker is then counted as malformed)."""

    __slots__ = ("d", "bad")

    def __init__(self, d: dict[str, Any]):
        self.d, self.bad = d, 0

    def get(self, key: str, field: str) -> Any:
        v = self.d.get(key)
        if v is None or CHECKS[field].ok(v):
            return v
        self.bad += 1
        return None

    def text(self, key: str) -> str | None:
        v = self.d.get(key)
        if v is None or isinstance(v, str):
            return v
        self.bad += 1
        return None

    def strings(self, key: str) -> tuple | None:
        """A list of strings (a call site); items that are not strings are dropped and counted."""
        v = self.d.get(key)
        if v is None:
            return None
        if not isinstance(v, list):
            self.bad += 1
            return None
        out = tuple(t for t in v if isinstance(t, str))
        self.bad += len(out) != len(v)
        return out

    def ints(self, key: str) -> tuple:
        v = self.d.get(key)
        if v is None:
            return ()
        items = v if isinstance(v, list) else [v]
        out = tuple(s for s in items if _is_int(s))
        self.bad += len(out) != len(items)
        return out


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _pyprof(text: str) -> TextInfo:
    try:
        p = markers.decode(text)
    except markers.MarkerError:
        return TextInfo("plain", malformed=True)
    f = _Fields(p)
    k = p["k"]
    if k == "op":
        seqs = f.ints("seq")
        op_id = p.get("id")
        keys = (*seqs, id_key(op_id)) if _is_int(op_id) else seqs
        op = f.text("op")
        if not op:
            return TextInfo("plain", malformed=True)  # no op: not an op instance
        info = TextInfo("op", mod=f.text("ns"), op=op, args=f.get("args", "args"), cdtype=f.text("cdtype"),
                        trace=f.strings("trace"), fwd_seqs=seqs, fwd_keys=keys)
    elif k == "mod":
        info = TextInfo("mod", layer=f.text("path") or f.text("cls"))
    elif k == "bwd":
        seq, op_id = p.get("seq"), p.get("id")
        vmap = p.get("vmap")  # (the node ran under torch.func.vmap: jacrev's batched backward)
        info = TextInfo("bwd", name=f.text("node"), seq=seq if _is_int(seq) else None,
                        link_key=id_key(op_id) if _is_int(op_id) else None,
                        args=[{"name": "", "type": "tensor", "shape": None, "vmap": vmap}] if vmap else None)
    elif k == "optim":
        info = TextInfo("optim", name=f.text("cls"))
    else:  # range: pyprof.range("attn") names a layer, as a `layer:attn` range does
        name = (f.text("name") or "").strip()
        info = TextInfo("layer", layer=markers.layer_name(name) or name) if name else TextInfo("plain")
    return replace(info, malformed=True) if f.bad else info  # (a field of the wrong type, left out)


def _legacy(text: str) -> TextInfo:
    try:
        d = markers.decode_legacy_pyprof(text)
    except markers.MarkerError:
        return TextInfo("plain", malformed=True)
    f = _Fields(d)
    if "traceMarker" in d:
        t = f.strings("traceMarker")
        info = TextInfo("trace", trace=tuple(reversed(t)) if t is not None else None)
    else:
        info = TextInfo("op", mod=f.text("mod"), op=f.text("op"), args=f.get("args", "args"))
    return replace(info, malformed=True) if f.bad else info


#: ``link``: which case of the linking rule named a record's op (docs/records.md, ``pyprof.records``):
#: a pyprof op marker, a namespaced op, an autograd node, a collective, a compiled region, a user
#: annotation; a GPU activity whose launch is not in the trace
LINK_MARKER, LINK_OP, LINK_NODE, LINK_COLLECTIVE = "marker", "op", "node", "collective"
LINK_REGION, LINK_ANNOTATION, LINK_NO_LAUNCH = "region", "annotation", "no-launch"
#: op namespaces of collectives (``c10d::allreduce_``)
_COLLECTIVE_NS = frozenset({"c10d", "_c10d_functional"})

#: torch.compile's range around a compiled frame (torch.profiler): ``Torch-Compiled Region: 0/1``
COMPILED_REGION = "Torch-Compiled Region"
COMPILED_MOD = "torch.compile"  # the ``mod`` of an op named by its compiled region


def _plain(text: str) -> TextInfo:
    layer = markers.layer_name(text)
    if layer:
        return TextInfo("layer", layer=layer)
    if text.startswith(COMPILED_REGION):
        return TextInfo("region", name=text)
    if _HINT_BWD.search(text):
        return TextInfo("hint", hint="bprop")
    if _HINT_OPTIM.search(text):
        return TextInfo("hint", hint="optim")
    if _HINT_FWD.search(text):
        return TextInfo("hint", hint="fprop")
    return TextInfo("plain")


@functools.lru_cache(maxsize=1 << 18)
def classify(text: str | None, bare_names: bool = False) -> TextInfo:
    """What one range text means (cached). ``bare_names``: treat bare identifiers (``mul``, ``SELU``)
    as emit_nvtx op names, right for sources known to hold legacy (PyTorch <= 1.x) emit_nvtx text."""
    if not text:
        return TextInfo("plain")
    if len(text) > 65536 and len(text) > limits.get("text"):  # (a limit is at least 64 KiB)
        raise limits.exceeded(f"a range text of {len(text):,} characters", "text", len(text))
    if markers.is_pyprof(text):
        return _pyprof(text)
    if markers.is_legacy_pyprof(text):
        return _legacy(text)
    if text.startswith(markers.LAYER_PREFIX):
        return _plain(text)
    info = _emit_nvtx(text, False)
    if info is not None:
        return info
    plain = _plain(text)
    if plain.kind == "plain" and bare_names:
        return _emit_nvtx(text, True) or plain
    return plain


def looks_like_legacy_emit_nvtx(texts) -> bool:
    """True when a source's texts show PyTorch <= 1.x emit_nvtx (autograd nodes, bare op names)."""
    return any(t and (_BWD_NODE.match(t.split(",")[0]) or _MANGLED_AUTOGRAD.match(t) or t == "CudaTransfer")
               for t in texts)


# -- a stack of texts --------------------------------------------------------------------------------

@dataclass
class Decoded:
    """Decoded fields of one open-range set. ``fields`` goes into the record as is (shared: never mutate);
    ``op_pos`` is the index of the range that is the op instance (for ``opId``), ``link_seq`` the seq a
    backward kernel links by, ``malformed`` how many of the ranges are malformed markers."""

    fields: dict[str, Any]
    op_pos: int | None = None
    link_seq: int | None = None
    malformed: int = 0


def _unique(values) -> list:
    """``values`` without repeats, in order."""
    return list(dict.fromkeys(values))


class _Scan:
    """One pass over the ranges open at a launch (outermost first): where each kind of range sits
    (the innermost of its kind wins, as the op a kernel belongs to is the innermost one called) and
    what the ranges say about sequence numbers, layers and the trace. One method per kind of range."""

    def __init__(self, infos: list[TextInfo]):
        self.infos = infos
        self.layer: list[str] = []
        self.trace: list | None = None
        # where the innermost range of each kind sits (None: no such range)
        self.op_i: int | None = None
        self.bwd_i: int | None = None
        self.optim_i: int | None = None
        self.aten_i: int | None = None
        self.region_i: int | None = None
        self.top_aten_i: int | None = None  # outermost aten op (of the innermost op instance), aten-only sources
        self.seq_ids: list[int] = []
        self.alt: list[int] = []
        self.hint: str | None = None
        self.link_seq: int | None = None
        self.bwd_node: str | None = None
        self.bwd_args: list | None = None  # a vmap'd backward's batch levels (see link)
        self.malformed = 0
        for i, info in enumerate(infos):
            self.malformed += info.malformed
            step = self.STEPS.get(info.kind)  # (a plain user range says nothing pyprof reads)
            if step is not None:
                step(self, i, info)

    def _mod(self, i: int, info: TextInfo) -> None:
        if info.layer:
            self.layer.append(info.layer)

    def _op(self, i: int, info: TextInfo) -> None:
        self.op_i = i
        self._trace(i, info)  # (an op marker carries its call site as a trace range does)
        if self.bwd_i is None:
            self.seq_ids.extend(info.fwd_seqs)

    def _trace(self, i: int, info: TextInfo) -> None:
        if info.trace:
            self.trace = list(info.trace)

    def _node(self, i: int, info: TextInfo, seq: int | None) -> None:
        """A backward node (pyprof's ``bwd`` range or an emit_nvtx autograd node) whose forward op has
        sequence number ``seq``."""
        self.bwd_i, self.bwd_node, self.top_aten_i = i, info.name, None
        if seq is not None:
            self.alt.append(seq)
            self.link_seq = seq

    def _bwd(self, i: int, info: TextInfo) -> None:
        self._node(i, info, info.seq)
        self.bwd_args = info.args
        if info.link_key is not None:  # the forward op's id: exact where ops share a seq
            self.link_seq = info.link_key

    def _optim(self, i: int, info: TextInfo) -> None:
        self.optim_i = i

    def _hint(self, i: int, info: TextInfo) -> None:
        self.hint = info.hint

    def _region(self, i: int, info: TextInfo) -> None:
        self.region_i = i

    def _aten(self, i: int, info: TextInfo) -> None:
        if info.is_bwd_node:
            # PyTorch 1.0-1.1 wrote a node's number as ``stashed seq``, later ones as ``seq``
            node_seq = info.seq if info.seq is not None else info.stashed
            self._node(i, info, node_seq if info.name not in _NO_LINK_NODES else None)
            return
        self.aten_i = i
        if self.top_aten_i is None or (self.op_i is not None and self.op_i > self.top_aten_i):
            self.top_aten_i = i
        if info.stashed is not None:
            self.alt.append(info.stashed)
            if self.bwd_i is None:
                self.link_seq = info.stashed
        if info.seq is not None and self.bwd_i is None and info.stashed is None:
            self.seq_ids.append(info.seq)

    #: the step each kind of range (:class:`TextInfo`) takes
    STEPS: ClassVar[dict[str, Callable[[_Scan, int, TextInfo], None]]] = {
        "mod": _mod, "layer": _mod, "op": _op, "trace": _trace, "bwd": _bwd, "optim": _optim, "hint": _hint,
        "region": _region, "aten": _aten}


def decode(texts: Sequence[str | None], bare_names: bool = False) -> Decoded:
    """Fold the texts of the ranges open at a launch (outermost first) into record fields."""
    infos = [classify(t, bare_names) for t in texts]
    sc = _Scan(infos)
    fields: dict[str, Any] = {
        "layer": sc.layer, "trace": sc.trace or [], "mod": None, "op": None, "args": None, "cdtype": None,
        "aten": None, "atenSizes": None, "seqId": _unique(sc.seq_ids), "altSeqId": _unique(sc.alt),
        "bwdNode": sc.bwd_node, "dir": "", "opDir": None, "link": None,
    }
    if sc.aten_i is not None:
        fields["aten"] = infos[sc.aten_i].name
        fields["atenSizes"] = infos[sc.aten_i].sizes
    op_pos = _op_fields(sc, fields)
    fields["dir"], fields["opDir"] = _direction(sc, fields["op"], op_pos)
    return Decoded(fields, op_pos=op_pos, link_seq=sc.link_seq, malformed=sc.malformed)


def _op_fields(sc: _Scan, fields: dict[str, Any]) -> int | None:
    """Fill the op instance's fields (``mod``, ``op``, ``args``, ``cdtype``, ``link``); the index of its
    range (None: no op). The op instance: the innermost marker op or backward node, else the outermost
    aten op (aten-only sources); a compiled region names the op where nothing inside it does."""
    infos = sc.infos
    candidates = [i for i in (sc.op_i, sc.bwd_i) if i is not None]
    op_pos = max(candidates) if candidates else None
    if op_pos is not None and op_pos == sc.op_i:
        info = infos[sc.op_i]
        fields.update(mod=info.mod, op=info.op, args=info.args, cdtype=info.cdtype, link=LINK_MARKER)
    elif sc.top_aten_i is not None and (op_pos is None or sc.top_aten_i > op_pos):
        name = infos[sc.top_aten_i].name or ""
        # aten::addmm -> addmm; another namespace keeps its own (torch::autograd::AccumulateGrad -> autograd)
        ns, _, bare = name.rpartition("::")
        mod = "aten" if ns in ("", "aten") else ns.rsplit("::", 1)[-1]
        fields.update(mod=mod, op=bare or name, link=LINK_COLLECTIVE if mod in _COLLECTIVE_NS else LINK_OP)
        if op_pos is None:
            op_pos = sc.top_aten_i
    elif sc.bwd_node is not None:
        fields.update(link=LINK_NODE, args=sc.bwd_args)  # (its op and args: the forward op's, once linked)
    if fields["op"] is None and sc.region_i is not None and (op_pos is None or sc.region_i > op_pos):
        # work a compiled region does itself (its generated kernels): the region names the op
        fields.update(mod=COMPILED_MOD, op=infos[sc.region_i].name, link=LINK_REGION)
        op_pos = sc.region_i
    return op_pos


def _direction(sc: _Scan, op: str | None, op_pos: int | None) -> tuple[str, str | None]:
    """``dir`` and ``opDir`` of a launch: a recompute, backward, optimizer, a user range's hint, or
    forward; "" where nothing says."""
    infos = sc.infos
    if sc.bwd_i is not None and _recomputes(infos, sc.bwd_i, sc.op_i):
        # a forward run by a backward node: checkpoint's recompute, its own direction, charged to the
        # modules it re-runs (their ranges open inside the node's), never linked to the node's forward op
        return RECOMPUTE, None
    if sc.bwd_i is not None or any(info.kind == "aten" and info.stashed is not None for info in infos):
        # an op run as itself in the backward pass (called inside a custom Function's backward, or an
        # aten op under an autograd node): priced as that op, unless linked to the forward op it serves
        inner = [i for i in (op_pos, sc.top_aten_i) if i is not None]
        inside = op is not None and sc.bwd_i is not None and inner and max(inner) > sc.bwd_i
        return "bprop", "fprop" if inside else None
    if sc.optim_i is not None:
        return "optim", None
    if sc.hint:
        return sc.hint, None
    if sc.op_i is not None or sc.seq_ids or sc.aten_i is not None or sc.region_i is not None:
        return "fprop", None
    return "", None


#: The direction of a forward re-run inside the backward pass (``torch.utils.checkpoint``).
RECOMPUTE = "recomp"
#: The backward directions (``records.BACKWARD_DIRS``; ``SECOND_ORDER``: a double backward, the work
#: of ``autograd.grad(..., create_graph=True)`` differentiated by a later ``backward()``).
BACKWARD = BACKWARD_DIRS
#: ``opDir`` of the records of an op whose call raised (the parser saw a ``raised`` marker after it):
#: no computation of the op ran (checkpoint's early stop), so prof prices them 0 FLOPs and 0 bytes.
NO_WORK = "none"


def _recomputes(infos: list[TextInfo], bwd_i: int, op_i: int | None) -> bool:
    """Whether the ranges open inside a backward node's (``infos[bwd_i + 1:]``) are a forward being
    recomputed: a module's forward range opens there, or a pyprof op marker that builds an autograd
    graph (it carries a ``seq``: grad mode on and an input needing grad, which a backward formula or a
    custom Function's backward, run without grad mode, never is)."""
    if any(info.kind == "mod" for info in infos[bwd_i + 1:]):
        return True
    return op_i is not None and op_i > bwd_i and bool(infos[op_i].fwd_seqs)


def forward_fields(texts: Sequence[str | None], bare_names: bool = False) -> dict[str, Any]:
    """What a forward range (the last text) hands to the backward kernels that link to it."""
    f = decode(texts, bare_names).fields
    return {k: f[k] for k in ("mod", "op", "args", "cdtype", "layer", "trace")}


def id_key(op_id: int) -> int:
    """The linker key of a pyprof op instance id: negative, so it never meets an autograd sequence number.

    pyprof's backward ranges carry both the forward op's ``seq`` (the thread's autograd counter before
    the op ran, which several ops can share: an op that made no node, or a composite op and the inner op
    that made the node) and its ``id`` (unique per process). Linking on the id is exact."""
    return -1 - op_id


def forward_seqs(text: str | None, bare_names: bool = False) -> tuple[int, ...]:
    """Linker keys a forward range registers: emit_nvtx ``seq = N`` (not backward nodes, not
    ``stashed``); for pyprof op markers their ``seq`` list and :func:`id_key` of their ``id``."""
    info = classify(text, bare_names)
    if info.kind == "op":
        return info.fwd_keys
    if info.kind == "aten" and not info.is_bwd_node and info.seq is not None and info.stashed is None:
        return (info.seq,)
    return ()


def link(own: dict[str, Any], fwd: dict[str, Any] | None, batched: list | None = None) -> dict[str, Any]:
    """A backward kernel's fields completed from its forward op's: op, args, dtype and layers (the
    backward of a layer's op belongs to that layer; an op marker called inside the backward keeps its
    own op, see ``opDir``; ranges open on the backward thread, such as a ``layer:`` range around the
    whole training step, stay in ``ranges``), and the call site when its own stack has none; ``batched``
    (or a node's own args): the vmap levels the node ran at (``jacrev``), added to the first tensor's.
    Returns a new dict; neither input is changed."""
    if not fwd:
        return own
    out = dict(own)
    # an instrumented op called inside the backward (a custom Function's backward), or an aten op of a
    # compiled region's backward graph (the forward "op" is the region, which has no model; the graph's
    # aten ops, an attention backward kernel say, are the work) keeps its own op and arguments
    if own.get("opDir") != "fprop" or (own.get("mod") == "aten" and fwd.get("mod") != COMPILED_MOD):
        out["opDir"] = None  # the node's work: the forward op's backward
        out.update((k, fwd[k]) for k in ("mod", "op", "args", "cdtype") if fwd.get(k) is not None)
        batched = batched or (own.get("args") if own.get("link") == LINK_NODE else None)
        if batched and out["args"] is not batched:  # run under vmap (jacrev): the first tensor takes its levels
            out["args"] = _vmapped(out["args"], batched)
    if fwd.get("layer"):
        out["layer"] = fwd["layer"]
    if not own.get("trace") and fwd.get("trace"):
        out["trace"] = fwd["trace"]
    return out


def _vmapped(args, batched: list) -> list | None:
    """``args`` with the vmap levels of ``batched``'s first argument added to its first tensor's."""
    i = next((i for i, a in enumerate(args or ()) if a.get("type") == "tensor"), None)
    if i is None:
        return args
    a = args[i]
    have = a.get("vmap") or ()
    return [*args[:i], {**a, "vmap": [*have, *(lv for lv in batched[0]["vmap"] if lv not in have)]}, *args[i + 1:]]


class BackwardLinker:
    """Forward op registry keyed by (pid, seq): the latest forward registered at or before a time wins.

    ``add(pid, seq, time, fields, op_id, tid)`` for every forward range carrying a seq, in any order;
    :meth:`find_op` returns the fields with the forward op instance's id, or None. That id becomes the
    backward instance's ``opId``: every node an op created runs under it, so the op's backward is one
    instance and is priced once, however many autograd nodes (``AddmmBackward0``, ``TBackward0``...) it has.

    Sequence numbers count per thread: a forward op re-run on the autograd engine's thread (a
    checkpointed block recomputed during a CUDA backward) can carry the number of an op of the main
    thread. A lookup that names the forward op's thread (``tid``) looks among that thread's ops first.
    """

    def __init__(self) -> None:
        self._raw: dict[tuple, list] = {}
        self._by_key: dict[tuple, tuple[list, list]] = {}
        self._tids: dict[tuple, set] = {}
        self._frozen = False

    def add(self, pid, seq: int, time: int, fields: dict[str, Any], op_id: int | None = None, tid=None) -> None:
        entry = (time, len(self._raw), (fields, op_id))
        self._raw.setdefault((pid, seq), []).append(entry)
        if tid is not None:
            self._raw.setdefault((pid, seq, tid), []).append(entry)
            self._tids.setdefault((pid, seq), set()).add(tid)
        self._frozen = False

    def freeze(self) -> None:
        self._by_key = {}
        for key, entries in self._raw.items():
            entries.sort(key=lambda e: (e[0], e[1]))
            self._by_key[key] = ([e[0] for e in entries], [e[2] for e in entries])
        self._frozen = True

    def threads(self, pid, seq: int) -> set:
        """The threads whose forward ops carry ``seq`` in process ``pid`` (those added with a ``tid``)."""
        return self._tids.get((pid, seq), set())

    def find_op(self, pid, seq: int | None, time: int | None = None,
                tid=None) -> tuple[dict[str, Any], int | None] | None:
        """(fields, op instance id) of the forward op with ``seq`` latest at or before ``time``, or None;
        on thread ``tid`` where it has one."""
        if seq is None:
            return None
        if not self._frozen:
            self.freeze()
        entry = self._by_key.get((pid, seq, tid)) if tid is not None else None
        if entry is None or (time is not None and entry[0][0] > time):
            entry = self._by_key.get((pid, seq))
        if not entry:
            return None
        times, values = entry
        i = len(times) - 1 if time is None else bisect.bisect_right(times, time) - 1
        return values[i] if i >= 0 else None
