"""Backward priced on what ran: the aten ops a trace shows under an autograd node, each by its own model.

The rules as users see them are docs/prof.md's "Backward is priced on what ran"; here is how they are
carried out. A backward instance (``dir`` ``bprop``, no ``opDir``) is priced by default by its forward
op's model in ``bprop``, a formula that assumes what the backward runs. Where a torch.profiler trace (or
an emit_nvtx export) names the aten op (``aten``, innermost, with its ``atenSizes``) of every working
record of an instance, the instance is priced on what ran instead, not as well:

* each distinct (aten op, input sizes) is priced once, forward, by that op's own model, the sizes read
  against its aten schema (:func:`_args`; scalar and list arguments unknown, their defaults where a model
  takes one); a ``sum`` over dims the sizes do not hold by :func:`_sum_over_unknown_dims`; an op that only
  moves data (:data:`MOVES`) whose sizes say too little (``zeros(size)``, ``constant_pad_nd``'s pad) has 0
  FLOPs and unknown bytes (the fill or copy it called on a CPU prices it);
* a call's cost goes on one record of the op's highest role (:mod:`pyprof.kernel_roles`): on a GPU one
  kernel per call is assumed, so an op launching several such kernels (a cuSOLVER factorisation) counts
  once per kernel; its other records, views, dispatch and engine records get none;
* on a CPU trace a caller (its record's span holds its callees') with a model covers what it called
  (``clone`` over ``copy_``), one without is ``open`` and its callees are priced (:func:`_walk_instance`);
  no work counts twice;
* where an op that ran has no model, or its sizes may not say enough (outside :data:`SIZED_FAMILIES` and
  :data:`SIZED_OPS`: attention's ``is_causal``), the forward op's formula prices the whole instance if it
  has one (never half of each); without one (linear algebra) what can be priced is, the rest n/a, never 0.

A forward instance whose op has no model (``svd_lowrank``) is priced on what ran the same way; a caller
that handed no work on is n/a on its own record (:func:`_idle_callers`). An instance with a working record
that names no aten op or no sizes keeps its formula, as does the Nsight path without emit_nvtx. The
instance keeps its op, module and direction. ``priced`` names, per record, the aten op whose model priced
it, so that a check by op family (GEMM FLOPs in backward) takes the family of the op that ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from pyprof.kernel_roles import NO_WORK
from pyprof.prof.ops import _args as A
from pyprof.records import BACKWARD_DIRS

NAN = float("nan")


#: The parameter kinds a tensor and a tensor list may stand at.
_TAKES = {"tensor": ("Tensor", "Tensor?"), "tensorlist": ("Tensor[]", "Tensor?[]")}


def _args(aten: str, sizes: list, dtype: str | None) -> list:
    """Argument dicts of an aten call from its ``Input Dims`` (:func:`pyprof.prof.ops.from_sizes`'s reading),
    checked against the first overload, in torch's order, that they fit: a size at a ``Tensor`` parameter
    is a tensor of that shape (``[]``: a 0-d tensor), a list of sizes a tensor list, and the other
    arguments, whose values the sizes do not hold, unknown. No overload fits: the plain reading."""
    from pyprof.prof.ops import from_sizes
    from pyprof.prof.ops.schema import schemas

    read = from_sizes(sizes, [dtype] * len(sizes))
    for s in schemas().get(aten.rsplit("::", 1)[-1].split(".", 1)[0], ()):
        if len(s.params) != len(sizes):
            continue
        out: list[dict] = []
        for p, a in zip(s.params, read, strict=True):
            if p.kind not in _TAKES.get(a["type"], (p.kind,)):  # an unknown fits any parameter
                break
            out.append(A.tensor_arg([], dtype) if a["type"] == "unknown" and p.kind == "Tensor" else a)
        else:
            return out
    return read


def _price(aten: str, sizes: list, dtype: str | None, cdtype: str | None, fwd_args: list | None = None):
    """(op name, Cost or None) of one aten call from its recorded input sizes; None where the op has no
    model or the sizes do not say enough for its FLOPs (a reduction's dims). Bytes may still be unknown
    (no dtype: a plain trace's tensor lists)."""
    from pyprof.prof.ops import Cost, OpCall, canonical, estimate, family, registry

    name = canonical(aten, "aten")
    try:
        cost = estimate(OpCall(aten, _args(aten, sizes, dtype), "fprop", cdtype, "aten"))
    except Exception:  # noqa: BLE001 - a model that cannot read these sizes: unknown, never a crash
        if registry.strict():
            raise
        cost = None
    if cost is None and name == "sum":
        cost = _sum_over_unknown_dims(sizes, dtype, cdtype, fwd_args)
    elif cost is None and family(name) in MOVES:  # zeros(size), constant_pad_nd(x, pad): no arithmetic
        cost = Cost(0.0, None, dtype)
    if cost is not None and cost.flops is None:
        cost = None
    return name, cost


def _sum_over_unknown_dims(sizes: list, dtype: str | None, cdtype: str | None, fwd_args: list | None):
    """``sum.dim_IntList`` (how autograd reduces a broadcast gradient: a bias's) whose dims the sizes do
    not hold: one add per input element whatever the dims, so its FLOPs are known. Its output is the
    gradient of the forward argument the input broadcast from: the one tensor argument of the forward
    op, not of the input's shape, that broadcasts to it (a ``linear``'s or ``addmm``'s bias); where
    there is not exactly one, the output and so the bytes are unknown (None)."""
    from pyprof.prof.ops import Cost, OpCall, estimate, scalar_arg

    if not sizes or not isinstance(sizes[0], list) or not sizes[0]:
        return None
    shp = sizes[0]
    whole = estimate(OpCall("aten::sum", [A.tensor_arg(shp, dtype), scalar_arg(None)], "fprop", cdtype, "aten"))
    if whole is None:
        return None
    n = A.numel(shp)
    if n is None:
        return None
    fits: set[int] = set()
    for a in A.tensors(fwd_args or []):
        s = A.shape(a)
        k = A.numel(s) if s is not None else None
        if k is not None and s != list(shp) and A.broadcast(s, shp) == list(shp):  # ([12] to [1, 12] too)
            fits.add(k)
    out = A.sized(n + fits.pop(), dtype) if len(fits) == 1 else None
    return Cost(whole.flops, out, whole.dtype)


#: Families that only move data: FLOPs 0 whatever their unrecorded arguments (a pad's widths, a fill's size).
MOVES = frozenset({"fill", "copy", "views", "viewcopy", "concat"})
#: Families and ops whose figures the input sizes determine (an unrecorded scalar changes none: a GEMM's
#: alpha, a fill value, a softmax backward's dim, nll_loss's reduction, which dY's shape shows; ``sum``:
#: :func:`_sum_over_unknown_dims`). Elsewhere an unrecorded argument can change the count (attention's
#: ``is_causal``, a convolution's stride): an instance whose forward op has a backward formula keeps it
#: when such an op ran.
SIZED_FAMILIES = MOVES | {"gemm", "pointwise"}
SIZED_OPS = frozenset({"sum", "masked_fill", "_softmax_backward_data", "_log_softmax_backward_data",
                       "nll_loss_backward", "nll_loss2d_backward"})


def _callers(rows: list[int], raw: dict[str, np.ndarray]) -> tuple[list[int], dict[int, int | None]]:
    """``rows`` (one instance's working CPU records) in start order, and each one's caller among them:
    the innermost record whose span holds its start on its thread (the profiler's ranges nest)."""
    start, end, tid = raw["start"], raw.get("end"), raw["tid"]
    if end is None:
        return rows, dict.fromkeys(rows)
    spans = sorted((start[i] if start[i] is not None else -1, -(end[i] if end[i] is not None else -1), i)
                   for i in rows)
    caller: dict[int, int | None] = {}
    stacks: dict[Any, list[tuple[int, int]]] = {}
    for s, neg_end, i in spans:
        stack = stacks.setdefault(tid[i], [])
        while stack and stack[-1][0] <= s:
            stack.pop()
        caller[i] = stack[-1][1] if stack else None
        stack.append((-neg_end, i))
    return [i for _, _, i in spans], caller


def _idle_callers(state: dict[int, str], caller: dict[int, int | None], costs: dict[int, tuple]) -> list[int]:
    """The callers without a model (``open``) that handed no work on: none of the ops they called does
    FLOPs or is itself such a caller. ``nonzero`` calls only an ``as_strided_`` view and does its work in
    its own record: that record is n/a (no model), never the 0 of its view."""
    def busy(i: int) -> bool:  # an open caller, or an op that does FLOPs
        return state.get(i) == "open" or (i in costs and costs[i][1] is not None and costs[i][1].flops > 0)

    return [c for c, st in state.items() if st == "open" and not any(busy(i) for i, p in caller.items() if p == c)]


def _walk_instance(members: list[int], formula: bool, is_cpu: np.ndarray, raw: dict[str, np.ndarray], price,
                   costs: dict[int, tuple]) -> tuple[dict[int, str], dict[int, int | None]] | None:
    """Price one instance's working records (``members``) on what ran, callers before the ops they call,
    into ``costs`` (row -> (name, cost or None)): a record whose caller's model priced it is ``covered``;
    a caller without a model is ``open`` (the ops it called are priced instead). The records' states and
    callers; None where the instance is better priced by its forward op's backward ``formula``: an op
    that ran has no model, or figures an unrecorded argument may change."""
    from pyprof.prof.ops import family

    cpu = [i for i in members if is_cpu[i]]
    order, caller = _callers(cpu, raw) if len(cpu) > 1 else (cpu, dict.fromkeys(cpu))
    callers = {c for c in caller.values() if c is not None}
    state: dict[int, str] = {}
    for i in order + [i for i in members if not is_cpu[i]]:
        c = caller.get(i)
        if c is not None and state.get(c) in ("priced", "covered"):
            state[i] = "covered"  # its caller's model prices its work
            continue
        got = price(i)
        cost = got[1]
        if i in callers and cost is not None and cost.flops == 0 and cost.bytes is None:
            state[i] = "open"  # a data move its sizes do not price (zeros, a pad): the op it ran says its bytes
            continue
        if formula and not (got[0] in SIZED_OPS or family(got[0]) in SIZED_FAMILIES):
            return None  # its figures may hang on an unrecorded argument: the formula is surer
        if cost is not None and cost.bytes is not None:
            state[i] = "priced"
        elif formula:  # an op that ran is (partly) unknown: the forward's formula prices it whole
            return None
        elif cost is None and i in callers:
            state[i] = "open"  # no model for the caller: the ops it called are priced
            continue
        else:
            state[i] = "priced" if cost is not None else "unknown"  # its FLOPs, or nothing, known
        costs[i] = got
    return state, caller


def _spread(costs: dict[int, tuple], bad: set[int], rows: np.ndarray, inst_of: np.ndarray, aten: np.ndarray,
            sizes: np.ndarray, role: np.ndarray, n: int) -> dict[str, Any] | None:
    """:func:`on_what_ran`'s answer: each call's cost on its top-role records, ``bad`` instances left out."""
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    priced = np.full(n, None, dtype=object)
    groups: dict[tuple, list[int]] = {}
    for i in costs:
        k = int(inst_of[i])
        if k not in bad:
            groups.setdefault((k, aten[i], orjson.dumps(sizes[i])), []).append(i)
    for members in groups.values():
        name, cost = costs[members[0]]
        top = max(int(role[i]) for i in members)
        takers = [i for i in members if role[i] == top]  # one call each
        flops[takers] = NAN if cost is None else cost.flops
        nbytes[takers] = NAN if cost is None or cost.bytes is None else cost.bytes
        priced[takers] = name
    keep = rows[~np.isin(inst_of[rows], np.fromiter(bad, np.int64, len(bad)))]
    if not len(keep):
        return None
    mask = np.zeros(n, bool)
    mask[keep] = True
    return {"rows": mask, "flops": flops, "bytes": nbytes, "priced": priced}


def on_what_ran(raw: dict[str, np.ndarray], inst_of: np.ndarray, dtype: np.ndarray, role: np.ndarray,
                is_kernel: np.ndarray, formula: np.ndarray, is_cpu: np.ndarray,
                unmodelled: np.ndarray | None = None) -> dict[str, Any] | None:
    """The backward instances priced on what ran: ``rows`` (a mask of their kernel records), per-row
    ``flops``, ``bytes`` (NaN where the op that ran has no model) and ``priced`` (the aten op, or None);
    None when no instance qualifies. ``dtype`` is each row's instance dtype; ``formula`` says, per
    instance, whether its forward op's backward formula prices it (the fallback where an op that ran
    cannot be priced from its sizes). ``unmodelled`` (per instance) marks forward instances whose op
    has no model at all (no FLOPs): they are priced on what ran the same way (a Python composite such
    as ``svd_lowrank``: the GEMMs and factorisations it called), with no formula to fall back on."""
    aten, sizes = raw.get("aten"), raw.get("atenSizes")
    n = len(is_kernel)
    if aten is None or sizes is None or not n:
        return None
    op_dir = raw.get("opDir")
    cand = is_kernel & np.isin(raw["dir"], BACKWARD_DIRS) & np.not_equal(raw["op"], None)  # type: ignore[call-overload]
    if op_dir is not None:
        cand &= np.equal(op_dir, None)  # type: ignore[call-overload]
    fwd_args = raw.get("args")
    if cand.any() and fwd_args is not None:  # under torch.func.vmap the outer records hold per-sample sizes:
        distinct = {id(a): a for a in fwd_args}  # the formula prices the batch (rows share argument lists)
        vmapped = {k: bool(a) and any("vmap" in t for t in A.tensors(a)) for k, a in distinct.items()}
        cand &= ~np.isin(inst_of, inst_of[np.fromiter((vmapped[id(a)] for a in fwd_args), bool, n)])
    forward: set[int] = set()
    if unmodelled is not None:  # forward instances of an op without a model: priced on what they ran
        fwd = is_kernel & (raw["dir"] == "fprop") & unmodelled[inst_of] & np.not_equal(raw["op"], None)  # type: ignore[call-overload]
        forward = set(np.unique(inst_of[fwd]).tolist())
        cand |= fwd
    if not cand.any():
        return None
    rows = np.flatnonzero(np.isin(inst_of, np.unique(inst_of[cand])) & is_kernel)
    by_inst: dict[int, list[int]] = {}  # each instance's working rows
    for i in rows.tolist():
        if role[i] != NO_WORK:
            by_inst.setdefault(int(inst_of[i]), []).append(i)
    cdtype = raw.get("cdtype")
    prices: dict[tuple, tuple] = {}

    def price(i: int):
        cd = cdtype[i] if cdtype is not None else None
        fa = fwd_args[i] if fwd_args is not None and aten[i] == "aten::sum" else None
        key = (aten[i], orjson.dumps(sizes[i]), dtype[i], cd, id(fa))
        got = prices.get(key)
        if got is None:
            got = prices[key] = _price(aten[i], sizes[i], dtype[i], cd, fa)
        return got

    bad: set[int] = set()
    costs: dict[int, tuple] = {}  # row -> (name, cost or None): the rows that carry a call
    for k, members in by_inst.items():
        if any(not isinstance(aten[i], str) or not isinstance(sizes[i], list) for i in members):
            bad.add(k)  # a working record that names no aten op: what ran is not known
            continue
        walked = _walk_instance(members, bool(formula[k]), is_cpu, raw, price, costs)
        if walked is None:
            bad.add(k)
            continue
        state, caller = walked
        if k in forward:
            for c in _idle_callers(state, caller, costs):
                costs[c] = (price(c)[0], None)  # its own work has no model: n/a on its record
    return _spread(costs, bad, rows, inst_of, aten, sizes, role, n)
