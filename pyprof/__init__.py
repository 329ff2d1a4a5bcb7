"""pyprof: the kernel-to-layer profiler for PyTorch.

``import pyprof; pyprof.init()`` instruments PyTorch so every op and module emits NVTX ranges
(see :mod:`pyprof.markers` for the payload). ``pyprof parse`` and ``pyprof prof`` turn a profile into
a per-kernel table. Only this module's public API lives here; importing ``pyprof`` never imports
torch (the instrumentation is loaded on first use), so ``pyprof.parse`` and ``pyprof.prof`` work on
machines without PyTorch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from pyprof.version import __version__

__all__ = ["__version__", "init", "deinit", "wrap", "range", "step", "is_initialized", "load", "dataset", "profile",
           "parse", "prof", "report", "diff", "export"]


def init(**options: Any) -> None:
    """Instrument PyTorch (see :func:`pyprof.annotate.init` for the options). A second call is a no-op."""
    from pyprof.annotate import init as _init

    _init(**options)


def deinit() -> None:
    """Undo :func:`init`: restore every patched function and remove every hook."""
    from pyprof.annotate import deinit as _deinit

    _deinit()


def is_initialized() -> bool:
    """Whether :func:`init` is in force (without importing torch where nothing has)."""
    mod = sys.modules.get("pyprof.annotate")
    return bool(mod and mod.is_initialized())


def wrap(obj: Any, name: str, **kw: Any) -> None:
    """Instrument ``obj.name`` (a custom autograd Function's forward/backward, a module, a C function)."""
    from pyprof.annotate import wrap as _wrap

    _wrap(obj, name, **kw)


def range(name: str):  # noqa: A001 - mirrors nvtx.annotate / torch.cuda.nvtx.range naming
    """Context manager and decorator opening a named user range (a layer in pyprof's table)."""
    from pyprof.annotate import range as _range

    return _range(name)


def step() -> None:
    """Mark an iteration boundary (used by ``pyprof run`` to schedule torch.profiler)."""
    from pyprof.annotate import step as _step

    _step()


def load(path: Any, columns: list[str] | None = None, prof: bool = False):
    """Kernel records as a pandas DataFrame, from any input ``pyprof prof`` takes: a record file (``pyprof
    parse -o x.dict``), a ``pyprof run`` folder, a Parquet file or dataset folder (``--format parquet``), or
    an export or trace (parsed first); ``columns``: only these; ``prof=True``: prof's table of them instead
    (flops, bytes, gap... as ``pyprof prof`` computes them). No torch; Parquet needs the ``scale`` extra.
    See :mod:`pyprof.scale.frame`."""
    from pyprof.scale import load as _load

    return _load(path, columns, prof)


def dataset(path: Any, connection: Any = None):
    """A DuckDB relation over a Parquet file or a dataset folder, for queries too big for memory
    (``scale`` extra). See :mod:`pyprof.scale.query`."""
    from pyprof.scale import dataset as _dataset

    return _dataset(path, connection)


def profile(out: Any = None, **options: Any):
    """``with pyprof.profile() as p:`` around your loop (call ``pyprof.step()`` once per iteration): ``pyprof
    run`` for code in a notebook; then ``p.summary("op")``, ``p.report()``, ``p.advise()``, ``p.save(dir)``
    (:class:`pyprof.api.Profile`, docs/api.md)."""
    from pyprof.api import Profile

    return Profile(out, **options)


def diff(a: Any, b: Any, by: str = "op,layer,kernel", threshold: float = 10.0, ignore_load: bool = False):
    """``pyprof diff A B`` as a DataFrame, the verdict in ``attrs`` (:func:`pyprof.api.diff`)."""
    from pyprof.api import diff as _diff

    return _diff(a, b, by, threshold, ignore_load)


def export(path: Any, out: Any):
    """``pyprof export --perfetto OUT PATH`` (:func:`pyprof.api.export`)."""
    from pyprof.api import export as _export

    return _export(path, out)


class _Command(types.ModuleType):
    """The subpackages ``parse``, ``prof`` and ``report`` are also their commands: ``pyprof.parse(path, out)``,
    ``pyprof.prof(path, by=None)``, ``pyprof.report(path, out)`` call :mod:`pyprof.api`'s functions of that
    name, while their modules (``pyprof.parse.open_source``, ``pyprof.prof.table``) stay where they are."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from pyprof import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    """This module: it makes each of those subpackages a :class:`_Command` as it is imported."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("parse", "prof", "report") and type(value) is types.ModuleType:
            value.__class__ = _Command
        super().__setattr__(name, value)


def __getattr__(name: str) -> Any:
    """``pyprof.parse``, ``pyprof.prof`` and ``pyprof.report`` before anything imported them."""
    if name not in ("parse", "prof", "report"):
        raise AttributeError(f"module 'pyprof' has no attribute {name!r}")
    importlib.import_module(f"pyprof.{name}")  # (binds it here, through _Package.__setattr__)
    return globals()[name]


sys.modules[__name__].__class__ = _Package
