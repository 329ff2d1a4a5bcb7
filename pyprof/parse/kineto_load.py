"""Read a torch.profiler chrome trace (``.json`` or ``.json.gz``) into memory, or fail with one line.

orjson parses the whole document at once (a 1M-event trace in about a second); the compressed
and the decompressed bytes are released before the caller walks the events.

Kineto wrote event names without escaping their double quotes until pytorch/kineto#1459 (2026):
a ``record_function`` whose name contains ``"``, which is every pyprof marker (``{"pyprof":1,...}``)
and any ``with_stack`` frame of generated code, makes the exported file invalid JSON
(pytorch/pytorch#146900). When the first parse fails, :func:`repair_unescaped_names` re-escapes
the ``"name": "..."`` lines of Kineto's one-field-per-line layout and the parse is retried once;
a file that is still not JSON is reported as such.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from pyprof.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
# Kineto's layout: `    "name": "<raw text>",` alone on its line. Only lines whose text holds a quote
# are touched; `(.*")` is greedy so the last `"` before `",` closes the value.
_NAME_LINE = re.compile(rb'(?m)^([ \t]*"name": ")(.*".*)("[ \t]*,?[ \t]*\r?)$')


@dataclass
class Trace:
    """A loaded chrome trace: its events and the top-level metadata (everything but the events)."""

    events: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    repaired: int = 0  # number of event names whose quotes had to be re-escaped


def _unescaped(match: re.Match) -> bytes:
    inner = match.group(2)
    # keep already-escaped quotes as they are, escape the bare ones
    inner = re.sub(rb'(?<!\\)"', rb'\\"', inner)
    return match.group(1) + inner + match.group(3)


def repair_unescaped_names(data: bytes) -> tuple[bytes, int]:
    """Escape bare double quotes inside Kineto's ``"name": "..."`` lines; returns (bytes, lines fixed)."""
    count = 0

    def fix(match: re.Match) -> bytes:
        nonlocal count
        count += 1
        return _unescaped(match)

    return _NAME_LINE.sub(fix, data), count


def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by content, whatever its name)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "check the path of the torch.profiler trace") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory", "give the trace file (.json or .json.gz) inside it") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})", "check the file's permissions") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            raise InputError(
                f"{path}: truncated or corrupt gzip file",
                "copy the trace again or re-export it with prof.export_chrome_trace()",
            ) from None
    elif path.endswith(".gz"):
        raise InputError(f"{path}: named .gz but not gzip-compressed", "rename it to .json or gzip it")
    return data


def load_trace(path: str | os.PathLike) -> Trace:
    """Load and validate a chrome trace; raise :class:`InputError` with one line if it is none."""
    path = os.fspath(path)
    data = read_bytes(path)
    if not data.strip():
        raise InputError(f"{path}: empty file", "export the trace with prof.export_chrome_trace(path)")
    repaired = 0
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        first_error = exc
        doc = None
        if data.lstrip()[:1] in (b"{", b"["):
            fixed, repaired = repair_unescaped_names(data)
            if repaired:
                del data
                try:
                    doc = orjson.loads(fixed)
                except orjson.JSONDecodeError as exc2:
                    first_error = exc2
                del fixed
        if doc is None:
            raise InputError(
                f"{path}: not JSON ({first_error}); truncated or not a torch.profiler trace",
                "give a file written by prof.export_chrome_trace() (.json or .json.gz)",
            ) from None
    else:
        del data
    if isinstance(doc, list):  # the Trace Event Format's "JSON Array Format"
        events, meta = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc.pop("traceEvents")
        meta = doc
    else:
        raise InputError(
            f"{path}: JSON but not a chrome trace (no 'traceEvents' list)",
            "give a file written by torch.profiler's export_chrome_trace()",
        )
    if not events:
        raise InputError(f"{path}: the trace holds no events", "profile at least one active step (check the schedule)")
    if not isinstance(events[0], dict):
        raise InputError(f"{path}: 'traceEvents' is not a list of events", "give a torch.profiler chrome trace")
    return Trace(events=events, meta=meta, repaired=repaired)
