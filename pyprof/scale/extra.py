"""The ``scale`` extra (dask[distributed], pyarrow, duckdb): imported only where used, and one line naming
the install command where it is absent."""

from __future__ import annotations

import importlib

from pyprof.errors import PyprofError

INSTALL = "pip install 'pyprof-torch[scale]'"
#: module -> the distribution the ``scale`` extra installs for it
MODULES = {"pyarrow": "pyarrow", "duckdb": "duckdb", "dask": "dask[distributed]", "distributed": "dask[distributed]"}


class ExtraMissing(PyprofError, ImportError):
    """A feature of the ``scale`` extra was asked for without it: an ImportError to the API's callers, a
    one-line error with exit status 2 to the command line's (as every :class:`PyprofError`)."""


def require(*modules: str, what: str | None = None) -> None:
    """Import ``modules`` (keys of :data:`MODULES`), or raise :class:`ExtraMissing` naming the first absent."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            need = what or {"pyarrow": "Parquet", "duckdb": "a dataset query",
                            "dask": "--cluster", "distributed": "--cluster"}.get(name, name)
            raise ExtraMissing(f"{need} needs {MODULES.get(name, name)}, which is not installed",
                               INSTALL) from exc
