"""Kineto records as JSON lines without building a dict per record: what ``pyprof parse`` writes.

:meth:`pyprof.parse.kineto.KinetoSource.prepared` resolves every kernel's op instance first (the
decoding); :class:`KinetoPrepared` then turns the kernels into records. Building a 33-field dict per
kernel and serialising it again would be most of a CPU trace's parse time, although most of each
line repeats: the op instance's decoded fields (layer, call site, arguments: serialised once per
instance), the ``ranges`` list (built from the parent range's bytes, one ``,{...}`` per range) and the
kernel name and thread (once per distinct value). :meth:`KinetoPrepared.lines` splices those
fragments and %-formats only the per-kernel integers, giving the same bytes as ``orjson.dumps`` of
the dict :meth:`KinetoPrepared.records` yields (a test compares them); a record whose decoded fields
are not in the usual order takes the dict path. :class:`KinetoStats` counts the prepared records for
``pyprof parse``'s summary line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from pyprof.parse import decode as dec
from pyprof.parse.kineto.args import sizes_value
from pyprof.parse.kineto.index import ROLE_OP, Index
from pyprof.process import collector_paused
from pyprof.records import nulled, thread_id

# the decoded fields, in the order decode (and _EMPTY) writes them; aten/atenSizes/seqId are per kernel
_F_ORDER = ("layer", "trace", "mod", "op", "args", "cdtype", "aten", "atenSizes", "seqId", "altSeqId",
            "bwdNode", "dir", "opDir", "link")
_HEAD = _F_ORDER[:6]
_TAIL = _F_ORDER[9:]
_CPU_API = ("device", "gpu", "gpuProps", "stream", "grid", "block", "bytes", "copyKind", "apiName", "apiStart", "apiEnd")
# the decoded fields' fragments: layer...cdtype, aten, atenSizes, seqId, altSeqId...dir, ranges (open, close)
_FIELDS = b'%b,"aten":%b,"atenSizes":%b,"seqId":%b%b%b%b'
_LINE = b'%b%d,"start":%d,"end":%d%b' + _FIELDS + b',"opId":%d,"subSeqId":%d}\n'
_LINE_NO_OP = b'%b%d,"start":%d,"end":%d%b' + _FIELDS + b',"opId":null,"subSeqId":%d}\n'
_GPU_LINE = b'%b' + _FIELDS + b',"opId":%d,"subSeqId":%d}\n'
_GPU_LINE_NO_OP = b'%b' + _FIELDS + b',"opId":null,"subSeqId":%d}\n'
_CHUNK = 2048      # lines per yielded chunk of bytes
_MEMO_MAX = 16384   # entries per fragment cache (ranges prefixes are up to a few kB: pyprof markers are long)


class PlanSource(Protocol):
    """What this module reads of a source (:class:`~.source.KinetoSource` is one): its index and the
    record dict of a plan entry. A public interface, so that it neither reaches into the source's own
    attributes nor imports its module (which imports it: no circle, even for the type checker)."""

    stats: Any

    @property
    def index(self) -> Index: ...

    def record(self, entry: tuple, self_t: list[int] | None) -> dict[str, Any]: ...

    def prepared(self) -> KinetoPrepared: ...


@dataclass
class KinetoStats:
    """Counts for ``pyprof parse``'s summary line, filled while :meth:`KinetoSource.records` runs:
    ``attributed`` records have an op (or a backward node) from the ranges open at their launch."""

    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    nulled: dict = field(default_factory=dict)  # fields written as null where their check refused them


class KinetoPrepared:
    """A trace's kernels, decoded, in output order (``n`` of them); ``stats`` is complete."""

    def __init__(self, src: PlanSource, entries: list[tuple], self_t: list[int] | None):
        self.src = src
        self.entries = entries
        self.self_t = self_t
        self.stats = entry_stats(entries)
        self.nulled = self.stats.nulled
        self.n = len(entries)

    def records(self, lo: int = 0, hi: int | None = None) -> Iterator[dict[str, Any]]:
        record, self_t = self.src.record, self.self_t
        with collector_paused():
            for e in self.entries[lo:hi]:
                yield record(e, self_t)

    def lines(self, lo: int = 0, hi: int | None = None) -> Iterator[bytes]:
        """Records ``lo:hi`` as JSON lines, in chunks of bytes (see the module docstring)."""
        hi = len(self.entries) if hi is None else hi
        w = _Writer(self.src, self.self_t)
        entries = self.entries
        block = w.line_block if self.self_t is not None else w.lines_of
        with collector_paused():  # the fragment caches are many acyclic objects, like the index's
            for i in range(lo, hi, _CHUNK):
                yield block(entries[i:min(i + _CHUNK, hi)])


def entry_stats(entries: list[tuple]) -> KinetoStats:
    """Kernels, copies and attributed kernels among plan entries, which are checked first: every field
    of a GPU record's own and of an op instance's decoded fields that its check refuses is written as
    null (:func:`pyprof.records.nulled`: the entries are changed), counted per record in ``nulled``."""
    stats = KinetoStats()
    _checked(entries, stats.nulled)
    for _, ctx, _, pre in entries:
        if pre is not None and pre["kind"] != "kernel":
            stats.copies += 1
        else:
            stats.kernels += 1
            f = ctx[0]
            if f["op"] is not None or f["bwdNode"] is not None:
                stats.attributed += 1
    return stats


def _checked(entries: list[tuple], counts: dict[str, int]) -> None:
    """:func:`pyprof.records.nulled` of the GPU records' own fields and of each distinct instance's
    fields, at once (column by column); an entry whose values were nulled is replaced."""
    ctxs: dict[int, tuple] = {}
    pres: list[dict] = []
    for _, ctx, _, pre in entries:
        ctxs.setdefault(id(ctx), ctx)
        if pre is not None:
            pres.append(pre)
    fields = [c[0] for c in ctxs.values()]
    bad_ctx = nulled(fields, {})
    bad_pre = nulled(pres, counts)
    if not bad_ctx and not bad_pre:
        return
    keys = list(ctxs)
    fixed = {keys[i]: ((fields[i], *ctxs[keys[i]][1:]), names) for i, names in bad_ctx.items()}
    p = 0
    for i, (node, ctx, n, pre) in enumerate(entries):
        got = fixed.get(id(ctx))
        if got is not None:
            ctx = got[0]
            for name in got[1]:
                counts[name] = counts.get(name, 0) + 1
        if pre is not None:
            if p in bad_pre:
                pre = pres[p]
            p += 1
        entries[i] = (node, ctx, n, pre)


class LazyRecords:
    """What :meth:`KinetoSource.records` returns: an iterator of record dicts that prepares the source
    on first use, and whose :meth:`lines`/:meth:`prepared` let :func:`pyprof.records.write_records`
    write the same records as JSON lines without the dicts."""

    def __init__(self, src: PlanSource):
        self._src = src
        self._prep: KinetoPrepared | None = None
        self._it: Iterator[dict[str, Any]] | None = None
        src.stats = KinetoStats()

    def prepared(self) -> KinetoPrepared:
        if self._prep is None:
            self._prep = self._src.prepared()
        return self._prep

    def lines(self) -> Iterator[bytes]:
        return self.prepared().lines()

    def __iter__(self) -> LazyRecords:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            self._it = self.prepared().records()
        return next(self._it)


class _Writer:
    """Fragment caches for one pass of :meth:`KinetoPrepared.lines`."""

    def __init__(self, src: PlanSource, self_t: list[int] | None):
        self.src = src
        self.ix = src.index
        self.self_t = self_t
        self.ctx_frags: dict[int, Any] = {}   # id(ctx) -> fragments (the entries keep ctx alive; cleared
        #                                        now and then: instances are met in time order)
        self.heads: dict[str, bytes] = {}     # kernel name -> '{"kind":...,"kDuration":'
        self.threads: dict[Any, dict] = {}    # pid -> tid -> ',"correlationId":null,...,"apiEnd":null,'
        self.items: dict[str, bytes] = {}     # range text -> '{"text":...,"domain":null}'
        self.items_c: dict[str, bytes] = {}   # range text -> '{"text":...,"domain":null},'
        self.closes: dict[str, bytes] = {}    # range text -> '{"text":...,"domain":null}]'
        self.memo: dict[int, bytes] = {}      # range id -> ',"ranges":[' and its chain's items, each + ','
        self.names: dict[str, bytes] = {}     # aten op name -> JSON string
        self.size_json: dict = {}              # Input Dims JSON text -> atenSizes JSON

    def _frags(self, ctx: tuple):
        """An op instance's serialised fields: (layer...cdtype, aten, atenSizes, seqId, altSeqId...dir,
        depth of its ranges below which deeper forward ops add seq numbers), or None: not the usual
        field order."""
        f = ctx[0]
        if tuple(f) != _F_ORDER:
            return None
        dumps = orjson.dumps
        head = dumps({k: f[k] for k in _HEAD})[1:-1]
        tail = b"," + dumps({k: f[k] for k in _TAIL})[1:-1]
        key = ctx[2]
        key_depth = len(self.ix.chain[key]) if key >= 0 and f["dir"] not in dec.BACKWARD else None
        return head, dumps(f["aten"]), dumps(f["atenSizes"]), dumps(f["seqId"]), tail, key_depth

    def _ctx_frags(self, ctx: tuple):
        """:meth:`_frags` of ``ctx``, cached (False: take the dict path)."""
        if len(self.ctx_frags) > _MEMO_MAX:
            self.ctx_frags.clear()
        got = self.ctx_frags[id(ctx)] = self._frags(ctx) or False
        return got

    def _open(self, r: int) -> bytes:
        """``,"ranges":[{...},`` for the ranges of ``ix.chain[r]`` (memoised per range id, built from
        the nearest memoised ancestor's bytes); a kernel's line closes it with its own range's item."""
        memo = self.memo
        got = memo.get(r)
        if got is not None:
            return got
        chain = self.ix.chain[r]
        i = len(chain) - 1
        while i > 0 and chain[i - 1] not in memo:
            i -= 1
        got = memo[chain[i - 1]] if i > 0 else b',"ranges":['
        if len(memo) > _MEMO_MAX:
            memo.clear()
        names, items_c = self.ix.name, self.items_c
        for q in chain[i:]:
            ic = items_c.get(names[q])
            if ic is None:
                if len(items_c) > _MEMO_MAX:
                    items_c.clear()
                ic = items_c[names[q]] = self.item(q) + b","
            got = got + ic
            memo[q] = got
        return got

    def item(self, r: int) -> bytes:
        """``{"text":...,"domain":null}`` of range ``r`` (cached per text)."""
        text = self.ix.name[r]
        got = self.items.get(text)
        if got is None:
            if len(self.items) > _MEMO_MAX:
                self.items.clear()
            got = self.items[text] = b'{"text":' + orjson.dumps(text) + b',"domain":null}'
        return got

    def _close(self, r: int) -> bytes:
        """The last item of a ``ranges`` list, ``]`` included (cached per text)."""
        text = self.ix.name[r]
        if len(self.closes) > _MEMO_MAX:
            self.closes.clear()
        got = self.closes[text] = self.item(r) + b"]"
        return got

    def _head(self, node: int) -> bytes:
        """A CPU op record's first fields up to ``"kDuration":`` (cached per op name)."""
        name = self.ix.name[node]
        head = self.heads[name] = orjson.dumps(
            {"kind": "kernel", "source": "kineto", "kShortName": name, "kLongName": name})[:-1] + b',"kDuration":'
        return head

    def _thread(self, pid, tid) -> bytes:
        """A CPU op record's fields from ``correlationId`` to ``apiEnd`` (cached per thread)."""
        got = self.threads.setdefault(pid, {})[tid] = b"," + orjson.dumps(
            {"correlationId": None, "pid": pid, "tid": thread_id(tid), **dict.fromkeys(_CPU_API)})[1:-1] + b","
        return got

    def sizes(self, text: bytes | None) -> bytes:
        """An ``Input Dims`` JSON text as ``atenSizes`` (orjson's spelling of its value), cached."""
        got = self.size_json.get(text)
        if got is None:
            got = self.size_json[text] = orjson.dumps(sizes_value(self.ix.value(text)))
        return got

    def _aten(self, name: str) -> bytes:
        got = self.names[name] = orjson.dumps(name)
        return got

    def lines_of(self, entries: list[tuple]) -> bytes:
        line = self.line
        return b"".join([line(e) for e in entries])

    def line_block(self, entries: list[tuple]) -> bytes:
        """The lines of CPU op records: :meth:`line` with its common path inlined (a call per record
        would cost much of its time); anything unusual goes through :meth:`line`."""
        ix = self.ix
        names, chains, bwd, role, args, seqs = ix.name, ix.chain, ix.bwd, ix.role, ix.args, ix.seq
        starts, ends, pids, tids, self_t = ix.start, ix.end, ix.pid, ix.tid, self.self_t
        assert self_t is not None  # (CPU records: their self times)
        ctx_frags, heads, threads, atens, memo, closes = (
            self.ctx_frags, self.heads, self.threads, self.names, self.memo, self.closes)
        dumps = orjson.dumps
        sizes_of = self.sizes
        last_pid = last_tid = th = None
        out: list[bytes] = []
        append = out.append
        for entry in entries:
            node, ctx, n, _ = entry
            frags = ctx_frags.get(id(ctx))
            if frags is None:
                frags = self._ctx_frags(ctx)
            chain = chains[node]
            if not frags or len(chain) < 2:  # (a CPU record's node is an op range: chain[-1] == node)
                append(self.line(entry))
                continue
            name = names[node]
            if bwd[node]:  # the innermost plain op open, if any
                aten, sizes = frags[1], frags[2]
                for r in reversed(chain):
                    if role[r] == ROLE_OP and not bwd[r]:
                        aten, sizes = atens.get(names[r]) or self._aten(names[r]), sizes_of(args[r][1])
                        break
            else:
                aten, sizes = atens.get(name) or self._aten(name), sizes_of(args[node][1])
            depth = frags[5]
            seq = frags[3]
            if depth is not None and len(chain) > depth:
                extra = [seqs[r] for r in chain[depth:] if seqs[r] is not None and not bwd[r]]
                if extra:
                    seq = dumps(dec._unique([*ctx[0]["seqId"], *extra]))
            pid, tid = pids[node], tids[node]
            if pid is not last_pid or tid is not last_tid:  # (the scan interns them: one object per thread)
                of_pid = threads.get(pid)
                th = of_pid.get(tid) if of_pid is not None else None
                if th is None:
                    th = self._thread(pid, tid)
                last_pid, last_tid = pid, tid
            op_id = ctx[1]
            append((_LINE if op_id is not None else _LINE_NO_OP) % (
                heads.get(name) or self._head(node), self_t[node], starts[node], ends[node], th, frags[0],
                aten, sizes, seq, frags[4], memo.get(chain[-2]) or self._open(chain[-2]),
                closes.get(name) or self._close(node), *((op_id, n) if op_id is not None else (0,))))
        return b"".join(out)

    def line(self, entry: tuple) -> bytes:
        """One record's JSON line: the same bytes as ``orjson.dumps`` of ``KinetoSource.record``'s dict
        (see ``_kernel_fields`` there for what each fragment holds)."""
        node, ctx, n, pre = entry
        frags = self.ctx_frags.get(id(ctx))
        if frags is None:
            frags = self._ctx_frags(ctx)
        ix = self.ix
        chain = ix.chain[node] if node >= 0 else None
        if frags is False or chain == ():  # unusual record: the dict path
            return orjson.dumps(self.src.record(entry, self.self_t)) + b"\n"
        op_id = ctx[1]
        aten, sizes, seq = frags[1], frags[2], frags[3]
        if chain is None:  # launched outside every CPU range: an empty list, as the dict path writes
            ranges, close = b',"ranges":[', b"]"
        else:
            # the innermost plain ATen op open: its name and input sizes
            role, bwd = ix.role, ix.bwd
            for r in reversed(chain):
                if role[r] == ROLE_OP and not bwd[r]:
                    name = ix.name[r]
                    aten = self.names.get(name) or self._aten(name)
                    sizes = self.sizes(ix.args[r][1])
                    break
            # seq numbers of forward ops deeper than the op instance's ranges
            depth = frags[5]
            if depth is not None and len(chain) > depth:
                s = ix.seq
                extra = [s[r] for r in chain[depth:] if s[r] is not None and not bwd[r]]
                if extra:
                    seq = orjson.dumps(dec._unique([*ctx[0]["seqId"], *extra]))
            ranges = (self.memo.get(chain[-2]) or self._open(chain[-2])) if len(chain) > 1 else b',"ranges":['
            close = self.closes.get(ix.name[chain[-1]]) or self._close(chain[-1])
        if pre is not None:
            head = orjson.dumps(pre)[:-1] + b","
            if op_id is None:
                return _GPU_LINE_NO_OP % (head, frags[0], aten, sizes, seq, frags[4], ranges, close, 0)
            return _GPU_LINE % (head, frags[0], aten, sizes, seq, frags[4], ranges, close, op_id, n)
        of_pid = self.threads.get(ix.pid[node])
        th = of_pid.get(ix.tid[node]) if of_pid is not None else None
        if th is None:
            th = self._thread(ix.pid[node], ix.tid[node])
        self_t = self.self_t
        assert self_t is not None  # (a CPU record: its self time)
        if op_id is None:
            return _LINE_NO_OP % (self.heads.get(ix.name[node]) or self._head(node), self_t[node],
                                  ix.start[node], ix.end[node], th, frags[0], aten, sizes, seq, frags[4], ranges,
                                  close, 0)
        return _LINE % (self.heads.get(ix.name[node]) or self._head(node), self_t[node], ix.start[node],
                        ix.end[node], th, frags[0], aten, sizes, seq, frags[4], ranges, close, op_id, n)
