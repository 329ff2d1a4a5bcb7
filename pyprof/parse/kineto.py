"""torch.profiler (Kineto) chrome traces as a pyprof source: the same kernel records as from Nsight.

``KinetoSource(path)`` loads a ``export_chrome_trace`` file (``.json`` or ``.json.gz``;
:mod:`pyprof.parse.kineto_load`), nests its ranges per thread (:mod:`pyprof.parse.kineto_index`) and
yields one record per kernel (:mod:`pyprof.records`):

* **GPU trace** (it has ``kernel``/``gpu_memcpy``/``gpu_memset`` events): each GPU activity joins its
  ``cuda_runtime``/``cuda_driver`` launch on the correlation id; the ranges open on the launching
  thread at the launch (``cpu_op`` ATen ops and ``user_annotation`` record_function ranges, where
  pyprof markers land) are decoded by the shared :func:`pyprof.parse.decode.decode`.
* **CPU-only trace**: the kernels are the CPU ops themselves. Every ``cpu_op`` with a positive *self
  time* (its duration minus that of the ops directly under it) is one record whose ``kDuration`` is
  that self time, so the records add up to the time spent in ops, with nothing counted twice. (Only
  taking ops without a child op would lose real work: ``aten::mkldnn_convolution`` calls
  ``aten::empty``/``aten::resize_`` and its convolution time would vanish.) Dispatch wrappers such
  as ``aten::conv2d`` -> ``aten::convolution`` appear with their small self time.

Kineto gives structure that emit_nvtx text has to spell out: the autograd ``Sequence number`` of
forward ops and of backward nodes (``autograd::engine::evaluate_function: AddmmBackward0``) is read
from the event's args, and backward kernels are tied to the forward op with that number on the same
process through :class:`pyprof.parse.decode.BackwardLinker`. Without pyprof markers the op is the
outermost ATen op (``aten::linear`` -> ``linear``, ``mod`` ``aten``) with its arguments from
``Input Dims``/``Input type``/``Concrete Inputs`` (:mod:`pyprof.parse.kineto_args`), and the call
site comes from ``with_stack`` Python frames when the trace has them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from pyprof.errors import NoKernelsError
from pyprof.parse import decode as dec
from pyprof.parse import kineto_schema as ks
from pyprof.parse.demangle import short_name
from pyprof.parse.kineto_args import kineto_args
from pyprof.parse.kineto_index import ROLE_OP, build_index, self_times
from pyprof.parse.kineto_load import load_trace

_FWD_KEYS = ("mod", "op", "args", "cdtype", "layer", "trace")


class KinetoSource:
    """A torch.profiler chrome trace. ``records()`` yields kernel records in kernel start order."""

    kind = "kineto"

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        trace = load_trace(self.path)
        self.meta = trace.meta
        self.version = f"chrome trace schemaVersion {trace.meta.get('schemaVersion', '?')}"
        self.warnings: list[str] = []
        if trace.repaired:
            self.warnings.append(
                f"{trace.repaired} event names had unescaped double quotes (a Kineto export bug, "
                "pytorch/pytorch#146900) and were repaired")
        self.n_events = len(trace.events)
        self._ix = build_index(trace.events)
        del trace
        ix = self._ix
        self.gpu_mode = bool(ix.gpu)
        if not self.gpu_mode and not any(r == ROLE_OP for r in ix.role):
            raise NoKernelsError(
                f"{self.path}: the trace holds neither GPU kernels nor CPU ops",
                "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] over at least one active step")
        self._devices = _device_names(self.meta)

    # -- decoding ------------------------------------------------------------------------------------

    def _decoded(self, chain: tuple) -> dec.Decoded:
        texts = tuple(self._ix.name[r] for r in chain)
        d = self._cache.get(texts)
        if d is None:
            d = dec.decode(texts)
            self._cache[texts] = d
            if d.malformed:
                self._malformed += d.malformed
        return d

    def _fields(self, node: int) -> tuple[dict[str, Any], int | None, tuple | None]:
        """Decoded fields of what was open at ``node`` (a range id), its op instance id and the
        (pid, seq) a backward kernel links by."""
        ix = self._ix
        chain = ix.chain[node] if node >= 0 else ()
        if not chain:
            return dict(_EMPTY), None, None
        d = self._decoded(chain)
        f = dict(d.fields)
        op_node = chain[d.op_pos] if d.op_pos is not None else None
        op_id = None
        if op_node is not None:
            # one backward op instance: the engine's evaluate_function range, not the node inside it
            if f["dir"] == "bprop":
                op_node = next((r for r in reversed(chain) if ix.name[r].startswith(ks.BACKWARD_PREFIX)), op_node)
            ext = ks.arg(ix.args[op_node], "external_id")
            op_id = ext if isinstance(ext, int) else -1 - op_node
        # sequence numbers from the events' args
        seqs, link = [], None
        for r in chain:
            seq = ix.seq[r]
            if seq is None:
                continue
            if ix.name[r].startswith(ks.BACKWARD_PREFIX) or dec.classify(ix.name[r]).is_bwd_node:
                link = (ix.pid[r], seq)
            elif link is None:
                seqs.append(seq)
        if f["dir"] == "bprop":
            if link is not None:
                f["altSeqId"] = dec._unique(list(f["altSeqId"]) + [link[1]])
        else:
            f["seqId"] = dec._unique(list(f["seqId"]) + seqs)
            link = None
        if f["aten"] is not None:
            inner = next((r for r in reversed(chain) if ix.role[r] == ROLE_OP), None)
            if inner is not None:
                f["atenSizes"] = ks.arg(ix.args[inner], "input_dims")
        if f["mod"] == "aten" and f["args"] is None and op_node is not None and f["dir"] != "bprop":
            f["args"] = kineto_args(ix.args[op_node])
        if not f["trace"]:
            frames = ix.frames[node] if node >= 0 else ()
            if frames:
                f["trace"] = [x for x in frames[:3]]
        return f, op_id, link

    def _register_forward(self) -> dec.BackwardLinker:
        """Every forward op range carrying an autograd seq number (the outermost of equal numbers)."""
        ix = self._ix
        linker = dec.BackwardLinker()
        for r in range(len(ix.name)):
            if ix.role[r] != ROLE_OP:
                continue
            seq = ix.seq[r]
            if seq is None:
                continue
            p = ix.parent[r]
            if p >= 0 and ix.seq[p] == seq:
                continue
            f, _, link = self._fields(r)
            if f["dir"] == "bprop" or link is not None:
                continue
            linker.add(ix.pid[r], seq, ix.start[r], {k: f[k] for k in _FWD_KEYS})
        linker.freeze()
        return linker

    # -- records -------------------------------------------------------------------------------------

    def records(self) -> Iterator[dict[str, Any]]:
        self._cache: dict[tuple, dec.Decoded] = {}
        self._malformed = 0
        linker = self._register_forward()
        kernels = self._gpu_kernels() if self.gpu_mode else self._cpu_kernels()
        # op context per launching node, op instance ids and per-op indices, in launch order
        kernels.sort(key=lambda k: k[0])
        ctx_cache: dict[int, tuple] = {}
        sub: dict[Any, int] = {}
        out = []
        unlinked = 0
        for k in kernels:
            node = k[1]
            ctx = ctx_cache.get(node)
            if ctx is None:
                f, op_id, link = self._fields(node)
                if link is not None:
                    fwd = linker.find(link[0], link[1], self._ix.start[node] if node >= 0 else None)
                    if fwd is None:
                        unlinked += 1
                    f = dec.link(f, fwd)
                ctx = (f, op_id)
                if self.gpu_mode:
                    ctx_cache[node] = ctx
            op_id = ctx[1]
            if op_id is not None:
                n = sub.get(op_id, 0)
                sub[op_id] = n + 1
            else:
                n = 0
            out.append((k[2], k, ctx, n))
        out.sort(key=lambda o: o[0])
        if unlinked:
            self.warnings.append(f"{unlinked} backward op instances found no forward op with their sequence "
                                 "number (the forward ran before the profiled steps?)")
        if self._malformed:
            self.warnings.append(f"{self._malformed} malformed pyprof markers were ignored")
        for _, k, (f, op_id), n in out:
            rec = k[3]
            rec.update(f)
            rec["opId"] = op_id
            rec["subSeqId"] = n
            if "ranges" not in rec:
                node = k[1]
                rec["ranges"] = ([{"text": self._ix.name[r], "domain": None} for r in self._ix.chain[node]]
                                 if node >= 0 else [])
            yield rec

    def _cpu_kernels(self) -> list:
        ix = self._ix
        self_t = self_times(ix)
        kernels = []
        for r in range(len(ix.name)):
            if ix.role[r] != ROLE_OP or self_t[r] <= 0:
                continue
            name = ix.name[r]
            rec = _base("kernel", name, name, ix.start[r], ix.end[r], self_t[r], ix.pid[r], ix.tid[r])
            kernels.append((ix.start[r], r, ix.start[r], rec))
        return kernels

    def _gpu_kernels(self) -> list:
        ix = self._ix
        by_corr: dict = {}
        for lid, launch in enumerate(ix.launches):
            if launch[5] is not None:
                by_corr[launch[5]] = lid
        kernels = []
        no_launch = 0
        for role, ev, start, end in ix.gpu:
            a = ev.get("args") or {}
            corr = ks.arg(a, "correlation")
            lid = by_corr.get(corr) if corr is not None else None
            name = ev.get("name") or ""
            if role == "kernel":
                rec = _base("kernel", short_name(name) or name, name, start, end, end - start, None, None)
                rec["grid"] = _dim3(a.get("grid"))
                rec["block"] = _dim3(a.get("block"))
            else:
                kind_name, copy_kind = _copy_kind(role, name)
                rec = _base(role, kind_name, name, start, end, end - start, None, None)
                nbytes = ks.arg(a, "bytes")
                rec["bytes"] = nbytes if isinstance(nbytes, int) else None
                rec["copyKind"] = copy_kind
            device = ks.arg(a, "device")
            if not isinstance(device, int):
                device = ev.get("pid") if isinstance(ev.get("pid"), int) else None
            stream = ks.arg(a, "stream")
            if not isinstance(stream, int):
                stream = ev.get("tid") if isinstance(ev.get("tid"), int) else None
            rec["device"] = device
            rec["gpu"] = self._devices.get(device)
            rec["stream"] = stream
            rec["correlationId"] = corr if isinstance(corr, int) else None
            if lid is None:
                no_launch += 1
                rec["pid"] = None  # the GPU event's pid is the device; the launching process is unknown
                rec["tid"] = None
                kernels.append((start, -1, start, rec))
                continue
            pid, tid, a_start, a_end, a_name, _, _ = ix.launches[lid]
            rec.update(pid=pid, tid=tid, apiName=a_name, apiStart=a_start, apiEnd=a_end)
            kernels.append((a_start, ix.launch_node[lid], start, rec))
        if no_launch:
            self.warnings.append(f"{no_launch} GPU activities have no CUDA launch with their correlation id "
                                 "in the trace; they are kept without op attribution")
        return kernels


_EMPTY = {"layer": [], "trace": [], "mod": None, "op": None, "args": None, "cdtype": None, "aten": None,
          "atenSizes": None, "seqId": [], "altSeqId": [], "bwdNode": None, "dir": ""}


def _base(kind, short, long, start, end, duration, pid, tid) -> dict[str, Any]:
    return {
        "kind": kind, "source": "kineto", "kShortName": short, "kLongName": long, "kDuration": duration,
        "start": start, "end": end, "correlationId": None, "pid": pid, "tid": tid, "device": None,
        "gpu": None, "stream": None, "grid": None, "block": None, "bytes": None, "copyKind": None,
        "apiName": None, "apiStart": None, "apiEnd": None,
    }


def _dim3(value) -> list[int] | None:
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value):
        return value
    return None


def _copy_kind(role: str, name: str) -> tuple[str, str]:
    if role == "memset":
        return "memset", "memset"
    for kind in ks.COPY_KINDS:
        if kind in name:
            return f"memcpy {kind}", kind
    return "memcpy", None


def _device_names(meta: dict) -> dict[int, str]:
    out = {}
    for i, prop in enumerate(meta.get("deviceProperties") or []):
        if isinstance(prop, dict) and prop.get("name"):
            dev = prop.get("id", i)
            out[dev if isinstance(dev, int) else i] = prop["name"]
    return out
