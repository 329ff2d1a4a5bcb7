"""pyprof's FLOPs on the path the user runs equal torch's own count, forward and backward.

Each case trains a model of :mod:`pyprof.validate.zoo` through ``pyprof run`` (torch.profiler with
``pyprof.init()``) -> records -> ``prof``, and compares the GEMM, convolution and attention FLOPs per
direction and per module (inclusive) with FlopCounterMode's formulas applied by a dispatch mode that
never sees pyprof's markers (:mod:`pyprof.validate.reference`). ``python scripts/validate.py`` runs the
whole zoo, ResNet-50 and ViT-B/16 included; this is its fast subset.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pyprof.validate import harness  # noqa: E402
from pyprof.validate.zoo import CASES  # noqa: E402

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
