"""pyprof.prof.render: the text of a long table is the same whether formatted here or on processes."""

from __future__ import annotations

import io

import pytest

from pyprof import process
from pyprof.prof import columns, render, table

A100 = "NVIDIA A100-SXM4-40GB"


def _records(n: int) -> list[dict]:
    """Kernels with text that needs CSV quoting, unknown numbers, and some memcpy records."""
    out = []
    for i in range(n):
        out.append({"kind": "memcpy" if i % 7 == 3 else "kernel", "kShortName": f"k,{i % 5} \"x\"",
                    "kLongName": "void k<float>(int)", "kDuration": 1000 + i, "start": i * 10, "tid": 1,
                    "device": 0, "gpu": A100, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1],
                    "bytes": 4096 if i % 7 == 3 else None, "layer": ["net", f"net.l{i % 3}"],
                    "trace": ["a.py:1:f"], "mod": "torch", "op": "relu" if i % 2 else None,
                    "args": [{"name": "", "type": "tensor", "shape": [i % 4 + 1, 8], "dtype": "float32"}],
                    "cdtype": None, "opId": i // 2, "seqId": [i], "altSeqId": [], "dir": "fprop",
                    "subSeqId": i % 2})
    return out


@pytest.mark.parametrize("style", ["csv", "space", "json"])
@pytest.mark.parametrize("names", [list(columns.DEFAULT), [c.name for c in columns.COLUMNS], ["params"]])
def test_parallel_formatting_gives_the_same_text(monkeypatch, style, names):
    df = table.build(_records(1000))
    one = io.StringIO()
    render.write(df, names, one, style)
    monkeypatch.setattr(render, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(render, "CHUNK", 64)  # many chunks, more than the processes keep in flight
    two = io.StringIO()
    with process.owning():  # forks only where pyprof owns the process (as `pyprof prof` does)
        render.write(df, names, two, style, workers=2)
    assert two.getvalue() == one.getvalue()
    assert one.getvalue().count("\n") == 1000 + (style != "json")


def test_a_chunk_the_processes_cannot_give_is_formatted_here(monkeypatch):
    df = table.build(_records(300))
    one = io.StringIO()
    render.write(df, list(columns.DEFAULT), one, "csv")
    monkeypatch.setattr(render, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(render, "CHUNK", 50)
    asked = []
    monkeypatch.setattr(render, "_submit", lambda pool, span: asked.append(span))  # as if the pool were broken
    two = io.StringIO()
    with process.owning():
        render.write(df, list(columns.DEFAULT), two, "csv", workers=2)
    assert asked  # the pool was asked for chunks
    assert two.getvalue() == one.getvalue()
