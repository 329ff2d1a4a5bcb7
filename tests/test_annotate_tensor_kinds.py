"""Every kind of tensor gets its op marker, with the kind said in the argument (see pyprof.markers).

Nested, sparse (COO, CSR, CSC, BSR), quantized, mkldnn and meta tensors, a DTensor-like
``__torch_dispatch__`` wrapper subclass and a ``__torch_function__`` subclass: the op is marked, each
tensor argument says what it is (``"kind"``, ``"cls"`` for a subclass; a nested tensor's ragged shape
is ``null``), the op's result is what it is without pyprof, describing the arguments dispatches no
aten op (no ``.item()``, no copy: nothing that could synchronise a GPU), and the C accelerator writes
the same bytes as the pure-Python path.
"""

from __future__ import annotations

import re
import warnings

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from pyprof import markers  # noqa: E402
from pyprof.annotate import describe  # noqa: E402
from pyprof.annotate import ops as ann_ops  # noqa: E402
from pyprof.annotate.ops import OpMeta, build_payload  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402

HAS_MKLDNN = torch.backends.mkldnn.is_available()
# what torch says of these kinds themselves (beta, deprecated, prototype) is not the test's business
pytestmark = [pytest.mark.filterwarnings("ignore:Sparse (CSR|CSC|BSR|BSC) tensor support is in beta"),
              pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")]


class Sharded(torch.Tensor):
    """A DTensor-like wrapper subclass: the outer tensor carries the metadata (as DTensor carries the
    global shape), the data lives in ``local``; ``__torch_dispatch__`` unwraps, runs the aten op on
    the local tensors and wraps the result, logging every aten op it sees in ``Sharded.seen``."""

    seen: list[str] = []

    @staticmethod
    def __new__(cls, local):
        return torch.Tensor._make_wrapper_subclass(cls, local.shape, strides=local.stride(), dtype=local.dtype,
                                                   device=local.device, requires_grad=local.requires_grad)

    def __init__(self, local):
        self.local = local

    __torch_function__ = torch._C._disabled_torch_function_impl  # as DTensor: dispatch level only

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(str(func))

        def unwrap(x):
            if isinstance(x, Sharded):
                return x.local
            if isinstance(x, (list, tuple)):
                return type(x)(unwrap(y) for y in x)
            return x

        out = func(*unwrap(args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return Sharded(out) if isinstance(out, torch.Tensor) else out


class Logged(torch.Tensor):
    """A ``__torch_function__`` subclass (the default behaviour, results stay ``Logged``)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def _nested():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested tensor API is a prototype: it says so
        return torch.nested.nested_tensor([torch.arange(6.0).reshape(2, 3), torch.arange(12.0).reshape(4, 3)])


def _jagged():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.arange(6.0).reshape(2, 3), torch.arange(12.0).reshape(4, 3)],
                                          layout=torch.jagged)


def _dense():
    return torch.arange(12.0).reshape(3, 4) - 5


def _arg(shape, kind=None, cls=None, dtype="float32", device="cpu", contig=True, grad=False):
    """The expected description of argument ``input`` of ``torch.clone``."""
    d = {"name": "input", "type": "tensor", "shape": shape, "dtype": dtype, "device": device, "contig": contig,
         "grad": grad}
    if kind is not None:
        d["kind"] = kind
    if cls is not None:
        d["cls"] = cls
    return d


# label -> (make the tensor, an op to run on it, the expected description of it as torch.clone's input)
KINDS = {
    "nested": (_nested, lambda t: F.relu(torch.add(t, t)), _arg(None, "nested")),
    "nested_jagged": (_jagged, lambda t: torch.add(t, t).sin(), _arg(None, "nested", "NestedTensor")),
    "sparse_coo": (lambda: _dense().to_sparse(), lambda t: torch.mm(t, torch.ones(4, 2)),
                   _arg([3, 4], "sparse_coo", contig=False)),
    "sparse_csr": (lambda: _dense().to_sparse_csr(), lambda t: torch.mm(t, torch.ones(4, 2)),
                   _arg([3, 4], "sparse_csr", contig=False)),
    "sparse_csc": (lambda: _dense().to_sparse_csc(), lambda t: torch.add(t, t),
                   _arg([3, 4], "sparse_csc", contig=False)),
    "sparse_bsr": (lambda: torch.arange(16.0).reshape(4, 4).to_sparse_bsr((2, 2)), lambda t: torch.add(t, t),
                   _arg([4, 4], "sparse_bsr", contig=False)),
    "quantized": (lambda: torch.quantize_per_tensor(_dense(), 0.1, 3, torch.quint8), lambda t: F.relu(t).dequantize(),
                  _arg([3, 4], "quantized", dtype="quint8")),
    "quantized_per_channel": (
        lambda: torch.quantize_per_channel(_dense(), torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2]), 0,
                                           torch.qint8),
        lambda t: t.dequantize(), _arg([3, 4], "quantized", dtype="qint8")),
    "meta": (lambda: torch.empty(3, 4, device="meta"), lambda t: torch.add(t, 1).t(), _arg([3, 4], device="meta")),
    "subclass_dispatch": (lambda: Sharded(_dense()), lambda t: F.relu(torch.add(t, t)),
                          _arg([3, 4], "subclass", "Sharded")),
    "subclass_function": (lambda: _dense().as_subclass(Logged), lambda t: torch.add(t, t).relu(),
                          _arg([3, 4], "subclass", "Logged")),
}
if HAS_MKLDNN:
    KINDS["mkldnn"] = (lambda: _dense().to_mkldnn(), lambda t: torch.add(t, t).to_dense(), _arg([3, 4], "mkldnn"))


def _plain(x):
    """A result as something torch.equal can compare (dense, plain class), or its metadata for meta."""
    if isinstance(x, Sharded):
        x = x.local
    if type(x) is not torch.Tensor and isinstance(x, torch.Tensor):
        x = x.as_subclass(torch.Tensor) if not x.is_nested else x
    if x.is_nested:  # its components (torch 2.4 has no to_padded_tensor for the jagged layout)
        return (*x.unbind(), x.dtype)
    if x.is_meta:
        return (tuple(x.shape), x.dtype, x.stride())
    if x.is_quantized:
        return (x.int_repr(), x.qscheme())
    if x.layout is not torch.strided:
        return x.to_dense()
    return x


def _same(a, b) -> bool:
    a, b = _plain(a), _plain(b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                                        for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("label", list(KINDS))
def test_every_kind_is_marked_with_its_kind_and_runs_the_same(label):
    """The op is marked (no error swallowed into a missing marker), the tensor says its kind, and the
    op's result is exactly what it is without pyprof."""
    import pyprof

    make, op, want = KINDS[label]
    expected = op(make())  # without pyprof
    pyprof.init()
    try:
        t1, t2 = make(), make()
        with Recorder() as rec:
            torch.clone(t1)
            got = op(t2)
    finally:
        pyprof.deinit()
    ops = rec.payloads("op")
    assert [p["op"] for p in ops[:1]] == ["clone"], rec.texts()
    assert ops[0]["args"] == [want]
    # the ops run on it were marked too, and say the same of it
    tensors = [a for p in ops[1:] for a in p["args"] if a.get("type") == "tensor"]
    assert any({**a, "name": "input"} == want for a in tensors), rec.texts()
    assert _same(got, expected)


def test_uninitialized_parameter_is_marked_and_fails_as_without_pyprof():
    """A lazy module's parameter has no shape and refuses is_contiguous (a subclass whose
    ``__torch_function__`` raises): the marker keeps the facts it can read, the op raises as before."""
    import pyprof

    w, x = torch.nn.parameter.UninitializedParameter(), torch.ones(2, 3)
    with pytest.raises((ValueError, RuntimeError)) as plain:
        F.linear(x, w)
    pyprof.init()
    try:
        with Recorder() as rec, pytest.raises(type(plain.value)):
            F.linear(x, w)
    finally:
        pyprof.deinit()
    (p,) = rec.payloads("op")
    assert p["op"] == "linear"
    assert p["args"][1] == {"name": "weight", "type": "tensor", "shape": None, "dtype": "float32", "device": "cpu",
                            "contig": None, "grad": True, "kind": "subclass", "cls": "UninitializedParameter"}


def test_describing_dispatches_no_aten_op():
    """Describing a wrapper subclass runs nothing at the aten level (no .item(), no copy, no
    is_contiguous through __torch_dispatch__): the ops its __torch_dispatch__ sees are the same with
    pyprof as without."""
    import pyprof

    def run():
        Sharded.seen.clear()
        x = Sharded(_dense())
        F.relu(torch.add(x, x)).sum(dim=0)
        torch.clone(x)
        return list(Sharded.seen)

    without = run()
    pyprof.init()
    try:
        with Recorder() as rec:
            with_pyprof = run()
    finally:
        pyprof.deinit()
    assert len(rec.payloads("op")) >= 4
    assert with_pyprof == without
    assert not any("_local_scalar_dense" in s or "copy" in s for s in with_pyprof)


def test_nested_tensor_requiring_grad_is_marked_with_its_seq():
    """A nested tensor that requires grad: marked with the autograd sequence number, its backward
    hooked, gradients as without pyprof."""
    import pyprof

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nt = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], requires_grad=True)
        y = torch.nested.to_padded_tensor(torch.mul(nt, 3.0), 0.0)
        y.sum().backward()
        return nt.grad

    expected = run()
    pyprof.init()
    try:
        with Recorder() as rec:
            got = run()
    finally:
        pyprof.deinit()
    mul = [p for p in rec.payloads("op") if p["op"] == "mul"]
    assert mul and mul[0]["args"][0]["kind"] == "nested" and mul[0]["args"][0]["grad"] is True
    assert "seq" in mul[0]
    assert _same(got, expected)


# -- the text form, byte for byte: dict encoding, pure Python, C accelerator -----------------------
def _all_kinds() -> list:
    return [make() for make, _, _ in KINDS.values()] + [torch.nn.parameter.UninitializedParameter()]


def test_text_is_byte_identical_to_the_dict_encoding():
    """:func:`describe.args_json` (what markers are built from) equals ``orjson`` of :func:`describe.args`,
    for every kind alone, next to plain tensors, in a tensor list and as a keyword argument."""
    meta = OpMeta("torch", "add", torch.add)
    names = meta.arg_names()
    for t in _all_kinds():
        for args, kwargs in (((t,), {}), ((torch.ones(2), t, 1.5), {}), (([t, torch.ones(1), t],), {}),
                             ((torch.ones(1),), {"other": t})):
            text = build_payload(meta, args, kwargs, 7, None)
            got = markers.decode(text)
            p = {"pyprof": markers.VERSION, "k": "op", "ns": "torch", "op": "add",
                 "args": describe.args(args, kwargs, names), "id": 7, "trace": got["trace"]}
            assert text == markers.encode(p)


def _texts(fast: bool, calls) -> list[str]:
    """Payload texts of ``calls`` (real instrumented torch functions) with the C accelerator on or off."""
    saved = ann_ops._fast_call
    if not fast:
        ann_ops._fast_call = None
    try:
        with Recorder() as rec:
            for fn, args in calls:
                fn(*args)  # one call site for all: the trace must match too
    finally:
        ann_ops._fast_call = saved
    return [re.sub(r',"seq":\[\d+\],', ',"seq":[0],', re.sub(r',"id":\d+,', ',"id":0,', t)) for t in rec.texts()]


def _refusing(fn):
    """``fn``, where an op refusing a kind of tensor (as it does without pyprof) is no failure here."""
    def call(*a):
        try:
            fn(*a)
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            pass
    return call


def _run_kind_calls(fast: bool) -> list[str]:
    """Each kind twice (the second time from every cache), beside plain tensors of the same shape,
    dtype, device and contiguity (a cached plain text must never be served for another kind, nor the
    other way round), alone and in tensor lists."""
    calls = []
    for t in _all_kinds():
        try:
            twin = torch.empty([int(d) for d in t.shape])
        except Exception:  # noqa: BLE001 - no plain shape (nested, uninitialized)
            twin = torch.empty(2, 3)
        calls += [(torch.clone, (twin,)), (torch.clone, (t,)), (torch.clone, (twin,)), (torch.clone, (t,)),
                  (torch.add, (t, t)), (torch.stack, ([twin, t],)), (torch.cat, ([t, twin],))]
    return _texts(fast, [(_refusing(fn), args) for fn, args in calls])


@pytest.mark.skipif(ann_ops._fast is None, reason="the C accelerator is not built here (or PYPROF_PURE_PYTHON=1)")
def test_c_accelerator_writes_the_same_bytes_for_every_kind(initialized):
    for _ in range(2):
        c_texts = _run_kind_calls(True)
        py_texts = _run_kind_calls(False)
        assert c_texts == py_texts
        assert sum('"kind":' in t for t in c_texts) >= 2 * (len(KINDS) - 1)  # meta has no kind
