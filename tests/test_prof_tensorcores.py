"""Tensor-core patterns (pyprof/data/tensor_cores.json) against real kernel names from the corpus."""

from __future__ import annotations

import sqlite3

import pytest

try:
    from conftest import corpus_file
except ImportError:  # tests/ collected as a package
    from tests.conftest import corpus_file

from pyprof.prof import tensorcores
from pyprof.prof.tensorcores import eligibility_note, tc_flag


def kernel_names(name: str) -> set[str]:
    """Distinct kernel names of one corpus file, read in place (nsys: short and demangled; nvprof: name)."""
    path = corpus_file(name)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "StringTable" in tables:
            q = ("select distinct s.value from CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k "
                 "join StringTable s on s._id_ = k.name")
            return {r[0] for r in con.execute(q)}
        out = set()
        for col in ("shortName", "demangledName"):
            q = f"select distinct s.value from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.{col}"
            out |= {r[0] for r in con.execute(q)}
        return out
    finally:
        con.close()


# (corpus file, a substring picking real kernel names in it, expected tc on the file's GPU architecture)
REAL = [
    # Ampere (RTX 3090, TensorRT): xmma implicit-GEMM convs with tensor16x8x16, h16816 GEMM
    ("LeiWang1999__memfusion", "sm80_xmma_fprop_implicit_gemm", "ampere", "1"),
    ("LeiWang1999__memfusion", "trt_ampere_h16816gemm", "ampere", "1"),
    ("LeiWang1999__memfusion", "sm50_xmma_pooling", "ampere", "-"),
    # Ampere (A100, cuDNN): TF32 tensor-op convs; fp32 SIMT GEMMs
    ("yyhtbs-yye__mmagic", "cutlass_tensorop_s1688fprop_optimized_tf32", "ampere", "1"),
    ("yyhtbs-yye__mmagic", "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32", "ampere", "1"),
    ("yyhtbs-yye__mmagic", "ampere_sgemm_64x32_sliced1x4_nn", "ampere", "0"),
    ("yyhtbs-yye__mmagic", "cutlass_80_simt_sgemm", "ampere", "0"),
    ("yyhtbs-yye__mmagic", "nchwToNhwcKernel", "ampere", "-"),
    ("jsun-012__assignment2", "ampere_sgemm_128x64_tn", "ampere", "0"),
    # Ampere (A40/A100, CUTLASS): MmaTensorOp in the demangled name only
    ("wenscarl__cutlass_benchmark", "MmaTensorOp", "ampere", "1"),
    # Hopper (H200): cuBLASLt nvjet kernels
    ("NVIDIA__Fuser__report1", "nvjet_tst_", "hopper", "1"),
    ("NVIDIA__Fuser__report3", "nvjet_hsh_", "hopper", "1"),
    # Volta (V100 / RTX 2070 SUPER on Turing): fp32 SIMT GEMMs and cuDNN fp32 kernels
    ("josiahdavis__profiling-lm", "volta_sgemm_128x64_tn", "volta", "0"),
    ("MohanadOdema__DLProf", "volta_scudnn_128x64_relu_interior_nn_v1", "turing", "0"),
    ("MohanadOdema__DLProf", "volta_scudnn_winograd_128x128", "turing", "0"),
    ("MohanadOdema__DLProf", "implicit_convolve_sgemm", "turing", "0"),
    ("MohanadOdema__DLProf", "volta_cgemm_32x32_tn", "turing", "0"),
    ("MohanadOdema__DLProf", "im2col4d_kernel", "turing", "-"),
    # elementwise kernels: not applicable
    ("jsun-012__assignment2", "vectorized_elementwise_kernel", "ampere", "-"),
    ("josiahdavis__profiling-lm", "softmax_warp_forward", "volta", "-"),
    # Maxwell (GeForce 840M): no tensor cores at all
    ("askliar__nlp-information-retrieval", "maxwell_sgemm_128x128_tn", "maxwell", "-"),
]


@pytest.mark.corpus
@pytest.mark.parametrize("file,part,arch,expected", REAL, ids=[f"{r[0][:12]}-{r[1][:24]}" for r in REAL])
def test_real_kernel_names(file, part, arch, expected):
    names = [n for n in kernel_names(file) if part in n]
    assert names, f"no kernel name containing {part!r} in {file}"
    for name in names:
        assert tc_flag(name, False, arch) == expected, name


# Names of architectures the corpus lacks (Volta fp16, Turing, Ampere fp16, Hopper, Blackwell), written as
# cuBLAS/cuDNN/CUTLASS spell them.
SYNTHETIC = [
    ("volta_h884gemm_64x64_ldg8_nn", "volta", "1"),
    ("volta_fp16_s884cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", "volta", "1"),
    ("volta_hmma_implicit_gemm_nhwc", "volta", "1"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "turing", "1"),
    ("turing_i8816gemm_int8_128x128_ldg16_tn", "turing", "1"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "ampere", "1"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x10_nn_align8", "ampere", "1"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "hopper", "1"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::SM90_64x128x16_F32BF16BF16_SS>> gmma", "hopper", "1"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT", "hopper", "1"),
    ("sm100_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_cluster2x1x1_execute_kernel", "blackwell", "1"),
    ("void cutlass::device_kernel<cutlass3x_sm100_tensorop_tcgen05_gemm_bf16>", "blackwell", "1"),
    # FlashAttention 2 computes with mma.sync tensor-core instructions (it needs fp16/bf16 and sm80+);
    # PyTorch's memory-efficient kernels use tensor cores for 16-bit types and, from sm80, for fp32 (TF32x3)
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::half_t>>", "ampere", "1"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "ampere", "1"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "ampere", "1"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm50", "ampere", "0"),
    # ROCm: Tensile/hipBLASLt kernels name their matrix-core (MFMA) instruction MIaxbxc
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1", None, "1"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<...>>", None, "1"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "pascal", "-"),
]


@pytest.mark.parametrize("name,arch,expected", SYNTHETIC)
def test_architecture_patterns(name, arch, expected):
    assert tc_flag(name, False, arch) == expected


def test_op_eligibility_decides_0_for_unnamed_kernels():
    # a kernel of a GEMM op whose name says nothing: 0 (eligible, not used); helpers stay '-'
    assert tc_flag("gemv2T_kernel_val", True, "ampere") == "0"
    assert tc_flag("void at::native::elementwise_kernel<128>", False, "ampere") == "-"
    assert tc_flag("splitKreduce_kernel", True, "ampere") == "-"
    assert tensorcores.is_gemm_op("linear") and tensorcores.is_gemm_op("conv2d")
    assert not tensorcores.is_gemm_op("relu")


def test_eligibility_notes():
    assert "TF32" in eligibility_note("0", "float32", "linear", [], "ampere")
    assert "autocast" in eligibility_note("0", "float32", "linear", [], "volta")
    args = [{"type": "tensor", "shape": [64, 100], "dtype": "float16"},
            {"type": "tensor", "shape": [256, 100], "dtype": "float16"}]
    assert eligibility_note("0", "float16", "linear", args, "ampere") == "dims not multiple of 8: 100"
    conv = [{"type": "tensor", "shape": [8, 3, 32, 32], "dtype": "float16"},
            {"type": "tensor", "shape": [64, 3, 3, 3], "dtype": "float16"}]
    assert eligibility_note("0", "float16", "conv2d", conv, "ampere") == "dims not multiple of 8: 3"
    assert eligibility_note("1", "float32", "linear", [], "ampere") == ""
    assert eligibility_note("-", "float32", "relu", [], "ampere") == ""


def test_every_architecture_from_volta_to_blackwell_has_patterns():
    arch = tensorcores.patterns()["architectures"]
    for a in ("volta", "turing", "ampere", "hopper", "blackwell"):
        assert arch[a]["tensor_cores"] and arch[a]["tensor"], a


def test_attention_eligibility_looks_at_the_head_dimension_not_the_sequence():
    """A bf16 flash kernel with sequence length 559 and head dim 64 is eligible: no 'dims' note."""
    q = {"name": "query", "type": "tensor", "shape": [2, 8, 559, 64], "dtype": "bfloat16"}
    note = tensorcores.eligibility_note("0", "bfloat16", "scaled_dot_product_attention", [q, q, q], "hopper")
    assert "multiple of 8" not in note
    odd = dict(q, shape=[2, 8, 559, 60])
    assert "60" in tensorcores.eligibility_note("0", "bfloat16", "scaled_dot_product_attention", [odd] * 3, "hopper")


def _h200_kernels() -> list[tuple[str, str]]:
    """(expected tc, kernel name) of every GEMM/conv/attention-like kernel an H200 ran, labelled by hand
    from what the names say (tests/fixtures/gpu/h200_gemm_kernels.tsv tells how)."""
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "gpu" / "h200_gemm_kernels.tsv"
    rows = [line.split("\t", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return [(tc, name) for tc, name in rows[1:]]


def test_h200_kernel_names_get_the_tensor_core_flag_their_names_state():
    rows = _h200_kernels()
    assert len(rows) > 100 and {tc for tc, _ in rows} == {"0", "1"}
    wrong = [(tc, name[:100]) for tc, name in rows if tc_flag(name, True, "hopper") != tc]
    assert wrong == []


def test_xmma_ffma_kernels_are_fp32_fma_not_tensor_cores():
    # cuBLAS/cuDNN xmma kernels built for FP32 FMA (fp32 without TF32) carry `_ffma_` in their names
    name = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
    assert tc_flag(name, True, "hopper") == "0"
    assert eligibility_note("0", "float32", "linear", [], "hopper").startswith("fp32 without TF32")
    tf32 = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8_aligna4_alignc4_execute_kernel__5x_cublas"
    assert tc_flag(tf32, True, "hopper") == "1"
