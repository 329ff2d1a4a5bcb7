"""pyprof: the kernel-to-layer profiler for PyTorch.

``import pyprof; pyprof.init()`` instruments PyTorch so every op and module emits NVTX ranges
(see :mod:`pyprof.markers` for the payload). ``pyprof parse`` and ``pyprof prof`` turn a profile into
a per-kernel table. Only this module's public API lives here; importing ``pyprof`` never imports
torch (the instrumentation is loaded on first use), so ``pyprof.parse`` and ``pyprof.prof`` work on
machines without PyTorch.
"""

from __future__ import annotations

from typing import Any

from pyprof.version import __version__

__all__ = ["__version__", "init", "deinit", "wrap", "range", "step", "is_initialized", "load", "dataset"]


def init(**options: Any) -> None:
    """Instrument PyTorch (see :func:`pyprof.annotate.init` for the options). A second call is a no-op."""
    from pyprof.annotate import init as _init

    _init(**options)


def deinit() -> None:
    """Undo :func:`init`: restore every patched function and remove every hook."""
    from pyprof.annotate import deinit as _deinit

    _deinit()


def is_initialized() -> bool:
    import sys

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
    """Kernel records as a pandas DataFrame: a JSON-lines record file (``pyprof parse -o x.dict``), a
    Parquet file or a dataset folder (``--format parquet``); ``columns``: only these; ``prof=True``:
    prof's table of them instead (flops, bytes, gap... as ``pyprof prof`` computes them). No torch;
    Parquet needs the ``scale`` extra. See :mod:`pyprof.scale.frame`."""
    from pyprof.scale import load as _load

    return _load(path, columns, prof)


def dataset(path: Any, connection: Any = None):
    """A DuckDB relation over a Parquet file or a dataset folder, for queries too big for memory
    (``scale`` extra). See :mod:`pyprof.scale.query`."""
    from pyprof.scale import dataset as _dataset

    return _dataset(path, connection)
