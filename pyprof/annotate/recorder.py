"""An in-process NVTX consumer: records every range pyprof emits while it is active.

``with Recorder() as rec:`` makes payloads be built (it counts as a consumer, like nsys) and collects
each range opened through :mod:`pyprof.annotate.emit` on any thread (the autograd thread included):
its text, domain, thread, depth, enclosing texts and start/end times. Tests use it to check payloads
without Nsight; the cost models use :meth:`Recorder.payloads` to price ops per module.

Ranges opened by code that calls NVTX directly (``nvtx.push_range("layer:x")``) are not seen: only
what pyprof emits (ops, modules, backward nodes, optimizer steps, ``pyprof.range``).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import Any

from pyprof import markers
from pyprof.annotate.state import LOCK, S


@dataclass
class RecordedRange:
    """One range: ``parents`` are the texts of the ranges enclosing it on the same thread, outermost first.

    ``tid`` is the OS thread id (``threading.get_native_id()``, what Nsight records); times are
    ``time.perf_counter_ns()``; ``domain`` is pyprof's NVTX domain."""

    text: str
    domain: str | None
    tid: int
    depth: int
    parents: tuple[str, ...]
    start_ns: int
    end_ns: int = -1  # -1 while still open


class Recorder:
    """Context manager collecting pyprof ranges (see module docstring). Reusable, not re-entrant."""

    def __init__(self) -> None:
        self.ranges: list[RecordedRange] = []
        self._stacks: dict[int, list[RecordedRange]] = {}
        self._active = False

    # -- consumer protocol used by pyprof.annotate.emit (called with the GIL; lists are thread-safe enough)
    def _push(self, text: str) -> RecordedRange:
        tid = threading.get_native_id()
        stack = self._stacks.setdefault(tid, [])
        r = RecordedRange(text, markers.DOMAIN, tid, len(stack), tuple(p.text for p in stack),
                          time.perf_counter_ns())
        stack.append(r)
        self.ranges.append(r)
        return r

    def _pop(self, r: RecordedRange) -> None:
        r.end_ns = time.perf_counter_ns()
        stack = self._stacks.get(r.tid)
        if stack and stack[-1] is r:
            stack.pop()
        elif stack and r in stack:  # out of order close: drop it and anything opened above it
            del stack[stack.index(r):]

    # -- activation
    def start(self) -> Recorder:
        with LOCK:
            if not self._active:
                self._active = True
                S.recorders = S.recorders + (self,)
                S.refresh()
        return self

    def stop(self) -> None:
        with LOCK:
            if self._active:
                self._active = False
                S.recorders = tuple(r for r in S.recorders if r is not self)
                S.refresh()

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading
    def payloads(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Decoded pyprof payloads (optionally of one kind), in start order, each with ``"_parents"``:
        the decoded pyprof payloads enclosing it on its thread, outermost first."""
        dec = functools.lru_cache(maxsize=None)(markers.decode)  # (a text decoded once per call)
        out = []
        for r in self.ranges:
            if not markers.is_pyprof(r.text):
                continue
            d = dec(r.text)
            if kind is not None and d.get("k") != kind:
                continue
            out.append({**d, "_parents": [dec(p) for p in r.parents if markers.is_pyprof(p)]})
        return out

    def texts(self) -> list[str]:
        return [r.text for r in self.ranges]

    def open_ranges(self) -> list[RecordedRange]:
        """Ranges never closed (should be empty after balanced code)."""
        return [r for r in self.ranges if r.end_ns < 0]
