"""The op payload text is written directly (not via a dict and orjson): it must stay byte-identical
to ``markers.encode`` of the payload dict built from :func:`pyprof.annotate.describe.args`."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from pyprof import markers  # noqa: E402
from pyprof.annotate import callsite, describe  # noqa: E402
from pyprof.annotate.ops import OpMeta, build_payload  # noqa: E402

ARGS = [
    (torch.ones(2, 3), torch.zeros(3, dtype=torch.int64)),
    (torch.ones(2, 3).t(), 2.5, -0.0, 1e-5, 1e300, math.inf, math.nan),
    (torch.ones(1, requires_grad=True), 3, -(1 << 63), (1 << 64) - 1, True, False, None),
    (torch.ones(()), "a\"b\\c\u00e9\n", 1 + 2j, torch.float16, torch.device("cpu"), torch.strided),
    (torch.ones(2), [1, 2.0, [3, None]], (4, 5), torch.Size([2, 3]), [torch.ones(1), torch.ones(2)]),
    (torch.ones(2), object(), torch.contiguous_format, torch.nn.Parameter(torch.ones(2, 2))),
    (torch.ones(4).as_strided((2,), (2,)), torch.empty(0, 5)),
    (torch.ones(1), (1, 1), [0, -1], (), [], (True, 1), (1, 2.0), (-(1 << 63), (1 << 64) - 1)),
    (torch.ones(1), (1, (2, 3)), [None], ("a", 1), torch.Size([]), [torch.Size([1, 2])]),
    (torch.ones(1), (slice(1, None), slice(None, None, 2)), slice(0, 1), (1, slice(None)), (Ellipsis, None)),
]
KWARGS = [{}, {"dim": -1, "keepdim": True, "out": None, "alpha": 0.5, "weird\"key": torch.ones(1)}]


def _expected(meta, args, kwargs, op_id, s0, trace):
    p = {"pyprof": markers.VERSION, "k": "op", "ns": meta.ns, "op": meta.name,
         "args": describe.args(args, kwargs, meta.arg_names())}
    if s0 is not None:
        p["seq"] = [s0]
    p["id"] = op_id
    p["trace"] = trace
    return markers.encode(p)


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("kwargs", KWARGS)
@pytest.mark.parametrize("ns,name,fn", [("torch", "add", torch.add), ("wrap", "my \"op\"", lambda *a, **k: None),
                                        ("torch.nn.functional", "linear", torch.nn.functional.linear)])
def test_payload_text_is_byte_identical_to_the_dict_encoding(args, kwargs, ns, name, fn):
    meta = OpMeta(ns, name, fn)
    text = build_payload(meta, args, kwargs, 7, 41 if args[0].requires_grad else None)
    got = markers.decode(text)
    assert text == _expected(meta, args, kwargs, 7, got.get("seq", [None])[0], got["trace"])
    assert markers.is_pyprof(text)


def test_big_int_still_rejected_like_orjson():
    meta = OpMeta("torch", "add", torch.add)
    for big in (1 << 64, [1, 1 << 64], (-(1 << 63) - 1,)):
        with pytest.raises(TypeError):
            build_payload(meta, (torch.ones(1), big), {}, 1, None)


def test_call_site_json_matches_call_site():
    def inner(depth):
        return callsite.call_site(1, depth), callsite.call_site_json(1, depth)

    for depth in (1, 3):
        for _ in range(2):  # second round: from the caches
            sites, text = inner(depth)
            assert markers.encode({"t": list(sites)})[5:-1] == text
            assert sites and sites[0].endswith(":inner")


# -- the C accelerator (pyprof/annotate/_fastpayload.c) against the pure-Python builder -------------
from pyprof.annotate import ops as ann_ops  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402


@contextlib.contextmanager
def _probe_op(fast: bool):
    """A real op wrapper (of a function that does nothing), with the C accelerator on or off."""
    saved = ann_ops._fast_call
    if not fast:
        ann_ops._fast_call = None
    try:
        meta = OpMeta("wrap", "probe", lambda *a, **k: None, composite=False)
        yield ann_ops.make_wrapper(lambda *a, **k: None, meta)
    finally:
        ann_ops._fast_call = saved


def _texts_through_wrapper(fast: bool, calls):
    """Payload texts of ``calls`` made through a real op wrapper, with the C accelerator on or off."""
    import re

    with _probe_op(fast) as wrapper, Recorder() as rec:
        for args, kwargs in calls:
            wrapper(*args, **kwargs)  # one call site for all: the trace must match too
    return [re.sub(r',"id":\d+,', ',"id":0,', t) for t in rec.texts()]


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_accelerator_writes_the_same_bytes_as_python(initialized):
    calls = [(a, k) for a in ARGS for k in KWARGS]
    calls += [((torch.ones(2, 3, requires_grad=True), 0.5), {}), ((torch.ones(1), 1e-5, 0.1, 1e-5), {}),
              ((torch.ones(1), float("nan"), -0.0, 0.0, math.inf, -math.inf, 1e16, 1e-7), {}),
              ((torch.ones(2, 2).t(), torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), [], (3,))), {}),
              ((1 << 63, -(1 << 63) - 1 + 1, (1 << 63) - 1), {"x": (1, 2), "y": [1, 2], "z": (1, (1 << 64) - 1)}),
              # the C writer's own dtype/device caches, a non-ASCII name, and a text longer than its
              # first buffer (1536 bytes)
              ((torch.ones(2, dtype=torch.bfloat16), torch.empty(3, 1, device="meta").t(),
                torch.ones(1, dtype=torch.float16), torch.ones(1, dtype=torch.bool)), {"\u00e9t\u00e9": torch.ones(1)}),
              (tuple(torch.ones(i + 1, 2) for i in range(40)), {"tail": (1, 2, 3)})]
    for _ in range(2):  # second round: every cache warm
        c_texts = _texts_through_wrapper(True, calls)
        py_texts = _texts_through_wrapper(False, calls)
        assert len(c_texts) == len(calls)
        assert c_texts == py_texts
        assert all('"trace":["tests/test_annotate_payload.py:' in t for t in c_texts)
    assert ann_ops._fast.info()["tensor_hits"] > 0  # the second round took texts from the C table


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_tensor_texts_from_its_table_differ_wherever_one_fact_differs(initialized):
    """The C writer keeps whole tensor texts keyed by shape, dtype, device, contiguity and
    requires_grad: tensors that differ in one of these only, described after each other (so that
    one would be served the other's text if the key missed that fact), must read as in Python."""
    base = torch.ones(4, 6)
    variants = [base, torch.ones(6, 4), torch.ones(46), torch.ones(4, 6, 1), torch.ones(1, 4, 6),
                base.to(torch.float64), base.to(torch.bfloat16), base.to(torch.int32),
                torch.ones(4, 6, device="meta"), torch.ones(4, 12)[:, ::2],
                torch.ones(4, 6, requires_grad=True), torch.ones(6, 4, requires_grad=True).t(),
                torch.ones(1 << 40, 0), torch.ones(0, 1 << 40), torch.ones(*[1] * 8), torch.ones(*[1] * 9)]
    calls = [((v,), {}) for v in variants] + [((v, w), {}) for v, w in itertools.pairwise(variants)]
    hits = ann_ops._fast.info()["tensor_hits"]
    for _ in range(2):
        c_texts = _texts_through_wrapper(True, calls)
        assert c_texts == _texts_through_wrapper(False, calls)
    assert len(set(c_texts[:len(variants)])) == len(variants)
    assert ann_ops._fast.info()["tensor_hits"] - hits >= 2 * len(variants)  # the table served them
    # many keys that differ in one fact, each right after the other: with far more keys than table
    # slots, some of these pairs share a slot, where only the full key comparison tells them apart
    pairs = []
    for i in range(1, 1500):
        pairs += [((torch.ones(i, 3),), {}), ((torch.ones(i, 3, 1),), {}), ((torch.ones(i, 3),), {}),
                  ((torch.ones(i, 3, requires_grad=True),), {}),
                  ((torch.ones(3, i).t(),), {}),
                  ((torch.ones(3, i),), {}), ((torch.ones(i, 3, dtype=torch.float64),), {})]
    assert _texts_through_wrapper(True, pairs) == _texts_through_wrapper(False, pairs)


def _special_tensors() -> list:
    """Tensors of other kinds than plain strided ones, and shapes the C writer's table does not keep."""
    import warnings

    x = torch.ones(2, 3)
    makers = [lambda: torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)]),
              lambda: x.to_sparse(), lambda: x.to_sparse_csr(), lambda: x.to_mkldnn(),
              lambda: torch.quantize_per_tensor(x, 0.1, 0, torch.quint8),
              lambda: torch._efficientzerotensor(2, 3), lambda: torch.ones(2, dtype=torch.complex64).conj(),
              lambda: torch._neg_view(torch.ones(2, dtype=torch.complex64)),
              lambda: torch.ones(*[2] * 6), lambda: torch.ones(*[2] * 6).transpose(0, 5), lambda: torch.tensor(1.5)]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for make in makers:
            try:
                out.append(make())
            except (RuntimeError, AttributeError):  # a kind this build of torch lacks
                pass
    return out


def _script_texts(fast: bool, script) -> list[str]:
    """Payload texts of script(op), which calls the op wrapper and changes tensors in between."""
    import re

    with _probe_op(fast) as op, Recorder() as rec:
        script(op)
    # ids and autograd sequence numbers count on from run to run
    return [re.sub(r',"seq":\[\d+\],', ',"seq":[0],', re.sub(r',"id":\d+,', ',"id":0,', t)) for t in rec.texts()]


def _mutations(op):
    """A tensor described, changed in place in every way that keeps the Python object, described again."""
    x = torch.ones(4, 6)
    for change in (lambda: x.t_(), lambda: x.unsqueeze_(0), lambda: x.resize_(2, 3, 2),
                   lambda: x.as_strided_((3, 2), (1, 3)), lambda: x.requires_grad_(),
                   lambda: x.requires_grad_(False), lambda: x.set_(torch.ones(5, 2).t()),
                   lambda: x.squeeze_(), lambda: setattr(x, "data", torch.ones(7, dtype=torch.float64)),
                   lambda: x.resize_(0)):
        op(x)
        change()
        op(x)
    p = torch.nn.Parameter(torch.ones(3, 4))
    m = torch.nn.Linear(4, 3)
    for change in (lambda: m.half(), lambda: m.double(), lambda: m.to("meta"), lambda: m.float()):
        op(p, m.weight, m.bias)
        change()
        op(m.weight, m.bias)
    with torch.inference_mode():
        op(torch.ones(3, 2), torch.ones(2, 3).t())
    for t in _special_tensors():
        op(t)
        op(t)


def _grad_kinds(op):
    """Tensors with and without autograd metadata, requiring grad or not (leaves, results, views,
    detached, Parameters, cleared after being set), under grad, no_grad and inference mode."""
    for ctx in (torch.enable_grad, torch.no_grad):
        with ctx():
            leaf = torch.ones(2, 3, requires_grad=True)
            plain = torch.ones(2, 3)
            cleared = torch.ones(2, 3).requires_grad_().requires_grad_(False)  # metadata kept
            lin = torch.nn.Linear(3, 2)
            op(leaf, plain, cleared, leaf * 2, plain * 2, leaf.t(), plain.t(), leaf.detach(), leaf[0])
            op(lin.weight, lin.bias, lin(plain), lin.weight.detach(), torch.nn.Parameter(plain, requires_grad=False))
            plain.requires_grad_()
            op(plain, plain.t())
    with torch.inference_mode():
        op(torch.ones(2, 3), torch.ones(3).t())


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_texts_match_python_through_changes_and_special_kinds(initialized):
    """The C writer's texts equal the Python path's after every in-place change of a tensor's shape,
    strides, dtype, device or requires_grad (its table must never serve a stale text), for Parameters
    of a module cast and moved, for the kinds it hands to Python (nested, sparse, mkldnn, quantized,
    zero, conjugate and negative views, more than eight dims, 0-dim), and for vmap's batched and
    functionalized tensors."""
    for _ in range(3):  # later rounds: texts from the table
        assert _script_texts(True, _mutations) == _script_texts(False, _mutations)
        assert _script_texts(True, _grad_kinds) == _script_texts(False, _grad_kinds)

    def transformed(op):
        x = torch.ones(3, 4, 5)
        torch.func.vmap(lambda t: (op(t, t.t()), t)[1])(x)
        torch.func.functionalize(lambda t: (op(t.add(1), t), t)[1])(x)

    assert _script_texts(True, transformed) == _script_texts(False, transformed)


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_no_op_ranges_while_jit_trace_records(initialized):
    """Ops run while torch.jit.trace records emit no op range on the C path (as on the Python path);
    ops after the trace emit theirs again."""
    with Recorder() as rec:
        with warnings.catch_warnings():  # newer torch warns that torch.jit.trace is deprecated
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(lambda t: torch.relu(t) * 2, torch.randn(3), check_trace=False)
        torch.relu(torch.ones(1))
    assert [p["op"] for p in rec.payloads("op") if p["op"] in ("relu", "mul", "__mul__")] == ["relu"]
    assert "aten::relu" in str(traced.graph)


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_route_reaches_the_c_path_on_every_refresh():
    """S.refresh() hands the C path its route bits (route_sink): options set by init() take effect
    there (nested ranges appear with nested=True and not without), and a set_route for another
    state object is ignored."""
    import pyprof
    from pyprof.annotate.state import S

    fast = ann_ops._fast

    x = torch.ones(2)

    def ranges():
        with Recorder() as rec:
            torch.nn.functional.relu(x)  # calls torch.relu inside
        return [p["op"] for p in rec.payloads("op")]

    for nested, want in ((True, ["relu", "relu"]), (False, ["relu"])):
        pyprof.init(nested=nested)
        try:
            assert fast.info()["route_kept"]
            assert ranges() == want
            fast.set_route(object(), 0 if nested else 4)  # not S: no effect
            assert ranges() == want
        finally:
            pyprof.deinit()
    assert S.route_sink is not None


def _sites_through_wrapper(fast: bool) -> list[str]:
    """The call sites of one op called from a generator, a comprehension, a lambda, an except
    block, a builtin (map) and another thread, twice each (the second time from the caches)."""
    import threading

    with _probe_op(fast) as op:
        x = torch.ones(1)

        def gen():
            yield op(x)

        def in_thread():
            t = threading.Thread(target=lambda: op(x))
            t.start()
            t.join()

        def in_except():
            try:
                raise KeyError("k")
            except KeyError:
                op(x)

        with Recorder() as rec:
            for _ in range(2):
                list(gen())
                [op(x) for _ in range(1)]  # noqa: B018
                (lambda: op(x))()
                in_except()
                list(map(op, [x]))
                in_thread()
    return [json.loads(t)["trace"][0] for t in rec.texts()]


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_call_sites_match_python_in_generators_comprehensions_threads(initialized):
    c_sites, py_sites = _sites_through_wrapper(True), _sites_through_wrapper(False)
    assert len(c_sites) == 12 and c_sites == py_sites
    assert len(set(c_sites)) == 6 and all(s.startswith("tests/test_annotate_payload.py:") for s in c_sites)


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_accelerator_raises_like_python_on_values_orjson_rejects(initialized):
    meta = OpMeta("torch", "add", torch.add)
    for big in (1 << 64, [1, 1 << 64], (-(1 << 63) - 1,)):
        with pytest.raises(TypeError):
            ann_ops._fast.build(meta, (torch.ones(1), big), {}, 1, None)


def _model_ranges(fast: bool, make, fail_at: str | None = None):
    """(depth, text with ids zeroed, closed?) of every range of a forward + backward (+ a forward
    that raises inside the module named ``fail_at``), with the C accelerator on or off."""
    import re

    saved = ann_ops._fast_call
    if not fast:
        ann_ops._fast_call = None
    try:
        torch.manual_seed(0)
        model, x = make()
        with Recorder() as rec:
            model(x).float().sum().backward()
            if fail_at is not None:
                sub = dict(model.named_modules())[fail_at]
                handle = sub.register_forward_hook(lambda *a: 1 / 0)
                with pytest.raises(ZeroDivisionError):
                    model(x)
                handle.remove()
                model(x)  # the stack is balanced again afterwards
        ids = re.compile(r'"(id|seq|nseq)":\[?\d+\]?')
        return [(r.depth, ids.sub("", r.text), r.end_ns >= 0) for r in rec.ranges]
    finally:
        ann_ops._fast_call = saved


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
@pytest.mark.parametrize("name,fail_at", [("lenet", None), ("resnet", "layer1.0"), ("transformer", "encoder.layers.0")])
def test_c_accelerator_records_the_same_ranges_as_python(initialized, name, fail_at):
    from tests.small_models import MODELS

    c = _model_ranges(True, MODELS[name], fail_at)
    py = _model_ranges(False, MODELS[name], fail_at)
    assert len(c) > 20 and any('"k":"mod"' in t for _, t, _ in c) and any('"k":"bwd"' in t for _, t, _ in c)
    assert c == py
    assert all(closed for _, _, closed in c)
