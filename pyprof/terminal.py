"""Text from an input as it may reach a terminal: the one sanitiser of every row, warning and error line.

Names come from profiles anyone can write (an op, a kernel, an NVTX message), so they may hold escape
sequences that drive the terminal (``\\x1b[2J`` clears it) and may be megabytes long. :func:`escaped`
writes each control character (C0, DEL, C1) as its escape, ``\\x1b``; :func:`shown` also cuts a name (a
run of non-space characters) past :data:`NAME_MAX` characters and a line past :data:`LINE_MAX`, saying how
much was left out. Files (records, CSV, JSON, HTML) keep the text whole.
"""

from __future__ import annotations

import re

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
NAME_MAX, LINE_MAX = 300, 4000
_LONG = re.compile(r"\S{" + str(NAME_MAX + 1) + ",}")


def escaped(text: str) -> str:
    """``text`` with every control character written as its escape (``\\x1b``)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if CONTROL.search(text) else text


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}...(+{len(text) - keep:,} characters)"


def cut_names(text: str) -> str:
    """``text`` with each name (a run of non-space characters) past :data:`NAME_MAX` characters cut, saying
    how many characters were left out."""
    return _LONG.sub(lambda m: _cut(m.group(), NAME_MAX), text) if len(text) > NAME_MAX else text


def shown(text: str, limit: int = LINE_MAX) -> str:
    """``text`` as one terminal line: :func:`escaped`, each name past :data:`NAME_MAX` characters and the
    whole past ``limit`` cut, with how many characters were left out."""
    text = cut_names(escaped(text))
    return _cut(text, limit) if len(text) > limit else text
