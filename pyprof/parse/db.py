"""Open an export read-only and read its tables by column name.

Every reader needs the same guarantees: the file opened read-only (``mode=ro``), text decoded
leniently (some exports hold invalid UTF-8 in command lines and environment blobs), an absent table
read as zero rows, an absent column as nulls (:func:`check_columns` for those a reader cannot do
without), and any SQLite failure (a truncated or corrupt file) one :class:`~pyprof.errors.InputError`
instead of a traceback. Tables and columns come from SQLite's own catalog, not a reflection library,
whose import alone is a third of a small export's parse (docs/design.md, "Third-party dependencies").
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyprof.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

SQLITE_MAGIC = b"SQLite format 3\x00"
REEXPORT = "re-export the report (nsys export --type sqlite REPORT.nsys-rep, or nvprof -o FILE)"


def is_sqlite(path: str | os.PathLike) -> bool:
    """True when the file starts with the SQLite header."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


#: texts of this process that were no UTF-8, kept with their bytes escaped (:func:`text`)
_escaped = [0]


def text(raw: bytes) -> str:
    """Bytes an export holds as text, as str: UTF-8, or where they are not, each byte that is not
    written as its escape (``\\xff``), counted (:func:`escaped`): a name is never changed silently."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        _escaped[0] += 1
        return raw.decode("utf-8", "backslashreplace")


def escaped() -> int:
    """How many texts :func:`text` has escaped in this process so far."""
    return _escaped[0]



class LayoutError(InputError):
    """The export lacks a table or column a statement reads: a layout the reader does not know (not
    damage). A reader may go on without what that statement gives (GPU names, say)."""


def as_text(value) -> str | None:
    """A text column's value as str (or None): a damaged record can hold a blob or a number where
    text belongs, and the readers after this point handle only str."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text(bytes(value))
    return str(value)


def _one_line(text: str, limit: int = 200) -> str:
    """``text`` fit for a one-line message: first line, printable characters only, at most ``limit``."""
    lines = text.splitlines() or [""]
    line = "".join(c if c.isprintable() else "?" for c in lines[0])
    return line if len(line) <= limit else line[: limit - 3] + "..."


def damaged(path: str, reason: str) -> InputError:
    """The one-line error for an export SQLite cannot read (or reads values from that no exporter writes)."""
    return InputError(f"{path}: cannot read the SQLite database ({_one_line(reason)}): the export is "
                      "truncated or corrupt", REEXPORT)


def _reason(exc: BaseException) -> str:
    """What SQLite said, for :func:`damaged`."""
    if isinstance(exc, UnicodeDecodeError):
        # SQLite's message quoted bytes of a damaged schema that are not UTF-8: sqlite3 cannot decode it
        return "SQLite's error message is not text: the schema is damaged"
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    """Turn SQLite failures met while reading ``path`` into one-line :class:`InputError`.

    A statement naming a column or table the export lacks fails the same way in SQLite; the readers
    check the schema first (:func:`check_columns`), so such a failure is reported as a layout the
    reader does not know rather than as damage."""
    try:
        yield
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        reason = _reason(exc)
        if reason.startswith(("no such column", "no such table")):
            raise LayoutError(f"{path}: the export lacks a table or column pyprof reads ({_one_line(reason)})",
                              REEXPORT) from None
        if reason.startswith(("database is locked", "database table is locked")):
            raise InputError(f"{path}: the database is locked by another program ({_one_line(reason)})",
                             "wait for the program writing it (nsys export) to finish, or copy the file") from None
        if reason.startswith("unable to open database file"):
            raise InputError(f"{path}: SQLite cannot open the file ({_one_line(reason)})",
                             "check that the file and its folder are readable") from None
        raise damaged(path, reason) from None


def integrity_problem(path: str | os.PathLike) -> str | None:
    """SQLite's own verdict on ``path`` (``PRAGMA quick_check``: every page and record it can reach):
    the first problem it reports, or None for a sound database or a file that is no SQLite database."""
    path = os.fspath(path)
    if not is_sqlite(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(sqlite_uri(path), uri=True)) as con:
            con.text_factory = text
            rows = con.execute("PRAGMA quick_check(1)").fetchall()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return _reason(exc)
    verdict = str(rows[0][0]) if rows and rows[0] else "no verdict"
    if verdict == "ok":
        return None
    # "*** in database main ***\nPage 80: btreeInitPage() returns error code 11": the finding, on one line
    return ", ".join(ln.strip() for ln in verdict.splitlines() if ln.strip() and not ln.startswith("***")) \
        or verdict


def cut_short(path: str | os.PathLike) -> str | None:
    """A file shorter than its SQLite header says (the database size in pages, bytes 28-31, valid when
    the change counter at bytes 24-27 equals the one at 92-95): a copy or download cut short, whose lost
    pages SQLite may never visit. The problem in words, or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    if len(head) < 100 or head[:16] != SQLITE_MAGIC or head[24:28] != head[92:96]:
        return None
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if pages and size < pages * page:
        return f"the file holds {size} bytes, its header says {pages} pages of {page} bytes"
    return None


def sqlite_uri(path: str) -> str:
    """A read-only SQLite URI for ``path``, percent-encoded (so '?', '#', '%' and spaces in names are safe)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


class Database:
    """A read-only SQLite export: its tables and columns (reflected), and column-by-name selects."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        short = cut_short(self.path)
        if short is not None:
            raise damaged(self.path, short)
        self._conn: sqlite3.Connection | None = None
        try:
            with translate_errors(self.path):
                self._conn = sqlite3.connect(sqlite_uri(self.path), uri=True, check_same_thread=False)
                self.conn: sqlite3.Connection = self._conn
                self.conn.text_factory = text
                # tables only: an exporter writes no views, and a view (a recursive one named like a CUPTI
                # table, say) could make a plain SELECT run for ever; SQLite's own tables left out. The
                # views' names are kept, to say why such a table is not read (view_problem)
                found = self.conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                                          "AND name NOT LIKE 'sqlite~_%' ESCAPE '~'").fetchall()
                self.tables: set[str] = {str(name) for name, kind in found if kind == "table"}
                self.views: set[str] = {str(name) for name, kind in found if kind == "view"}
        except BaseException:
            self.close()
            raise
        self._columns: dict[str, list[str]] = {}
        self._rows: dict[str, bool] = {}

    def view_problem(self, tables) -> None:
        """One line where one of ``tables`` (needed, and found empty or absent) is a view: no exporter
        writes one, and pyprof does not run it (a recursive one would never end)."""
        views = sorted(set(tables) & self.views)
        if views:
            raise InputError(f"{self.path}: {views[0]} is a view, not a table: no exporter writes one, and pyprof does "
                             "not run it", "export the report again (nsys export --type sqlite REPORT.nsys-rep)")

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` ([] if the table is absent), as the export declares them."""
        if table not in self.tables:
            return []
        if table not in self._columns:
            quoted = '"' + table.replace('"', '""') + '"'
            # (cid, name, type, notnull, default, pk, hidden): hidden 1 is a virtual table's hidden column
            rows = self.execute(f"PRAGMA main.table_xinfo({quoted})")
            self._columns[table] = [str(r[1]) for r in rows if r[6] != 1]
        return self._columns[table]

    def has_rows(self, table: str) -> bool:
        """Whether ``table`` is present and holds at least one row (one b-tree step, not a count)."""
        if table not in self.tables:
            return False
        if table not in self._rows:
            self._rows[table] = bool(self.execute(f'SELECT 1 FROM "{table}" LIMIT 1'))
        return self._rows[table]

    def missing(self, table: str, names: Iterable[str]) -> list[str]:
        """Which of ``names`` ``table`` lacks; [] for an absent or empty table (it reads as zero rows)."""
        if not self.has_rows(table):
            return []
        present = set(self.columns(table))
        return [n for n in names if n not in present]

    def execute(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with translate_errors(self.path):
            return self.conn.execute(sql, params).fetchall()

    def select(self, table: str, wanted: dict[str, str]) -> pd.DataFrame:
        """Read ``table`` into a DataFrame with the columns ``wanted`` ({output: column}); an absent column
        reads as nulls, an absent table as zero rows (nvprof's reader: pandas is imported here, not by nsys')."""
        import pandas as pd

        present = set(self.columns(table))
        if not present:
            return pd.DataFrame({out: pd.Series([], dtype="object") for out in wanted})
        exprs = ", ".join(f'"{col}" AS {out}' if col in present else f"NULL AS {out}" for out, col in wanted.items())
        rows = self.execute(f'SELECT {exprs} FROM "{table}"')
        return pd.DataFrame.from_records(rows, columns=list(wanted), coerce_float=False)

    def strings(self, table: str, key: str = "id", value: str = "value") -> dict[int, str | None]:
        """A string table as a dict (StringIds / StringTable); {} where the table or either column is
        absent (names then read as nulls). Values are text whatever a damaged record holds; rows whose
        id is no integer are left out."""
        if not {key, value} <= set(self.columns(table)):
            return {}
        rows = self.execute(f'SELECT "{key}", "{value}" FROM "{table}"')
        return {k: as_text(v) for k, v in rows if type(k) is int}  # (a damaged row's id may be no integer)


def check_columns(db: Database, essential: Mapping[str, Iterable[str]],
                  optional: Mapping[str, Iterable[str]]) -> str | None:
    """Raise a one-line :class:`LayoutError` where a table that holds rows lacks an ``essential`` column
    (a kernel's or copy's start and end); else the one warning naming, table by table, the ``optional``
    columns the tables with rows lack (the readers read them as nulls), or None."""
    for table, cols in essential.items():
        if lacks := db.missing(table, cols):
            raise LayoutError(f"{db.path}: table {table} has no column {lacks[0]!r} (every kernel and copy "
                              "needs its start and end)",
                              "the export is incomplete or from an exporter pyprof does not know: " + REEXPORT)
    absent = {t: missing for t, cols in optional.items() if (missing := db.missing(t, cols))}
    if not absent:
        return None
    shown = "; ".join(f"{t}.{', '.join(cols)}" if len(cols) == 1 else f"{t}.({', '.join(cols)})"
                      for t, cols in absent.items())
    return f"the export lacks column(s) {shown}: they read as null in the records"
