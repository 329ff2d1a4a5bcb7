"""The one argument form: recorded arguments bound to the aten schema of the overload that ran.

The schemas are data (pyprof/data/aten_schemas.txt, written by scripts/gen_aten_schemas.py); with
torch installed the file is checked against torch's own registry, and the binding against what torch
itself binds (``torch.ops.aten.<op>`` resolves the overload; the marker pyprof records of the same
Python call is bound here and must name the same overload and the same tensors).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyprof.prof.ops import scalar_arg, tensor_arg
from pyprof.prof.ops.schema import normalize, parse_schema, schemas, torch_version
from tests.conftest import BLOCK_TORCH, REPO


def test_every_line_of_the_data_file_parses():
    text = (REPO / "pyprof" / "data" / "aten_schemas.txt").read_text().splitlines()
    lines = [x for x in text if x and not x.startswith("#")]
    assert all(parse_schema(x) is not None for x in lines)
    assert sum(len(v) for v in schemas().values()) == len(lines)
    assert torch_version()


def test_schema_module_imports_without_torch():
    code = BLOCK_TORCH + ("from pyprof.prof.ops.schema import normalize\n"
                          "b = normalize('einsum', [{'name': 'a', 'type': 'str', 'value': 'ij,jk'}])\n"
                          "print(b.problem)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "fit no overload" in r.stdout  # einsum with no operand fits neither overload


@pytest.mark.torch
def test_data_file_is_torchs_registry():
    torch = pytest.importorskip("torch")
    if torch.__version__ != torch_version():
        pytest.skip(f"data written from torch {torch_version()}, {torch.__version__} installed")
    import runpy

    gen = runpy.run_path(str(REPO / "scripts" / "gen_aten_schemas.py"))
    assert gen["text"]() == (REPO / "pyprof" / "data" / "aten_schemas.txt").read_text()


def _shapes(b):
    return {k: (v.get("shape") if v.get("type") == "tensor" else
                [x.get("shape") for x in v["items"]] if v.get("type") == "tensorlist" else v.get("value"))
            for k, v in b.args.items()}


def test_forms_of_one_call_bind_alike():
    """A pyprof marker (names of the Python signature), a trace (positional, keyword-only ones in
    place) and a hand call all give aten::addmm's names, defaults filled in."""
    x, m1, m2 = tensor_arg([3]), tensor_arg([3, 4]), tensor_arg([4, 3])
    marker = normalize("addmm", [{**x, "name": "input"}, {**m1, "name": "mat1"}, {**m2, "name": "mat2"},
                                 scalar_arg(0, "beta")])
    trace = normalize("addmm", [x, m1, m2, {"name": None, "type": "int", "value": 0},
                                {"name": None, "type": "int", "value": 1}])
    assert marker.overload == trace.overload == "aten::addmm"
    assert _shapes(marker) == _shapes(trace) == {"self": [3], "mat1": [3, 4], "mat2": [4, 3], "beta": 0, "alpha": 1}


def test_varargs_and_python_values():
    # einsum(*args): the marker names the equation after einsum.sublist's ``a``; operands are unnamed
    b = normalize("einsum", [scalar_arg("ij,jk->ik", "a"), tensor_arg([3, 4]), tensor_arg([4, 5])])
    assert (b.overload, _shapes(b)) == ("aten::einsum", {"equation": "ij,jk->ik", "tensors": [[3, 4], [4, 5]],
                                                         "path": None})
    assert _shapes(normalize("view", [tensor_arg([3, 4], name="self"), scalar_arg(2), scalar_arg(6)]))["size"] == [2, 6]
    # consecutive ints are a kernel size then a stride where the overload takes them so
    assert _shapes(normalize("max_pool2d", [tensor_arg([1, 3, 8, 8]), scalar_arg(2), scalar_arg(3)]))["stride"] == 3
    ce = normalize("cross_entropy", [tensor_arg([3, 4], name="input"), tensor_arg([3], "int64", name="target"),
                                     scalar_arg("sum", "reduction")])
    assert ce.overload == "aten::cross_entropy_loss" and _shapes(ce)["reduction"] == 2
    assert normalize("add", [tensor_arg([2]), scalar_arg(2.0)]).overload == "aten::add.Tensor"  # as torch
    assert normalize("add_", [tensor_arg([2]), scalar_arg(2.0)], inplace=True).overload == "aten::add_.Tensor"
    assert normalize("add", [tensor_arg([2]), tensor_arg([2])]).overload == "aten::add.Tensor"


def test_what_cannot_be_bound_says_why():
    assert "no aten schema" in normalize("interpolate", [tensor_arg([1, 3, 4, 4])]).problem
    b = normalize("mm", [tensor_arg([3, 4])])  # mat2 missing
    assert b.schema is None and "fit no overload of aten::mm" in b.problem


@pytest.mark.torch
@pytest.mark.parametrize("call, aten", [
    ("torch.einsum('bij,bjk->bik', a, b)", ("einsum", ("bij,bjk->bik", "[a, b]"), {})),
    ("torch.addmm(c, a[0], b[0], beta=0.5)", ("addmm", ("c", "a[0]", "b[0]"), {"beta": 0.5})),
    ("a.matmul(b)", ("matmul", ("a", "b"), {})),
    ("torch.nn.functional.linear(a, b[0].t())", ("linear", ("a", "b[0].t()"), {})),
    ("torch.bmm(a, b)", ("bmm", ("a", "b"), {})),
    ("torch.add(a, 2)", ("add", ("a", 2), {})),
    ("a.view(3, 8)", ("view", ("a", [3, 8]), {})),
    ("torch.cat([a, a], 1)", ("cat", ("[a, a]", 1), {})),
    ("torch.nn.functional.softmax(a, -1)", ("softmax", ("a", -1), {})),
    ("a.sum(dim=1, keepdim=True)", ("sum", ("a",), {"dim": 1, "keepdim": True})),
    ("a.sum()", ("sum", ("a",), {})),
    ("torch.nn.functional.conv2d(a[None], w, None, 2)", ("conv2d", ("a[None]", "w", None, [2, 2]), {})),
])
def test_marker_binds_to_the_overload_torch_resolves(call, aten):
    """The marker init() records for a Python call binds to the overload torch's own resolution picks
    for the aten op (``torch._C._jit_resolve_packet``), with each tensor in its schema name."""
    torch = pytest.importorskip("torch")
    import orjson

    import pyprof
    from pyprof.annotate.recorder import Recorder
    from pyprof.prof.ops import canonical

    env = {"torch": torch, "a": torch.randn(2, 3, 4), "b": torch.randn(2, 4, 5), "c": torch.randn(3, 5),
           "w": torch.randn(5, 2, 2, 2)}
    pyprof.init()
    try:
        with Recorder() as rec:
            eval(call, env)
    finally:
        pyprof.deinit()
    name, targs, tkw = aten
    ops = [orjson.loads(r.text) for r in rec.ranges if '"k":"op"' in r.text]
    first = next(o for o in ops if canonical(o["op"], o["ns"]) == name)
    targs = [eval(x, env) if isinstance(x, str) and x[:1] in "abcw[" and "->" not in x else x for x in targs]
    overload = torch._C._jit_resolve_packet(f"aten::{name}", *targs, **tkw)
    bnd = normalize(canonical(first["op"], first["ns"]), first["args"])
    assert bnd.overload == f"aten::{name}" + ("" if overload == "default" else f".{overload}")
    schema = next(s for s in torch._C._jit_get_schemas_for_operator(f"aten::{name}")
                  if s.overload_name == ("" if overload == "default" else overload))
    values = dict(zip([p.name for p in schema.arguments], targs, strict=False)) | tkw
    for pname, v in values.items():
        if isinstance(v, torch.Tensor):
            assert bnd.args[pname]["shape"] == list(v.shape), pname
        elif isinstance(v, list) and v and isinstance(v[0], torch.Tensor):
            assert [x["shape"] for x in bnd.args[pname]["items"]] == [list(x.shape) for x in v], pname
        else:
            got = bnd.args[pname]["value"]
            assert got == v or [got] * len(v or [0]) == v, pname


def test_ops_priced_by_what_their_schema_says():
    """Tagged pointwise ops, views by their return alias and alias spellings get the family's model."""
    from pyprof.prof.ops import OpCall, estimate, family
    from pyprof.prof.ops.schema import pointwise_ops, view_ops

    assert {"xlogy", "special_zeta", "logaddexp"} <= pointwise_ops() and "max" not in pointwise_ops()
    assert {"mT", "broadcast_to", "tensor_split"} <= view_ops() and "add" not in view_ops()
    a, b = tensor_arg([3, 4]), tensor_arg([4])
    assert estimate(OpCall("divide", [a, b])) == estimate(OpCall("div", [a, b]))
    assert family("divide") == family("div") == "pointwise"
    z = estimate(OpCall("special_zeta", [a, b]))  # one FLOP per output element; read both, write one
    assert (z.flops, z.bytes) == (12, (12 + 4 + 12) * 4)
    assert estimate(OpCall("special_zeta", [a, b], "bprop")).flops == 12 + (12 + 12)  # dY·∂ per grad (+ b's sum)
    mt = estimate(OpCall("mT", [a]))
    assert (mt.flops, mt.bytes) == (0, 0) and family("mT") == "views"
