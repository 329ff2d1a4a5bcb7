"""The trace's own annotations that records do not keep as time spans: ``ProfilerStep#N`` and
``enumerate(DataLoader)#...__next__`` (torch.profiler's ranges around a step and around each batch
fetched). Records carry the ranges open at each op, not their start and end, and a DataLoader wait holds
no op at all (the batch comes from a worker, or the dataset sleeps on I/O), so the dataloader advice
reads these from the trace: ``pyprof run``'s ``trace.json`` beside its records, or the torch.profiler
trace given to ``pyprof advise``."""

from __future__ import annotations

import os
from typing import Any

STEP_PREFIX, LOADER_PREFIX = "ProfilerStep#", "enumerate(DataLoader)#"
PREFIXES = (STEP_PREFIX, LOADER_PREFIX)


def read_spans(path: str | os.PathLike) -> dict[str, list[tuple[Any, int, int, str]]]:
    """Prefix of :data:`PREFIXES` -> its complete CPU events as (thread, start ns, duration ns, name), in
    start order. Raises :class:`pyprof.errors.InputError` where ``path`` is no chrome trace."""
    from pyprof.parse.kineto.load import load_trace
    from pyprof.parse.kineto.schema import to_ns

    out: dict[str, list] = {p: [] for p in PREFIXES}
    for chunk in load_trace(path, raw=True).chunks:
        for ev in chunk:
            name = ev.get("name") if type(ev) is dict else None
            if (type(name) is not str or ev.get("ph") != "X" or not name.startswith(PREFIXES)
                    or ev.get("cat") == "gpu_user_annotation"):  # the GPU's copy of a CPU range
                continue
            ts, dur = ev.get("ts"), ev.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                continue
            prefix = PREFIXES[0] if name.startswith(PREFIXES[0]) else PREFIXES[1]
            out[prefix].append((ev.get("tid"), to_ns(ts), to_ns(dur), name))
    for v in out.values():
        v.sort(key=lambda s: s[1])
    return out


def trace_beside(path: str | os.PathLike) -> str | None:
    """The chrome trace that goes with a records path: the path itself where it is a torch.profiler
    trace, ``trace.json`` beside a ``pyprof run`` output's records; None where there is none."""
    from pyprof.parse.source import is_export

    path = os.fspath(path)
    if path == "-" or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        path = os.path.join(path, "records.dict")
    if path.lower().endswith((".json", ".json.gz")) and is_export(path):
        return path
    beside = os.path.join(os.path.dirname(path), "trace.json")
    return beside if os.path.isfile(beside) else None
