"""Build the per-kernel table: records in, one DataFrame row per kernel out.

``build(records, gpu=None, peak_flops=None, peak_bw=None)`` is the Python API (``pyprof run`` and the CLI
use it). Each step works over whole columns or over distinct keys, never a query or a model call per
kernel, because real traces repeat the same op shapes and kernel names thousands of times:

1. **Op instances**: kernels sharing ``opId`` and ``dir`` (PyProf's records without ``opId``: the legacy
   rule of :func:`_instance_ids`).
2. **Cost** of each instance (:func:`pyprof.prof.ops.estimate`), once per distinct
   ``(op, mod, dir, cdtype, args)``; ``None`` (no model) leaves FLOPs and bytes NaN (``n/a``), never 0.
   Each row's ``priced_by`` names the stage that set its figures (:data:`pyprof.prof.columns.PRICED_BY`).
3. **The split rule**: an instance's cost goes to the kernels that do its work (:mod:`pyprof.kernel_roles`),
   by duration, so the per-kernel figures add up exactly to it; memcpy/memset keep their own bytes.
4. **Tensor cores** from kernel names (:mod:`pyprof.prof.tensorcores`), once per distinct name.
5. **Roofline** (:mod:`pyprof.prof.devices`): ideal, gap and bound; none for memcpy/memset.

docs/prof.md ("Op instances, and which kernels carry an op's cost", "Roofline") states the rules.
``df.attrs["warnings"]`` holds the one-line warnings the CLI prints on stderr (ops without a model with
their share of kernel time, kernels without an op, GPUs without known peaks).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from pyprof import kernel_roles
from pyprof.errors import InputError
from pyprof.process import collector_paused
from pyprof.prof import steps, tensorcores
from pyprof.prof.devices import DeviceResolver
from pyprof.prof.fastread import read_columns, record_columns
from pyprof.prof.params import first_dtype, render
from pyprof.records import SECOND_ORDER, read_header

NAN = float("nan")

# output column <- record field, for the columns copied as they are
COPIED = {"seq": "seqId", "altseq": "altSeqId", "tid": "tid", "layer": "layer", "trace": "trace",
          "sub": "subSeqId", "mod": "mod", "op": "op", "kernel": "kShortName", "longkernel": "kLongName",
          "device": "device", "stream": "stream", "grid": "grid", "block": "block", "start": "start",
          "gpu": "gpu", "opid": "opId"}


def _estimate(op: str, mod: str | None, direction: str, cdtype: str | None, args: list) -> tuple[Any, str]:
    """(Cost or None, the stage of :data:`~pyprof.prof.columns.PRICED_BY` that decided it) of one op call."""
    from pyprof.prof.ops import Cost, OpCall, estimate, fused, registry

    if direction == "none":  # opDir none: the call raised before its work (records.md): none done
        return Cost(0.0, 0.0, None, note="raised: no work"), "raised"
    if fused.is_fused(op, mod):  # a kernel Inductor generated: its origin ops and buffers (ops/fused.py)
        return fused.fused_cost(args), "inductor"
    try:
        cost = estimate(OpCall(op, list(args or []), direction or "fprop", cdtype, mod), quiet=False)
    except Exception:  # a model that cannot read these arguments: unknown, never a crash
        if registry.strict():
            raise
        return None, "model-error"
    return cost, "model" if cost is not None else "unpriced" if registry.lookup(op, mod) else "no-model"


def _ids(values: np.ndarray) -> np.ndarray:
    """``id`` of each object: the readers (:class:`~pyprof.prof.fastread.Columns`) share one object per
    distinct ``gpuProps`` or argument list, alive until the table is built."""
    return np.fromiter(map(id, values.tolist()), dtype=np.int64, count=len(values))


def _obj(values) -> np.ndarray:
    return np.fromiter(values, dtype=object, count=len(values))


def _codes(*arrays) -> tuple[np.ndarray, int]:
    """One int code per row for the combination of several columns (None counts as a value), and the number
    of codes (0 without rows)."""
    key = np.zeros(len(arrays[0]), dtype=np.int64)
    card = 1  # number of distinct keys so far (an upper bound)
    for a in arrays:
        ints = None
        if a.dtype == object:
            values = a.tolist()
            if values and values[0].__class__ is int:  # (op ids: a million distinct integers)
                ints = np.array(values)
                if ints.dtype != np.int64 or ints.ndim != 1:  # not all integers, or beyond int64
                    ints = None
        if ints is not None:  # the same equalities as a dict's (True is 1), in C
            c, u = pd.factorize(ints)
            k = len(u)
        elif a.dtype == object:  # a dict beats pd.factorize on object arrays (str hashes are cached)
            index = {v: i for i, v in enumerate(dict.fromkeys(values))}
            c = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
            k = len(index)
        else:
            c, u = pd.factorize(a)
            k = len(u) + 1
        if card * (k + 1) >= 2**62:
            key, uniq = pd.factorize(key)
            card = len(uniq)
        key = key * (k + 1) + c
        card *= k + 1
    key = pd.factorize(key)[0]
    return key, int(key.max()) + 1 if len(key) else 0


def _numeric(raw: dict[str, np.ndarray], field: str) -> np.ndarray:
    """A numeric record field as float64 (null -> NaN); a non-number is an input error, not a crash."""
    try:
        return pd.Series(raw[field], dtype="float64").to_numpy()
    except (TypeError, ValueError):
        bad = next(v for v in raw[field].tolist() if v is not None and not isinstance(v, (int, float)))
        raise InputError(f"record field {field} holds {bad!r}, not a number",
                         "give the output of `pyprof parse`") from None


def _first_index(codes: np.ndarray, m: int) -> np.ndarray:
    first = np.full(m, -1, dtype=np.int64)
    uniq, idx = np.unique(codes, return_index=True)  # first occurrence of each code
    first[uniq] = idx
    return first


PARALLEL_MIN_BYTES = 64 << 20  # below this, starting processes costs more than it saves


def default_workers() -> int:
    """Processes for decoding and formatting when the caller gives none: the CPUs, at most 8."""
    return min(os.cpu_count() or 1, 8)


def _range_columns(job: tuple[str, int, int]):
    """Worker: the columns of one byte range of a record file (a forked child of an owned process: its
    collector is pyprof's to turn off)."""
    gc.disable()
    path, start, end = job
    return read_columns(path, start, end, name=f"{path} (bytes {start}-{end})", allow_empty=True).pack()


def _parallel_columns(path: str, workers: int):
    """Decode a large record file on ``workers`` forked processes (JSON decoding is most of prof's time).
    None when it cannot, or may not (a process pyprof does not own: :func:`pyprof.process.can_fork`); the
    caller then reads it in this process, which also reports any bad line."""
    from pyprof import process
    from pyprof.prof.load import split_ranges

    pool = process.pool(workers)
    if pool is None:
        return None
    jobs = [(path, a, b) for a, b in split_ranges(path, workers * 2)]
    try:
        with pool:
            parts = list(pool.map(_range_columns, jobs))
    except Exception:  # a bad line (reported exactly by the sequential read), or a worker died
        return None
    cols = parts[0]
    for part in parts[1:]:
        cols.extend(part)
    if not len(cols):
        return None
    cols.ends.check(path)  # (each part saw part of the file: the whole is checked here)
    return cols


def build_file(source, gpu: str | None = None, peak_flops: float | None = None, peak_bw: float | None = None,
               calibration: dict | None = None, workers: int | None = None, reprice: bool = False) -> pd.DataFrame:
    """:func:`build` of a record file (path, ``-`` or None for stdin). A JSON-lines file is read straight
    into columns (:mod:`pyprof.prof.fastread`); with ``workers`` > 1 a large file (64 MiB or more) is
    decoded on that many forked processes (``None``: the CPUs, at most 8) where the process is pyprof's to
    fork (:mod:`pyprof.process`: ``pyprof prof``, not a library call); PyProf dict files and stdin are
    read record by record in this process. The result is the same either way. The file's header (its
    steps, the conditions it ran under, the peaks it was priced with: :func:`pyprof.records.read_header`)
    goes into ``df.attrs["header"]``; ``reprice``: price with today's calibration instead of the pinned one."""
    from pyprof.prof.load import is_legacy, iter_records

    if workers is None:
        workers = default_workers()
    path = None if source is None or str(source) == "-" or hasattr(source, "read") else os.fspath(source)
    head = read_header(path) if path is not None and os.path.isfile(path) else {}
    resolver = DeviceResolver(gpu, peak_flops, peak_bw, calibration, pinned=None if reprice else head.get("peaks"))
    with collector_paused():
        if path is not None and os.path.isfile(path) and not is_legacy(path):
            cols = None
            if workers > 1 and os.path.getsize(path) >= PARALLEL_MIN_BYTES:
                cols = _parallel_columns(path, workers)
            if cols is None:
                cols = read_columns(path)
            return _build(cols.arrays(), resolver, head)
        return _build(record_columns(iter_records(source)), resolver, head)


def build(records: Iterable[dict[str, Any]], gpu: str | None = None, peak_flops: float | None = None,
          peak_bw: float | None = None, calibration: dict | None = None,
          header: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per record (kernel, memcpy, memset), columns as in :data:`pyprof.prof.columns.COLUMNS`
    plus ``kind``. ``records`` may be a generator (``pyprof.prof.load.iter_records``): it is consumed
    once. ``gpu`` overrides every record's GPU name; ``peak_flops`` (FLOP/s, all dtypes) and ``peak_bw``
    (bytes/s) override the peak table; ``calibration`` maps device names to
    :class:`~pyprof.prof.devices.Device` (default: the peaks ``header`` pins, else the calibration file, if
    any). ``header``: the record file's header (:func:`pyprof.records.header`: steps, conditions, peaks). In a
    process pyprof owns (:mod:`pyprof.process`) the cyclic collector is paused meanwhile; elsewhere it is
    left as it is."""
    head = header or {}
    with collector_paused():
        return _build(record_columns(records),
                      DeviceResolver(gpu, peak_flops, peak_bw, calibration, pinned=head.get("peaks")), head)


def _build(raw: dict[str, np.ndarray], resolver: DeviceResolver, head: dict[str, Any]) -> pd.DataFrame:
    """The table of the record fields ``raw`` (:data:`KEYS`, an object array each)."""
    n = len(raw["kind"])
    for k in ("op", "mod"):  # PyProf wrote lists
        if list in set(map(type, raw[k].tolist())):
            raw[k] = _obj([(v[0] if v else None) if v.__class__ is list else v for v in raw[k].tolist()])
    kind = _obj(["kernel" if v is None else v for v in raw["kind"].tolist()])
    direction = _obj(["" if v is None else v for v in raw["dir"].tolist()])
    raw["dir"] = direction
    is_kernel = kind == "kernel"
    sil = _numeric(raw, "kDuration")
    rec_bytes = _numeric(raw, "bytes")

    inst = _instances(raw, n, is_kernel)
    out: dict[str, Any] = {"idx": np.arange(1, n + 1)}
    for col, field in COPIED.items():
        out[col] = raw[field]
    out.update(dir=direction, kind=kind, sil=sil)
    out["module"] = _obj([(lay[-1] if lay else None) for lay in raw["layer"].tolist()])
    step_table = steps.table(head)
    out["step"] = steps.assign(*steps.launches(raw["apiStart"], raw["start"]), step_table)
    step_numbers = steps.numbers(out["step"], step_table)
    is_cpu = np.equal(raw["device"], None) if n else np.zeros(0, bool)  # type: ignore[call-overload]
    role = _roles(raw, is_cpu)
    _costs(out, inst, sil, rec_bytes, is_kernel, raw["kShortName"], role)
    _backward_on_what_ran(out, inst, raw, is_kernel, role)
    codes = _tensor_cores(out, inst, raw, is_kernel, is_cpu, resolver)
    warnings = _coverage_warning(out, inst, sil, is_kernel)
    warnings += _roofline(out, raw, is_kernel, is_cpu, inst, codes, resolver)

    # copy=False: the columns are this function's own arrays; copying them into consolidated blocks
    # cost about half of the build (pandas fills and copies an object block per dtype)
    df = pd.DataFrame({k: (pd.Series(v, dtype=object, copy=False) if isinstance(v, np.ndarray) and v.dtype == object
                           else v) for k, v in out.items()}, copy=False)
    df.attrs["warnings"] = warnings
    df.attrs["n_costed"] = inst["n_costed"]
    df.attrs["header"] = head
    df.attrs["steps"] = step_numbers
    df.attrs["peaks"] = _peak_sources(raw, is_cpu, codes["device"], resolver)
    return df


def _peak_sources(raw: dict, is_cpu: np.ndarray, dcodes: np.ndarray, resolver: DeviceResolver) -> list[str]:
    """One line per device of the records: its name, where its peaks came from and the main figures
    (``Device.describe``), in order of first appearance."""
    lines = []
    for i in _first_index(dcodes, int(dcodes.max()) + 1 if len(dcodes) else 0).tolist():
        cpu = bool(is_cpu[i])
        label = "CPU" if cpu and resolver.gpu is None else resolver.gpu or raw["gpu"][i] or "unknown GPU"
        dev = resolver.resolve(raw["gpu"][i], cpu, raw["gpuProps"][i])
        line = f"{label}: " + (dev.describe() if dev is not None else "no peaks known")
        if line not in lines:
            lines.append(line)
    return lines


def _instances(raw: dict[str, np.ndarray], n: int, is_kernel: np.ndarray) -> dict[str, Any]:
    """Op-instance id per row (``of``, ``m`` instances, ``first`` row of each) and each instance's cost,
    params and dtype (see the module docstring). A training loop has many instances but few distinct
    calls, so the per-call work is done once per distinct key (:func:`_call_info`) and broadcast:
    ``key`` gives each instance's key, ``row_key`` each row's."""
    inst_of, m = _instance_ids(raw, n, is_kernel)
    first = _first_index(inst_of, m)
    key_of, info = _call_info(raw, first, is_kernel)
    return {"of": inst_of, "m": m, "first": first, "key": key_of, "row_key": key_of[inst_of], **info}


def _instance_ids(raw: dict[str, np.ndarray], n: int, is_kernel: np.ndarray) -> tuple[np.ndarray, int]:
    """Instance id per row: kernels by (opId, dir); PyProf kernels without opId by the legacy rule
    (a new instance at subSeqId 0 or when thread/op/module/direction change); everything else alone."""
    op = raw["op"]
    has_op = _not_none(op)
    has_id = _not_none(raw["opId"])
    grouped = is_kernel & has_id
    legacy = is_kernel & ~has_id & has_op
    inst_of = np.full(n, -1, dtype=np.int64)
    m = 0
    if grouped.any():  # exact ids (no float rounding), compared as JSON gave them
        codes, m = _codes(raw["opId"][grouped], raw["dir"][grouped])
        inst_of[grouped] = codes
    if legacy.any():
        prev: dict[Any, tuple[tuple, int]] = {}
        tid, d, mod, sub = raw["tid"], raw["dir"], raw["mod"], raw["subSeqId"]
        for i in np.flatnonzero(legacy).tolist():
            lkey = (tid[i], d[i], op[i], mod[i])
            p = prev.get(tid[i])
            if p is not None and p[0] == lkey and sub[i] not in (0, None):
                inst_of[i] = p[1]
            else:
                inst_of[i] = m
                prev[tid[i]] = (lkey, m)
                m += 1
    single = inst_of < 0
    inst_of[single] = m + np.arange(int(single.sum()))
    m += int(single.sum())
    return inst_of, m


def _not_none(values: np.ndarray) -> np.ndarray:
    """True where an object array holds something other than None (a vectorised identity test)."""
    return np.not_equal(values, None) if len(values) else np.zeros(0, bool)  # type: ignore[call-overload]


def _model_dir(raw: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The computation a model prices for ``rows``: ``opDir`` where a record gives it (an op run as itself
    in the backward pass: ``fprop``), else the record's direction; a recompute (``recomp``) is its op's
    forward, run again; a double backward (``bprop2``) its op's backward."""
    d = raw["dir"][rows]
    if len(d) and (d == "recomp").any():
        d = np.where(d == "recomp", "fprop", d)
    if len(d) and (d == SECOND_ORDER).any():  # a double backward node's work is a backward's
        d = np.where(d == SECOND_ORDER, "bprop", d)
    op_dir = raw.get("opDir")
    if op_dir is None:
        return d
    o = op_dir[rows]
    has = _not_none(o)
    return np.where(has, o, d) if has.any() else d


def _call_info(raw: dict[str, np.ndarray], first: np.ndarray, is_kernel: np.ndarray) -> tuple[np.ndarray, dict]:
    """Each instance's call key (op, mod, dir, cdtype, args object, is a kernel), from its first row, and
    the per-key arrays of :func:`_key_arrays`. Keys are numbered in order of first appearance, so models
    run in instance order, as a loop over instances would run them."""
    model_dir = _model_dir(raw, first)
    key_of, k = _codes(raw["op"][first], raw["mod"][first], model_dir, raw["cdtype"][first],
                       _ids(raw["args"][first]), is_kernel[first])
    kpos = _first_index(key_of, k)  # each key's first instance, a position in ``first``
    kfirst = first[kpos].tolist()
    calls = (raw["op"][kfirst].tolist(), raw["args"][kfirst].tolist(), raw["cdtype"][kfirst].tolist(),
             raw["mod"][kfirst].tolist(), model_dir[kpos].tolist(), is_kernel[kfirst].tolist())
    return key_of, _key_arrays(calls)


def _key_arrays(calls: tuple[list, ...]) -> dict[str, Any]:
    """Per distinct call: ``cost`` (None: no model, or not a kernel), ``params``, ``dtype``, ``by`` (its
    ``priced_by`` stage), ``flops``, ``bytes`` (NaN unknown), ``tensor_op``, ``eligible`` (tensor-core
    eligible op), ``note``; and ``n_costed``, the calls a model was asked to price. A call without a model
    takes its params and dtype from the first call with the same argument list."""
    k = len(calls[0])
    costs: list[Any] = [None] * k
    params: list[str] = [""] * k
    dtypes: list[str | None] = [None] * k
    by = ["no-op" if kern else "record" for kern in calls[5]]
    renders: dict[int, tuple] = {}
    n_costed = 0
    for j, (o, args, cd, mod, d, kern) in enumerate(zip(*calls, strict=True)):
        if o is None or not kern:
            if args:
                info = renders.get(id(args))
                if info is None:
                    info = renders[id(args)] = (render(args), cd or first_dtype(args))
                params[j], dtypes[j] = info
            continue
        cost, by[j] = _estimate(o, mod, d, cd, args)
        n_costed += 1
        costs[j] = cost
        params[j] = render(args)
        dtypes[j] = (cost.dtype if cost is not None and cost.dtype else None) or cd or first_dtype(args)
    _convs_from_backward(calls, costs, dtypes, by)
    gemm = {o: tensorcores.is_gemm_op(o) for o in set(calls[0])}
    tensor_op = np.array([bool(c is not None and c.tensor_op) for c in costs], dtype=bool)
    return {
        "cost": costs, "params": _obj(params), "dtype": _obj(dtypes), "n_costed": n_costed,
        "flops": np.array([c.flops if c is not None and c.flops is not None else NAN for c in costs], dtype=float),
        "bytes": np.array([c.bytes if c is not None and c.bytes is not None else NAN for c in costs], dtype=float),
        "tensor_op": tensor_op, "eligible": tensor_op | np.array([gemm[o] for o in calls[0]], dtype=bool),
        "note": _obj([(c.note if c is not None else "") or "" for c in costs]), "by": _obj(by),
    }


def _convs_from_backward(calls: tuple[list, ...], costs: list, dtypes: list, by: list) -> None:
    """Price, in place, the forward convolutions no model could price for want of stride/padding (PyTorch
    1.8 traces record only tensor arguments) with the output shape their backward recorded for the same
    input and weight shapes (:func:`pyprof.prof.ops.conv.price_with_backward`); the others stay unknown."""
    from pyprof.prof.ops import OpCall, canonical, conv, registry

    todo = [j for j, (o, kern) in enumerate(zip(calls[0], calls[5], strict=True))
            if kern and costs[j] is None and o is not None and canonical(o, calls[3][j]) in conv.SIGNATURES]
    if not todo:
        return
    outputs = conv.backward_outputs(OpCall(canonical(o, mod), list(args or []), d or "fprop", cd, mod)
                                    for o, args, cd, mod, d, kern in zip(*calls, strict=True)
                                    if kern and o is not None and canonical(o, mod) in conv.BACKWARD)
    for j in todo:
        o, args, cd, mod, d = calls[0][j], calls[1][j], calls[2][j], calls[3][j], calls[4][j]
        try:
            cost = conv.price_with_backward(OpCall(canonical(o, mod), list(args or []), d or "fprop", cd, mod),
                                            outputs)
        except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError):
            if registry.strict():
                raise
            cost = None
        if cost is not None:
            costs[j], by[j] = cost, "inferred"
            dtypes[j] = cost.dtype or dtypes[j]


def _roles(raw: dict[str, np.ndarray], is_cpu: np.ndarray) -> np.ndarray:
    """Each row's :mod:`pyprof.kernel_roles` role: a CPU record's from its name, a GPU kernel's from its full
    name (short and demangled) and its op; once per distinct (names, op, on CPU)."""
    kname = raw["kShortName"]
    codes, m = _codes(kname, raw["kLongName"], raw["op"], is_cpu)
    first = _first_index(codes, m).tolist()
    roles = np.empty(m, np.int8)
    for j, i in enumerate(first):
        short = kname[i]
        if is_cpu[i]:
            roles[j] = kernel_roles.cpu_role(str(short))
            continue
        long_ = raw["kLongName"][i]
        full = f"{short or ''} {long_ or ''}" if long_ and long_ != short else str(short or "")
        _, compute, helper = tensorcores.kernel_class(full)
        roles[j] = kernel_roles.gpu_role(compute, helper, raw["op"][i])
    return roles[codes]


def _costs(out: dict, inst: dict, sil: np.ndarray, rec_bytes: np.ndarray, is_kernel: np.ndarray,
           kname: np.ndarray, role: np.ndarray) -> None:
    """Per-kernel FLOPs and bytes by the split rule (see the module docstring): each instance's cost
    goes to its rows of the highest role present, by duration."""
    m, inst_of, row_key = inst["m"], inst["of"], inst["row_key"]
    dur = np.maximum(np.nan_to_num(sil, nan=0.0), 0.0)
    best = np.zeros(m, np.int8)
    if len(inst_of):
        np.maximum.at(best, inst_of, role)
    takes = role == best[inst_of]  # the rows that do the instance's work
    dur = np.where(takes, dur, 0.0)
    total = np.bincount(inst_of, weights=dur, minlength=m)
    count = np.bincount(inst_of, weights=takes, minlength=m)
    t = total[inst_of]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(t > 0, dur / np.where(t > 0, t, 1.0), np.where(takes, 1.0, 0.0) / count[inst_of])
    flops = inst["flops"][row_key] * share
    nbytes = inst["bytes"][row_key] * share
    copy = ~is_kernel
    if copy.any():
        # a memcpy/memset is no op's arithmetic: its FLOPs are unknown (n/a), never 0, so a row priced
        # only from such records (an op whose kernels the trace lacks) never shows FLOPs
        flops[copy] = NAN
        # a device-to-device copy reads and writes every byte: twice the bytes copied go through memory
        twice = _per_distinct(kname[copy], lambda k: str(k).endswith("DtoD"), bool)
        nbytes[copy] = rec_bytes[copy] * np.where(twice, 2.0, 1.0)
    out["flops"] = flops
    out["bytes"] = nbytes
    by = inst["by"][row_key]
    out["priced_by"] = np.where(~takes & np.isin(by, ("model", "inductor", "inferred")), "no-share", by)
    out["params"] = inst["params"][row_key]
    out["dtype"] = inst["dtype"][row_key]


def _backward_on_what_ran(out: dict, inst: dict, raw: dict, is_kernel: np.ndarray, role: np.ndarray) -> None:
    """Backward instances whose records name the aten ops that ran: priced on those ops instead of their
    forward op's backward formula, and forward instances of an op without a model: priced on the ops it
    ran (:mod:`pyprof.prof.backward`); ``priced`` names the op per row."""
    from pyprof.prof.backward import on_what_ran

    formula = (~np.isnan(inst["flops"]) & ~np.isnan(inst["bytes"]))[inst["key"]]  # per instance
    unmodelled = np.isnan(inst["flops"])[inst["key"]]
    got = on_what_ran(raw, inst["of"], out["dtype"], role, is_kernel, formula,
                      np.equal(raw["device"], None), unmodelled)  # type: ignore[call-overload]
    if got is None:
        out["priced"] = _obj([None] * len(is_kernel))
        return
    rows = got["rows"]
    for k in ("flops", "bytes"):
        out[k] = np.where(rows, got[k], out[k])
    out["priced"] = got["priced"]
    carries = np.not_equal(got["priced"], None)  # type: ignore[call-overload]
    share = (np.bincount(inst["of"][carries], minlength=inst["m"]) > 0)[inst["of"]]  # its instance's work ran
    out["priced_by"] = np.where(rows, np.where(carries, "what-ran", np.where(share, "no-share", "no-work")),
                                out["priced_by"])


def _per_distinct(values: np.ndarray, fn, dtype=object) -> np.ndarray:
    """``fn(v)`` for every value of an object array, called once per distinct value (names repeat)."""
    items = values.tolist()
    try:
        index = {v: i for i, v in enumerate(dict.fromkeys(items))}
    except TypeError:  # an unhashable value: one call per row
        return np.fromiter(map(fn, items), dtype=dtype, count=len(items))
    results = np.fromiter(map(fn, index), dtype=dtype, count=len(index))
    return results[np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items))]


def _tensor_cores(out: dict, inst: dict, raw: dict, is_kernel: np.ndarray, is_cpu: np.ndarray,
                  resolver: DeviceResolver) -> dict[str, np.ndarray]:
    """``tc`` per kernel from its names, once per distinct (names, op eligibility, GPU); notes for TC=0.
    Returns int codes per row for the roofline: ``device`` (GPU name, on CPU) and ``tc``."""
    n = len(is_kernel)
    # device per row: once per distinct (gpu name, on CPU); CPU records have no tensor cores, whatever
    # the calibration says
    dcodes, dm = _codes(raw["gpu"], _ids(raw["gpuProps"]), is_cpu)
    dfirst = _first_index(dcodes, dm).tolist()
    devs = [resolver.resolve(raw["gpu"][i], bool(is_cpu[i]), raw["gpuProps"][i]) for i in dfirst]
    dev_arch = ["cpu" if is_cpu[i] else d.arch if d is not None else None for i, d in zip(dfirst, devs, strict=True)]
    arch_index = {a: c for c, a in enumerate(dict.fromkeys(dev_arch))}
    arch_code = np.array([arch_index[a] for a in dev_arch], dtype=np.int64)[dcodes]
    arch = _obj(list(arch_index))[arch_code]
    eligible = inst["eligible"][inst["row_key"]]
    tc_code = np.zeros(n, dtype=np.int64)  # index into TC_FLAGS: "-" unless a kernel says otherwise
    if is_kernel.any():
        k = is_kernel
        short, long_, el, ar = raw["kShortName"][k], raw["kLongName"][k], eligible[k], arch[k]
        codes, cm = _codes(short, long_, el, arch_code[k])
        first = _first_index(codes, cm).tolist()
        flags = [tensorcores.tc_flag(f"{short[i] or ''} {long_[i] or ''}", bool(el[i]), ar[i]) for i in first]
        tc_code[k] = np.array([TC_FLAGS.index(f) for f in flags], dtype=np.int64)[codes]
    tc = _obj(TC_FLAGS)[tc_code]
    out["tc"] = tc
    out["note"] = _notes(out, inst, raw, arch, arch_code, tc_code)
    return {"device": dcodes, "tc": tc_code}


TC_FLAGS = (tensorcores.NA, "0", "1")


def _notes(out: dict, inst: dict, raw: dict, arch: np.ndarray, arch_code: np.ndarray,
           tc_code: np.ndarray) -> np.ndarray:
    """Eligibility note (TC=0) and the model's remark per row, once per (instance, arch, flag), from the
    group's first row."""
    n = len(tc_code)
    note = _obj([""] * n)
    key_note = inst["note"]
    want = (tc_code == TC_FLAGS.index("0")) | (key_note != "")[inst["row_key"]] if n else np.zeros(0, bool)
    if not want.any():
        return note
    rows = np.flatnonzero(want)
    width = int(arch_code.max()) + 1
    group = (inst["of"][rows] * width + arch_code[rows]) * len(TC_FLAGS) + tc_code[rows]
    gcodes, uniq = pd.factorize(group)
    texts = []
    for i in rows[_first_index(gcodes, len(uniq))].tolist():
        tc = TC_FLAGS[tc_code[i]]
        text = tensorcores.eligibility_note(tc, out["dtype"][i], raw["op"][i], raw["args"][i], arch[i])
        texts.append("; ".join(x for x in (text, key_note[inst["row_key"][i]]) if x))
    note[rows] = _obj(texts)[gcodes]
    return note


def _roofline(out: dict, raw: dict, is_kernel: np.ndarray, is_cpu: np.ndarray, inst: dict, codes: dict,
              resolver: DeviceResolver) -> list[str]:
    """ideal, gap, bound, ai, tflops, gbps; returns the warning about GPUs without known peaks.
    Peaks are looked up once per distinct (device, dtype, tc) and broadcast. The rules (cache levels, the
    latency floor of :meth:`Device.floor_ns`, no-work kernels): docs/prof.md, "Steps, noise, the latency
    floor and pinned peaks"."""
    n = len(is_kernel)
    peak_f, peak_b, floor = np.full(n, NAN), np.full(n, NAN), np.full(n, NAN)
    missing: dict[str, int] = {}
    flops, nbytes, sil = out["flops"], out["bytes"], out["sil"]
    if n:
        dtypes = inst["dtype"].tolist()
        dindex = {d: c for c, d in enumerate(dict.fromkeys(dtypes))}
        dtype_code = np.array([dindex[d] for d in dtypes], dtype=np.int64)[inst["row_key"]]
        group = (codes["device"] * len(dindex) + dtype_code) * len(TC_FLAGS) + codes["tc"]
        gcodes, uniq = pd.factorize(group)
        first = _first_index(gcodes, len(uniq))
        pf, pb, fl = np.full(len(uniq), NAN), np.full(len(uniq), NAN), np.full(len(uniq), NAN)
        for j, i in enumerate(first.tolist()):
            dev = resolver.resolve(raw["gpu"][i], bool(is_cpu[i]), raw["gpuProps"][i])
            if dev is not None:
                pf[j] = dev.peak(out["dtype"][i], out["tc"][i] == "1") or NAN
                pb[j] = dev.bw or NAN
                fl[j] = dev.floor_ns()
                if dev.bw_levels:
                    rows = gcodes == j
                    peak_b[rows] = _level_bw(nbytes[rows], dev.bw_levels, pb[j])
        peak_f, floor = pf[gcodes], fl[gcodes]
        peak_b = np.where(np.isnan(peak_b), pb[gcodes], peak_b)
        unknown = is_kernel & np.isnan(peak_f) & np.isnan(pb[gcodes])
        if unknown.any():
            labels = pd.Series([resolver.gpu or g or ("CPU" if c else "unknown GPU")
                                for g, c in zip(raw["gpu"][unknown], is_cpu[unknown], strict=True)])
            missing = labels.value_counts().to_dict()
    with np.errstate(divide="ignore", invalid="ignore"):
        t_f = np.where(flops == 0, 0.0, flops / peak_f * 1e9)
        t_b = nbytes / peak_b * 1e9
        roof = np.where(~is_kernel, NAN, np.fmax(t_f, t_b))  # NaN only when both terms are unknown
        latency = roof < floor  # (a model of no work, or of less than the floor can take)
        ideal = np.where(latency, np.fmin(floor, sil), roof)
        ideal = np.where(ideal > 0, ideal, NAN)
        # no work at all (0 FLOPs, 0 bytes: a wrapper's or a compiled region's own time): all of it is
        # overhead, latency-bound, with no roofline to be a multiple of (no ideal, no gap)
        idle = (flops == 0) & (nbytes == 0) & latency
        ideal = np.where(idle, NAN, ideal)
        gap = sil / ideal
        ai = np.where(nbytes > 0, flops / nbytes, NAN)
        pos = sil > 0
        tflops = np.where(pos, flops / np.where(pos, sil, 1) / 1e3, NAN)
        gbps = np.where(pos, nbytes / np.where(pos, sil, 1), NAN)
    compute = np.nan_to_num(t_f, nan=-1.0) > np.nan_to_num(t_b, nan=-1.0)
    known = ~np.isnan(ideal)
    bound = _obj([None, "compute", "memory", "latency"])[np.where(known, np.where(latency, 3, np.where(compute, 1, 2)),
                                                                   np.where(idle, 3, 0))]
    out.update(ideal=ideal, gap=gap, bound=bound, ai=ai, tflops=tflops, gbps=gbps)
    warnings = _beyond_roofline(out, known & (roof > sil), sil)
    if not missing:
        return warnings
    parts = ", ".join(f"{k} ({v} kernels)" for k, v in sorted(missing.items(), key=lambda kv: -kv[1]))
    return [f"no peak FLOP/s or bandwidth known for {parts}: ideal and gap show n/a; "
            "pass --gpu NAME or --peak-flops/--peak-bw, or run `pyprof calibrate`", *warnings]


def _level_bw(nbytes: np.ndarray, levels: tuple, base: float) -> np.ndarray:
    """The bandwidth roof of working sets of ``nbytes``: that of the largest calibrated copy (``levels``:
    (bytes moved, bytes/s), sizes ascending) no larger than it (the smallest for less), never below
    ``base``; NaN bytes stay unpriced."""
    sizes = np.array([b for b, _ in levels])
    rates = np.array([r for _, r in levels])
    pos = np.clip(np.searchsorted(sizes, np.nan_to_num(nbytes, nan=0.0), side="right") - 1, 0, len(sizes) - 1)
    return np.fmax(rates[pos], base)


BEYOND_NOTE = "faster than the roofline: FLOP/byte model or peak wrong"


def _beyond_roofline(out: dict, beyond: np.ndarray, sil: np.ndarray) -> list[str]:
    """Kernels that ran faster than their ideal time (gap < 1): achieved FLOP/s or bandwidth above the
    peak, which no kernel can do, so the FLOP/byte model or the peak is wrong. Each gets a note and
    ``beyond`` (summaries leave them out of ideal, excess and gap); one warning counts them."""
    out["beyond"] = beyond
    if not beyond.any():
        return []
    note = out["note"]
    rows = np.flatnonzero(beyond)
    note[rows] = _obj([f"{t}; {BEYOND_NOTE}" if t else BEYOND_NOTE for t in note[rows].tolist()])
    total = float(np.nansum(sil))
    share = float(np.nansum(sil[rows])) / total * 100 if total > 0 else 0.0
    return [f"{len(rows)} kernel(s), {share:.1f}% of the time, ran faster than the roofline allows (achieved "
            "FLOP/s or bandwidth above the peak): their FLOP/byte model or the peak is wrong; summaries leave "
            "them out of ideal, excess and gap (check --peak-flops/--peak-bw or `pyprof calibrate`)"]


def _coverage_warning(out: dict, inst: dict, sil: np.ndarray, is_kernel: np.ndarray) -> list[str]:
    """One line naming the ops without a FLOP/byte model, with their share of kernel time (a backward
    priced on what ran: its records whose op has no model)."""
    n = len(is_kernel)
    if not n:
        return []
    dur = np.nan_to_num(sil, nan=0.0)
    total = dur[is_kernel].sum() or 1.0
    op = out["op"]
    has_op = _not_none(op)
    by = out["priced_by"]
    lines = []
    uncovered = has_op & (np.isin(by, ("no-op", "model-error", "unpriced", "no-model"))
                          | ((by == "what-ran") & np.isnan(out["flops"])))
    if uncovered.any():
        from pyprof.prof.ops.registry import canonical, covered_ops

        covered = covered_ops()
        shares = pd.Series(dur[uncovered]).groupby(op[uncovered]).sum().sort_values(ascending=False) / total * 100
        modelled = [o in covered or canonical(o) in covered for o in shares.index]
        for has_model, what in ((False, "no FLOP/byte model for {n} op(s)"),
                                (True, "{n} op(s) have a FLOP/byte model but arguments it cannot price "
                                       "(unknown contiguity, shapes or dtypes)")):
            part = shares[[m == has_model for m in modelled]]
            if part.empty:
                continue
            listed = ", ".join(f"{o} {pct:.1f}%" for o, pct in part.head(12).items())
            more = f", and {len(part) - 12} more" if len(part) > 12 else ""
            lines.append(f"{what.format(n=len(part))}, {part.sum():.1f}% of kernel time "
                         f"(their flops/bytes show n/a): {listed}{more}")
    lines += _fused_warning(out, inst, dur, total)
    no_op = is_kernel & ~has_op
    if no_op.any():
        lines.append(f"{int(no_op.sum())} kernel(s), {dur[no_op].sum() / total * 100:.1f}% of kernel time, "
                     "carry no op (no pyprof/PyProf marker around their launch): flops/bytes n/a")
    return lines


def _fused_warning(out: dict, inst: dict, dur: np.ndarray, total: float) -> list[str]:
    """One line per unknown of the kernels Inductor generated (:mod:`pyprof.prof.ops.fused`): how many
    have FLOPs n/a, with their share of kernel time and why (the first reasons), and how many bytes n/a."""
    fused = inst["by"][inst["row_key"]] == "inductor"  # (whether or not what ran priced them since)
    if not fused.any():
        return []
    lines = []
    for col, what in (("flops", "FLOPs"), ("bytes", "bytes")):
        unknown = fused & np.isnan(out[col])
        if not unknown.any():
            continue
        line = (f"{int(unknown.sum())} kernel(s) Inductor generated, {dur[unknown].sum() / total * 100:.1f}% of "
                f"kernel time, have {what} n/a")
        if col == "flops":
            notes = inst["note"][inst["row_key"]][unknown].tolist()
            why = list(dict.fromkeys(n.removeprefix("fused: flops n/a (").removesuffix(")") for n in notes if n))
            line += f": {', '.join(why[:8])}" if why else ""
        else:
            line += ": a buffer of unknown size, or no record of its buffers"
        lines.append(line)
    return lines
