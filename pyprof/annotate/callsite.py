"""The user's call site of an op: the first Python frame outside torch and pyprof.

Walks ``f_back`` from the wrapper's caller (never ``traceback.extract_stack``), with two caches:
whether a code object belongs to torch/pyprof (by its file name), and the formatted
``file:line:function`` string per (code object, line). File names are made relative to the current
directory when they lie under it, so payloads stay short.
"""

from __future__ import annotations

import os
import sys

import torch

import pyprof

_INTERNAL_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, pyprof)
)
_internal: dict = {}   # code object -> bool
_sites: dict = {}      # (code object, lineno) -> "file:line:func"
_one: dict = {}        # (code object, lineno) -> ("file:line:func",) for depth 1
_getframe = sys._getframe


def _is_internal(code) -> bool:
    fn = code.co_filename
    r = fn.startswith(_INTERNAL_DIRS) or fn.startswith("<frozen")
    if not r and not os.path.isabs(fn) and not fn.startswith("<"):
        r = os.path.abspath(fn).startswith(_INTERNAL_DIRS)
    _internal[code] = r
    return r


def _fmt(code, line: int) -> str:
    fn = code.co_filename
    try:
        rel = os.path.relpath(fn)
        if not rel.startswith(".."):
            fn = rel
    except ValueError:
        pass
    s = f"{fn}:{line}:{code.co_name}"
    _sites[(code, line)] = s
    return s


def call_site(skip: int = 2, depth: int = 1) -> list[str] | tuple[str, ...]:
    """Up to ``depth`` user frames (innermost first), starting ``skip`` frames above the caller.

    Returns a cached tuple for ``depth == 1`` (do not mutate the result)."""
    try:
        f = _getframe(skip)
    except ValueError:
        return ()
    internal = _internal
    if depth == 1:
        while f is not None:
            code = f.f_code
            inside = internal.get(code)
            if inside is None:
                inside = _is_internal(code)
            if not inside:
                key = (code, f.f_lineno)
                r = _one.get(key)
                if r is None:
                    s = _sites.get(key)
                    r = _one[key] = (s if s is not None else _fmt(code, key[1]),)
                return r
            f = f.f_back
        return ()
    out: list[str] = []
    while f is not None:
        code = f.f_code
        inside = internal.get(code)
        if inside is None:
            inside = _is_internal(code)
        if not inside:
            line = f.f_lineno
            s = _sites.get((code, line))
            out.append(s if s is not None else _fmt(code, line))
            if len(out) >= depth:
                break
        f = f.f_back
    return out
