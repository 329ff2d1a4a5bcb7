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


def call_site(skip: int = 2, depth: int = 1) -> list[str]:
    """Up to ``depth`` user frames (innermost first), starting ``skip`` frames above the caller."""
    try:
        f = _getframe(skip)
    except ValueError:
        return []
    out: list[str] = []
    internal = _internal
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
