"""Build the per-kernel table: records in, one DataFrame row per kernel out.

``build(records, gpu=None, peak_flops=None, peak_bw=None)`` is the Python API (``pyprof run`` and the CLI
use it). Steps, each over whole columns or over distinct keys, never a query per kernel:

1. **Op instances.** Kernels sharing ``opId`` and ``dir`` are one op instance (records without ``opId``,
   e.g. NVIDIA PyProf's, start a new instance at ``subSeqId`` 0 or when thread/op/direction change).
2. **Cost.** Each instance's :class:`~pyprof.prof.ops.registry.Cost` comes from
   :func:`pyprof.prof.ops.estimate`, computed once per distinct ``(op, mod, dir, cdtype, args)``.
3. **The split rule.** The instance's FLOPs and bytes are split over its kernels in proportion to their
   durations (equally if all durations are 0), so the per-kernel figures add up exactly to the
   instance's cost. memcpy/memset records take their own byte count and 0 FLOPs and do not share in
   the op's cost.
4. **Tensor cores** from kernel names (:mod:`pyprof.prof.tensorcores`).
5. **Roofline**: ideal = max(flops / peak(dtype, unit), bytes / bandwidth); gap = sil / ideal.

Unknown values are NaN in the frame (printed ``n/a``); ``df.attrs["warnings"]`` holds the one-line
warnings the CLI prints on stderr (uncovered ops with their share of time, missing peaks).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import orjson
import pandas as pd

from pyprof.prof import tensorcores
from pyprof.prof.devices import DeviceResolver
from pyprof.prof.params import first_dtype, render

NAN = float("nan")
COPY_KINDS = ("memcpy", "memset")


def _estimate(op: str, mod: str | None, direction: str, cdtype: str | None, args: list):
    from pyprof.prof.ops import OpCall, estimate

    try:
        return estimate(OpCall(op, list(args or []), direction or "fprop", cdtype, mod))
    except Exception:  # a model that cannot read these arguments: unknown, never a crash
        return None


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


class _Instances:
    """Assigns op-instance ids and costs each distinct op call once."""

    def __init__(self):
        self.ids: dict[Any, int] = {}
        self.cost: list[Any] = []  # Cost | None per instance
        self.params: list[str] = []
        self.dtype: list[str | None] = []
        self.op: list[str | None] = []
        self.args: list[Any] = []
        self.cache: dict[Any, tuple] = {}
        self.legacy_prev: dict[Any, tuple[Any, int]] = {}

    def add(self, key: Any, op, mod, direction, cdtype, args) -> int:
        inst = self.ids.get(key)
        if inst is not None:
            return inst
        inst = len(self.cost)
        self.ids[key] = inst
        if op is None:
            info = (None, render(args) if args else "", cdtype or first_dtype(args))
        else:
            akey = orjson.dumps(args) if args else b""
            ckey = (op, mod, direction, cdtype, akey)
            info = self.cache.get(ckey)
            if info is None:
                cost = _estimate(op, mod, direction, cdtype, args)
                dtype = (cost.dtype if cost is not None and cost.dtype else None) or cdtype or first_dtype(args)
                info = (cost, render(args), dtype)
                self.cache[ckey] = info
        self.cost.append(info[0])
        self.params.append(info[1])
        self.dtype.append(info[2])
        self.op.append(op)
        self.args.append(args)
        return inst


def _extract(records: Iterable[dict[str, Any]]):
    """One pass over the records: the columns prof needs, and each kernel's op instance."""
    inst = _Instances()
    names = ("seq", "altseq", "tid", "layer", "trace", "dir", "sub", "mod", "op", "kernel", "longkernel",
             "device", "stream", "grid", "block", "start", "gpu", "opid", "kind")
    cols: dict[str, list] = {k: [] for k in names}
    sil: list[float] = []
    rec_bytes: list[float] = []
    inst_of: list[int] = []
    (a_seq, a_alt, a_tid, a_layer, a_trace, a_dir, a_sub, a_mod, a_op, a_k, a_lk, a_dev, a_str, a_grid,
     a_block, a_start, a_gpu, a_opid, a_kind) = (cols[k].append for k in names)
    a_sil, a_bytes, a_inst = sil.append, rec_bytes.append, inst_of.append
    legacy_prev = inst.legacy_prev
    add = inst.add
    for i, r in enumerate(records):
        get = r.get
        op = get("op")
        if op.__class__ is list:
            op = _first(op)
        mod = get("mod")
        if mod.__class__ is list:
            mod = _first(mod)
        d = get("dir") or ""
        kind = get("kind") or "kernel"
        dur = get("kDuration")
        a_sil(NAN if dur is None else dur)
        a_seq(get("seqId"))
        a_alt(get("altSeqId"))
        tid = get("tid")
        a_tid(tid)
        a_layer(get("layer"))
        a_trace(get("trace"))
        a_dir(d)
        sub = get("subSeqId")
        a_sub(sub)
        a_mod(mod)
        a_op(op)
        a_k(get("kShortName"))
        a_lk(get("kLongName"))
        a_dev(get("device"))
        a_str(get("stream"))
        a_grid(get("grid"))
        a_block(get("block"))
        a_start(get("start"))
        a_gpu(get("gpu"))
        a_kind(kind)
        opid = get("opId")
        a_opid(opid)
        if kind != "kernel":
            b = get("bytes")
            a_bytes(NAN if b is None else b)
            a_inst(add(("row", i), None, mod, d, None, None))
            continue
        a_bytes(NAN)
        if opid is not None:
            key = (opid, d)
        elif op is None:
            key = ("row", i)
        else:  # PyProf records: no opId
            lkey = (tid, d, op, mod)
            prev = legacy_prev.get(tid)
            if prev is not None and prev[0] == lkey and sub not in (0, None):
                key = prev[1]
            else:
                key = ("legacy", i)
                legacy_prev[tid] = (lkey, key)
        a_inst(add(key, op, mod, d, get("cdtype"), get("args")))
    return (cols, np.asarray(sil, dtype=np.float64), np.asarray(rec_bytes, dtype=np.float64),
            np.asarray(inst_of, dtype=np.int64), inst)


def build(records: Iterable[dict[str, Any]], gpu: str | None = None, peak_flops: float | None = None,
          peak_bw: float | None = None, calibration: dict | None = None) -> pd.DataFrame:
    """One row per record (kernel, memcpy, memset), columns as in :data:`pyprof.prof.columns.COLUMNS`
    plus ``kind``. ``gpu`` overrides every record's GPU name; ``peak_flops`` (FLOP/s, all dtypes) and
    ``peak_bw`` (bytes/s) override the peak table; ``calibration`` maps device names to
    :class:`~pyprof.prof.devices.Device` (default: the calibration file, if any)."""
    resolver = DeviceResolver(gpu, peak_flops, peak_bw, calibration)
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of small containers: the cyclic collector would dominate the run time
    try:
        cols, sil, rec_bytes, inst_of, inst = _extract(records)
    finally:
        if gc_was_on:
            gc.enable()
    n = len(sil)
    df = pd.DataFrame({"idx": np.arange(1, n + 1)})
    for k, v in cols.items():
        df[k] = v
    df["sil"] = sil
    df["module"] = [(lay[-1] if lay else None) for lay in cols["layer"]]
    _costs(df, inst, inst_of, sil, rec_bytes)
    _tensor_cores(df, inst, inst_of, resolver)
    warnings = _roofline(df, resolver)
    warnings = _coverage_warning(df, inst, inst_of) + warnings
    df.attrs["warnings"] = warnings
    df.attrs["n_costed"] = len(inst.cache)
    return df


def _costs(df: pd.DataFrame, inst: _Instances, inst_of: np.ndarray, sil: np.ndarray, rec_bytes: np.ndarray) -> None:
    """Per-kernel FLOPs and bytes by the split rule (see the module docstring)."""
    m = len(inst.cost)
    inst_flops = np.full(m, NAN)
    inst_bytes = np.full(m, NAN)
    for j, c in enumerate(inst.cost):
        if c is not None:
            if c.flops is not None:
                inst_flops[j] = c.flops
            if c.bytes is not None:
                inst_bytes[j] = c.bytes
    dur = np.nan_to_num(sil, nan=0.0)
    dur = np.maximum(dur, 0.0)
    total = np.bincount(inst_of, weights=dur, minlength=m)
    count = np.bincount(inst_of, minlength=m).astype(np.float64)
    t = total[inst_of]
    share = np.where(t > 0, dur / np.where(t > 0, t, 1.0), 1.0 / count[inst_of])
    flops = inst_flops[inst_of] * share
    nbytes = inst_bytes[inst_of] * share
    copy = df["kind"].to_numpy() != "kernel"
    if copy.any():
        flops[copy] = np.where(np.isnan(rec_bytes[copy]), NAN, 0.0)
        nbytes[copy] = rec_bytes[copy]
    df["flops"] = flops
    df["bytes"] = nbytes
    df["params"] = [inst.params[j] for j in inst_of]
    df["dtype"] = [inst.dtype[j] for j in inst_of]
    df["tensor_op"] = [bool(c is not None and c.tensor_op) for c in (inst.cost[j] for j in inst_of)]
    df["model_note"] = [(c.note if c is not None else "") for c in (inst.cost[j] for j in inst_of)]


def _tensor_cores(df: pd.DataFrame, inst: _Instances, inst_of: np.ndarray, resolver: DeviceResolver) -> None:
    """``tc`` per kernel from its names (cached per distinct name); eligibility notes for TC=0 kernels."""
    flag_cache: dict[tuple, str] = {}
    note_cache: dict[tuple, str] = {}
    tcs, notes = [], []
    gpus = df["gpu"].tolist()
    devs = df["device"].tolist()
    for i, (short, long_, eligible, kind, dtype, op, mnote) in enumerate(zip(
            df["kernel"].tolist(), df["longkernel"].tolist(), df["tensor_op"].tolist(), df["kind"].tolist(),
            df["dtype"].tolist(), df["op"].tolist(), df["model_note"].tolist(), strict=True)):
        if kind != "kernel":
            tcs.append(tensorcores.NA)
            notes.append(mnote)
            continue
        dev = resolver.resolve(gpus[i], devs[i] is None)
        arch = dev.arch if dev is not None else None
        gemm_op = eligible or tensorcores.is_gemm_op(op)
        fkey = (short, long_, gemm_op, arch)
        flag = flag_cache.get(fkey)
        if flag is None:
            flag = tensorcores.tc_flag(f"{short or ''} {long_ or ''}", gemm_op, arch)
            flag_cache[fkey] = flag
        tcs.append(flag)
        if flag != "0" and not mnote:
            notes.append("")
            continue
        j = int(inst_of[i])
        nkey = (flag, dtype, op, arch, mnote, j if dtype in ("float16", "bfloat16") else -1)
        note = note_cache.get(nkey)
        if note is None:
            note = tensorcores.eligibility_note(flag, dtype, op, inst.args[j], arch)
            note = "; ".join(x for x in (note, mnote) if x)
            note_cache[nkey] = note
        notes.append(note)
    df["tc"] = tcs
    df["note"] = notes


def _roofline(df: pd.DataFrame, resolver: DeviceResolver) -> list[str]:
    """ideal, gap, bound, ai, tflops, gbps; returns warnings about missing peaks."""
    n = len(df)
    peak_f = np.full(n, NAN)
    peak_b = np.full(n, NAN)
    cache: dict[tuple, tuple[float, float]] = {}
    missing: dict[str, int] = {}
    for i, (g, dev_id, dtype, tc, kind) in enumerate(zip(
            df["gpu"].tolist(), df["device"].tolist(), df["dtype"].tolist(), df["tc"].tolist(),
            df["kind"].tolist(), strict=True)):
        key = (g, dev_id is None, dtype, tc)
        hit = cache.get(key)
        if hit is None:
            dev = resolver.resolve(g, dev_id is None)
            if dev is None:
                hit = (NAN, NAN)
            else:
                pf = dev.peak(dtype, tc == "1")
                hit = (pf if pf else NAN, dev.bw if dev.bw else NAN)
            cache[key] = hit
        peak_f[i], peak_b[i] = hit
        if math.isnan(hit[0]) and math.isnan(hit[1]) and kind == "kernel":
            label = resolver.gpu or g or ("CPU" if dev_id is None else "unknown GPU")
            missing[label] = missing.get(label, 0) + 1
    flops = df["flops"].to_numpy()
    nbytes = df["bytes"].to_numpy()
    sil = df["sil"].to_numpy()
    # memcpy between host and device is bound by the link, not by memory bandwidth: no ideal
    host_copy = np.array([k != "kernel" and not str(s or "").endswith(("DtoD", "memset")) and "memset" not in str(s or "")
                          for k, s in zip(df["kind"].tolist(), df["kernel"].tolist(), strict=True)], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_f = flops / peak_f * 1e9
        t_b = nbytes / peak_b * 1e9
        t_f = np.where(flops == 0, 0.0, t_f)
        ideal = np.fmax(t_f, t_b)  # NaN only when both terms are unknown
        ideal = np.where(host_copy | (ideal <= 0), NAN, ideal)
        gap = sil / ideal
        ai = np.where(nbytes > 0, flops / nbytes, NAN)
        pos = sil > 0
        tflops = np.where(pos, flops / np.where(pos, sil, 1) / 1e3, NAN)
        gbps = np.where(pos, nbytes / np.where(pos, sil, 1), NAN)
    bound = np.where(np.isnan(ideal), None, np.where(np.nan_to_num(t_f, nan=-1) > np.nan_to_num(t_b, nan=-1),
                                                     "compute", "memory"))
    df["ideal"] = ideal
    df["gap"] = gap
    df["bound"] = bound
    df["ai"] = ai
    df["tflops"] = tflops
    df["gbps"] = gbps
    warnings = []
    if missing:
        parts = ", ".join(f"{k} ({v} kernels)" for k, v in sorted(missing.items(), key=lambda kv: -kv[1]))
        warnings.append(f"no peak FLOP/s or bandwidth known for {parts}: ideal and gap show n/a; "
                        "pass --gpu NAME or --peak-flops/--peak-bw, or run `pyprof calibrate`")
    return warnings


def _coverage_warning(df: pd.DataFrame, inst: _Instances, inst_of: np.ndarray) -> list[str]:
    """One line naming the ops without a FLOP/byte model, with their share of kernel time."""
    kernel = (df["kind"] == "kernel").to_numpy()
    sil = np.nan_to_num(df["sil"].to_numpy(), nan=0.0)
    total = sil[kernel].sum()
    if total <= 0:
        total = 1.0
    no_model = np.array([inst.cost[j] is None and inst.op[j] is not None for j in inst_of], dtype=bool) & kernel
    out = []
    if no_model.any():
        shares = pd.Series(sil[no_model], index=df["op"].to_numpy()[no_model]).groupby(level=0).sum()
        shares = shares.sort_values(ascending=False) / total * 100
        listed = ", ".join(f"{op} {pct:.1f}%" for op, pct in shares.head(12).items())
        more = f", and {len(shares) - 12} more" if len(shares) > 12 else ""
        out.append(f"no FLOP/byte model for {len(shares)} op(s), {shares.sum():.1f}% of kernel time "
                   f"(their flops/bytes show n/a): {listed}{more}")
    no_op = np.array([o is None for o in df["op"].tolist()], dtype=bool) & kernel
    if no_op.any():
        out.append(f"{int(no_op.sum())} kernel(s), {sil[no_op].sum() / total * 100:.1f}% of kernel time, "
                   "carry no op (no pyprof/PyProf markers around their launch): flops/bytes n/a")
    return out
