"""pyprof's FLOPs on the path the user runs equal torch's own count, forward and backward.

Each case trains a model of :mod:`scripts.validation.zoo` through ``pyprof run`` (torch.profiler with
``pyprof.init()``) -> records -> ``prof``, and compares the GEMM, convolution and attention FLOPs per
direction and per module (inclusive) with FlopCounterMode's formulas applied by a dispatch mode that
never sees pyprof's markers (:mod:`scripts.validation.reference`). ``python scripts/validate.py`` runs the
whole zoo, ResNet-50 and ViT-B/16 included; this is its fast subset.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scripts.validation import harness  # noqa: E402
from scripts.validation.zoo import CASES  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("name", ["gpt", "convnet_bf16", "custom_function", "lstm"])
def test_flops_per_direction_and_module_equal_torchs(name, tmp_path):
    o = harness.validate(name, steps=2, workdir=tmp_path)
    assert not o.error, o.error
    # not vacuous: every family the model exercises is counted on both sides, in both directions
    for fam in CASES[name].families:
        for d in ("fprop", "bprop"):
            assert o.total("torch", d, fam) > 0, (d, fam)
            assert o.total("pyprof", d, fam) > 0, (d, fam)
    assert not o.mismatches(), harness.table([o])
    assert len({m for (_, m, _) in o.torch}) > 2  # per-module totals really compared, not only the root
    # forward bytes of every nn.Linear / nn.Conv* layer equal a hand count from the shapes torch saw
    # (the custom Function's layers are not nn.Linear: nothing to count there)
    assert o.bytes_hand or name == "custom_function"
    assert not o.bytes_mismatches(), o.bytes_mismatches()


def test_a_wrong_backward_count_or_byte_count_is_caught(tmp_path):
    """The comparison fails when the backward is charged twice (the bug this harness exists for), and
    when one layer's bytes are off by 2%."""
    o = harness.validate("gpt", steps=1, workdir=tmp_path)
    assert not o.mismatches() and not o.bytes_mismatches() and o.ok
    o.pyprof = {k: v * (2 if k[0] == "bprop" else 1) for k, v in o.pyprof.items()}
    assert {m[0] for m in o.mismatches()} == {"bprop"}
    layer = next(iter(o.bytes_pyprof))
    o.bytes_pyprof[layer] *= 1.02
    assert [m[0] for m in o.bytes_mismatches()] == [layer] and not o.ok


def _table(workdir):
    from pyprof.prof import build_file

    return build_file(workdir / "records.dict", peak_flops=1e12, peak_bw=1e11, workers=1)


def test_checkpoint_recompute_is_its_own_direction(tmp_path):
    """A llama-style block under torch.utils.checkpoint (use_reentrant=False): the recomputed forward
    is ``recomp``, charged per module to the modules it re-runs (``layers.0.mlp.up_proj``, not the
    backward node's module), and equals torch's count of the ops that ran; the op at which the early
    stop raised (each block's ``down_proj``, stopped while saving its inputs) records time but no work."""
    o = harness.validate("checkpoint_llama", steps=1, workdir=tmp_path)
    assert not o.error, o.error
    for d in ("fprop", "bprop", "recomp"):
        for fam in ("gemm", "attention"):
            assert o.total("torch", d, fam) > 0 and o.total("pyprof", d, fam) > 0, (d, fam)
    assert o.pyprof.get(("recomp", "layers.0.mlp.up_proj", "gemm"), 0) > 0
    assert not o.mismatches(), harness.table([o])
    df = _table(tmp_path)
    stopped = df[(df["dir"] == "recomp") & (df["module"] == "layers.0.mlp.down_proj")]
    assert len(stopped) and (stopped["flops"] == 0).all() and (stopped["bytes"] == 0).all()
    assert (stopped["kernel"] == "aten::mm").any() and stopped["note"].str.contains("raised").all()
    raised = df[df["priced_by"] == "raised"]  # the early stop's ops, and no other
    assert (stopped["priced_by"] == "raised").all() and raised["module"].str.endswith(".mlp.down_proj").all()
    assert (raised["dir"] == "recomp").all() and (raised["flops"] == 0).all()
    assert (df.loc[(df["dir"] == "fprop") & (df["module"] == "layers.0.mlp.down_proj"), "flops"] > 0).any()


def test_packed_bidirectional_rnns(tmp_path):
    """nn.GRU and nn.LSTM (bidirectional) on a PackedSequence: aten's ``gru.data``/``lstm.data``
    arguments, the packed rows, and the reverse direction's first step of ``batch_sizes[-1]`` rows."""
    o = harness.validate("packed_rnn", steps=1, workdir=tmp_path)
    assert not o.error, o.error
    for m in ("gru", "lstm"):
        assert o.torch.get(("bprop", m, "gemm"), 0) > 0 and o.pyprof.get(("bprop", m, "gemm"), 0) > 0
    assert not o.mismatches(), harness.table([o])


def test_conv_transpose_cost_lands_on_the_op_that_did_the_work(tmp_path):
    """A UNet's ConvTranspose2d: its forward runs inside ``aten::_convolution`` (oneDNN's transposed
    convolution is no op of its own), which carries the FLOPs, not the as_strided_/clone/copy_ helpers."""
    o = harness.validate("unet", steps=1, workdir=tmp_path)
    assert not o.error and not o.mismatches(), harness.table([o])
    df = _table(tmp_path)
    up = df[(df["dir"] == "fprop") & (df["module"] == "up2")]
    work = up[up["kernel"] == "aten::_convolution"]
    assert len(work) and (work["flops"] > 0).all()
    assert up.loc[up["kernel"] != "aten::_convolution", "flops"].fillna(0).eq(0).all()
    assert work["flops"].sum() == pytest.approx(o.pyprof[("fprop", "up2", "conv")])
