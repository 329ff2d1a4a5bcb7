"""torch.profiler (Kineto) chrome traces as a pyprof source: the same kernel records as from Nsight.

``KinetoSource(path)`` loads an ``export_chrome_trace`` file (:mod:`pyprof.parse.kineto.load`), nests its
ranges per thread (:mod:`pyprof.parse.kineto.index`) and yields one record per kernel (:mod:`pyprof.records`),
its op found by the linking rule of docs/records.md ("How a kernel finds its op").

* **GPU trace** (it has ``kernel``/``gpu_memcpy``/``gpu_memset`` events): each GPU activity joins its
  launch on the correlation id; the ranges open on the launching thread at the launch are decoded by
  the shared :func:`pyprof.parse.decode.decode`.
* **CPU-only trace**: the kernels are the CPU ops that do work of their own, each timed by its self
  time plus that of the no-work ops it called (:mod:`pyprof.kernel_roles`; docs/prof.md, "What a CPU
  kernel is"). Only taking ops without a child op would lose real work: ``aten::mkldnn_convolution``
  calls ``aten::empty``/``aten::resize_``.

Without a pyprof marker, the call site comes from the ``with_stack`` Python frames (their line is where
the function was entered, less exact than a marker's) and the layers from the ``nn.Module: Name_N``
ranges. Op instances are decoded once and shared by their kernels; ``opId`` is the ``External id`` of
the instance's range, and a backward instance linked to its forward op takes that op's id. A backward
node's ``Sequence number`` is looked up by (pid, seq), the latest forward op with it before the node
runs, on the thread its ``Fwd thread id`` names where that is known (sequence numbers count per thread;
see :meth:`KinetoSource._forward_tid`).

Speed: records are planned first (:meth:`KinetoSource.prepared`: every kernel's op instance decoded and
linked), then built as dicts or JSON lines (:mod:`~pyprof.parse.kineto.lines`), with the cyclic garbage
collector paused (:mod:`pyprof.process`). ``scripts/bench_kineto.py`` measures it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any, cast

from pyprof.errors import InputError, NoKernelsError
from pyprof.parse import decode as dec
from pyprof.parse.demangle import short_name
from pyprof.parse.kineto import graph, inductor
from pyprof.parse.kineto import schema as ks
from pyprof.parse.kineto.args import kineto_args, sizes_value
from pyprof.parse.kineto.events import ARG_REASON, ESCAPED_REASON, MISSING_TS
from pyprof.parse.kineto.index import (
    ROLE_OP,
    Index,
    cpu_nodes,
    finish,
    fold_no_work,
    raised_ops,
    scan,
    self_times,
)
from pyprof.parse.kineto.lines import KinetoPrepared, KinetoStats, LazyRecords
from pyprof.parse.kineto.load import Trace, load_trace
from pyprof.process import collector_paused
from pyprof.records import thread_id

_FWD_KEYS = ("mod", "op", "args", "cdtype", "layer", "trace")



class KinetoSource:
    """A torch.profiler chrome trace. ``records()`` yields kernel records in kernel start order."""

    kind = "kineto"

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        with collector_paused():
            self._load()

    def _load(self) -> None:
        trace = load_trace(self.path)
        self.meta = trace.meta
        self.version = f"chrome trace schemaVersion {trace.meta.get('schemaVersion', '?')}"
        self.warnings: list[str] = []
        self.stats: KinetoStats | None = None
        ix = self._ix = _build_index(trace)
        self.n_events = ix.n_events
        if trace.repaired:
            self.warnings.append(
                f"{trace.repaired} event names had unescaped double quotes (a Kineto export bug, "
                "pytorch/pytorch#146900) and were repaired")
        trace.chunks = iter(())  # the unused chunk generator holds the file's bytes (and the trace: a cycle)
        del trace  # (load_trace refused a trace without events)
        self.dropped = ix.dropped
        said = dropped_text(ix.dropped)
        self.gpu_mode = bool(ix.gpu)
        if not self.gpu_mode and not any(r == ROLE_OP for r in ix.role):
            if said:  # nothing left to make a record of: not "0 kernels"
                raise InputError(f"{self.path}: no kernel or CPU op is left: {said}",
                                 "export the trace again with prof.export_chrome_trace()")
            raise NoKernelsError(
                f"{self.path}: the trace holds neither GPU kernels nor CPU ops",
                "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] over at least one active step")
        if said:
            self.warnings.append(said)
        self._devices, self._device_props = _devices(self.meta)
        self._raised = raised_ops(ix)  # op ranges whose call raised: their records did no work
        self._range_lists: dict[int, list] = {}  # ranges field per innermost range (see _ranges)
        self._fwd_threads: tuple | None = None  # (Fwd thread id -> tid, the linker it was learnt from)
        self._node_threads: dict | None = None  # (pid, tid, seq) of a backward node -> its Fwd thread id
        self._masks: dict[int, list] = {}  # backward instance id -> output_mask (see _register_forward)
        self._graph = graph.Graph(ix)  # runs of a backward, its convolutions' gradients, double backward

    # -- decoding ------------------------------------------------------------------------------------

    def _instance(self, key: int) -> tuple[dict[str, Any], int | None, tuple | None]:
        """Decoded fields of the op instance whose ranges are ``ix.chain[key]`` (``key`` is the outermost
        plain ATen op open at a kernel, or the innermost range when there is none), its op instance id
        and the (pid, seq) a backward instance links by. One decode per op instance, not per kernel."""
        ix = self._ix
        if key == NO_LAUNCH:
            return _NO_LAUNCH, None, None
        chain = ix.chain[key] if key >= 0 else ()
        if not chain:
            return _EMPTY, None, None
        steps = ix.steps  # (ProfilerStep#N ranges mean nothing to the decoder; see _decode)
        kept = chain if steps.isdisjoint(chain) else tuple(r for r in chain if r not in steps)
        d = self._decode(kept)
        f = dict(d.fields)
        op_node = self._named_op(f, d, kept)
        op_id = None if op_node is None else self._op_id(f, d, kept, chain, op_node)
        seqs, link = self._chain_seqs(chain)
        if f["dir"] != "bprop":
            if seqs:
                f["seqId"] = dec._unique([*f["seqId"], *seqs])
            link = None
        elif link is not None and link[1] not in f["altSeqId"]:
            f["altSeqId"] = [*f["altSeqId"], link[1]]
        return f, op_id, link

    def _op_id(self, f: dict[str, Any], d: dec.Decoded, kept: tuple, chain: tuple, op_node: int) -> int:
        """The id of the op instance named by ``op_node`` (see :meth:`_instance_node`): its event's External id,
        else -1 - its range; fills its fields ``f``: a raised call's opDir, an op's arguments the decode lacks."""
        ix = self._ix
        op_node = self._instance_node(f, d, kept, chain, op_node)
        if op_node in self._raised:
            f["opDir"] = dec.NO_WORK  # the call raised before its work: priced 0
        if (f["mod"] == "aten" or f["link"] == dec.LINK_OP) and f["args"] is None and (
                f["dir"] != "bprop" or f["opDir"] == "fprop"):
            f["args"] = kineto_args(*map(ix.value, ix.args[op_node][1:]))
            mask = self._graph.conv_masks().get(op_node) if ix.name[op_node] in graph.OLD_CONV else None
            if mask is not None:  # (an old backward op's arguments: input, grad_output, weight)
                f["args"] = graph.with_grads(f["args"], [mask[0], True, mask[1]])
        ext = ix.args[op_node][0]
        return ext if type(ext) is int else -1 - op_node

    def _named_op(self, f: dict[str, Any], d: dec.Decoded, kept: tuple) -> int | None:
        """The range of ``kept`` that names the op instance (a recomputed op's first, a collective, or what
        :meth:`_named_work` finds where the decode named no op), updating its fields ``f``; None: none."""
        ix = self._ix
        op_node = None if d.op_pos is None else kept[d.op_pos]
        if f["opDir"] == "fprop" and f["mod"] == "aten" and self._graph.recomputed(kept):
            f.update(dir=dec.RECOMPUTE, opDir=None)
            op_node = self._graph.first_op(kept)
        comm = next((i for i in range(len(kept) - 1, -1, -1) if kept[i] in ix.comms), None) if ix.comms else None
        if comm is not None and (d.op_pos is None or comm > d.op_pos):
            # a collective (its kernels: NCCL's): the op torch.distributed recorded, with its message sizes
            op_node = kept[comm]
            f.update(_comm_fields(ix.comms[op_node]), opDir="fprop" if f["dir"] == "bprop" else None,
                     link=dec.LINK_COLLECTIVE)
            f["dir"] = f["dir"] or "fprop"
        if f["op"] is not None:
            if f["mod"] == "c10d" and f["link"] == dec.LINK_OP:
                f["link"] = dec.LINK_COLLECTIVE
            return op_node
        # no op or region decoded: an op of another namespace, a collective without its arguments, a
        # compiled region or a user annotation (see _named_work); under an autograd node, only an op,
        # collective or region inside it (run as itself, as an aten op there is)
        node = f["bwdNode"] is not None
        found = self._named_work(kept, ops_only=node)
        if found is None:
            return op_node
        f.update(found[1])
        f["dir"] = f["dir"] or "fprop"  # (in a backward pass, the decode said bprop)
        if node:
            f["opDir"] = "fprop"
        return found[0]

    def _decode(self, kept: tuple) -> dec.Decoded:
        """:func:`~pyprof.parse.decode.decode` of the ranges ``kept``, cached by their texts (aten-only
        chains repeat from one iteration to the next); their malformed markers counted each time."""
        texts = tuple(map(self._ix.name.__getitem__, kept))
        d = self._decodes.get(texts)
        if d is None:
            d = dec.decode(texts)
            if len(self._decodes) > 65536:
                self._decodes.clear()
            self._decodes[texts] = d
        self._malformed += d.malformed
        return d

    def _instance_node(self, f: dict[str, Any], d: dec.Decoded, kept: tuple, chain: tuple, op_node: int) -> int:
        """The range that is a backward launch's op instance, where it is not the one the decode named."""
        ix = self._ix
        if f["dir"] == "bprop" and f["opDir"] == "fprop" and f["mod"] == "aten" and d.op_pos is not None:
            # an aten op under an autograd node: the instance is that op (the outermost one), unless
            # the node links to its forward op (then the forward op's id, see _context)
            return next((r for r in kept[d.op_pos + 1:] if ix.role[r] == ROLE_OP and not ix.bwd[r]), op_node)
        if f["dir"] == "bprop" and f["opDir"] is None:
            # one backward op instance: the engine's evaluate_function range, not the node inside it
            return next((r for r in reversed(chain) if ix.name[r].startswith(ks.BACKWARD_PREFIX)), op_node)
        return op_node

    def _chain_seqs(self, chain: tuple) -> tuple[list, tuple | None]:
        """Sequence numbers from the events' args of the ranges ``chain``: the forward ops' (those outside
        any backward node), and the (pid, seq, Fwd thread) the innermost backward node links by."""
        ix = self._ix
        seqs: list = []
        link = None
        for r in chain:
            seq = ix.seq[r]
            if seq is None:
                continue
            if ix.bwd[r]:
                link = (ix.pid[r], seq, self._node_thread(r))
            elif link is None:
                seqs.append(seq)
        return seqs, link

    def _named_work(self, kept: tuple, ops_only: bool = False) -> tuple[int, dict[str, Any]] | None:
        """(range, fields) of the innermost range of ``kept`` (a chain less ``ProfilerStep#N``) that names
        work, by the rule's precedence (docs/records.md, :meth:`_work_of`). None: nothing does.
        ``ops_only``: only an op, collective or region inside the innermost autograd node."""
        best = None  # (precedence, range, fields)
        for r in reversed(kept):
            if self._ix.bwd[r]:
                if ops_only:
                    break
                continue
            hit = self._work_of(r)
            if hit is None or (ops_only and hit[0] > 2):  # (an annotation inside a node names no work of its own)
                continue
            if best is None or hit[0] < best[0]:
                best = (hit[0], r, hit[1])
                if hit[0] == 0:
                    break
        return None if best is None else (best[1], best[2])

    def _work_of(self, r: int) -> tuple[int, dict[str, Any]] | None:
        """(precedence, fields) of the work range ``r`` names: 0 an op of any namespace, 1 a collective's
        ``record_param_comms`` (its type refined per kernel: :meth:`_collective`) or gloo's run of one, 2 a
        compiled region (``CompiledFunction``) or a custom autograd Function's record (an op: it made the
        Function's node), 3 a user annotation or another unnamespaced op range. None: no work."""
        ix = self._ix
        nm = ix.name[r]
        if ix.role[r] != ROLE_OP:
            if nm.startswith(ks.GLOO_RANGE_PREFIX) and nm != ks.GLOO_RANGE_PREFIX:
                # gloo's run of a collective on its worker thread (a CPU trace's record of it)
                kind = nm[len(ks.GLOO_RANGE_PREFIX):]
                return 1, {"mod": "c10d", "op": kind, "link": dec.LINK_COLLECTIVE,
                           "args": self._backend_args(r, kind, self._group_size())}
            if dec.classify(nm).kind in ("plain", "hint", "optim"):
                return 3, {"mod": "annotation", "op": nm, "link": dec.LINK_ANNOTATION}
            return None
        if nm == ks.COMMS_OP:
            return 1, {"mod": "c10d", "op": nm, "link": dec.LINK_COLLECTIVE}
        if "::" in nm and not nm.startswith("autograd::"):
            ns, _, bare = nm.rpartition("::")
            ns = ns.rsplit("::", 1)[-1]
            return 0, {"mod": ns, "op": bare or nm,
                       "link": dec.LINK_COLLECTIVE if ns in ks.COLLECTIVE_NAMESPACES else dec.LINK_OP}
        if nm in ks.COMPILED_REGIONS:
            return 2, {"mod": "torch.compile", "op": nm, "link": dec.LINK_REGION}
        if ix.seq[r] is not None:  # a custom autograd Function's forward (it made the Function's node)
            return 2, {"mod": "autograd", "op": nm, "link": dec.LINK_OP}
        return 3, {"mod": "annotation", "op": nm, "link": dec.LINK_ANNOTATION}  # another profiler range

    def _collective(self, node: int, ctx: tuple, kernel: str) -> tuple:
        """``ctx`` of a collective recorded without its ``Collective name`` (a ``record_param_comms`` or a
        ``c10d::`` op without message sizes): a bare ``record_param_comms`` takes its type from the
        ``nccl:NAME`` range open inside it at the launch, else from the NCCL/RCCL kernel's name; the message
        comes from that range's Input Dims (:meth:`_backend_args`). Cached per instance."""
        ix = self._ix
        prefix = ks.NCCL_RANGE_PREFIX
        rng = next((r for r in reversed(ix.chain[node] if node >= 0 else ()) if ix.name[r].startswith(prefix)), None)
        kind = (ix.name[rng][len(prefix):] if rng is not None else None) or ks.collective_of_kernel(kernel)
        if kind is None:
            return ctx
        key = (ctx[2], ctx[1], ctx[0]["dir"], kind, rng)
        got = self._coll_cache.get(key)
        if got is None:
            f = dict(ctx[0], op=kind) if ctx[0]["op"] == ks.COMMS_OP else dict(ctx[0])
            if f["args"] is None and rng is not None:  # the message, from the nccl: range's Input Dims
                f["args"] = self._backend_args(rng, kind, None)
            got = self._coll_cache[key] = (f, ctx[1], ctx[2])
        return got

    def _backend_args(self, r: int, kind: str, group: int | None) -> list[dict[str, Any]] | None:
        """The arguments (:func:`_message`) of a collective known from its backend's range ``r``
        (``nccl:NAME``, ``gloo:NAME``), whose Input Dims and Input type are the input tensor: the output
        is as large for a collective that keeps the size (all-reduce, all-to-all, broadcast), ``group``
        times larger for an all-gather and smaller for a reduce-scatter where the group is known, else
        unknown. None where the range recorded no tensor."""
        a = self._ix.args[r]
        got = kineto_args(self._ix.value(a[1]), self._ix.value(a[2]), None) if a is not None else None
        t = got[0] if got and got[0].get("type") == "tensor" else None
        if t is None:
            return None
        n_in = math.prod(t["shape"])
        n_out = None
        if kind in ks.SAME_SIZE_COLLECTIVES:
            n_out = n_in
        elif group and "gather" in kind:
            n_out = n_in * group
        elif group and "scatter" in kind and n_in % group == 0:
            n_out = n_in // group
        return _message(n_in, n_out, t["dtype"], group)

    def _group_size(self) -> int | None:
        """The size of the job's one process group, from the trace's ``distributedInfo`` (``pg_config``);
        None where it names none or several (a collective's group is then unknown)."""
        info = self.meta.get("distributedInfo")
        groups = info.get("pg_config") if isinstance(info, dict) else None
        if isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict):
            size = groups[0].get("pg_size")
            if type(size) is int and size > 0:
                return size
        return None

    def _context(self, node: int, linker: dec.BackwardLinker | None) -> tuple:
        """(fields, op id) of the op instance open at ``node``, cached per instance, backward linked."""
        ix = self._ix
        key = ix.cut[node] if node >= 0 and ix.cut[node] >= 0 else node
        ctx = self._cache.get(key)
        if ctx is not None:
            return ctx
        f, op_id, link = self._instance(key)
        if link is not None and linker is not None:
            f, op_id = self._linked(f, op_id, link, key, linker)
        if linker is not None and f["op"] is None and f["bwdNode"] is not None:
            # a node with no forward op in the trace (it ran before the window, or the trace has no
            # sequence numbers) and no op inside it: the node is the op
            f = dict(f, mod="autograd", op=f["bwdNode"])
        if not f["trace"] and key >= 0 and ix.frames[key]:
            # no marker call site (own or forward's): the with_stack Python frames
            f = dict(f, trace=list(ix.frames[key][:3]))
        if not f["layer"] and key >= 0 and ix.modules[key]:
            # no pyprof module range (own or forward's): torch.profiler's nn.Module ranges
            f = dict(f, layer=list(self._graph.rooted(ix.modules[key]) if f["dir"] == dec.RECOMPUTE else
                                   ix.modules[key]))
        if len(self._cache) > 262144:  # instances are met in time order: old ones are done
            self._cache.clear()
        ctx = self._cache[key] = (f, op_id, key)
        return ctx

    def _linked(self, f: dict[str, Any], op_id, link: tuple, key: int, linker: dec.BackwardLinker) -> tuple:
        """(fields, op id) of the backward instance ``key`` linked by ``link`` to its forward op: one backward
        instance per forward op instance and run, whatever node runs it."""
        found = linker.find_op(link[0], link[1], self._ix.start[key], self._forward_tid(link, linker))
        if found is not None and found[0].get("mod") == "aten" and _in_cpp_node(self._ix, key):
            # a C++ autograd Function's node (fbgemm's) is made by that Function, never by an aten
            # op: an aten op with its number only ran before the Function (which records none)
            found = None
        if found is None:
            return self._made_in_backward(f, link, key, linker), op_id
        node_r = self._graph.node(key)
        f = dec.link(f, found[0], self._graph.batched(node_r))
        if found[1] is not None and f["opDir"] is None:
            op_id = graph.run_id(found[1], self._graph.run(node_r))
            if (mask := self._masks.get(op_id)) is not None and f["op"].startswith(("conv", "_conv")):
                f["args"] = graph.with_grads(f["args"], mask)
        return f, op_id

    def _made_in_backward(self, f: dict[str, Any], link: tuple, key: int, linker: dec.BackwardLinker) -> dict[str, Any]:
        """``f`` of a backward instance whose node links to no forward op: made by an op another backward
        node ran (a double backward), it keeps its own op and takes that backward's layers and call site."""
        ix = self._ix
        made = self._graph.maker(link[0], ix.tid[key], link[1], ix.start[key])
        if made is None:
            self._unlinked += 1
            return f
        by = self._context(made, linker)[0]
        return dict(f, dir=dec.SECOND_ORDER, layer=by["layer"] or f["layer"], trace=f["trace"] or by["trace"])

    def _kernel_fields(self, node: int, ctx: tuple, rec: dict[str, Any]) -> dict[str, Any]:
        """``rec`` completed with the instance's fields, the kernel's innermost ATen op, the seq numbers
        of ops deeper than the instance's, and the open ranges."""
        f, _, key = ctx
        rec.update(f)
        if node < 0:  # launched outside every CPU range (e.g. an autograd thread without events)
            rec["ranges"] = []
            return rec
        ix = self._ix
        chain = ix.chain[node]
        role, bwd = ix.role, ix.bwd
        for r in reversed(chain):
            if role[r] == ROLE_OP and not bwd[r]:
                rec["aten"] = ix.name[r]
                rec["atenSizes"] = sizes_value(ix.value(ix.args[r][1]))
                break
        if key >= 0 and f["dir"] not in dec.BACKWARD and len(chain) > len(ix.chain[key]):
            seq = ix.seq
            extra = [seq[r] for r in chain[len(ix.chain[key]):] if seq[r] is not None and not bwd[r]]
            if extra:
                rec["seqId"] = dec._unique([*f["seqId"], *extra])
        rec["ranges"] = self._ranges(chain)
        return rec

    def _ranges(self, chain: tuple) -> list[dict[str, Any]]:
        """The ``ranges`` field of a chain: built from its parent chain's (memoised per innermost range,
        in start order the parent was just seen), one shared ``{"text", "domain"}`` dict per range."""
        if not chain:  # launched with only Python frames (python_function events) open
            return []
        memo = self._range_lists
        last = chain[-1]
        got = memo.get(last)
        if got is not None:
            return list(got)
        base = memo.get(chain[-2]) if len(chain) > 1 else []
        if base is None:
            base = [{"text": self._ix.name[r], "domain": None} for r in chain[:-1]]
        got = [*base, {"text": self._ix.name[last], "domain": None}]
        if len(memo) > 200_000:
            memo.clear()
        memo[last] = got
        return list(got)

    def _node_thread(self, r: int):
        """The ``Fwd thread id`` of backward range ``r``: its own, or that of the node range with its
        thread and sequence number (the engine's ``evaluate_function`` range records none)."""
        ix = self._ix
        got = ix.fwd_thread.get(r)
        if got is None and ix.fwd_thread:
            if self._node_threads is None:
                self._node_threads = {(ix.pid[n], ix.tid[n], ix.seq[n]): f for n, f in ix.fwd_thread.items()}
            got = self._node_threads.get((ix.pid[r], ix.tid[r], ix.seq[r]))
        return got

    def _forward_tid(self, link: tuple, linker: dec.BackwardLinker):
        """The trace thread of the forward op a backward node links to, or None where unknown.

        A node records its forward op's thread as the profiler's own thread number (``Fwd thread
        id``), not the trace's ``tid``. Each number is mapped to the thread most often alone in
        holding the forward ops of its nodes' sequence numbers (the main thread, for a training
        loop); ambiguous nodes, such as those whose number a recompute on the autograd thread
        reused, then find their op on that thread."""
        pid, seq, ftid = link
        if ftid is None:
            return None
        threads = self._fwd_threads
        if threads is None or threads[1] is not linker:
            votes: dict[tuple, dict] = {}
            ix = self._ix
            for r, f in ix.fwd_thread.items():
                got = linker.threads(ix.pid[r], ix.seq[r]) if ix.seq[r] is not None else ()
                if len(got) == 1:
                    tally = votes.setdefault((ix.pid[r], f), {})
                    t = next(iter(got))
                    tally[t] = tally.get(t, 0) + 1
            threads = self._fwd_threads = ({k: max(v, key=v.__getitem__) for k, v in votes.items()}, linker)
        return threads[0].get((pid, ftid))

    def _register_forward(self) -> dec.BackwardLinker:
        """Every forward op range carrying an autograd seq number (the outermost of equal numbers), and each
        backward instance's convolution ``output_mask`` (``_masks``), from whichever of its nodes ran
        ``convolution_backward`` (not always its first, whose arguments it takes: an unbatched input's
        ``SqueezeBackward1`` runs before it)."""
        ix = self._ix
        linker = dec.BackwardLinker()
        for r, seq in enumerate(ix.seq):
            if seq is None or ix.role[r] != ROLE_OP or ix.bwd[r]:
                continue
            p = ix.parent[r]
            if p >= 0 and ix.seq[p] == seq:
                continue
            f, op_id, key = self._context(r, None)
            if f["dir"] in dec.BACKWARD:
                self._cache.pop(key, None)  # cached without its backward link: recompute later
                continue
            if f["mod"] != "aten" and f["link"] == dec.LINK_OP and key >= 0 and ix.seq[key] is None:
                # an op of another namespace that records no sequence number (fbgemm's): the number of
                # an aten op inside it was the autograd counter's, not a node it made
                continue
            linker.add(ix.pid[r], seq, ix.start[r], {k: f[k] for k in _FWD_KEYS}, op_id, ix.tid[r])
        linker.freeze()
        self._masks = {}
        for n, mask in self._graph.conv_masks().items():
            link = self._chain_seqs((n,))[1]  # (None for an old backward op range: no node)
            found = link and linker.find_op(link[0], link[1], ix.start[n], self._forward_tid(link, linker))
            if found and found[1] is not None:
                k = graph.run_id(found[1], self._graph.run(n))
                self._masks[k] = [a or b for a, b in zip(self._masks.get(k, mask), mask, strict=True)]
        return linker

    # -- records -------------------------------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        """What the record file's header says of the trace (:func:`pyprof.records.header`): ``steps``, the
        ``ProfilerStep#N`` ranges as ``[N, start, end]`` (ns, the records' clock) in start order, where
        the trace has any."""
        ix = self._ix
        prefix, cut = ks.PROFILER_STEP_PREFIX, len(ks.PROFILER_STEP_PREFIX)
        # (an annotation since PyTorch 1.10; an op range before)
        ranges = ix.steps or {r for r, nm in enumerate(ix.name) if nm.startswith(prefix)}
        steps = sorted(([int(ix.name[r][cut:]), ix.start[r], ix.end[r]] for r in ranges
                        if ix.name[r][cut:].isdigit()), key=lambda s: s[1])
        return {"steps": steps} if steps else {}

    def prepared(self) -> KinetoPrepared:
        """Every kernel with its op instance decoded and linked, in output order, ready to be turned
        into dicts (:meth:`KinetoPrepared.records`) or JSON lines (:meth:`KinetoPrepared.lines`);
        ``stats`` and ``warnings`` are complete on return. ``pyprof parse`` takes this path."""
        with collector_paused():
            entries, self_t = self._plan()
        prep = KinetoPrepared(self, entries, self_t)
        self.stats = prep.stats
        return prep

    def records(self) -> Iterator[dict[str, Any]]:
        """Kernel records in kernel start order; ``subSeqId`` counts each op instance's kernels in
        launch order. The iterator also has ``prepared()`` (the same records as JSON lines, see
        :func:`pyprof.records.write_records`)."""
        return LazyRecords(self)

    def _plan(self) -> tuple[list[tuple], list[int] | None]:
        """(entries, self times): one ``(node, ctx, n, pre)`` per record in output order, ``node``
        the innermost range open at the kernel (-1: none), ``ctx`` its op instance's context, ``n`` its
        ``subSeqId`` count and ``pre`` the GPU record's own fields (None on CPU: built from ``node``)."""
        self._cache: dict[int, tuple] = {}
        self._decodes: dict[tuple, dec.Decoded] = {}
        self._coll_cache: dict[tuple, tuple] = {}
        self._malformed = self._unlinked = 0
        ix = self._ix
        self_t = None
        linker = self._register_forward()
        if self.gpu_mode:
            kernels = self._gpu_kernels()
            kernels.sort(key=lambda k: (k[0], k[2]))  # launch order; a graph launch's kernels as they ran
            entries = self._numbered(((k[1], k[3]) for k in kernels), linker)
            del kernels
            entries.sort(key=lambda e: e[3]["start"])
        else:
            self_t = fold_no_work(ix, self_times(ix))
            entries = self._numbered(((r, None) for r in cpu_nodes(ix, self_t)), linker)
        self._cache.clear()
        self._decodes.clear()
        self._compiled(entries)
        if self._unlinked:
            self.warnings.append(f"{self._unlinked} backward op instances found no forward op with their sequence "
                                 "number (the forward ran before the profiled steps?); each is priced as the op "
                                 "it ran (or named by its autograd node), direction bprop")
        if self._malformed:
            self.warnings.append(f"{self._malformed} malformed pyprof markers: not decodable, or a field of the wrong type "
                                 "(left out)")
        missing = self._missing_shapes()
        if missing:
            self.warnings.append(missing)
        return entries, self_t

    def _compiled(self, entries: list[tuple]) -> None:
        """Kernels of compiled regions joined to their modules and origin ops (:mod:`.inductor`), and a
        warning for those whose module the trace cannot tell."""
        counts = inductor.attribute(self._ix, entries, self.meta)
        if counts[inductor.LINK_KERNEL_NAME]:
            self.warnings.append(
                f"{counts[inductor.LINK_KERNEL_NAME]} kernels of compiled regions have no Inductor metadata in the "
                "trace: their origin ops are read from their names, their modules are unknown (link kernel-name; "
                "record with pyprof run to have them)")
        if counts["unmatched"]:
            self.warnings.append(
                f"{counts['unmatched']} calls inside compiled regions outnumber their graph's extern calls of that op: "
                "left with the compiled module's layer")

    def _missing_shapes(self) -> str:
        """One line when the trace lacks what the cost models need for ops without pyprof markers:
        shapes (``record_shapes=False``), or types and scalar arguments (PyTorch 1.8-1.9 traces)."""
        ix = self._ix
        dims = types = False
        for r, a in enumerate(ix.args):
            if ix.role[r] != ROLE_OP or a is None or len(a) < 3:
                continue
            dims = dims or bool(ix.value(a[1]))
            types = types or bool(ix.value(a[2]))
            if dims and types:
                return ""
        if not dims:
            return ("the trace has no input shapes (recorded without record_shapes=True): ops and times only, "
                    "FLOPs and bytes of ops without pyprof markers are n/a")
        return ("the trace has input shapes but no input types or scalar arguments (PyTorch 1.8-1.9): "
                "bytes, and the FLOPs of ops that need their arguments (convolutions), are n/a")

    def _numbered(self, kernels: Iterator[tuple], linker: dec.BackwardLinker) -> list[tuple]:
        """The plan entries of ``(node, pre)`` kernels in launch order (``pre``: a GPU record's own fields,
        None for a CPU op range), numbering each op instance's kernels from 0."""
        sub: dict[Any, int] = {}
        entries: list[tuple] = []
        for node, pre in kernels:
            ctx = self._context(node, linker)
            if pre is not None and (ctx[0]["op"] == ks.COMMS_OP or (
                    ctx[0]["link"] == dec.LINK_COLLECTIVE and ctx[0]["args"] is None)):
                ctx = self._collective(node, ctx, pre["kLongName"])
            inst = (ctx[1], ctx[0]["dir"])
            n = sub[inst] = sub.get(inst, -1) + 1
            entries.append((node, ctx, n, pre))
        return entries

    def record(self, entry: tuple, self_t: list[int] | None) -> dict[str, Any]:
        """The record dict of one plan entry (see :meth:`_plan`; ``self_t``: CPU self times, for a CPU
        trace's records), public as :class:`~.lines.PlanSource` reads it."""
        node, ctx, n, pre = entry
        if pre is None:
            ix = self._ix
            name = ix.name[node]
            self_t = cast("list[int]", self_t)  # no pre: a CPU trace's entry, which comes with its self times
            rec = _base("kernel", name, name, ix.start[node], ix.end[node], self_t[node], ix.pid[node], ix.tid[node])
        else:
            rec = dict(pre)
        self._kernel_fields(node, ctx, rec)
        rec["opId"] = ctx[1]
        rec["subSeqId"] = n if ctx[1] is not None else 0
        return rec

    def _gpu_kernels(self) -> list:
        """(launch time, plan node, start, record) of each GPU activity; one without its launch in the trace
        is kept at its own start, with no op (a warning says how many)."""
        ix = self._ix
        by_corr = {launch[5]: lid for lid, launch in enumerate(ix.launches) if launch[5] is not None}
        kernels = []
        no_launch = early = 0
        first = min((c for c in by_corr if isinstance(c, int)), default=None)
        for ev in ix.gpu:
            rec, corr = self._gpu_record(*ev), ev[6]
            lid = by_corr.get(corr)
            if lid is None:  # (no pid or tid: the GPU event's pid is the device, the launching process unknown)
                no_launch += 1
                early += first is not None and isinstance(corr, int) and corr < first
                kernels.append((rec["start"], NO_LAUNCH, rec["start"], rec))
                continue
            pid, tid, a_start, a_end, a_name, _, _ = ix.launches[lid]
            rec.update(pid=pid, tid=thread_id(tid), apiName=a_name, apiStart=a_start, apiEnd=a_end)
            kernels.append((a_start, ix.launch_node[lid], rec["start"], rec))
        if no_launch:
            why = (f" ({early} of them launched before the profiled window: correlation ids below the first "
                   "launch's)") if early else ""
            self.warnings.append(f"{no_launch} GPU activities have no CUDA launch with their correlation id "
                                 f"in the trace{why}; they are kept without an op, link 'no-launch'")
        return kernels

    def _gpu_record(self, role, name, start, end, ev_pid, ev_tid, corr, device, stream, grid, block, nbytes) -> dict:
        """The record of one GPU activity of ``Index.gpu``, less its launch's fields."""
        name = name or ""
        if role == "kernel":
            rec = _base("kernel", short_name(name) or name, name, start, end, end - start, None, None)
            rec.update(grid=_dim3(grid), block=_dim3(block))
        else:
            kind_name, copy_kind = _copy_kind(role, name)
            rec = _base(role, kind_name, name, start, end, end - start, None, None)
            rec.update(bytes=nbytes if isinstance(nbytes, int) and nbytes >= 0 else None, copyKind=copy_kind)
        if not isinstance(device, int):
            device = ev_pid if isinstance(ev_pid, int) else None
        rec.update(device=device, gpu=self._devices.get(device), gpuProps=self._device_props.get(device),
                   stream=stream if isinstance(stream, int) else ev_tid if isinstance(ev_tid, int) else None,
                   correlationId=corr if isinstance(corr, int) else None)
        return rec


def dropped_text(dropped: dict) -> str:
    """The one line telling what was left out of a trace (``Index.dropped``), per reason; empty if nothing."""
    left = {r: n for r, n in dropped.items() if r not in (ARG_REASON, ESCAPED_REASON)}
    parts = [f"{sum(left.values()):,} events left out (" + ", ".join(f"{r}: {n:,}" for r, n in left.items()) + ")"] \
        if left else []
    parts += [f"{dropped[r]:,} {r}" for r in (ESCAPED_REASON, ARG_REASON) if dropped.get(r)]
    return "; ".join(parts)


def _build_index(trace: Trace) -> Index:
    """The index of ``trace``: its events classified in one pass over the chunks, then each thread's
    ranges nested (one sort and one stack per thread)."""
    ix = Index()
    scan(ix, trace.chunks, trace)
    counts = [*(trace.types.dropped.items() if trace.types is not None else ()), (MISSING_TS, ix.skipped)]
    for reason, n in counts:
        if n:
            ix.dropped[reason] = ix.dropped.get(reason, 0) + n
    finish(ix)
    return ix


_EMPTY: dict[str, Any] = {"layer": [], "trace": [], "mod": None, "op": None, "args": None, "cdtype": None, "aten": None,
          "atenSizes": None, "seqId": [], "altSeqId": [], "bwdNode": None, "dir": "", "opDir": None, "link": None}
#: the plan's node of a GPU activity whose launch is not in the trace, and its fields
NO_LAUNCH = -2
_NO_LAUNCH = dict(_EMPTY, link=dec.LINK_NO_LAUNCH)


def _in_cpp_node(ix: Index, key: int) -> bool:
    """Whether range ``key`` runs inside the backward node of a C++ autograd Function
    (``torch::autograd::CppNode<X>``)."""
    return key >= 0 and any(ks.CPP_NODE in ix.name[r] for r in ix.chain[key] if ix.bwd[r])


def _base(kind, short, long, start, end, duration, pid, tid) -> dict[str, Any]:
    return {
        "kind": kind, "source": "kineto", "kShortName": short, "kLongName": long, "kDuration": duration,
        "start": start, "end": end, "correlationId": None, "pid": pid, "tid": thread_id(tid), "device": None,
        "gpu": None, "gpuProps": None, "stream": None, "grid": None, "block": None, "bytes": None, "copyKind": None,
        "apiName": None, "apiStart": None, "apiEnd": None,
    }


def _dim3(value) -> list[int] | None:
    ok = isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value)
    return value if ok else None


def _copy_kind(role: str, name: str) -> tuple[str, str | None]:
    if role == "memset":
        return "memset", "memset"
    kind = next((k for k in ks.COPY_KINDS if k in name), None)
    return ("memcpy" if kind is None else f"memcpy {kind}"), kind


def _comm_fields(comm: tuple) -> dict[str, Any]:
    """A collective's op fields from its ``record_param_comms`` arguments: the collective's name (namespace
    ``c10d``) and its :func:`_message`."""
    name, n_in, n_out, dtype, group = comm
    n_in, n_out = (n if isinstance(n, int) and n >= 0 else None for n in (n_in, n_out))
    dt = ks.SCALAR_TYPE_NAMES.get(dtype) if isinstance(dtype, str) else None
    args = _message(n_in, n_out, dt, group if isinstance(group, int) else None)
    return {"mod": "c10d", "op": name, "args": args, "cdtype": None}


def _message(n_in: int | None, n_out: int | None, dtype: str | None,
             group: int | None) -> list[dict[str, Any]]:
    """A collective's arguments: its input and output messages as 1-D tensors (shape null: size unknown)
    and its group size."""
    return [{"name": "input", "type": "tensor", "shape": None if n_in is None else [n_in], "dtype": dtype},
            {"name": "output", "type": "tensor", "shape": None if n_out is None else [n_out], "dtype": dtype},
            {"name": "group_size", "type": "int", "value": group}]


def _devices(meta: dict) -> tuple[dict[int, str], dict[int, dict]]:
    """Device id -> its name, and device id -> its ``gpuProps``, from the trace's ``deviceProperties`` (SMs,
    compute capability, memory, warp size; torch.profiler records no clock or bandwidth), as
    ``parse.gpus.device_props`` builds them."""
    names: dict[int, str] = {}
    out: dict[int, dict] = {}
    props = meta.get("deviceProperties")
    for i, prop in enumerate(props if isinstance(props, list) else []):
        if not isinstance(prop, dict):
            continue
        dev = prop["id"] if isinstance(prop.get("id"), int) else i
        name = prop.get("name")
        if isinstance(name, str) and name:
            # (a lone surrogate, which Python's json reads, cannot be written as UTF-8: replaced)
            names[dev] = name.encode("utf-8", "replace").decode("utf-8")
        major, minor = prop.get("computeMajor"), prop.get("computeMinor")
        ok = type(major) is int and type(minor) is int and major > 0 and minor >= 0
        got: dict[str, Any] = {"cc": f"{major}.{minor}"} if ok else {}
        got.update((k, v) for k, key in (("sms", "numSms"), ("mem", "totalGlobalMem"), ("warp", "warpSize"))
                   if type(v := prop.get(key)) is int and v > 0)
        if got:
            out[dev] = got
    return names, out
