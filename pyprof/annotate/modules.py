"""Module attribution: a "mod" range around every ``nn.Module`` forward, named by its path.

While a consumer is present, ``nn.Module.__call__`` is replaced by :func:`_call`, which calls the
original inside the range (closed in a finally, so a raising forward closes it too); the original is
put back when the last consumer goes. Not PyTorch's global forward hooks: with any registered, every
``Module._call_impl`` leaves its fast path for the hook-dispatching slow path, about 1.6 us per module
call on top of the two hook calls, more than the whole range costs with the patch. Hooks registered on
modules, and global hooks registered later, run inside the range.

Hooks mode (:data:`_mode`): when someone else's global forward hooks are already registered as the
consumer appears, every module call takes the slow path anyway, so pyprof registers its own global
hook pair after them, keeping their order; once TorchDynamo is imported, as :func:`unseen_by_dynamo`
makes them, so that it compiles no frame of their own. ``pyprof run`` takes its deferred profiler
steps through :func:`add_before_call` for the same reason, not through a global hook.

A module called with no module open on its thread is a root; paths come from the root's
``named_modules()`` (cached per root, rebuilt once when a module is not found in it: one added, or
renamed, after the map was built). The root's own path is ``""``, except for a root called while an
autograd node runs (a checkpointed block that the backward pass re-runs) that had a path inside
another root when last called: it keeps that path, so a recompute is charged to the modules it
re-runs. A module that is not a descendant of the current root gets ``<parent path>.<ClassName>``.
The encoded text per (module, path) is cached: steady-state cost is two dict lookups, a push and a pop.

Installed only while a consumer is present (a Recorder, an NVTX tool, ``lazy=False``, or a
torch.profiler session, noticed by wrapping the functions torch.profiler calls as it starts and
stops, ``tp.PROFILER_HOOKS``), so lazy mode pays nothing per module. When the last consumer goes, the
ranges still open on the calling thread are closed (other threads' at their next module call, by a
generation counter). If another tool wrapped ``Module.__call__`` over pyprof's meanwhile, pyprof's
stays inside that wrapper, passing through until a consumer comes back (``_buried``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref

import torch
from torch import nn

from pyprof import markers
from pyprof import torch_private as tp
from pyprof.annotate import emit
from pyprof.annotate import ops as _ops
from pyprof.annotate.state import LOCK, S

_tls = threading.local()
_paths: dict = {}   # id(root) -> (weakref to root, {id(module): path})
_texts: dict = {}   # id(module) -> (weakref to module, path, text)
_ap = torch.autograd.profiler
_flags, _RECORDING = tp.FLAGS, tp.RECORDING  # ``_flags[_RECORDING]``: is torch.profiler recording?
_push = emit.push
_pop = emit.pop

_is_compiling = _ops._is_compiling


def _forget(table: dict, key: int):
    def cb(_ref):
        table.pop(key, None)
    return cb


def _path_map(root, rebuild: bool = False) -> dict:
    entry = _paths.get(id(root))
    if rebuild or entry is None or entry[0]() is not root:
        m = {id(mod): name for name, mod in root.named_modules(remove_duplicate=False)}
        _paths[id(root)] = (weakref.ref(root, _forget(_paths, id(root))), m)
        return m
    return entry[1]


def module_path(module, stack: list) -> str:
    if not stack:
        return ""
    root = stack[0][0]
    path = _path_map(root).get(id(module))
    if path is None:  # the tree may have changed since the map was built: rebuild once
        path = _path_map(root, rebuild=True).get(id(module))
        if path is None:
            parent = stack[-1][2]
            name = type(module).__name__
            return f"{parent}.{name}" if parent else name
    base = stack[0][2]  # the root's own path: "" unless it kept an earlier one
    return (f"{base}.{path}" if path else base) if base else path


def _text(module, path: str) -> str:
    entry = _texts.get(id(module))
    if entry is not None and entry[1] == path and entry[0]() is module:
        return entry[2]
    try:
        rep = module.extra_repr()
    except Exception:  # noqa: BLE001 - a user extra_repr that fails must not break forward
        rep = ""
    text = markers.encode(markers.make("mod", path=path, cls=type(module).__name__, repr=rep))
    with contextlib.suppress(TypeError):  # not weak-referenceable: not cached
        _texts[id(module)] = (weakref.ref(module, _forget(_texts, id(module))), path, text)
    return text


def _open(module) -> None:
    try:
        st = _tls.mods
    except AttributeError:
        st = _tls.mods = []
    gen = _gen[0]
    if st and st[-1][3] != gen:  # left open on this thread when the instrumentation was last removed
        while st:
            _pop(st.pop()[1])
    entry = _texts.get(id(module))
    if st:  # inlined module_path / _text cache hits: this runs around every module forward
        root = st[0][0]
        got = _paths.get(id(root))
        path = got[1].get(id(module)) if got is not None and got[0]() is root else None
        if path is None:
            path = module_path(module, st)
        elif st[0][2]:  # in the map of a root that kept its earlier path (see the module docstring)
            path = f"{st[0][2]}.{path}" if path else st[0][2]
    elif entry is not None and entry[1] and entry[0]() is module and _current_node() is not None:
        # a root called by a running autograd node (torch.utils.checkpoint re-running a block from the
        # backward pass) that was last called inside another root: the path it had there
        path = entry[1]
    else:  # a root: "" as in named_modules()
        path = ""
    if entry is not None and entry[1] == path and entry[0]() is module:
        text = entry[2]
    else:
        text = _text(module, path)
    st.append((module, _push(text, True), path, gen))


def _close(module) -> None:
    st = getattr(_tls, "mods", None)
    if not st:
        return
    if st[-1][0] is module:
        _pop(st.pop()[1])
        return
    # entries above this module's were left open in between (stale or unbalanced): close them too
    for i in range(len(st) - 2, -1, -1):
        if st[i][0] is module:
            while len(st) > i:
                _pop(st.pop()[1])
            break


_is_dynamo_compiling = _ops._is_dynamo_compiling
_current_node = tp.current_autograd_node
_orig_call = nn.Module.__call__  # replaced by _on() with what Module.__call__ is then


def _call(self, *args, **kwargs):
    """``nn.Module.__call__`` while a consumer is present: the original inside a "mod" range."""
    if _is_dynamo_compiling() or _mode[0] != "call":
        return _orig_call(self, *args, **kwargs)  # compile check first: see ops.make_wrapper
    if _before:
        _run_before(self, args)
    if (S.idle and not _flags[_RECORDING]) or _is_compiling():
        return _orig_call(self, *args, **kwargs)
    _open(self)
    try:
        return _orig_call(self, *args, **kwargs)
    finally:
        st = _tls.mods  # set by _open on this thread
        if st and st[-1][0] is self:  # the common case of _close, inline
            _pop(st.pop()[1])
        else:
            _close(self)


def _pre(module, inputs):
    """Global forward pre-hook (hooks mode, see module docstring). The compile check comes first:
    TorchDynamo folds it, so a compiled region reads no pyprof state and guards on none (reading the
    idle flag there made every profiler start or stop recompile the region)."""
    if _is_compiling():
        return None
    if _before:
        _run_before(module, inputs)
    if S.idle and not _flags[_RECORDING]:
        return None
    st = getattr(_tls, "mods", None)
    if st and tp.compiled_original(st[-1][0]) is module:
        # the user's module, called by torch.compile's OptimizedModule at the top of the compiled
        # region, where its hooks run uncompiled (unseen_by_dynamo): no range of its own, as where
        # Dynamo compiles the call (the patch, or hooks traced in), and as before Dynamo is imported
        return None
    _open(module)
    return None


def _post(module, inputs, output):
    """Global forward hook, ``always_call=True`` (hooks mode). Inside a compiled region it does nothing,
    as :func:`_pre` opened nothing there (TorchDynamo would otherwise trace the module stack); for a
    module :func:`_pre` opened nothing for, :func:`_close` finds nothing to close."""
    if _is_compiling():
        return None
    _close(module)
    return None


def _on() -> None:
    global _orig_call
    if _installed[0]:
        if _mode[0] != "hooks" or _global_hooks():
            return
        _off()  # the hooks that called for hooks mode are gone: the patch again
    if tp.global_module_hooks():  # keep their order: hooks mode
        _register_hooks()
        _mode[0] = "hooks"
        _installed[0] = True
        return
    cur = vars(nn.Module)["__call__"]
    if cur is _call or cur is _orig_call:  # a foreign wrapper (see _off) is gone again
        _buried[0] = False
    if cur is not _call and not _buried[0]:
        _orig_call = cur
        nn.Module.__call__ = _call
    _mode[0] = "call"
    _installed[0] = True


def _off() -> None:
    if _installed[0]:
        mode = _mode[0]
        _mode[0] = None  # first: _call passes through from here on, wherever it still is
        _installed[0] = False
        _gen[0] += 1
        while _handles:
            _handles.pop().remove()
        if mode == "call":
            if vars(nn.Module).get("__call__") is _call:
                nn.Module.__call__ = _orig_call
            elif not _buried[0]:
                # someone wrapped Module.__call__ over ours: theirs calls ours, which stays in the
                # chain (passing through while not installed) and is reused as it is by the next _on()
                _buried[0] = True
    st = getattr(_tls, "mods", None)
    while st:
        _pop(st.pop()[1])


def _pass(*_args) -> None:
    """What TorchDynamo traces in place of a global module hook of pyprof's: nothing."""


def unseen_by_dynamo(hook):
    """``hook`` as a global module hook TorchDynamo neither compiles nor traces (imports TorchDynamo).

    Dynamo meets a global hook two ways. The hooks of a compiled module whose ``forward`` is the user's
    run frame by frame before its compiled forward, and Dynamo would compile each such frame into a
    graphless one of its own (a guarded cache lookup per call, a frame the user's program has not):
    ``torch.compiler.disable`` runs the hook there uncompiled, and Dynamo counts no frame for its
    wrapper (torch's own code). A submodule's call inside a compiled forward, where Dynamo inlines
    the hooks: ``tp.DYNAMO_INLINE`` (the attribute Dynamo unwraps, as for ``torch.compile``'s own
    wrappers) hands it :func:`_pass` to trace, so the disabled wrapper breaks no graph and the hook's
    state is neither traced nor guarded on."""
    wrapped = torch.compiler.disable(hook)
    try:
        setattr(wrapped, tp.DYNAMO_INLINE, _pass)
    except (AttributeError, TypeError):
        return hook
    return wrapped


_dynamo_hooks: list = []  # (pre, post) as unseen_by_dynamo makes them, once TorchDynamo is imported


def _register_hooks() -> None:
    """Register pyprof's global hook pair (hooks mode): :func:`_pre` and :func:`_post` themselves until
    TorchDynamo is imported (wrapping them imports it, seconds), then as :func:`unseen_by_dynamo`
    makes them (:func:`swap` re-registers them when pyprof's finder imports it)."""
    from torch.nn.modules import module as mm

    while _handles:
        _handles.pop().remove()
    if not _dynamo_hooks and tp.dynamo_imported():
        _dynamo_hooks.extend((unseen_by_dynamo(_pre), unseen_by_dynamo(_post)))
    pre, post = _dynamo_hooks or (_pre, _post)
    _handles.append(mm.register_module_forward_pre_hook(pre))
    _handles.append(mm.register_module_forward_hook(post, always_call=True))


def swap(installed: bool) -> None:
    """Put the original ``nn.Module.__call__`` in place (``installed=False``) or :func:`_call` again
    (``True``) where :func:`_call` is what is installed (see :mod:`pyprof.annotate.torchtables`:
    TorchDynamo keeps the ``Module.__call__`` it finds at import as the one it may skip). In hooks
    mode, TorchDynamo just imported (``True``): the hooks again, made unseen by it."""
    if _mode[0] == "call" and not _buried[0]:
        nn.Module.__call__ = _call if installed else _orig_call
    elif installed and _mode[0] == "hooks" and not _dynamo_hooks and tp.dynamo_imported():
        _register_hooks()


def sync() -> None:
    """Patch ``nn.Module.__call__`` when a consumer is present, restore it when none is. In hooks mode
    (global module hooks already registered, as under ``pyprof run``) the hooks stay registered while
    :func:`pyprof.init` is on: every module call takes torch's hook path anyway, and a hook set that
    changed when a profiler starts would make TorchDynamo recompile compiled regions in the profile."""
    with LOCK:
        if _enabled[0] and (not S.idle or _flags[_RECORDING] or _global_hooks() or _before):
            _on()
        else:
            _off()


_before: list = []  # callbacks of add_before_call


def add_before_call(fn) -> bool:
    """Call ``fn(module, args)`` (the call's positional arguments) at every eager module call, before
    the module's range opens (never inside a compiled region, nor while a compile runs), with or
    without a profiler recording; ``fn`` must be cheap. False, and nothing registered, where the
    module instrumentation is not enabled (no ``pyprof.init()``, or ``init(modules=False)``)."""
    with LOCK:
        if not _enabled[0]:
            return False
        if fn not in _before:
            _before.append(fn)
    sync()
    return True


def remove_before_call(fn) -> None:
    with LOCK:
        if fn in _before:
            _before.remove(fn)
    sync()


def _run_before(module, args) -> None:
    for fn in tuple(_before):
        fn(module, args)


def _global_hooks() -> bool:
    """Whether someone else's global module forward hooks are registered (pyprof's own not counted)."""
    ours = (_pre, _post, *_dynamo_hooks)
    return any(h not in ours for h in tp.global_module_hooks())


_enabled = [False]
_installed = [False]  # _call opens ranges only while True
_mode: list = [None]  # "call" (Module.__call__ patched) or "hooks" (global hooks), while installed
_handles: list = []   # the global hook handles in hooks mode
_buried = [False]     # _call is inside a foreign wrapper of Module.__call__ (see _off)
_gen = [0]  # bumped when the patch goes: entries of other threads older than this are stale
_prof_patched: list = []


def _wrap_prof(orig):
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        r = orig(*args, **kwargs)
        sync()
        return r

    return wrapper


def install() -> None:
    _enabled[0] = True
    for name in tp.PROFILER_HOOKS:
        orig = getattr(_ap, name, None)
        if orig is not None:
            setattr(_ap, name, _wrap_prof(orig))
            _prof_patched.append((name, orig))
    if sync not in S.listeners:
        S.listeners.append(sync)
    sync()


def uninstall() -> None:
    _enabled[0] = False
    _before.clear()
    while _prof_patched:
        name, orig = _prof_patched.pop()
        setattr(_ap, name, orig)
    if sync in S.listeners:
        S.listeners.remove(sync)
    _off()
