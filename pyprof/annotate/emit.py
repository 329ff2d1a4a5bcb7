"""The single point where pyprof opens and closes ranges, and the consumers it feeds.

Every range pyprof emits (op, module, backward node, optimizer step, user range) goes through
:func:`push` / :func:`pop` here, which hand the text to whichever consumers are present:

* an NVTX tool (Nsight Systems): a push/pop range in the NVTX domain :data:`pyprof.markers.DOMAIN`
  (whether a tool is attached, and who pushes the range: :func:`nvtx_attached`; a range that goes to
  the tool alone from the C extension never enters this module). Op messages are unique (they carry an
  instance id), so the ``nvtx`` package registers them per call, without its unbounded message cache.
* an active torch.profiler (Kineto) session: the same text becomes a ``record_function`` range
  (:mod:`pyprof.torch_private`'s ``record_function_enter`` / ``record_function_exit``), named
  ``markers.to_profiler_name(text)`` (Kineto writes names into the chrome trace unescaped, so the
  quotes are percent-encoded; ``markers.from_profiler_name`` gives the marker back).
* every active :class:`~pyprof.annotate.recorder.Recorder` (an in-process consumer used by tests and
  by the cost models).

:func:`push` returns a token saying what it did; :func:`pop` undoes exactly that, so a consumer that
appears or disappears between the two (a profiler started inside an op) never unbalances a stack.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from pyprof import markers
from pyprof import torch_private as tp
from pyprof.annotate import fastpath
from pyprof.annotate.state import S

_prof_enabled, _prof_type, _KINETO = tp.profiler_enabled, tp.profiler_type, tp.KINETO
_flags, _RECORDING = tp.FLAGS, tp.RECORDING  # ``_flags[_RECORDING]``: is torch.profiler recording?
_enter, _exit = tp.record_function_enter, tp.record_function_exit

_domain: Any = None          # the real nvtx.Domain when a tool is attached, else None
_EventAttributes: Any = None
_RegisteredString: Any = None
_native: Any = None          # the C extension, pushing NVTX ranges itself (when built; see nvtx_attached)


def nvtx_attached() -> bool:
    """True when an NVTX tool (nsys) enabled pyprof's NVTX domain in this process.

    The ``nvtx`` package answers: its domain is a ``DummyDomain`` unless the NVTX injection library
    (``NVTX_INJECTION64_PATH``, set by nsys) was loaded and enabled it. Where the C extension was built
    (:func:`pyprof.annotate.fastpath.extension`), it pushes the ranges itself through its own copy of
    NVTX v3 (an ASCII-type message, no Python objects per range); else they go through the ``nvtx``
    package (a registered string per message)."""
    global _domain, _EventAttributes, _RegisteredString, _native
    try:
        import nvtx
        from nvtx._lib.lib import DummyDomain, EventAttributes, RegisteredString
    except Exception:  # noqa: BLE001 - an nvtx build without these internals: no NVTX output
        return False
    domain = nvtx.get_domain(markers.DOMAIN)
    if isinstance(domain, DummyDomain) or not hasattr(domain, "handle"):
        return False
    _domain, _EventAttributes, _RegisteredString = domain, EventAttributes, RegisteredString
    ext = fastpath.extension()
    if ext is not None:
        ext.nvtx_domain(markers.DOMAIN)
    _native = ext
    return True


def consumer_active() -> bool:
    """Is anybody there to read a marker now: a consumer of :data:`S`, or a torch.profiler (Kineto)
    session recording (not emit_nvtx / legacy profilers)? Payloads are only built when this is true."""
    return not S.idle or (_flags[_RECORDING] and _prof_enabled() and _prof_type() == _KINETO)


#: The token of a range nobody consumed (push had nowhere to send it); pop takes it and does nothing.
NOTHING = (False, None, (), ())
#: The token of a range that went to the NVTX tool alone (the C extension hands it out too).
NVTX_ONLY = (True, None, (), ())


def push(text: str, cache: bool = False):
    """Open a range with message ``text`` on this thread in every present consumer; returns a token.

    ``cache`` registers the NVTX string once (for repeated texts: module, backward-node markers).
    """
    nv = False
    if S.nvtx and _domain is not None:
        if _native is not None:
            _native.nvtx_push(text)
        else:
            rs = _domain.get_registered_string(text) if cache else _RegisteredString(_domain.handle, text)
            _domain.push_range(_EventAttributes(_domain, rs, None, None, None))
        nv = True
    rf = None
    if _flags[_RECORDING] and _prof_enabled() and _prof_type() == _KINETO:
        rf = _enter(markers.to_profiler_name(text), None)
    recs = S.recorders
    if recs:
        if len(recs) == 1:
            return (nv, rf, recs, (recs[0]._push(text),))
        return (nv, rf, recs, tuple(r._push(text) for r in recs))
    if rf is not None:
        return (nv, rf, (), ())
    return NVTX_ONLY if nv else NOTHING


def pop(token) -> None:
    """Close the range opened by :func:`push` (same thread), in the consumers it was opened in."""
    nv, rf, recs, rtoks = token
    if recs:
        for r, t in zip(recs, rtoks, strict=True):
            r._pop(t)
    if rf is not None:
        _exit(rf)
    if nv and _domain is not None:
        if _native is not None:
            _native.nvtx_pop()
        else:
            _domain.pop_range()


_tls = threading.local()


class Range:
    """``with Range(text):`` / ``@Range(text)``: a push/pop pair with try/finally (used by pyprof.range)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __enter__(self):
        tok = push(self.text, cache=True) if consumer_active() else NOTHING
        if not hasattr(_tls, "stack"):
            _tls.stack = []
        _tls.stack.append(tok)
        return self

    def __exit__(self, *exc):
        pop(_tls.stack.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with Range(self.text):
                return fn(*args, **kwargs)

        return inner

