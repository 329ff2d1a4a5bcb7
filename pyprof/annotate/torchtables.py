"""torch's own tables of its functions, kept made of the originals while pyprof's wrappers are in.

Some of torch's code recognises its functions by identity, in tables it builds once: the factory
functions ``with torch.device(...)`` redirects (cached on first use), and TorchDynamo's map from torch
callables to how it traces them (its ``trace_rules``, cached on first use) together with what its
modules read off ``torch`` and ``torch.Tensor`` when imported (``all_tensor_attrs``,
``unpatched_nn_module_call``...). A table built while the wrappers are installed holds the wrappers;
torch then looks an original up in it, finds nothing, and behaves as if the function were foreign:
``torch.zeros`` under ``with torch.device("meta")`` made a CPU tensor, and Dynamo broke the graph at
the builtin ``dropout`` and others (:mod:`pyprof.torch_private` builds them).

So, before the patch (:func:`prime`): the cached tables torch has already imported are built, from
the originals. TorchDynamo is not imported for it (that costs about as much as importing torch):
where it is not imported yet, a finder on ``sys.meta_path`` (:class:`_DynamoFinder`) runs its first
import with the originals put back (``swap(False)``), builds its cached tables, then puts the wrappers
back (``swap(True)``). Other threads calling torch meanwhile call the originals and emit nothing.

What TorchDynamo sees of a wrapper itself is :mod:`pyprof.annotate.ops`'s business
(``DYNAMO_INLINE``: it traces the original in the wrapper's place).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable

from pyprof import torch_private as tp


class HookedLoader(importlib.abc.Loader):
    """A module's own loader, whose execution of the module ``run(execute, module)`` does (``execute``:
    the loader's own ``exec_module``): what pyprof's import hooks do around an import."""

    def __init__(self, loader, run: Callable[[Callable, object], None]):
        self._loader, self._run = loader, run

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._run(self._loader.exec_module, module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _DynamoFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands TorchDynamo's spec, found by the finders after it, a loader
    that imports it with the originals in place (once; then it leaves ``sys.meta_path``)."""

    def __init__(self, swap: Callable[[bool], None]):
        self.swap = swap

    def find_spec(self, fullname, path, target=None):
        if fullname != tp.DYNAMO:
            return None
        uninstall()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = HookedLoader(spec.loader, self._exec)
                return spec
        return None

    def _exec(self, execute, module) -> None:
        """TorchDynamo's import, with the originals in place; its cached tables built from them."""
        self.swap(False)
        try:
            execute(module)
            tp.build_dynamo_tables()
        finally:
            self.swap(True)


def prime(swap: Callable[[bool], None]) -> None:
    """Called just before the patch: build the tables torch already has from the originals, and
    arrange for TorchDynamo's first import to happen with the originals in place. ``swap(False)``
    puts the originals back, ``swap(True)`` the wrappers."""
    tp.build_device_tables()
    uninstall()
    if tp.dynamo_imported():
        tp.build_dynamo_tables()
    else:
        sys.meta_path.insert(0, _DynamoFinder(swap))


def uninstall() -> None:
    """Take pyprof's finder off ``sys.meta_path`` (when the patch goes, or once it has been used)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _DynamoFinder)]
