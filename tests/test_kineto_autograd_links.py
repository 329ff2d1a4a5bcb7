"""Plain GPU torch.profiler traces (no pyprof markers), built here in the layout of real ones (see
tests/fixtures/kineto/make_gpu_synthetic.py): the GEMMs of a compiled backward and the kernels of a custom
autograd Function.

* ``torch.compile``'s backward (``CompiledFunctionBackward``) calls its GEMMs as extern aten ops
  (``aten::mm`` with an ``out`` tensor): their kernels are priced from those ops' shapes, in bprop; a
  compiled backward replayed as a CUDA graph (``mode="reduce-overhead"``) launches them without any op:
  no FLOPs (n/a), never 0.
* A custom ``autograd.Function`` whose forward launches a kernel of its own (Triton, an extension) is an
  op (link ``op``, ``mod`` autograd, the Function's name), and its backward node's kernels link to it.
"""

from __future__ import annotations

import json
import math

from pyprof.parse.kineto import KinetoSource

PID, MAIN, AUTOGRAD = 7, 7, 8
T = 1_700_000_000_000


class Trace:
    def __init__(self):
        self.events: list[dict] = []
        self.ext = 100
        self.corr = 1000

    def op(self, name, tid, ts, dur, **args):
        self.ext += 1
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
                            "args": {"External id": self.ext, **args}})

    def kernel(self, name, tid, ts, launch="cudaLaunchKernel"):
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": PID, "tid": tid, "ts": ts,
                            "dur": 5, "args": {"External id": self.ext, "correlation": self.corr}})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 50, "dur": 20,
                            "args": {"device": 0, "stream": 7, "correlation": self.corr, "grid": [1, 1, 1],
                                     "block": [128, 1, 1]}})

    def write(self, path):
        props = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0, "numSms": 108}]
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": props, "traceEvents": self.events}))
        return {r["kLongName"] + ("" if r["dir"] == "fprop" else "@" + r["dir"]): r
                for r in KinetoSource(path).records() if r["kind"] == "kernel"}


def test_compiled_backward_gemms_priced_from_their_extern_ops(tmp_path):
    from pyprof.prof import build

    f32, t = "float", Trace()
    t.op("CompiledFunction", MAIN, T, 100, **{"Sequence number": 21, "Fwd thread id": 0,
                                              "Input Dims": [[128, 64], [128], [16, 64]], "Input type": [f32] * 3})
    t.op("aten::addmm", MAIN, T + 10, 50, **{"Input Dims": [[128], [16, 64], [64, 128], [], [], [16, 128]],
                                              "Input type": [f32, f32, f32, "Scalar", "Scalar", f32],
                                              "Concrete Inputs": ["", "", "", "1", "1", ""]})
    t.kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>", MAIN, T + 20)
    t.op("autograd::engine::evaluate_function: CompiledFunctionBackward", AUTOGRAD, T + 500, 300,
         **{"Sequence number": 21, "Fwd thread id": 1})
    t.op("CompiledFunctionBackward", AUTOGRAD, T + 505, 290, **{"Sequence number": 21, "Fwd thread id": 1,
                                                               "Input Dims": [[16, 128]], "Input type": [f32]})
    t.op("aten::mm", AUTOGRAD, T + 510, 60, **{"Input Dims": [[16, 128], [128, 64], [16, 64]],
                                                "Input type": [f32] * 3})
    t.kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>", AUTOGRAD, T + 520)
    t.op("aten::mm", AUTOGRAD, T + 600, 60, **{"Input Dims": [[128, 16], [16, 64], [128, 64]],
                                                "Input type": [f32] * 3})
    t.kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nt_align4>", AUTOGRAD, T + 610)
    t.op("cudaGraphLaunch", AUTOGRAD, T + 700, 20)  # (a CUDA graph replay: its kernels under no op)
    t.kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4>", AUTOGRAD, T + 705,
             launch="cudaGraphLaunch")
    recs = list(t.write(tmp_path / "t.json").values())
    df = build(recs, peak_flops=1e12, peak_bw=1e11)
    by = {k.split("gemm_")[1][:14]: (d, f) for k, d, f in zip(df["longkernel"], df["dir"], df["flops"], strict=True)}
    assert by["64x64_32x6_tn_"] == ("fprop", 2 * 16 * 64 * 128)
    assert by["64x64_32x6_nn_"] == ("bprop", 2 * 16 * 128 * 64)
    assert by["64x64_32x6_nt_"] == ("bprop", 2 * 128 * 16 * 64)
    assert math.isnan(by["256x128_32x3_n"][1])  # the replayed graph's GEMM: no op, n/a


def test_custom_function_kernels_are_op_links(tmp_path):
    t = Trace()
    t.op("FusedRMSNormFunction", MAIN, T, 100, **{"Sequence number": 40, "Fwd thread id": 0})
    t.kernel("rms_norm_fwd_kernel", MAIN, T + 10, launch="cuLaunchKernel")
    t.op("autograd::engine::evaluate_function: FusedRMSNormFunctionBackward", AUTOGRAD, T + 500, 100,
         **{"Sequence number": 40, "Fwd thread id": 1})
    t.op("FusedRMSNormFunctionBackward", AUTOGRAD, T + 505, 90, **{"Sequence number": 40, "Fwd thread id": 1})
    t.kernel("rms_norm_bwd_kernel", AUTOGRAD, T + 510, launch="cuLaunchKernel")
    t.op("Optimizer.step#FusedAdam.step", MAIN, T + 900, 50)  # a profiler range, not an op: stays an annotation
    t.kernel("multi_tensor_apply_kernel", MAIN, T + 905)
    got = t.write(tmp_path / "t.json")
    fwd, bwd = got["rms_norm_fwd_kernel"], got["rms_norm_bwd_kernel@bprop"]
    assert (fwd["op"], fwd["mod"], fwd["link"], fwd["dir"]) == ("FusedRMSNormFunction", "autograd", "op", "fprop")
    assert (bwd["op"], bwd["link"], bwd["opId"]) == ("FusedRMSNormFunction", "node", fwd["opId"])
    assert got["multi_tensor_apply_kernel@optim"]["link"] == "annotation"
