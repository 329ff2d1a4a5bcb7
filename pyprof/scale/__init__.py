"""Profiles as data, beyond one machine: records as Parquet (:mod:`~pyprof.scale.parquet`, the rank and
host of each export from :mod:`~pyprof.scale.identity`), parsed by Dask workers or local processes, a task
per file (:mod:`~pyprof.scale.cluster`), queried by DuckDB (:mod:`~pyprof.scale.query`), loaded as a pandas
DataFrame (:mod:`~pyprof.scale.frame`).

dask, pyarrow and duckdb (the ``scale`` extra) are imported inside the functions that use them, so
``import pyprof`` stays light; without them those functions raise :class:`~pyprof.scale.extra.ExtraMissing`
(an ImportError) naming ``pip install 'pyprof-torch[scale]'``.
"""

from __future__ import annotations

import os
from typing import Any

from pyprof.scale.extra import INSTALL, ExtraMissing, require

__all__ = ["load", "dataset", "ExtraMissing", "INSTALL", "require"]


def load(path: str | os.PathLike, columns: list[str] | None = None, prof: bool = False):
    """Records as a pandas DataFrame: a JSON-lines record file, a Parquet file or a dataset folder
    (see :mod:`pyprof.scale.frame`); ``prof=True``: prof's table of them (flops, bytes, gap...)."""
    from pyprof.scale.frame import load as _load

    return _load(path, columns, prof)


def dataset(path: str | os.PathLike, connection: Any = None):
    """A DuckDB relation over a Parquet file or a dataset folder (see :mod:`pyprof.scale.query`)."""
    from pyprof.scale.query import dataset as _dataset

    return _dataset(path, connection)
