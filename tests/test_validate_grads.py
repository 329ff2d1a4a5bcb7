"""Higher-order gradients and torch.func transforms through the path a user runs (``pyprof run`` ->
records -> ``prof``), against torch's own count (FlopCounterMode's formulas by a dispatch mode that never
sees pyprof's markers: scripts/validation/reference.py), per direction and per module.

The cases are scripts/validation/grads.py's: a WGAN-GP critic step (``autograd.grad(create_graph=True)``
then ``backward()`` through it: each layer's backward runs twice and its backward's backward once),
per-sample gradients (``vmap(grad(functional_call(...)))``: every op runs batched while it sees one
sample), and held-out models of the same kinds (an MLP and a LayerNorm block under the penalty; a
``vmap(jacrev(...))`` of a conv net, whose backward runs batched over the outputs; an ensemble's
``vmap`` over stacked weights)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scripts.validation import harness  # noqa: E402
from scripts.validation.zoo import CASES  # noqa: E402
from tests.conftest import read_record_file  # noqa: E402

pytestmark = pytest.mark.torch


def _check(o) -> None:
    assert not o.error, o.error
    for fam in CASES[o.name].families:
        for d in ("fprop", "bprop"):
            assert o.total("torch", d, fam) > 0 and o.total("pyprof", d, fam) > 0, (d, fam)
    assert not o.mismatches(), harness.table([o])
    assert len({m for (_, m, _) in o.torch}) > 2  # per module, not only the root


def test_gradient_penalty(tmp_path):
    """WGAN-GP on a conv critic: equal to torch's count per direction and module; each run of a layer's
    backward is an instance of its own, priced for the gradients that run computed; the double backward
    (``_convolution_double_backward``) is priced and charged to the layer whose backward it differentiates;
    no working backward record is left unpriced."""
    o = harness.validate("wgan_gp", steps=1, workdir=tmp_path)
    _check(o)
    recs = read_record_file(tmp_path / "records.dict")
    df = o.frame
    # the interpolate's conv1 backward ran twice: inside autograd.grad (input gradient alone: the weight's
    # was not asked for) and inside backward() (both): two instances, the second's id a later run's
    runs = {r["opId"]: r["args"][1]["grad"] for r in recs if r["op"] == "conv2d" and r["dir"] == "bprop"
            and r["layer"][-1] == "conv1" and r["kShortName"] == "aten::convolution_backward"}
    assert sorted(runs.values()) == [False, True, True, True] and any(i >= 1 << 40 for i in runs)
    double = df[df["op"] == "_convolution_double_backward"]
    assert set(double["module"]) == {"conv1", "conv2"} and double["flops"].sum() > 0
    assert set(double["dir"]) == {"bprop2"}  # a direction that names the double backward
    second = set(df.loc[df["dir"] == "bprop2", "op"])  # the double backward's ops: the first backward's conv2d none
    assert "_convolution_double_backward" in second and "conv2d" not in second and "leaky_relu_backward" in second
    assert (df.loc[(df["dir"] == "bprop") & df["op"].notna() & (df["kind"] == "kernel"), "flops"].notna()).all()
    nodes = {r["bwdNode"] for r in recs if r["bwdNode"] and "BackwardBackward" in r["bwdNode"]}
    assert {"ConvolutionBackwardBackward0", "LeakyReluBackwardBackward0"} <= nodes
    assert all(r["layer"] for r in recs if r["bwdNode"] in nodes)  # every double-backward record has a module


@pytest.mark.parametrize("name", ["mlp_gp", "ln_gp"])
def test_gradient_penalty_held_out(name, tmp_path):
    """Models the fix was not built on: an MLP (Tanh, Softplus: their double backwards' own ops) and a
    LayerNorm + GELU block (a norm's double backward, run as its aten decomposition)."""
    _check(harness.validate(name, steps=1, workdir=tmp_path))


@pytest.mark.parametrize("name", ["per_sample_grad", "jacrev_conv", "ensemble_mlp"])
def test_torch_func_transforms(name, tmp_path):
    """Ops under ``torch.func.vmap`` are priced at the batch the kernels ran (the forward bytes of each
    layer too, against the batched tensors the transform's wrappers hold), at every nesting."""
    o = harness.validate(name, steps=1, workdir=tmp_path)
    assert not o.error, o.error
    directions = ("fprop",) if name == "ensemble_mlp" else ("fprop", "bprop")
    for fam in CASES[name].families:
        for d in directions:
            assert o.total("torch", d, fam) > 0 and o.total("pyprof", d, fam) > 0, (d, fam)
    assert not o.mismatches() and not o.bytes_mismatches(), harness.table([o])


@pytest.mark.parametrize("name", ["jacfwd_mlp", "hvp_mlp", "jacfwd_conv", "hvp_conv", "hvp_ln"])
def test_forward_mode_transforms(name, tmp_path):
    """Forward-mode AD (``jacfwd``: ``vmap`` over ``jvp``; a Hessian-vector product: ``jvp`` of ``grad``)
    runs each op's tangent formula inside its call, one product per operand (zeros for an operand with no
    tangent), at the tangent's batch: equal to torch's count per direction and module (the forward bytes
    are not compared: the hand count has only the primal tensors). Built on the MLP; the conv net and the
    LayerNorm block held out."""
    o = harness.validate(name, steps=1, workdir=tmp_path)
    assert not o.error, o.error
    for fam in CASES[name].families:
        for d in ("fprop",) if name.startswith("jacfwd") else ("fprop", "bprop"):
            assert o.total("torch", d, fam) > 0 and o.total("pyprof", d, fam) > 0, (d, fam)
    assert not o.mismatches(), harness.table([o])
