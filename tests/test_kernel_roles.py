"""Kernel roles (pyprof/kernel_roles.py, the patterns of pyprof/data/tensor_cores.json) on every real kernel
name of the corpus' torch.profiler traces.

The oracle is the trace itself, read here without pyprof's parser: the aten op that launched each
kernel (the innermost CPU op around its CUDA launch, joined by correlation id). A kernel launched by an
op that does no GEMM, convolution or attention (``aten::copy_``, ``aten::add``, ``aten::layer_norm``...)
must never carry a GEMM's cost, and every GEMM, convolution or attention op that launched kernels must
have at least one kernel recognised as its compute kernel by name: cuBLAS, cuBLASLt, CUTLASS 2/3
(``Kernel``/``Kernel2`` whose demangled name is ``cutlass::Kernel2<...>``), cuDNN, flash attention,
ROCm Tensile (``Cijk_*``) on the MI250 trace.
"""

from __future__ import annotations

import bisect
import gzip
from collections import defaultdict

import orjson
import pytest

try:
    from conftest import CORPUS
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS

from pyprof import kernel_roles
from pyprof.prof import tensorcores

# aten ops that launch a GEMM, convolution or attention kernel themselves (the innermost op at the launch)
GEMM_CONV_ATTENTION = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv", "aten::dot",
    "aten::cudnn_convolution", "aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
    "aten::miopen_convolution",
    "aten::convolution_backward", "aten::_flash_attention_forward", "aten::_flash_attention_backward",
    "aten::_efficient_attention_forward", "aten::_efficient_attention_backward",
}


def traces():
    d = CORPUS / "kineto"
    return sorted(d.glob("*.json.gz")) if d.is_dir() else []


def launched_kernels(path) -> list[tuple[str, str | None]]:
    """(full kernel name, innermost CPU op at its launch, or None) for every kernel of a trace."""
    events = orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops: dict[tuple, list] = defaultdict(list)
    launches = {}
    for e in events:
        cat = e.get("cat")
        if cat == "cpu_op":
            ops[(e.get("pid"), e.get("tid"))].append((e["ts"], -e.get("dur", 0), e["name"]))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (e.get("pid"), e.get("tid"), e["ts"])
    for v in ops.values():
        v.sort()
    starts = {k: [o[0] for o in v] for k, v in ops.items()}
    out = []
    for e in events:
        if e.get("cat") != "kernel":
            continue
        where = launches.get(e.get("args", {}).get("correlation"))
        inner = None
        if where is not None:
            key, t = where[:2], where[2]
            lst = ops.get(key, [])
            # the latest-starting op that still contains the launch is the innermost one
            for i in range(bisect.bisect_right(starts.get(key, []), t) - 1, -1, -1):
                ts, neg_dur, name = lst[i]
                if ts - neg_dur >= t:
                    inner = name
                    break
        out.append((e["name"], inner))
    return out


def role(name: str, op: str | None) -> int:
    _, compute, helper = tensorcores.kernel_class(name)
    return kernel_roles.gpu_role(compute, helper, op)


@pytest.fixture(scope="module")
def corpus_kernels():
    found = {p.name: launched_kernels(p) for p in traces()}
    if not found:
        pytest.skip(f"no torch.profiler traces under {CORPUS}")
    return found


def test_no_kernel_of_other_ops_carries_gemm_cost(corpus_kernels):
    bad = set()
    for trace, kernels in corpus_kernels.items():
        for name, op in kernels:
            if op is None or not op.startswith("aten::") or op in GEMM_CONV_ATTENTION:
                continue
            if role(name, op) >= kernel_roles.OP_COMPUTE:
                bad.add((trace[:40], op, name[:100]))
    assert not bad, sorted(bad)[:10]


def test_every_gemm_conv_attention_op_has_a_compute_kernel_by_name(corpus_kernels):
    """Grouped by (op, kernel set) per trace: each group of kernels one such op launched has one the
    names say is its GEMM/conv/attention kernel (the op's own name plays no part here)."""
    checked = 0
    missing = set()
    for trace, kernels in corpus_kernels.items():
        names_by_op: dict[str, set] = defaultdict(set)
        for name, op in kernels:
            if op in GEMM_CONV_ATTENTION:
                names_by_op[op].add(name)
        for op, names in names_by_op.items():
            checked += 1
            compute = [n for n in names if tensorcores.kernel_class(n)[1]]
            if not compute:
                missing.add((trace[:40], op, tuple(sorted(n[:60] for n in names))))
    assert checked >= 10
    assert not missing, sorted(missing)


def test_real_gemm_kernel_names_are_compute(corpus_kernels):
    """Every distinct kernel name launched by a GEMM/conv/attention op is COMPUTE, OP_COMPUTE or a helper
    (copy, fill, elementwise, reduction, layout transform), and the CUTLASS, cuBLAS, flash and Tensile
    kernels among them are COMPUTE: the ``Kernel``/``Kernel2`` short names alone say nothing."""
    seen = {}
    for kernels in corpus_kernels.values():
        for name, op in kernels:
            if op in GEMM_CONV_ATTENTION:
                seen[name] = op
    assert seen
    for name, op in seen.items():
        lname = name.lower()
        library = ("cutlass::" in lname or "cutlass_" in lname or lname.startswith(("sm90_xmma", "ampere_sgemm",
                   "volta_sgemm", "cijk_")) or "flash_fwd" in lname or "gemv" in lname)
        if library:
            assert role(name, op) == kernel_roles.COMPUTE, name
        else:
            assert role(name, op) in (kernel_roles.COMPUTE, kernel_roles.OP_COMPUTE, kernel_roles.WORK), name


def test_compute_ops():
    for op in ("linear", "aten::addmm", "mm", "matmul", "conv2d", "cudnn_convolution_backward",
               "aten::convolution_backward", "conv_transpose2d", "scaled_dot_product_attention",
               "aten::_flash_attention_forward", "_efficient_attention_backward", "einsum", "bmm"):
        assert kernel_roles.is_compute_op(op), op
    for op in ("add", "aten::copy_", "layer_norm", "_convert_indices_from_coo_to_csr", "softmax", "to", None, ""):
        assert not kernel_roles.is_compute_op(op), op


def test_gpu_role_order():
    # a kernel named as a GEMM beats an unnamed kernel of a GEMM op, which beats a helper
    assert role("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16>", "linear") == kernel_roles.COMPUTE
    assert role("kernel", "linear") == kernel_roles.OP_COMPUTE
    assert role("kernel", "add") == kernel_roles.WORK
    for helper in ("splitKreduce_kernel", "nchwToNhwcKernel", "vectorized_elementwise_kernel", "CatArrayBatchedCopy",
                   "void cublasLt::epilogue::impl::globalKernel<float>", "computeWgradBOffsetsKernel",
                   "compute_gemm_pointers(float2 **, const float2 *, int)"):
        assert role(helper, "linear") == kernel_roles.WORK, helper
    assert kernel_roles.NO_WORK < kernel_roles.WORK < kernel_roles.OP_COMPUTE < kernel_roles.COMPUTE


@pytest.mark.parametrize("name", [
    "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<>>",
    "void ck_tile::kentry<ck_tile::FmhaFwdKernel<>>",
    "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT",
    "void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16>",
    "hipblasltExtKernel_gemm",
    "Cijk_Ailk_Bjlk_HHS_BH_MT128x128x32_MI32x32x8x1",
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<>",
])
def test_library_names_without_a_corpus_trace(name):
    """Libraries the corpus has no trace of (Composable Kernel, hipBLASLt, CUTLASS 3, nvjet), as they name
    their kernels."""
    assert role(name, None) == kernel_roles.COMPUTE


@pytest.mark.parametrize("part", ["Falconsai", "timesformer"])
def test_gemm_flops_land_on_the_tensor_core_kernels(part):
    """Through parse and prof on real H100 traces: in every GEMM/conv/attention instance that ran a
    tensor-core kernel, the FLOPs are all on its tensor-core kernels (cutlass ``Kernel``/``Kernel2``, the
    cuBLAS ``sm90_xmma`` GEMMs, flash attention), none on the layout transforms, copies or memsets beside."""
    import math

    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof.table import build

    paths = [p for p in traces() if part in p.name]
    if not paths:
        pytest.skip(f"no corpus trace {part!r}")
    df = build(KinetoSource(paths[0]).records())
    checked = 0
    for _, g in df.groupby(["opid", "dir"]):
        if not kernel_roles.is_compute_op(g["op"].iloc[0]) or not (g["tc"] == "1").any():
            continue
        checked += 1
        tc = g["tc"] == "1"
        total = g["flops"].sum()
        assert total > 0 and math.isclose(g.loc[tc, "flops"].sum(), total, rel_tol=1e-9), g[["kernel", "flops"]]
        assert not (g.loc[~tc, "flops"].fillna(0) > 0).any(), g[["kernel", "flops"]]
    assert checked >= 80


def _export_kernel_names() -> set[str]:
    """Every distinct kernel name (short and demangled) of the corpus' Nsight and nvprof exports."""
    import sqlite3

    names: set[str] = set()
    for kind in ("nsys", "nvprof"):
        for path in sorted((CORPUS / kind).glob("*.sqlite")) if (CORPUS / kind).is_dir() else []:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
                if "CUPTI_ACTIVITY_KIND_KERNEL" in tables and "StringIds" in tables:
                    for col in ("shortName", "demangledName"):
                        names |= {r[0] for r in con.execute(
                            f"select distinct s.value from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.{col}")}
                elif "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL" in tables and "StringTable" in tables:
                    names |= {r[0] for r in con.execute(
                        "select distinct s.value from CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL k "
                        "join StringTable s on s._id_ = k.name")}
            finally:
                con.close()
    return names


# namespaces and prefixes of kernels that never compute a GEMM, convolution or attention: PyTorch's own
# elementwise/reduction/indexing kernels (old and new spellings), code generators, thrust/cub, NCCL
NOT_GEMM = ("at::native::", "at::cuda::", "_ZN2at6native", "_ZN2at4cuda", "kernelPointwiseApply", "cunn_",
            "nvfuser_", "triton_", "thrust::", "cub::", "ncclKernel", "ncclDevKernel")


def test_export_kernel_names():
    """On every kernel name of the Nsight/nvprof corpus: PyTorch's and the code generators' own kernels are
    never compute kernels, and some names are (the exports hold cuBLAS, cuDNN, CUTLASS and nvjet kernels)."""
    names = _export_kernel_names()
    if not names:
        pytest.skip(f"no Nsight/nvprof exports under {CORPUS}")
    compute = {n for n in names if role(n, None) == kernel_roles.COMPUTE}
    wrong = sorted(n for n in compute if any(p in n for p in NOT_GEMM) and "conv" not in n.lower())
    assert not wrong, wrong[:10]
    assert len(compute) >= 20
