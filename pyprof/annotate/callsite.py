"""The user's call site of an op: the first Python frame outside torch and pyprof.

Walks ``f_back`` from the wrapper's caller (never ``traceback.extract_stack``). Per code object it
caches whether the code belongs to torch/pyprof (by its file name) and the formatted
``file:line:function`` strings per instruction offset (``f_lasti``). The caches are keyed by
``id(code)`` and hold the code object (so the id cannot be reused while the entry lives), because
hashing a code object hashes its whole content (0.1-0.5 us) and ``f_lineno`` decodes the line
table (about 0.4 us); both were most of the per-op cost of this lookup. File names are made
relative to the current directory when they lie under it, so payloads stay short.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

import orjson
import torch

# torch's folder and pyprof's (two levels above this file)
_INTERNAL_DIRS = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                  os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
_codes: dict = {}  # id(code) -> [code, internal?, {f_lasti: "file:line:func"}, {f_lasti: ('["..."]', (s,))}]
_getframe = sys._getframe


def _is_internal(code) -> bool:
    fn = code.co_filename
    if not os.path.isabs(fn) and not fn.startswith("<"):
        fn = os.path.abspath(fn)
    return fn.startswith(_INTERNAL_DIRS) or fn.startswith("<frozen")


def _entry(code) -> list:
    e = _codes.get(id(code))
    if e is None or e[0] is not code:
        e = _codes[id(code)] = [code, _is_internal(code), {}, {}]
    return e


def _site(e: list, f) -> str:
    lasti = f.f_lasti
    s = e[2].get(lasti)
    if s is None:
        code = e[0]
        fn = code.co_filename
        try:
            rel = os.path.relpath(fn)
            if not rel.startswith(".."):
                fn = rel
        except ValueError:
            pass
        s = e[2][lasti] = f"{fn}:{f.f_lineno}:{code.co_name}"
    return s


def _user_frame(skip: int):
    """The first frame outside torch/pyprof, ``skip`` frames above the caller's caller, and its entry."""
    try:
        f: FrameType | None = _getframe(skip + 1)
    except ValueError:
        return None, None
    codes = _codes
    while f is not None:
        code = f.f_code
        e = codes.get(id(code))
        if e is None or e[0] is not code:
            e = _entry(code)
        if not e[1]:
            return f, e
        f = f.f_back
    return None, None


def call_site(skip: int = 2, depth: int = 1) -> list[str]:
    """Up to ``depth`` user frames (innermost first), starting ``skip`` frames above the caller."""
    try:
        f: FrameType | None = _getframe(skip)
    except ValueError:
        return []
    out: list[str] = []
    while f is not None:
        e = _entry(f.f_code)
        if not e[1]:
            out.append(_site(e, f))
            if len(out) >= depth:
                break
        f = f.f_back
    return out


def _one(e: list, f) -> tuple:
    r = e[3].get(f.f_lasti)
    if r is None:
        s = _site(e, f)
        r = e[3][f.f_lasti] = (orjson.dumps([s]).decode(), (s,))
    return r


def call_site_json(skip: int = 2, depth: int = 1) -> str:
    """:func:`call_site` as the JSON text of the payload's ``trace`` list (cached for ``depth == 1``)."""
    if depth == 1:
        f, e = _user_frame(skip)
        if f is None:
            return "[]"
        r = e[3].get(f.f_lasti)
        if r is None:
            r = _one(e, f)
        return r[0]
    return orjson.dumps(call_site(skip + 1, depth)).decode()
