"""Per op instance against AMD TraceLens on its four H100 traces (scripts/compare_tracelens.py).

The reference here is the hand count of ``compare_tracelens.hand_instances``: TraceLens' conventions
applied to the shapes each trace recorded, with no code of pyprof's models (TraceLens itself is no
dependency; run with it installed, the script compares with its own GFLOPS). Every GEMM, convolution
and attention instance must be within 2% of it or differ by a documented convention, and no kernel
may run above its peak FLOP/s or bandwidth.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

try:
    from conftest import CORPUS, REPO
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS, REPO


def _script():
    name = "compare_tracelens"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "compare_tracelens.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# GEMM/conv/SDPA instances TraceLens 0.1.0 (TreePerfAnalyzer.build_df_unified_perf_table, categories
# GEMM, CONV_fwd, SDPA_fwd) finds on each trace
TRACELENS_INSTANCES = {
    "Falconsai_nsfw_image_detection": 86,
    "Qwen_Qwen1.5-0.5B-Chat": 193,
    "facebook_timesformer-base-finetuned-k400": 134,
    "gaunernst_bert-small-uncased": 30,
}


def _trace(part: str):
    paths = sorted((CORPUS / "kineto").glob(f"AMD-AGI__TraceLens__{part}__*.json.gz"))
    if not paths:
        pytest.skip(f"TraceLens trace {part} not in the corpus")
    return paths[0]


@pytest.mark.parametrize("part", list(TRACELENS_INSTANCES))
def test_every_instance_agrees_and_no_kernel_above_peak(part):
    ct = _script()
    outcome, used = ct.compare(_trace(part), reference="hand")
    assert used == "hand"
    assert outcome.instances == TRACELENS_INSTANCES[part]
    unexplained = [d for d in outcome.differ if d[3] == "unexplained"]
    assert not unexplained, unexplained[:5]
    assert outcome.agree + len(outcome.differ) == outcome.instances
    assert outcome.on_gemm_kernel == outcome.instances  # FLOPs on the GEMM kernel, not the helpers beside it
    assert outcome.above_peak == 0
    assert 0 < outcome.max_flops_ratio < 1 and 0 < outcome.max_bw_ratio < 1
    assert outcome.ok


def test_hand_count_formulas():
    ct = _script()
    # a ViT patch embedding: 16x16 stride-16 conv of 224x224 RGB into 768 channels, with bias
    flops, bias = ct.conv_flops([[4, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], [], [], []],
                                ["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"])
    assert bias == 4 * 768 * 14 * 14
    assert flops == 2 * 4 * 768 * 14 * 14 * 3 * 16 * 16 + bias
    # transposed: every input element meets C_out/groups * k*k weights
    flops, _ = ct.conv_flops([[1, 8, 5, 5], [8, 4, 3, 3], []],
                             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"])
    assert flops == 2 * 8 * 25 * 4 * 9
    assert ct.gemm_flops("aten::addmm", [[3072], [788, 768], [768, 3072]]) == (
        2 * 788 * 3072 * 768 + 788 * 3072, 788 * 3072)
    assert ct.gemm_flops("aten::bmm", [[96, 3137, 64], [96, 64, 3137]])[0] == 2 * 96 * 3137 * 3137 * 64
    q = [16, 16, 559, 64]
    assert ct.attention_flops([q, q, q], ["", "", "", "0.", "True"], "aten::_scaled_dot_product_flash_attention")[0] \
        == 2 * 16 * 16 * 559 * 559 * 128 / 2  # causal: half


def test_a_difference_needs_a_convention():
    ct = _script()
    ref = ct.Instance("aten::addmm", 2 * 10 * 20 * 30 + 10 * 20, frozenset({1}), bias_flops=10 * 20)
    assert ct.convention(ref, 2 * 10 * 20 * 30).startswith("bias epilogue")
    assert ct.convention(ref, 0.5 * ref.flops) == "unexplained"
    assert ct.convention(ref, float("nan")) == "unexplained"


def test_a_training_trace_agrees_on_the_backward_that_ran():
    """The MI250 (ROCm) training trace: its first and only linear layer's backward ran one aten::mm (dW:
    the input needs no gradient). The trace records no requires_grad; pyprof prices the backward on
    the aten op that ran (pyprof/prof/backward.py), dW alone, as TraceLens counts it."""
    ct = _script()
    path = CORPUS / "kineto" / "facebookresearch__HolisticTraceAnalysis__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.is_file():
        pytest.skip("MI250 trace not in the corpus")
    outcome, _ = ct.compare(path, reference="hand")
    assert outcome.instances == 2 and outcome.agree == 2 and outcome.differ == []
