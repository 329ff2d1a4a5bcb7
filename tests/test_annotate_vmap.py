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
