"""One pass over a Kineto trace's events into flat arrays, and the per-thread nesting of its ranges.

Ranges are ``cpu_op`` (ATen ops, autograd nodes), ``user_annotation`` (record_function: pyprof
markers, ``ProfilerStep#N``, ``Optimizer.step#...``) and ``python_function`` (``with_stack``) events.
Complete events on one thread nest, so one sort by (start, -end) and a stack per thread give every
range its parent and every CUDA launch its innermost open range: O(n log n), no query per kernel.
Each range keeps the chain of its open ancestors (a tuple shared with its parent's), so what was
open at a launch is one lookup.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import orjson

from pyprof.kernel_roles import NO_WORK, cpu_role
from pyprof.markers import RAISED, from_profiler_name
from pyprof.parse import limits
from pyprof.parse.decode import classify
from pyprof.parse.kineto import schema as ks
from pyprof.parse.kineto.load import Trace

if TYPE_CHECKING:
    from pyprof.parse.kineto.events import EventTypes

ROLE_OP, ROLE_ANN, ROLE_PY = 0, 1, 2
_MISSING = object()
_ROLE_CODE = {"op": ROLE_OP, "ann": ROLE_ANN, "py": ROLE_PY}


@dataclass
class Index:
    """Flat per-range arrays (index = range id) plus launches and GPU activities."""

    name: list = field(default_factory=list)
    role: list = field(default_factory=list)
    start: Any = field(default_factory=list)  # a list while scanning, an array("q") once finish() packs it
    end: Any = field(default_factory=list)    # (the same)
    pid: list = field(default_factory=list)
    tid: list = field(default_factory=list)
    args: list = field(default_factory=list)    # op: (external id, dims, types, concrete: JSON texts, see
    #                                             value()); ann: (external id, None, None, None)
    parent: list = field(default_factory=list)
    seq: list = field(default_factory=list)     # autograd sequence number (int >= 0) or None
    bwd: list = field(default_factory=list)     # an autograd backward node / evaluate_function range
    fwd_thread: dict = field(default_factory=dict)  # backward range -> its ``Fwd thread id`` (where recorded)
    cut: list = field(default_factory=list)     # op instance range: outermost namespaced op open (self
    #                                             included; see _is_op_instance), or -1
    chain: list = field(default_factory=list)   # tuple of open op/ann range ids, outermost first, self last
    frames: list = field(default_factory=list)  # tuple of user Python frames, innermost first
    modules: list = field(default_factory=list)  # tuple of open ``nn.Module: Name_N`` ranges, outermost first
    # launches: (pid, tid, start, end, name, correlation, external id) and their innermost open range
    launches: list = field(default_factory=list)
    launch_node: list = field(default_factory=list)
    gpu: list = field(default_factory=list)     # GPU activities (see :func:`scan`)
    threads: dict = field(default_factory=dict)  # (pid, tid) -> [range ids]
    launch_threads: dict = field(default_factory=dict)  # (pid, tid) -> [launch ids]
    skipped: int = 0                            # events without a usable ts
    dropped: dict = field(default_factory=dict)  # events left out, values read as missing: reason -> count
    n_events: int = 0
    steps: set = field(default_factory=set)     # ProfilerStep#N annotation ranges (mean nothing to decode)
    texts: dict = field(default_factory=dict)   # interned JSON texts of op arguments (args[1:])
    # record_param_comms ranges: range id -> (collective, in nelems, out nelems, dtype, group size)
    comms: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)  # JSON text -> its value
    anc: tuple | None = None                    # (is_op, nearest op ancestor) once nested: op_ancestors()

    def __len__(self) -> int:
        return len(self.name)

    def value(self, text: bytes | None) -> Any:
        """The value of an op argument's JSON text (``args[r][1:]``: Input Dims, types, concrete
        inputs), decoded once per distinct text; None when absent or null. Do not mutate it: equal
        texts share it."""
        if text is None:
            return None
        got = self.values.get(text, _MISSING)
        if got is _MISSING:
            got = self.values[text] = orjson.loads(text)
        return got


# Frames of these files are PyTorch's or pyprof's, not the user's call site. Kineto writes paths
# relative to their sys.path entry (``torch/nn/modules/conv.py``) or absolute.
_LIB_PREFIXES = ("torch/", "pyprof/", "site-packages/", "runpy.py", "threading.py")
_LIB_MARKERS = ("/torch/", "/site-packages/", "/dist-packages/", "/pyprof/", "<frozen ", "runpy.py")


#: torch.profiler's python_function range around a module's forward (``with_modules=True``, or with
#: ``with_stack``): ``nn.Module: Linear_0`` (class and the instance's index)
MODULE_PREFIX = "nn.Module: "


def user_frame(name: str) -> str | None:
    """``/home/u/train.py(42): forward`` -> ``train.py:42:forward``; None for library/builtin frames."""
    if not name or name[0] == "<":
        return None
    head, sep, func = name.partition("): ")
    if not sep:
        return None
    path, paren, line = head.rpartition("(")
    if not paren or not line.isdigit():
        return None
    if path.startswith(_LIB_PREFIXES) or any(m in path for m in _LIB_MARKERS):
        return None
    return f"{path.rsplit('/', 1)[-1]}:{line}:{func}"


def scan(ix: Index, chunks: Iterable[list], trace: Trace) -> None:
    """Append the ranges, launches and GPU activities of ``chunks``' events (``trace``'s structs,
    :mod:`pyprof.parse.kineto.events`) to ``ix``, times as lists, names interned; :func:`finish` then
    nests them. The per-range loop is inlined (a call per event costs); what is rarer (annotations,
    launches, GPU activities, a change of thread) is a call of its own."""
    # category -> range role code (int), or the role name of launches and GPU activities
    codes = {cat: _ROLE_CODE.get(role, role) for cat, role in ks.CATEGORY_ROLE.items()}
    name_l, role_l, start_l, end_l, pid_l, tid_l, args_l, seq_l, bwd_l = (
        ix.name, ix.role, ix.start, ix.end, ix.pid, ix.tid, ix.args, ix.seq, ix.bwd)
    bwd_names: dict[str, bool] = {}
    names: dict[str, str] = {}
    py_names: dict[str, str] = {}
    ann_names: dict[str, str] = {}  # raw annotation name -> decoded (module markers repeat every step)
    keys: dict[tuple, tuple] = {}
    # the thread of the last range: its interned (pid, tid) key and range list (consecutive events
    # are mostly on one thread)
    last_pid = last_tid = _MISSING
    key: tuple = ()
    lst: list = []
    for chunk in chunks:
        ix.n_events += len(chunk)
        for ev in chunk:
            if ev.ph != "X":
                continue
            code = codes.get(ev.cat)
            if code is None:
                continue
            ts = ev.ts
            if ts is None or type(ts) is str:
                ix.skipped += 1
                continue
            start = ts * 1000 if type(ts) is int else round(ts * 1000.0)
            dur = ev.dur or 0
            end = start + (dur * 1000 if type(dur) is int else round(dur * 1000.0))
            pid = ev.pid
            if pid.__class__ is not int:  # text ("7") as an int, else None (the record field is an int)
                pid = int(pid) if isinstance(pid, str) and pid.isdecimal() else None
            if type(code) is not int:
                _device_event(ix, trace, ev, code, pid, start, end)
                continue
            tid = ev.tid
            if pid != last_pid or tid != last_tid:
                key = keys.setdefault((pid, tid), (pid, tid))  # (interned)
                lst = ix.threads.setdefault(key, [])
                last_pid, last_tid = pid, tid
            rid = len(name_l)
            name = ev.name or ""
            if code != ROLE_OP:
                if code == ROLE_PY:  # (most events of a with_stack trace)
                    name, args = py_names.setdefault(name, name), None
                else:
                    name, args = _annotation(ix, rid, name, ev.args, ann_names)
                seq_l.append(None)
                bwd_l.append(False)
                args_l.append(args)
            else:
                a = ev.args
                name = names.setdefault(name, name)
                b = bwd_names.get(name)
                if b is None:  # a node's or evaluate_function's; never a name met first as a Python range's
                    b = bwd_names[name] = name not in py_names and (
                        name.startswith(ks.BACKWARD_PREFIX) or classify(name).is_bwd_node)
                bwd_l.append(b)
                if a is None:
                    seq_l.append(None)
                    args_l.append((None, None, None, None))
                else:
                    seq_l.append(_op_args(ix, rid, a, b))
            name_l.append(name)
            role_l.append(code)
            start_l.append(start)
            end_l.append(end)
            pid_l.append(key[0])
            tid_l.append(key[1])
            lst.append(rid)


def _op_args(ix: Index, rid: int, a, bwd: bool) -> int | None:
    """Append op range ``rid``'s ``(External id, Input Dims, Input type, Concrete Inputs)`` (JSON texts,
    interned) to ``ix.args``, with its ``Fwd thread id`` (a backward node's) and collective; its autograd
    sequence number (None: none)."""
    texts = ix.texts
    d = None if a.dims is None else texts.setdefault(x := bytes(a.dims), x)
    t = None if a.types is None else texts.setdefault(x := bytes(a.types), x)
    c = None if a.conc is None else texts.setdefault(x := bytes(a.conc), x)
    ix.args.append((a.ext, d, t, c))
    if bwd and type(a.ftid) is int:
        ix.fwd_thread[rid] = a.ftid
    if a.coll is not None:
        ix.comms[rid] = (a.coll, a.inn, a.outn, a.cdt, a.gsz)
    seq = a.seq
    return seq if type(seq) is int and seq >= 0 else None


def _annotation(ix: Index, rid: int, raw: str, a, ann_names: dict) -> tuple[str, tuple]:
    """(name, args) of annotation range ``rid``: its name decoded (pyprof markers are percent-encoded in
    traces), a backend's collective (nccl:all_to_all, gloo:all_reduce) with its message; a step noted."""
    name = ann_names.get(raw)
    if name is None:
        if len(ann_names) > 65536:
            ann_names.clear()
        name = ann_names[raw] = from_profiler_name(raw)
    if name.startswith(ks.PROFILER_STEP_PREFIX):
        ix.steps.add(rid)
    if a is None:
        return name, (None, None, None, None)
    if not name.startswith(ks.BACKEND_RANGE_PREFIXES) or a.dims is None:
        return name, (a.ext, None, None, None)
    t = None if a.types is None else ix.texts.setdefault(x := bytes(a.types), x)
    return name, (a.ext, ix.texts.setdefault(x := bytes(a.dims), x), t, None)


def _device_event(ix: Index, trace: Trace, ev, code, pid, start: int, end: int) -> None:
    """A CUDA launch (``code`` "launch") or a GPU activity of the scan, appended to ``ix``. GPU activities keep
    ``(role, name, start, end, pid, tid, correlation, device, stream, grid, block, bytes)``."""
    a, arg = ev.args, cast("EventTypes", trace.types).gpu_arg  # (set once events were decoded)
    if code != "launch":
        ix.gpu.append((code, ev.name, start, end, ev.pid, ev.tid, arg(a, "correlation"), arg(a, "device"),
                       arg(a, "stream"), arg(a, "grid"), arg(a, "block"), arg(a, "bytes")))
        return
    key = (pid, ev.tid)
    ix.launch_threads.setdefault(key, []).append(len(ix.launches))
    ix.launches.append((pid, ev.tid, start, end, ev.name, arg(a, "correlation"), a.ext if a is not None else None))


def finish(ix: Index) -> None:
    """Pack the times and nest the ranges of a scanned index."""
    n = len(ix.name)
    ix.start = array("q", ix.start)
    ix.end = array("q", ix.end)
    ix.parent = [-1] * n
    ix.chain = [()] * n
    ix.cut = [-1] * n
    ix.frames = [()] * n
    ix.modules = [()] * n
    ix.launch_node = [-1] * len(ix.launches)
    starts = np.frombuffer(ix.start, dtype=np.int64)
    ends = np.frombuffer(ix.end, dtype=np.int64)
    # every op/annotation range keeps the tuple of those open around it: their lengths in all, bounded
    # (one stack as deep as the depth limit always fits), so memory stays linear in the ranges
    held = [limits.get("chain") * n + limits.get("depth") ** 2]
    for key, rids in ix.threads.items():
        # start order, the longer first at equal starts (a stable sort: ties keep scan order); a trace
        # with fractional microseconds seldom has equal starts, and its events come nearly sorted
        r = np.fromiter(rids, dtype=np.int64, count=len(rids))
        s = starts[r]
        order = np.argsort(s, kind="stable")
        s = s[order]
        if (s[1:] == s[:-1]).any():
            order = np.lexsort((-ends[r], starts[r]))
        rids[:] = r[order].tolist()
        _nest(ix, rids, ix.launch_threads.get(key, ()), key, held)
    ix.anc = op_ancestors(ix)
    _backward_seqs(ix)


def _backward_seqs(ix: Index) -> None:
    """Give an ``evaluate_function: XBackward0`` range without a seq the seq of the node inside it: in
    scan order, each op range with a seq hands it to its nearest op ancestor (:func:`op_ancestors`) if
    that one is such a range still without one (which then hands it on in turn, if later in scan order)."""
    name, seq = ix.name, ix.seq
    prefix = ks.BACKWARD_PREFIX
    is_op, up = cast(tuple, ix.anc)  # (finish() computed it)
    below = is_op & (up >= 0)
    gives = below & np.fromiter((v is not None for v in seq), dtype=bool, count=len(seq))
    # the ranges that can take a seq, and the ones that then can give it on
    takes: set[int] = set()
    targets = np.unique(up[gives])
    while len(targets):
        new = [p for p in targets.tolist() if p not in takes and seq[p] is None and name[p].startswith(prefix)]
        takes.update(new)
        more = np.array(new, dtype=np.int64)
        more = more[below[more]]
        gives[more] = True
        targets = np.unique(up[more])
    if not takes:
        return
    rs = np.flatnonzero(gives)
    for r, p in zip(rs.tolist(), up[rs].tolist(), strict=True):
        if p in takes and seq[p] is None and seq[r] is not None:
            seq[p] = seq[r]


def _is_op_instance(name: str) -> bool:
    """Whether an op range can be an op instance: a namespaced op (``aten::addmm``, ``torchvision::nms``)
    or a collective's ``record_param_comms``.
    ``ProfilerStep#N`` (an op range in PyTorch 1.8-1.9 traces), ``Optimizer.step#SGD.step`` and a custom
    autograd Function's record (``LinearFunction``) are not: the ops they run are the instances."""
    return ("::" in name and not name.startswith("autograd::")) or name == ks.COMMS_OP


def _nest(ix: Index, rids: list[int], lids, key: tuple, held: list) -> None:
    """Parents, ancestor chains and user frames of one thread's ranges (``rids``, in start order; ``key``:
    its (pid, tid)); innermost range of its launches. ``held``: how many more range ids the chains (and
    module tuples) may hold, counted down here."""
    start, end, role, name, bwd = ix.start, ix.end, ix.role, ix.name, ix.bwd
    parent, chain, frames, cut, modules = ix.parent, ix.chain, ix.frames, ix.cut, ix.modules
    lids = sorted(lids, key=lambda i: ix.launches[i][2])
    launches, launch_node = ix.launches, ix.launch_node
    nl = len(lids)
    li = 0
    stack: list[int] = []
    place = _place_launches
    pop, push = stack.pop, stack.append
    max_depth = limits.get("depth")
    left = held[0]
    py: dict[str, tuple] = {}  # Python range name -> (its user frame or (), its module range or ())
    for r in rids:
        s = start[r]
        if li < nl and launches[lids[li]][2] < s:
            li = place(lids, li, s, stack, end, launches, launch_node)
        while stack and end[stack[-1]] <= s:
            pop()
        ro = role[r]
        if ro == ROLE_PY:  # (most ranges of a with_stack trace)
            nm = name[r]
            got = py.get(nm)
            if got is None:
                f = user_frame(nm)
                m = (nm[len(MODULE_PREFIX):],) if nm.startswith(MODULE_PREFIX) else ()  # ("Linear_0",)
                got = py[nm] = ((f,) if f else (), m)
            f, m = got
            if stack:
                p = stack[-1]
                parent[r] = p
                cut[r] = cut[p]
                chain[r] = chain[p]
                frames[r] = (f + frames[p])[:8]  # (f empty: the parent's own tuple, no copy)
                if m:
                    modules[r] = got = modules[p] + m
                    left -= len(got)
                else:
                    modules[r] = modules[p]
            else:
                frames[r] = f
                modules[r] = m
        else:
            p = stack[-1] if stack else -1
            c = cut[p] if stack else -1
            if c < 0 and ro == ROLE_OP and not bwd[r] and _is_op_instance(name[r]):
                c = r  # the op instance: the outermost plain op (under an autograd node too)
            cut[r] = c
            if stack:
                parent[r] = p
                chain[r] = got = chain[p] + (r,)
                frames[r] = frames[p]
                modules[r] = modules[p]
                left -= len(got)
            else:
                chain[r] = (r,)
        push(r)
        if len(stack) > max_depth:  # (ancestor chains are tuples: depth bounds their size)
            raise limits.exceeded(f"ranges nest more than {max_depth:,} deep on thread {key[1]} of process "
                                  f"{key[0]}", "depth", 2 * max_depth)
        if left < 0:
            per = limits.get("chain")
            raise limits.exceeded(f"ranges on thread {key[1]} of process {key[0]} are nested so deep so often that "
                                  f"more than {per:,} per range are open around it on average", "chain", 2 * per)
    held[0] = left
    place(lids, li, float("inf"), stack, end, launches, launch_node)


def _place_launches(lids: list, li: int, s, stack: list, end, launches: list, launch_node: list) -> int:
    """Give the launches ``lids[li:]`` before time ``s`` their innermost open range of ``stack`` (popping
    those ended by then, ``end``: range end times); the index of the first launch left."""
    while li < len(lids) and launches[lids[li]][2] < s:
        t = launches[lids[li]][2]
        while stack and end[stack[-1]] <= t:
            stack.pop()
        launch_node[lids[li]] = stack[-1] if stack else -1
        li += 1
    return li


def op_ancestors(ix: Index) -> tuple[np.ndarray, np.ndarray]:
    """(is_op, up): whether each range is an op range, and its nearest op ancestor (-1: none), found
    through annotations and Python frames by pointer jumping: every range first points at itself if
    it is an op, else at its parent, and each round every pointer still resting on a non-op range
    takes that range's pointer, so the distance covered doubles per round (``with_stack`` traces stack
    dozens of Python frames between two ops: a round per level cost more than the rest of the plan)."""
    n = len(ix.start)
    parent = np.fromiter(ix.parent, dtype=np.int64, count=n)
    is_op = np.fromiter(ix.role, dtype=np.int8, count=n) == ROLE_OP
    at = np.where(is_op, np.arange(n, dtype=np.int64), parent)  # the nearest op at or above, once settled
    idx = np.flatnonzero(at >= 0)
    idx = idx[~is_op[at[idx]]]
    while len(idx):
        at[idx] = at[at[idx]]
        nxt = at[idx]
        idx = idx[nxt >= 0]
        idx = idx[~is_op[at[idx]]]
    up = np.full(n, -1, dtype=np.int64)
    has = parent >= 0
    up[has] = at[parent[has]]
    return is_op, up


def self_times(ix: Index) -> list[int]:
    """Self time of every op range: its duration minus that of the op ranges directly under it
    (through annotations and Python frames; :func:`op_ancestors`). Clamped at 0 (rounding of float
    timestamps)."""
    n = len(ix.start)
    if not n:
        return []
    start = np.frombuffer(ix.start, dtype=np.int64)
    dur = np.frombuffer(ix.end, dtype=np.int64) - start
    is_op, up = ix.anc or op_ancestors(ix)  # (finish() computed it)
    child = np.flatnonzero(is_op & (up >= 0))
    inner = np.zeros(n, dtype=np.int64)
    np.add.at(inner, up[child], dur[child])
    return np.maximum(dur - inner, 0).tolist()


def fold_no_work(ix: Index, self_t: list[int]) -> list[int]:
    """Self times with each no-work op's (:func:`pyprof.kernel_roles.cpu_role`: views, allocation,
    dispatch wrappers, autograd records) added to the nearest op that called it, so that a CPU trace's
    kernels are the ops with work of their own and every microsecond is still counted once. A no-work op
    with no op above it keeps its time (it is then its own record)."""
    n = len(self_t)
    if not n:
        return self_t
    is_op, up = ix.anc or op_ancestors(ix)  # (finish() computed it)
    roles: dict[str, bool] = {}
    names = ix.name
    no_work = np.zeros(n, dtype=bool)
    for r in np.flatnonzero(is_op & (up >= 0)).tolist():
        name = names[r]
        v = roles.get(name)
        if v is None:
            v = roles[name] = cpu_role(name) == NO_WORK
        no_work[r] = v
    st = np.asarray(self_t, dtype=np.int64)
    while True:  # one level up per round: a no-work op handed time passes it on in the next round
        move = np.flatnonzero(no_work & (st > 0))
        if not len(move):
            break
        amount = st[move]  # (a copy) taken before handing on: a mover may also receive this round
        st[move] = 0
        np.add.at(st, up[move], amount)
    return st.tolist()


def cpu_nodes(ix: Index, self_t: list[int]) -> list[int]:
    """The op ranges with a positive self time (a CPU trace's records), and gloo's collective ranges on its
    worker thread (``gloo:all_reduce``: the collective's run), in start order (stable)."""
    n = len(self_t)
    is_op = np.fromiter(ix.role, dtype=np.int8, count=n) == ROLE_OP
    gloo = [r for r, name in enumerate(ix.name) if ix.role[r] == ROLE_ANN and name.startswith(ks.GLOO_RANGE_PREFIX)]
    if gloo:
        is_op[gloo] = True
    nodes = np.flatnonzero(is_op & (np.fromiter(self_t, dtype=np.int64, count=n) > 0))
    start = np.frombuffer(ix.start, dtype=np.int64)
    return nodes[np.argsort(start[nodes], kind="stable")].tolist()


def raised_ops(ix: Index) -> set[int]:
    """The op ranges whose call raised: the previous sibling (same thread and parent, ended before it
    starts, the latest to start) of each pyprof ``raised`` range. Their records did no work of the op
    (checkpoint's early stop raises while the op saves its tensors, before its kernel runs)."""
    out: set[int] = set()
    start, end, parent = ix.start, ix.end, ix.parent
    places: dict[tuple, dict[int, int]] = {}  # thread -> its ranges' places in start order
    for r in [r for r, name in enumerate(ix.name) if name == RAISED]:
        key = (ix.pid[r], ix.tid[r])
        ids = ix.threads[key]  # (in start order, the longer first: finish() sorted them)
        if key not in places:
            places[key] = {q: i for i, q in enumerate(ids)}
        p = parent[r]
        # walking back from the marker: the sibling's own ranges (nested in it) are passed over
        for q in reversed(ids[:places[key][r]]):
            if q == p:
                break
            if parent[q] == p and end[q] <= start[r]:
                if ix.name[q].startswith('{"pyprof":') and '"k":"op"' in ix.name[q][:40]:
                    out.add(q)
                break
    return out
