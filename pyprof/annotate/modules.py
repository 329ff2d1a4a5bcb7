"""Module attribution: a "mod" range around every ``nn.Module`` forward, named by its path.

Uses PyTorch's global forward pre-hook and forward hook (``register_module_forward_pre_hook`` /
``register_module_forward_hook(always_call=True)``, so the range closes even when forward raises),
with removable handles; no Module class is patched. A module called with no module open on its
thread is a root; paths come from the root's ``named_modules()`` (cached per root in a
``WeakKeyDictionary``, refreshed once when a module is not found, e.g. added after the first
call). The root's own path is ``""`` as in ``named_modules()``; a module that is not a descendant of
the current root (called from inside it) gets ``<parent path>.<ClassName>``. The encoded text per
(module, path) is cached, so steady-state cost is a dict lookup, a push and a pop.
"""

from __future__ import annotations

import threading
import weakref

import torch

from pyprof import markers
from pyprof.annotate import emit
from pyprof.annotate.state import S

_tls = threading.local()
_paths: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # root -> {id(module): path}
_texts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # module -> (path, text)
_handles: list = []
_ap = torch.autograd.profiler

try:
    from torch.compiler import is_compiling as _is_compiling
except ImportError:  # pragma: no cover
    def _is_compiling() -> bool:
        return False


def _stack() -> list:
    st = getattr(_tls, "mods", None)
    if st is None:
        st = _tls.mods = []
    return st


def _path_map(root) -> dict:
    m = _paths.get(root)
    if m is None:
        m = {id(mod): name for name, mod in root.named_modules(remove_duplicate=False)}
        _paths[root] = m
    return m


def module_path(module, stack: list) -> str:
    if not stack:
        return ""
    root = stack[0][0]
    m = _path_map(root)
    path = m.get(id(module))
    if path is None:
        _paths.pop(root, None)
        path = _path_map(root).get(id(module))
        if path is None:
            parent = stack[-1][2]
            name = type(module).__name__
            path = f"{parent}.{name}" if parent else name
    return path


def _text(module, path: str) -> str:
    cached = _texts.get(module)
    if cached is not None and cached[0] == path:
        return cached[1]
    try:
        rep = module.extra_repr()
    except Exception:  # noqa: BLE001 - a user extra_repr that fails must not break forward
        rep = ""
    text = markers.encode(markers.make("mod", path=path, cls=type(module).__name__, repr=rep))
    try:
        _texts[module] = (path, text)
    except TypeError:
        pass
    return text


def _pre(module, inputs):
    st = _stack()
    if (S.idle and not _ap._is_profiler_enabled) or _is_compiling():
        st.append((module, None, ""))
        return None
    path = module_path(module, st)
    st.append((module, emit.push(_text(module, path), cache=True), path))
    return None


def _post(module, inputs, output):
    st = _stack()
    # pop down to this module's entry (entries above it belong to forwards that raised in between)
    for i in range(len(st) - 1, -1, -1):
        if st[i][0] is module:
            while len(st) > i:
                _, tok, _ = st.pop()
                if tok is not None:
                    emit.pop(tok)
            break
    return None


def install() -> None:
    from torch.nn.modules import module as m

    _handles.append(m.register_module_forward_pre_hook(_pre))
    _handles.append(m.register_module_forward_hook(_post, always_call=True))


def uninstall() -> None:
    while _handles:
        _handles.pop().remove()
