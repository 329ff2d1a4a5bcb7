"""The C accelerator is optional: when setting it up fails in any way, init() takes the Python path.

A torch release or build whose objects ``configure()`` rejects must not break
``import pyprof.annotate`` or a training script: :func:`pyprof.annotate.fastpath.load` returns None,
says why in ``LOAD_ERROR``, and leaves no C route on the state object; the wrappers built without the
accelerator write their markers through Python.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyprof.annotate import fastpath  # noqa: E402


class _Broken:
    """An extension whose setup fails the way an incompatible build would."""

    def configure(self, **_kw):
        raise RuntimeError("configure(): missing compiling")


def test_a_failing_extension_setup_takes_the_python_path(monkeypatch):
    from pyprof.annotate import ops
    from pyprof.annotate.state import S

    monkeypatch.setattr(fastpath, "extension", lambda: _Broken())
    monkeypatch.setattr(fastpath, "LOAD_ERROR", None)
    sink = S.route_sink
    try:
        assert fastpath.load(**ops.CALL_SIDE) is None
        assert fastpath.LOAD_ERROR == "RuntimeError: configure(): missing compiling"
        assert S.route_sink is None
    finally:
        S.route_sink = sink


def test_ops_without_the_accelerator_mark_through_python(monkeypatch):
    """What ops.py builds on a failed load (no ``_fast_call``): the same wrappers mark through Python."""
    import pyprof
    from pyprof.annotate import ops
    from pyprof.annotate.recorder import Recorder

    monkeypatch.setattr(ops, "_fast_call", None)
    wrapped = ops.make_wrapper(torch.add, ops.OpMeta("torch", "add", torch.add))
    a, b = torch.ones(2), torch.ones(2)
    pyprof.init()
    try:
        with Recorder() as rec:
            out = wrapped(a, b)
    finally:
        pyprof.deinit()
    assert out.tolist() == [2.0, 2.0]
    (payload,) = rec.payloads("op")
    assert payload["op"] == "add" and [x["shape"] for x in payload["args"]] == [[2], [2]]
