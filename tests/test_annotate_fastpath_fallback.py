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


def test_the_type_stub_names_the_extensions_functions_with_their_parameters():
    import ast
    import re
    from pathlib import Path

    ext = fastpath.extension()
    if ext is None:
        pytest.skip("the C accelerator is not built here")
    stub = ast.parse((Path(fastpath.__file__).parent / "_fastpayload.pyi").read_text())
    typed = {f.name: [a.arg for a in (*f.args.posonlyargs, *f.args.args)] + [f"**{k.arg}" for k in [f.args.kwarg] if k]
             for f in stub.body if isinstance(f, ast.FunctionDef)}
    public = {n for n in dir(ext) if not n.startswith("_")}
    assert set(typed) == public
    for name in public:  # each C docstring starts with its signature, "build(meta, args, ...)"
        m = re.match(rf"{name}\(([^)]*)\)", getattr(ext, name).__doc__)
        assert m is not None and [p.split(":")[0].strip() for p in m.group(1).split(",") if p.strip()] == typed[name]
