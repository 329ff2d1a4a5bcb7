"""Turn one source's activity and range tables into kernel records (shared by nsys and nvprof).

The readers hand over two DataFrames in a common shape:

* ``acts``: one row per kernel/memcpy/memset with the record's base columns (see :data:`ACT_COLUMNS`),
  plus ``thread`` (an int key of the launching thread, -1 when the API call is unknown);
* ``ranges``: one row per NVTX range with ``thread``, ``pid``, ``start``, ``end``, ``text``, ``domain``.

Steps: label ids for (text, domain) -> the sweep (:mod:`pyprof.parse.sweep`) gives each launch its
stack of open ranges -> each distinct stack is decoded once (:mod:`pyprof.parse.decode`) -> op
instance ids and per-op kernel indices -> backward kernels linked to their forward op -> records are
yielded one at a time, in kernel start order (the output is streamed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pyprof.parse import decode as dec
from pyprof.parse.sweep import open_stacks

ACT_COLUMNS = ("kind", "kShortName", "kLongName", "start", "end", "correlationId", "pid", "tid", "device",
               "gpu", "stream", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "bytes", "copyKind",
               "apiName", "apiStart", "apiEnd", "thread")


@dataclass
class Stats:
    """What a run found, for the summary line."""

    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    ranges: int = 0
    malformed: int = 0
    warnings: list[str] = field(default_factory=list)


def pylist(series: pd.Series) -> list:
    """A column as a list of plain Python values, nulls as None (orjson-ready)."""
    if series.dtype == object:
        return [None if (v is None or (isinstance(v, float) and v != v)) else v for v in series.tolist()]
    if series.dtype.kind in "iub":
        return series.tolist()
    if series.dtype.kind == "f":
        arr = series.to_numpy()
        mask = np.isnan(arr)
        out = arr.astype(np.int64, copy=False) if not mask.any() else None
        if out is not None:
            return out.tolist()
        vals = np.where(mask, 0, arr).astype(np.int64).tolist()
        return [None if m else v for v, m in zip(vals, mask.tolist())]
    return series.astype(object).where(series.notna(), None).tolist()


def _labels(ranges: pd.DataFrame) -> tuple[np.ndarray, list[tuple]]:
    """(text, domain) pairs -> label id per range and the list of distinct pairs."""
    tcodes, texts = pd.factorize(ranges["text"], use_na_sentinel=False)
    dcodes, domains = pd.factorize(ranges["domain"], use_na_sentinel=False)
    combo = tcodes.astype(np.int64) * (len(domains) + 1) + dcodes
    lcodes, luniq = pd.factorize(combo)
    labels = []
    for key in np.asarray(luniq).tolist():
        t, d = divmod(key, len(domains) + 1)
        text, domain = texts[t], domains[d]
        labels.append((None if text is None or text != text else str(text),
                       None if domain is None or domain != domain else str(domain)))
    return lcodes.astype(np.int64), labels


def build(acts: pd.DataFrame, ranges: pd.DataFrame, source: str, stats: Stats,
          bare_names: bool | None = None) -> Iterator[dict[str, Any]]:
    """Yield the records of ``acts`` attributed to ``ranges``. ``stats`` is filled before the first yield."""
    acts = acts.sort_values(["start", "correlationId"], kind="stable", na_position="last").reset_index(drop=True)
    n = len(acts)
    stats.kernels = int((acts["kind"] == "kernel").sum())
    stats.copies = n - stats.kernels
    stats.ranges = len(ranges)

    labels_of_range, labels = _labels(ranges) if len(ranges) else (np.zeros(0, np.int64), [])
    if bare_names is None:
        bare_names = dec.looks_like_legacy_emit_nvtx(t for t, _ in labels)
    label_info = [dec.classify(t, bare_names) for t, _ in labels]
    if labels:
        bad = np.array([i.malformed for i in label_info], dtype=bool)
        stats.malformed = int(bad[labels_of_range].sum())
        if stats.malformed:
            stats.warnings.append(
                f"{stats.malformed} malformed pyprof/PyProf marker range(s) could not be decoded; their "
                "kernels are written with the raw range text in `ranges`")

    thread = acts["thread"].to_numpy(dtype=np.int64, na_value=-1)
    api_start = acts["apiStart"].to_numpy(dtype=np.float64, na_value=np.nan)
    has_q = (thread >= 0) & ~np.isnan(api_start)
    q_rows = np.flatnonzero(has_q)
    st = open_stacks(ranges["thread"].to_numpy(np.int64), ranges["start"].to_numpy(np.int64),
                     ranges["end"].to_numpy(np.int64), labels_of_range,
                     thread[q_rows], api_start[q_rows].astype(np.int64))
    row_sid = np.full(n, -1, dtype=np.int64)
    row_sid[q_rows] = st.q_sid
    stats.attributed = int(((row_sid >= 0) & (acts["kind"] == "kernel").to_numpy()).sum())

    # decode each distinct stack once
    decoded: dict[int, dec.Decoded] = {}
    ranges_json: dict[int, list] = {}
    for sid in np.unique(row_sid[row_sid >= 0]).tolist():
        labs = st.stack_labels[sid]
        decoded[sid] = dec.decode([labels[lab][0] for lab in labs], bare_names)
        ranges_json[sid] = [{"text": labels[lab][0], "domain": labels[lab][1]} for lab in labs]

    # op instance ids: the range at the decoded op position
    op_id = np.full(n, -1, dtype=np.int64)
    op_pos = np.array([(decoded[s].op_pos if s >= 0 and decoded[s].op_pos is not None else -1)
                       for s in st.q_sid.tolist()], dtype=np.int64) if len(q_rows) else np.zeros(0, np.int64)
    sel = np.flatnonzero(op_pos >= 0)
    if len(sel):
        op_id[q_rows[sel]] = st.q_chain(sel, op_pos[sel])
    sub_seq = np.full(n, -1, dtype=np.int64)
    has_op = np.flatnonzero(op_id >= 0)
    if len(has_op):
        corr = acts["correlationId"].to_numpy(dtype=np.float64, na_value=0)
        order = has_op[np.lexsort((corr[has_op], api_start[has_op], op_id[has_op]))]
        ids = op_id[order]
        first = np.r_[True, ids[1:] != ids[:-1]]
        starts = np.maximum.accumulate(np.where(first, np.arange(len(ids)), 0))
        sub_seq[order] = np.arange(len(ids)) - starts

    # backward kernels -> forward op
    linked = _link(acts, row_sid, decoded, st, ranges, labels_of_range, labels, label_info, bare_names,
                   api_start)

    pids = pylist(acts["pid"])
    tids = pylist(acts["tid"])
    cols = {c: pylist(acts[c]) for c in ACT_COLUMNS if c not in ("thread", "pid", "tid")}
    empty = dec.decode([], bare_names).fields
    grids = zip(cols["gridX"], cols["gridY"], cols["gridZ"])
    blocks = zip(cols["blockX"], cols["blockY"], cols["blockZ"])
    sids = row_sid.tolist()
    opids = op_id.tolist()
    subs = sub_seq.tolist()
    for i, (g, b) in enumerate(zip(grids, blocks)):
        sid = sids[i]
        fields = linked.get(i) or (decoded[sid].fields if sid >= 0 else empty)
        start, end = cols["start"][i], cols["end"][i]
        rec = {
            "kind": cols["kind"][i], "source": source,
            "kShortName": cols["kShortName"][i], "kLongName": cols["kLongName"][i],
            "kDuration": end - start if start is not None and end is not None else None,
            "start": start, "end": end, "correlationId": cols["correlationId"][i],
            "pid": pids[i], "tid": tids[i], "device": cols["device"][i], "gpu": cols["gpu"][i],
            "stream": cols["stream"][i],
            "grid": list(g) if g[0] is not None else None, "block": list(b) if b[0] is not None else None,
            "bytes": cols["bytes"][i], "copyKind": cols["copyKind"][i],
            "apiName": cols["apiName"][i], "apiStart": cols["apiStart"][i], "apiEnd": cols["apiEnd"][i],
            "ranges": ranges_json[sid] if sid >= 0 else [],
        }
        rec.update(fields)
        rec["opId"] = opids[i] if opids[i] >= 0 else None
        rec["subSeqId"] = subs[i] if subs[i] >= 0 else None
        yield rec


def _link(acts, row_sid, decoded, st, ranges, labels_of_range, labels, label_info, bare_names, api_start):
    """Fields of backward kernels completed from their forward op: {row: fields}."""
    want = {}
    pid_col = acts["pid"].tolist()
    for i, sid in enumerate(row_sid.tolist()):
        if sid >= 0 and decoded[sid].link_seq is not None:
            want[i] = (pid_col[i], decoded[sid].link_seq)
    if not want or not len(ranges):
        return {}
    needed = {seq for _, seq in want.values()}
    # forward registrations: ranges carrying a seq we need, at the top of their seq group
    seqs_of_label = [dec.forward_seqs(t, bare_names) for t, _ in labels]
    reg_labels = np.array([bool(set(s) & needed) for s in seqs_of_label], dtype=bool)
    rows = np.flatnonzero(reg_labels[labels_of_range])
    linker = dec.BackwardLinker()
    fwd_cache: dict[int, dict] = {}
    r_pid = ranges["pid"].tolist()
    r_start = ranges["start"].to_numpy(np.int64)
    for r in rows.tolist():
        lab = labels_of_range[r]
        parent = st.r_parent[r]
        sid = st.r_sid[r]
        if sid < 0:
            continue
        own = set(seqs_of_label[lab]) & needed
        if parent >= 0:
            own -= set(seqs_of_label[labels_of_range[parent]])
        if not own:
            continue
        f = fwd_cache.get(sid)
        if f is None:
            f = fwd_cache[sid] = dec.forward_fields([labels[x][0] for x in st.stack_labels[sid]], bare_names)
        for seq in own:
            linker.add(r_pid[r], seq, int(r_start[r]), f)
    linker.freeze()
    out: dict[int, dict] = {}
    cache: dict[tuple, dict] = {}
    for i, (pid, seq) in want.items():
        f = linker.find(pid, seq, int(api_start[i]))
        if f is None:
            continue
        key = (row_sid[i], id(f))
        merged = cache.get(key)
        if merged is None:
            merged = cache[key] = dec.link(decoded[row_sid[i]].fields, f)
        out[i] = merged
    return out
