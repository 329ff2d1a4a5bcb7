"""NCCL collectives in a torch.profiler GPU trace: their kernels get the collective as op, with bytes.

torch.distributed records each collective as a ``record_param_comms`` cpu_op whose args give its name,
message sizes, element type and group size; the NCCL kernel is launched inside it. No corpus trace holds
collectives, so this trace is built by hand, with those args as torch writes them (``Collective name``,
``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``), in the layout of the GPU fixture
(``tests/fixtures/kineto/make_gpu_synthetic.py``): one all-reduce of gradients on the autograd thread
(as DDP's reducer runs it), one all-gather on the main thread.
"""

from __future__ import annotations

import json

from pyprof.parse.kineto import KinetoSource
from pyprof.prof import build

PID, MAIN, AUTOGRAD, T = 7, 7, 9, 1_700_000_000_000


def _trace(path):
    ev = []

    def x(cat, name, tid, ts, dur, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args})

    def launch_kernel(name, tid, ts, corr, dur):
        x("cuda_runtime", "cudaLaunchKernel", tid, ts, 5, correlation=corr, cbid=211)
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": ts + 10, "dur": dur,
                   "args": {"device": 0, "stream": 20, "correlation": corr, "grid": [8, 1, 1], "block": [512, 1, 1]}})

    x("user_annotation", "ProfilerStep#3", MAIN, T, 3000)
    comms = {"In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
             "Process Group Ranks": "[0, 1, 2, 3]"}
    x("cpu_op", "record_param_comms", MAIN, T + 100, 50, **{
        "External id": 11, "Collective name": "_allgather_base", "dtype": "BFloat16", "In msg nelems": 1024,
        "Out msg nelems": 4096, "Group size": 4, **comms})
    launch_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", MAIN, T + 110, 501, 300)
    x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", AUTOGRAD, T + 1000, 400,
      **{"External id": 20, "Sequence number": 77})
    x("cpu_op", "record_param_comms", AUTOGRAD, T + 1100, 50, **{
        "External id": 21, "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 2_000_000,
        "Out msg nelems": 2_000_000, "Group size": 4, **comms})
    launch_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", AUTOGRAD,
                  T + 1110, 502, 900)
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                                "traceEvents": ev}))
    return path


def test_collective_kernels_get_the_collective_and_its_bytes(tmp_path):
    recs = [r for r in KinetoSource(_trace(tmp_path / "t.json")).records() if r["kind"] == "kernel"]
    gather, reduce = recs
    assert (gather["op"], gather["mod"], gather["dir"]) == ("_allgather_base", "c10d", "fprop")
    assert (reduce["op"], reduce["dir"], reduce["opDir"]) == ("allreduce", "bprop", "fprop")
    assert [a.get("shape") for a in reduce["args"][:2]] == [[2_000_000], [2_000_000]]
    df = build(recs)
    # all-gather: reads 1024 and writes 4096 bf16 elements, moves data only; all-reduce: reads and writes
    # 2M float32, adds 3/4 of them on each of 4 ranks
    assert df["bytes"].tolist() == [(1024 + 4096) * 2, 2 * 2_000_000 * 4]
    assert df["flops"].tolist() == [0.0, 2_000_000 * 3 / 4]
    assert df["tc"].tolist() == ["-", "-"]
