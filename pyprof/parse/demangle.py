"""C++ symbol demangling (nvprof stores only mangled kernel names) and short names from long ones.

Uses libstdc++'s ``abi::__cxa_demangle`` through ctypes, cached; falls back to the raw name where
the library or the symbol cannot be demangled (never an error: a name is still a name).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _lib():
    for name in (ctypes.util.find_library("stdc++"), "libstdc++.so.6", "libc++.so.1"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                       ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        return fn, libc.free
    return None


@functools.lru_cache(maxsize=1 << 16)
def demangle(name: str | None) -> str | None:
    """``_ZN2at6native...`` -> ``void at::native::...``; other names unchanged."""
    if not name or not name.startswith("_Z"):
        return name
    lib = _lib()
    if lib is None:
        return name
    fn, free = lib
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)


@functools.lru_cache(maxsize=1 << 16)
def short_name(long_name: str | None) -> str | None:
    """Base name of a demangled signature: ``void ns::kern<4, float>(int, float*)`` -> ``kern``."""
    if not long_name:
        return long_name
    s = long_name
    # drop the parameter list: the last top-level '(' ... ')'
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        depth += (s[i] == ")") - (s[i] == "(")
        if depth == 0 and s[i] == "(":
            s = s[:i]
            break
    # drop template arguments
    out, depth = [], 0
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(c)
    s = "".join(out).strip().split(" ")[-1].split("::")[-1]  # (less the return type and the scope)
    return s or long_name
