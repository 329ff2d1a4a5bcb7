"""pyprof.init() on LeNet, a small ResNet and a small Transformer: payloads, paths, backward, identity."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import pyprof  # noqa: E402
from pyprof import markers  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402
from tests.small_models import MODELS  # noqa: E402

THIS = os.path.basename(__file__)



def _run(model, x):
    """Forward and backward; returns the output and the grads (detached clones)."""
    model.zero_grad(set_to_none=True)
    out = model(x)  # the call site the payloads must name
    out.float().sum().backward()
    return out.detach().clone(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_module_forward_has_its_path(name, initialized):
    model, x = MODELS[name]()
    called = []  # oracle: the modules whose forward actually runs, from per-module hooks
    handles = [m.register_forward_pre_hook(lambda mod, inp, n=n: called.append(n))
               for n, m in model.named_modules()]
    with Recorder() as rec:
        model(x)
    for h in handles:
        h.remove()
    paths = [p["path"] for p in rec.payloads("mod")]
    assert paths == called  # every forward, in call order, with its named_modules() path
    classes = {p["path"]: p["cls"] for p in rec.payloads("mod")}
    for n, m in model.named_modules():
        if n in classes:
            assert classes[n] == type(m).__name__
    assert not rec.open_ranges()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_op_payloads_decode_with_shapes_dtypes_and_call_site(name, initialized):
    model, x = MODELS[name]()
    with Recorder() as rec:
        line = _line_of_model_call()
        model(x)
    ops = rec.payloads("op")
    assert ops, "no op ranges recorded"
    for p in ops:
        assert p["ns"] in ("torch", "torch.Tensor", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special")
        assert isinstance(p["id"], int)
        for a in p["args"]:
            if a["type"] == "tensor":
                assert a["dtype"] == "float32" or a["dtype"] == "int64"
                assert a["device"] == "cpu"
    # the first op of the model sees the model's input as its first tensor argument
    first_tensor = next(a for a in ops[0]["args"] if a["type"] == "tensor")
    assert first_tensor["shape"] == list(x.shape)
    # ops run inside the model's own modules, so their call site is the model file; ops called
    # at the top of forward belong to this file only through the module call below
    sites = {t for p in ops for t in p["trace"]}
    assert any("small_models.py" in s for s in sites)
    # a direct op call in this test names this file and line
    with Recorder() as rec2:
        y = torch.relu(x.float()); here = _lineno()  # noqa: E702
    relu = [p for p in rec2.payloads("op") if p["op"] == "relu"]
    assert relu and relu[0]["trace"][0].endswith(f"{THIS}:{here}:test_op_payloads_decode_with_shapes_dtypes_and_call_site")
    assert relu[0]["args"][0]["shape"] == list(x.shape) and y.shape == x.shape
    del line


def _lineno() -> int:
    import sys

    return sys._getframe(1).f_lineno


def _line_of_model_call() -> int:
    return _lineno()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ops_nest_inside_their_module(name, initialized):
    model, x = MODELS[name]()
    with Recorder() as rec:
        model(x)
    by_cls = {}
    for p in rec.payloads("op"):
        mods = [q for q in p["_parents"] if q["k"] == "mod"]
        assert mods, f"op {p['op']} outside any module"
        by_cls.setdefault(mods[-1]["cls"], set()).add(p["op"])
    if name == "lenet":
        assert "conv2d" in by_cls["Conv2d"] and "linear" in by_cls["Linear"]
    if name == "resnet":
        assert "batch_norm" in by_cls["BatchNorm2d"]
    if name == "transformer":
        assert "embedding" in by_cls["Embedding"]
        assert {"linear", "scaled_dot_product_attention"} <= by_cls["MultiheadAttention"]  # inner ops of the composite MHA


@pytest.mark.parametrize("name", sorted(MODELS))
def test_backward_ranges_carry_the_forward_seq_and_id(name, initialized):
    model, x = MODELS[name]()
    with Recorder() as rec:
        model(x).sum().backward()
    ops = rec.payloads("op")
    bwd = rec.payloads("bwd")
    assert len(bwd) >= 5
    fwd_seqs = {s for p in ops for s in p.get("seq", [])}
    by_id = {p["id"]: p for p in ops}
    for b in bwd:
        assert b["seq"] in fwd_seqs, f"bwd {b['node']} seq {b['seq']} matches no forward op"
        op = by_id[b["id"]]
        assert b["seq"] in op["seq"] and b["nseq"] >= b["seq"]
        assert b["node"].endswith("Backward0") or b["node"].endswith("Backward1") or "Backward" in b["node"]
    nodes = {b["node"] for b in bwd}
    if name in ("lenet", "resnet"):
        assert "ConvolutionBackward0" in nodes
        conv = [b for b in bwd if b["node"] == "ConvolutionBackward0"]
        assert all(by_id[b["id"]]["op"] == "conv2d" for b in conv)
    assert not rec.open_ranges()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_outputs_and_grads_bitwise_identical_with_and_without_init(name):
    model, x = MODELS[name]()
    torch.manual_seed(1)
    ref_out, ref_grads = _run(model, x)
    pyprof.init()
    try:
        with Recorder() as rec:
            torch.manual_seed(1)
            out, grads = _run(model, x)
        assert rec.payloads("op")
    finally:
        pyprof.deinit()
    assert torch.equal(ref_out, out)
    for a, b in zip(ref_grads, grads, strict=True):
        assert torch.equal(a, b)


def test_recorder_payloads_parents_are_decoded_outermost_first(initialized):
    model, x = MODELS["transformer"]()
    with Recorder() as rec:
        model(x)
    deep = [p for p in rec.payloads("op") if any(q.get("path", "").endswith("self_attn") for q in p["_parents"])]
    assert deep
    paths = [q["path"] for q in deep[0]["_parents"] if q["k"] == "mod"]
    assert paths[0] == "" and paths[-1].startswith("encoder.layers.") and paths[-1].endswith("self_attn")
    for r in rec.ranges:
        assert markers.is_pyprof(r.text) and r.domain == markers.DOMAIN and r.end_ns >= r.start_ns
        assert r.depth == len(r.parents)
