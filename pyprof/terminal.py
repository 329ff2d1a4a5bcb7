"""Text from an input as it may reach a terminal: the one sanitiser of every row, warning and error line.

Names come from profiles anyone can write (an op, a kernel, an NVTX message, a file name), so they may
hold escape sequences that would drive the terminal (``\\x1b[2J`` clears it) and may be megabytes long.
:func:`shown` writes each control character (C0, DEL, C1; newlines too: a message is one line) as its
escape, ``\\x1b``, and cuts a name (a run of non-space characters) past :data:`NAME_MAX` characters and a
line past :data:`LINE_MAX`, saying how much was left out. :func:`escaped` does the first alone, for
table cells, which their renderer cuts to width itself. Files (records, CSV, JSON, HTML) keep the text
as it is: only what reaches a terminal is changed.
"""

from __future__ import annotations

import re

#: control characters: C0 (newlines and ESC among them), DEL, C1
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: a name (a run of non-space characters) longer than this is cut
NAME_MAX = 300
#: a line longer than this is cut
LINE_MAX = 4000
_LONG = re.compile(r"\S{" + str(NAME_MAX + 1) + ",}")


def _escape(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def escaped(text: str) -> str:
    """``text`` with every control character written as its escape (``\\x1b``)."""
    return CONTROL.sub(_escape, text) if CONTROL.search(text) else text


def escaped_column(col: list[str]) -> list[str]:
    """:func:`escaped` of a column of text (checked at C speed first)."""
    if not CONTROL.search("".join(col)):
        return col
    return [escaped(v) for v in col]


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}...(+{len(text) - keep:,} characters)"


def shown(text: str, limit: int = LINE_MAX) -> str:
    """``text`` fit for a terminal line: control characters escaped (:func:`escaped`), each name longer
    than :data:`NAME_MAX` characters and the whole past ``limit`` cut, with how many characters were
    left out."""
    text = escaped(text)
    if len(text) > NAME_MAX:
        text = _LONG.sub(lambda m: _cut(m.group(), NAME_MAX), text)
    return _cut(text, limit) if len(text) > limit else text
