"""``pyprof.init()``: instrument PyTorch so every op, module, backward node and optimizer step
emits an NVTX range carrying a pyprof marker (see :mod:`pyprof.markers` for the payload).

Its pieces, one module each (patch, ops, describe, callsite, autocast, modules, backward, optim,
inductor, emit...), are mapped in docs/design.md ("Layout", ``annotate/``) and explained in their own
docstrings.

Lazy mode (default): no payload is built while nobody consumes markers (no NVTX tool attached, no
torch.profiler session, no Recorder: :mod:`~pyprof.annotate.emit`). Then each wrapper costs two
attribute reads before the original runs, and ``nn.Module.__call__`` is not even wrapped (it is when a
consumer appears).

Compiled and traced code: TorchDynamo traces the original in each wrapper's place
(``torch_private.DYNAMO_INLINE``, see :mod:`~pyprof.annotate.ops`), and its tables of torch functions are
built from the originals (:mod:`~pyprof.annotate.torchtables`), so ``torch.compile`` captures the same
graphs, breaks and recompiles with ``init()`` as without; compiled regions run unmarked.
``torch.jit.trace`` takes the plain path; ``torch.jit.script`` compiles the originals (see
:mod:`~pyprof.annotate.patch`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from pyprof import markers, probes

probes.require()  # before the modules below read torch's private names (pyprof/probes.py)

from pyprof.annotate import backward as _backward  # noqa: E402
from pyprof.annotate import emit, inductor, optim, patch, torchtables  # noqa: E402
from pyprof.annotate import modules as _modules  # noqa: E402
from pyprof.annotate.state import LOCK, S  # noqa: E402
from pyprof.errors import UsageError  # noqa: E402
from pyprof.probes import TORCH_FLOOR, check_torch  # noqa: E402,F401  (re-exported)

__all__ = ["init", "deinit", "is_initialized", "wrap", "range", "step", "add_step_callback",
           "remove_step_callback", "consumer_active"]

_step_callbacks: list[Callable[[], Any]] = []


def _after_fork_in_child() -> None:
    """A forked child (DataLoader worker) does not inherit the parent's Recorders."""
    if S.recorders:
        S.recorders = ()
        S.refresh()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_wrapped: list = []  # (owner, name, original attribute, had_own) for pyprof.wrap


def init(*, functions: bool = True, methods: bool = True, functional: bool = True,
         modules: bool = True, backward: bool = True, optimizer: bool = True, extra: bool = True,
         nested: bool = False, stack_depth: int = 1, lazy: bool = True, **unknown: Any) -> None:
    """Instrument PyTorch. A second call (before :func:`deinit`) is a no-op.

    Categories: ``functions`` (torch.*, and ``torch.cuda.CUDAGraph.replay``: a hand-replayed graph's
    kernels take its op), ``methods`` (torch.Tensor), ``functional``
    (torch.nn.functional), ``extra`` (torch.linalg/fft/special), ``modules`` (module ranges),
    ``backward`` (per-node backward ranges and ``seq``), ``optimizer`` (optimizer-step ranges).
    ``nested=True`` emits ops called inside ops too. ``stack_depth`` user frames are kept in
    ``trace``. ``lazy=False`` builds payloads even when no consumer is attached (for tools that read
    NVTX some other way, and for measuring the payload cost).
    Raises :class:`~pyprof.errors.UsageError` for an unknown option or a bad value, and where torch is
    older than :data:`TORCH_FLOOR`.
    """
    if unknown:
        raise UsageError(f"unknown pyprof.init() option(s): {', '.join(sorted(unknown))}",
                         "see help(pyprof.annotate.init) for the options")
    if not isinstance(stack_depth, int) or isinstance(stack_depth, bool) or stack_depth < 1:
        raise UsageError(f"pyprof.init(stack_depth={stack_depth!r}) must be an int >= 1",
                         "pass stack_depth=1 for the call site only")
    probes.require()
    with LOCK:
        if S.initialized:
            return
        S.nested = bool(nested)
        S.stack_depth = stack_depth
        S.backward = bool(backward)
        S.always = not lazy
        S.nvtx = emit.nvtx_attached()
        try:
            torchtables.prime(_swap)
            patch.patch_namespaces(functions=functions, methods=methods, functional=functional,
                                   extra=extra)
            if modules:
                _modules.install()
            if backward:
                _backward.install()
            if optimizer:
                optim.install()
            inductor.install()  # compiled kernels' origins (module, aten ops), recorded as Inductor compiles
        except BaseException:
            _undo()
            raise
        S.initialized = True
        S.refresh()


def _swap(installed: bool) -> None:
    """The originals back in place (False) or pyprof's wrappers again (True): see torchtables."""
    with LOCK:
        patch.swap(installed)
        _modules.swap(installed)


def _undo() -> None:
    torchtables.uninstall()
    patch.unpatch_all()
    _modules.uninstall()
    _backward.uninstall()
    optim.uninstall()
    inductor.uninstall()


def deinit() -> None:
    """Restore every original function, remove every hook, and undo every :func:`wrap`."""
    with LOCK:
        _undo()
        while _wrapped:
            owner, name, orig, had_own = _wrapped.pop()
            patch.restore(owner, name, orig, had_own)
        S.initialized = False
        S.nvtx = False
        S.always = False
        S.refresh()


def is_initialized() -> bool:
    return S.initialized


def consumer_active() -> bool:
    """True when markers are being built now (an NVTX tool, torch.profiler, a Recorder, or lazy=False)."""
    return emit.consumer_active()


def wrap(obj: Any, name: str, *, op: str | None = None, composite: bool = True) -> None:
    """Instrument ``obj.name``: a custom autograd Function's ``forward``/``backward``, a module's
    ``forward``, a C-extension function... Its calls emit op ranges with namespace ``"wrap"`` and op
    ``<obj name>.<name>`` (or ``op``). ``composite=True`` (default) lets the instrumented torch ops it
    calls emit their own ranges inside it (they are what the cost models price). Undone by
    :func:`deinit`; wrapping twice is a no-op. Works before or after :func:`init`.
    """
    import inspect

    from pyprof.annotate.ops import OpMeta, make_wrapper

    try:
        static = inspect.getattr_static(obj, name)
    except AttributeError:
        raise UsageError(f"pyprof.wrap: {obj!r} has no attribute {name!r}",
                         "pass the object that owns the callable and its attribute name") from None
    current = getattr(obj, name)
    if not callable(current):
        raise UsageError(f"pyprof.wrap: {type(obj).__name__}.{name} is not callable",
                         "wrap a function, method or staticmethod")
    if getattr(current, "__pyprof_meta__", None) is not None:
        return
    owner_name = getattr(obj, "__name__", None) or type(obj).__name__
    meta = OpMeta("wrap", op or f"{owner_name}.{name}", current, composite=composite)
    if isinstance(static, (classmethod, staticmethod)):
        w: Any = type(static)(make_wrapper(static.__func__, meta))
    else:  # a class's function as it is defined; a module's function, an instance's attribute as read
        w = make_wrapper(static if isinstance(obj, type) else current, meta)
    had_own = name in getattr(obj, "__dict__", {})
    with LOCK:
        _wrapped.append((obj, name, static if had_own else None, had_own))
        setattr(obj, name, w)


class range(emit.Range):  # noqa: A001 - mirrors nvtx.annotate / torch.cuda.nvtx.range
    """A user range (kind "range"): ``with pyprof.range("attn"):`` or ``@pyprof.range("attn")``.

    Emitted only while a consumer is attached (like every pyprof range); names a layer in the table.
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise UsageError(f"pyprof.range name must be a non-empty string, got {name!r}",
                             "pass the range's name, e.g. pyprof.range('attention')")
        self.name = name
        super().__init__(markers.encode(markers.make("range", name=name)))


def add_step_callback(fn: Callable[[], Any]) -> None:
    """Call ``fn()`` at every :func:`step` (``pyprof run`` drives torch.profiler's schedule with it)."""
    with LOCK:
        _step_callbacks.append(fn)


def remove_step_callback(fn: Callable[[], Any]) -> None:
    with LOCK, contextlib.suppress(ValueError):
        _step_callbacks.remove(fn)


def step() -> None:
    """Mark an iteration boundary: run every registered step callback, in registration order."""
    for fn in tuple(_step_callbacks):
        fn()
