"""Module attribution: a "mod" range around every ``nn.Module`` forward, named by its path.

Uses PyTorch's global forward pre-hook and forward hook (``register_module_forward_pre_hook`` /
``register_module_forward_hook(always_call=True)``, so the range closes even when forward raises),
with removable handles; no Module class is patched. A module called with no module open on its
thread is a root; paths come from the root's ``named_modules()`` (cached per root in a
``WeakKeyDictionary``, refreshed once when a module is not found, e.g. added after the first
call). The root's own path is ``""`` as in ``named_modules()``; a module that is not a descendant of
the current root (called from inside it) gets ``<parent path>.<ClassName>``. The encoded text per
(module, path) is cached, so steady-state cost is a dict lookup, a push and a pop.

The global hooks are installed only while a consumer is present (a Recorder, an NVTX tool,
``lazy=False``, or a torch.profiler session, noticed by wrapping torch's
``torch.autograd.profiler._run_on_profiler_start/_stop``): with a global hook registered, every
``nn.Module.__call__`` takes PyTorch's slow path (measured: about twice the cost of a small module
call), which lazy mode must not pay. When the last consumer goes, the module ranges still open on
the calling thread are closed.
"""

from __future__ import annotations

import threading
import weakref

import torch

from pyprof import markers
from pyprof.annotate import emit
from pyprof.annotate.state import S

_tls = threading.local()
_paths: dict = {}   # id(root) -> (weakref to root, {id(module): path})
_texts: dict = {}   # id(module) -> (weakref to module, path, text)
_handles: list = []
_ap = torch.autograd.profiler

try:
    from torch.compiler import is_compiling as _is_compiling
except ImportError:  # pragma: no cover
    def _is_compiling() -> bool:
        return False


def _stack() -> list:
    try:
        return _tls.mods
    except AttributeError:
        st = _tls.mods = []
        return st


def _forget(table: dict, key: int):
    def cb(_ref):
        table.pop(key, None)
    return cb


def _path_map(root) -> dict:
    entry = _paths.get(id(root))
    if entry is None or entry[0]() is not root:
        m = {id(mod): name for name, mod in root.named_modules(remove_duplicate=False)}
        _paths[id(root)] = (weakref.ref(root, _forget(_paths, id(root))), m)
        return m
    return entry[1]


def module_path(module, stack: list) -> str:
    if not stack:
        return ""
    root = stack[0][0]
    path = _path_map(root).get(id(module))
    if path is None:
        _paths.pop(id(root), None)  # the tree changed since the map was built: rebuild once
        path = _path_map(root).get(id(module))
        if path is None:
            parent = stack[-1][2]
            name = type(module).__name__
            path = f"{parent}.{name}" if parent else name
    return path


def _text(module, path: str) -> str:
    entry = _texts.get(id(module))
    if entry is not None and entry[1] == path and entry[0]() is module:
        return entry[2]
    try:
        rep = module.extra_repr()
    except Exception:  # noqa: BLE001 - a user extra_repr that fails must not break forward
        rep = ""
    text = markers.encode(markers.make("mod", path=path, cls=type(module).__name__, repr=rep))
    try:
        _texts[id(module)] = (weakref.ref(module, _forget(_texts, id(module))), path, text)
    except TypeError:  # not weak-referenceable: do not cache
        pass
    return text


def _pre(module, inputs):
    if (S.idle and not _ap._is_profiler_enabled) or _is_compiling():
        return None
    st = _stack()
    gen = _gen[0]
    if st and st[-1][3] != gen:  # left open on this thread when the hooks were last removed
        while st:
            emit.pop(st.pop()[1])
    path = module_path(module, st)
    st.append((module, emit.push(_text(module, path), cache=True), path, gen))
    return None


def _post(module, inputs, output):
    try:
        st = _tls.mods
    except AttributeError:
        return None
    if not st:
        return None
    if st[-1][0] is module:
        emit.pop(st.pop()[1])
        return None
    # entries above this module's belong to forwards that raised in between: close them too
    for i in range(len(st) - 2, -1, -1):
        if st[i][0] is module:
            while len(st) > i:
                emit.pop(st.pop()[1])
            break
    return None


def _hooks_on() -> None:
    from torch.nn.modules import module as m

    if not _handles:
        _handles.append(m.register_module_forward_pre_hook(_pre))
        _handles.append(m.register_module_forward_hook(_post, always_call=True))


def _hooks_off() -> None:
    if _handles:
        _gen[0] += 1
    while _handles:
        _handles.pop().remove()
    st = getattr(_tls, "mods", None)
    while st:
        emit.pop(st.pop()[1])


def sync() -> None:
    """Install the hooks when a consumer is present, remove them when none is."""
    if _enabled[0] and (not S.idle or _ap._is_profiler_enabled):
        _hooks_on()
    else:
        _hooks_off()


_enabled = [False]
_gen = [0]  # bumped when the hooks go: entries of other threads older than this are stale
_prof_patched: list = []


def _wrap_prof(orig):
    def wrapper(*args, **kwargs):
        r = orig(*args, **kwargs)
        sync()
        return r

    wrapper.__wrapped__ = orig
    wrapper.__name__ = getattr(orig, "__name__", "wrapper")
    return wrapper


def install() -> None:
    _enabled[0] = True
    for name in ("_run_on_profiler_start", "_run_on_profiler_stop"):
        orig = getattr(_ap, name, None)
        if orig is not None:
            setattr(_ap, name, _wrap_prof(orig))
            _prof_patched.append((name, orig))
    if sync not in S.listeners:
        S.listeners.append(sync)
    sync()


def uninstall() -> None:
    _enabled[0] = False
    while _prof_patched:
        name, orig = _prof_patched.pop()
        setattr(_ap, name, orig)
    if sync in S.listeners:
        S.listeners.remove(sync)
    _hooks_off()
