"""Open an export read-only through SQLAlchemy and read its tables by column name.

Why a module of its own: every reader needs the same guarantees. The file is opened read-only
(``mode=ro``), text is decoded leniently (some exports hold invalid UTF-8 in command lines and
environment blobs), an absent table reads as zero rows, an absent column reads as nulls, and any
SQLite failure (a truncated or corrupt file) becomes one :class:`~pyprof.errors.InputError`
instead of a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence

import pandas as pd
import sqlalchemy
from sqlalchemy.pool import NullPool

from pyprof.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
REEXPORT = "re-export the report (nsys export --type sqlite REPORT.nsys-rep, or nvprof -o FILE)"


def is_sqlite(path: str | os.PathLike) -> bool:
    """True when the file starts with the SQLite header."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def _lenient(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    """Turn SQLite failures met while reading ``path`` into one-line :class:`InputError`."""
    try:
        yield
    except (sqlite3.DatabaseError, sqlalchemy.exc.DBAPIError) as exc:
        orig = getattr(exc, "orig", None) or exc
        raise InputError(
            f"{path}: cannot read the SQLite database ({str(orig).splitlines()[0]}): the file is "
            "truncated or corrupt",
            REEXPORT,
        ) from None


def sqlite_uri(path: str) -> str:
    """A read-only SQLite URI for ``path``, percent-encoded (so '?', '#', '%' and spaces in names are safe)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


class Database:
    """A read-only SQLite export: table listing, column listing, and column-by-name selects."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        # opened read-only by URI; SQLAlchemy's engine wraps the DBAPI connection we create
        uri = sqlite_uri(self.path)
        self.engine = sqlalchemy.create_engine(
            "sqlite://", poolclass=NullPool, creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
        with translate_errors(self.path):
            self._raw = self.engine.raw_connection()
            self.conn: sqlite3.Connection = self._raw.driver_connection  # type: ignore[assignment]
            self.conn.text_factory = _lenient
            self.tables: set[str] = {
                r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")
            }
        self._columns: dict[str, list[str]] = {}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._raw.close()
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` ([] if the table is absent)."""
        if table not in self.tables:
            return []
        if table not in self._columns:
            with translate_errors(self.path):
                self._columns[table] = [r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')]
        return self._columns[table]

    def execute(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with translate_errors(self.path):
            return self.conn.execute(sql, params).fetchall()

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return int(self.execute(f'SELECT COUNT(*) FROM "{table}"')[0][0])

    def select(self, table: str, wanted: dict[str, str], where: str = "") -> pd.DataFrame:
        """Read ``table`` into a DataFrame with the columns named by ``wanted`` ({output: column}).

        A column missing from this export's layout reads as nulls; an absent table as zero rows.
        Column names are SQL expressions over existing columns only when written as ``expr:...``.
        """
        present = set(self.columns(table))
        exprs = []
        for out, col in wanted.items():
            if col.startswith("expr:"):
                exprs.append(f"{col[5:]} AS {out}")
            elif col in present:
                exprs.append(f'"{col}" AS {out}')
            else:
                exprs.append(f"NULL AS {out}")
        if not present:
            return pd.DataFrame({out: pd.Series([], dtype="object") for out in wanted})
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"' + (f" WHERE {where}" if where else "")
        rows = self.execute(sql)
        return pd.DataFrame.from_records(rows, columns=list(wanted), coerce_float=False)

    def strings(self, table: str, key: str = "id", value: str = "value") -> dict[int, str]:
        """A string table as a dict (StringIds / StringTable)."""
        if table not in self.tables:
            return {}
        return dict(self.execute(f'SELECT "{key}", "{value}" FROM "{table}"'))
