"""``init()``'s markers under ``torch.func`` transforms: a tensor batched by ``vmap`` carries its levels
(``"vmap": [[level, batch size], ...]``, its shape the per-sample one the op sees); an unbatched one
(a weight shared by the samples) none; the model prices the batch (registry ``_batched``)."""

from __future__ import annotations

import pytest

from pyprof.prof.ops import OpCall, estimate, tensor_arg

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _ops(fn):
    import pyprof
    from pyprof.annotate.recorder import Recorder

    pyprof.init()
    try:
        with Recorder() as rec:
            fn()
    finally:
        pyprof.deinit()
    return rec.payloads("op")


def test_markers_carry_vmap_levels():
    from torch.func import grad, vmap

    w = torch.randn(3, 4)

    def f(x):
        return torch.nn.functional.linear(x, w).sum()

    got = _ops(lambda: (vmap(grad(f))(torch.randn(5, 4)), vmap(vmap(f))(torch.randn(2, 5, 4)),
                        f(torch.randn(4))))
    lin = [m for m in got if m["op"] == "linear"]
    assert [a.get("vmap") for a in lin[0]["args"]] == [[[1, 5]], None] and lin[0]["args"][0]["shape"] == [4]
    assert lin[1]["args"][0]["vmap"] == [[2, 5], [1, 2]]  # nested: inner level first
    assert "vmap" not in lin[2]["args"][0]  # outside any transform: the plain marker


def test_markers_carry_tangent_levels():
    """Dual tensors of ``jvp`` carry ``"tangent"``: ``jacfwd``'s tangent batched over the basis (4 here),
    a Hessian-vector product's parameters (``jvp`` of ``grad``) unbatched; a captured weight none."""
    from torch.func import grad, jacfwd, jvp

    w, x = torch.randn(3, 4), torch.ones(4)
    lin = [m for m in _ops(lambda: (jacfwd(lambda x: torch.nn.functional.linear(x, w))(torch.randn(4)),
                                    jvp(grad(lambda v: torch.nn.functional.linear(x, v).sum()),
                                        (w,), (torch.ones_like(w),))))
           if m["op"] == "linear"]
    assert [a.get("tangent") for a in lin[0]["args"]] == [[[1, 4]], None]
    assert [a.get("tangent") for a in lin[1]["args"]] == [None, []]
    # priced: the primal, then per operand its tangent's product (zeros where it has none)
    plain = estimate(OpCall("linear", [tensor_arg([4]), tensor_arg([3, 4])], "fprop", None, "torch"))
    fwd = estimate(OpCall("linear", lin[0]["args"], "fprop", None, "torch"))
    assert fwd.flops == (1 + 4 + 1) * plain.flops


def test_batched_cost_by_hand():
    x = tensor_arg([1, 800])
    plain = estimate(OpCall("linear", [x, tensor_arg([10, 800]), tensor_arg([10])], "fprop", None, "torch"))
    batched = estimate(OpCall("linear", [{**x, "vmap": [[1, 16]]}, tensor_arg([10, 800]), tensor_arg([10])],
                              "fprop", None, "torch"))
    # 16 samples: 16 times the GEMM; input and output 16 times, the shared weight and bias once
    assert batched.flops == 16 * plain.flops == 2 * 16 * 800 * 10
    assert batched.bytes == 4 * (16 * 800 + 10 * 800 + 10 + 16 * 10)
    # levels of two arguments multiply (vmap over an ensemble's weights and over samples)
    w = {**tensor_arg([10, 800]), "vmap": [[2, 3]]}
    both = estimate(OpCall("linear", [{**x, "vmap": [[1, 16]]}, w], "fprop", None, "torch"))
    assert both.flops == 48 * 2 * 800 * 10


def test_nsight_backward_under_vmap_is_priced_for_its_batch(tmp_path):
    """An Nsight export (synthetic, tests/nsys_synth.py) of a linear whose backward ran under ``vmap``
    (``jacrev``: the ``bwd`` marker carries the levels): its backward is priced for the 10 batched runs."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_synth import Export

    from pyprof.parse import open_source
    from pyprof.prof import build

    ex = Export()
    t = ex.track(name="python")
    x = '{"name":"input","type":"tensor","shape":[8,32],"dtype":"float32","grad":true}'
    w = '{"name":"weight","type":"tensor","shape":[16,32],"dtype":"float32","grad":true}'
    for i, vmap in ((1, ""), (2, ',"vmap":[[1,10]]')):
        with t.range('{"pyprof":1,"k":"op","ns":"torch.nn.functional","op":"linear","args":[' + x + "," + w
                     + f'],"id":{i},"seq":[{i}]}}', domain="pyprof"):
            t.launch("ampere_sgemm_32x32_sliced1x4_tn")
        with t.range(f'{{"pyprof":1,"k":"bwd","node":"MmBackward0","seq":{i},"id":{i},"nseq":{i}' + vmap + "}",
                     domain="pyprof"):
            t.launch("ampere_sgemm_32x32_sliced1x4_nn")
    ex.write(tmp_path / "x.sqlite")
    df = build(open_source(tmp_path / "x.sqlite").records(), peak_flops=1e12, peak_bw=1e11)
    fwd, plain, fwd2, batched = df["flops"].tolist()
    assert fwd == fwd2 == 2 * 8 * 32 * 16 and plain == 2 * fwd  # dX and dW
    assert batched == 10 * plain


def test_per_sample_grad_of_a_shared_input_equals_flopcountermode(tmp_path):
    """Per-sample gradients (``vmap(grad(...))``) through a linear projection of a tensor the
    loss captures, shared by the samples (a decoder's ``memory``): its forward runs once, unbatched, its
    backward batched (each sample's gradient flows into it) and only for the weight (the captured tensor
    is a constant to ``grad``). pyprof's GEMM FLOPs per direction equal FlopCounterMode's in the same run."""
    from torch.func import grad, vmap
    from torch.utils.flop_counter import FlopCounterMode

    from scripts.validation.catalogue import profiled_table

    w, b, mem, x = torch.randn(16, 8), torch.randn(16), torch.randn(5, 8, requires_grad=True), torch.randn(4, 5, 16)

    def step():  # (F.linear, not a module: FlopCounterMode's module hooks fail on a captured tensor)
        vmap(grad(lambda w, xb: (torch.nn.functional.linear(mem, w, b) * xb).sum()), in_dims=(None, 0))(w, x)

    with FlopCounterMode(display=False) as fc:
        step()
    counts = {str(op): n for op, n in fc.get_flop_counts()["Global"].items()}
    assert counts == {"aten.addmm": 2 * 5 * 8 * 16, "aten.mm": 4 * 2 * 5 * 8 * 16}  # the forward once, dW 4 times
    df = profiled_table(step, tmp_path)
    lin_rows = df[df["op"] == "linear"]
    got = lin_rows.groupby("dir")["flops"].sum().to_dict()
    assert got == pytest.approx({"fprop": counts["aten.addmm"], "bprop": counts["aten.mm"]})
