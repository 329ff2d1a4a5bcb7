"""torch's own tables of its functions, kept made of the originals while pyprof's wrappers are in.

Some of torch's code recognises its functions by identity, in tables it builds once: the factory
functions ``with torch.device(...)`` redirects (``torch.utils._device._device_constructors``, cached
on first use), and TorchDynamo's map from torch callables to how it traces them
(``torch._dynamo.trace_rules``: ``get_torch_obj_rule_map``, ``get_tensor_method``, cached on first
use) together with what its modules read off ``torch`` and ``torch.Tensor`` when imported
(``all_tensor_attrs``, ``unpatched_nn_module_call``...). A table built while the wrappers are
installed holds the wrappers; torch then looks an original up in it, finds nothing, and behaves as if
the function were foreign: ``torch.zeros`` under ``with torch.device("meta")`` made a CPU tensor, and
Dynamo broke the graph at ``torch._C._VariableFunctions.dropout`` and other builtins.

So, before the patch (:func:`prime`): the cached tables torch has already imported are built, from
the originals. TorchDynamo is not imported for it (that costs about as much as importing torch):
where it is not imported yet, a finder on ``sys.meta_path`` (:class:`_DynamoFinder`) runs its first
import with the originals put back (``swap(False)``), builds its cached tables, then puts the wrappers
back (``swap(True)``). Other threads calling torch meanwhile call the originals and emit nothing.

What TorchDynamo sees of a wrapper itself is :mod:`pyprof.annotate.ops`'s business
(``_torchdynamo_inline``: it traces the original in the wrapper's place).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable

_DYNAMO = "torch._dynamo"


def _build_dynamo_tables() -> None:
    tr = sys.modules.get(_DYNAMO + ".trace_rules")
    for name in ("get_torch_obj_rule_map", "get_tensor_method"):
        fn = getattr(tr, name, None)
        if fn is not None:
            fn()


def _build_tables() -> None:
    try:
        from torch.utils import _device
    except ImportError:  # pragma: no cover - every supported torch has it
        _device = None
    fn = getattr(_device, "_device_constructors", None)
    if fn is not None:
        fn()
    if _DYNAMO in sys.modules:
        _build_dynamo_tables()


class _Loader(importlib.abc.Loader):
    """The real loader of ``torch._dynamo``, run with the originals in place."""

    def __init__(self, loader, swap: Callable[[bool], None]):
        self._loader = loader
        self._swap = swap

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._swap(False)
        try:
            self._loader.exec_module(module)
            _build_dynamo_tables()
        finally:
            self._swap(True)


class _DynamoFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands ``torch._dynamo``'s spec, found by the finders after it, a loader
    that imports it with the originals in place (once; then it leaves ``sys.meta_path``)."""

    def __init__(self, swap: Callable[[bool], None]):
        self.swap = swap

    def find_spec(self, fullname, path, target=None):
        if fullname != _DYNAMO:
            return None
        uninstall()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.swap)
                return spec
        return None


def prime(swap: Callable[[bool], None]) -> None:
    """Called just before the patch: build the tables torch already has from the originals, and
    arrange for TorchDynamo's first import to happen with the originals in place. ``swap(False)``
    puts the originals back, ``swap(True)`` the wrappers."""
    _build_tables()
    uninstall()
    if _DYNAMO not in sys.modules:
        sys.meta_path.insert(0, _DynamoFinder(swap))


def uninstall() -> None:
    """Take pyprof's finder off ``sys.meta_path`` (when the patch goes, or once it has been used)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _DynamoFinder)]
