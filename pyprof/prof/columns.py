"""The one table of output columns: name (for ``-c``), header, how to print it, and what it means.

``pyprof prof --help``, ``docs/prof.md`` and the renderers are all generated from :data:`COLUMNS`; the
first twenty are NVIDIA PyProf's, with its names and headers. Unknown numbers print ``n/a`` (never 0),
unknown text ``-``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str  # the -c name and DataFrame column
    header: str  # printed header (PyProf's for PyProf's columns)
    fmt: str  # int | str | list | dims | float | sci | tc
    meaning: str


#: The stages that price a row (``priced_by``), in the order they run (:mod:`pyprof.prof.table`): a row names the last.
PRICED_BY = {
    "no-op": "a kernel no op marker encloses: n/a",
    "raised": "an op that raised before its work: 0",
    "inductor": "a kernel Inductor generated: its origin ops' flops, its buffers' bytes",
    "model": "the op's model (pyprof.prof.ops), from its arguments",
    "model-error": "the op's model raised on these arguments: n/a",
    "unpriced": "the op's model cannot price these arguments (unknown shapes or dtypes): n/a",
    "no-model": "no model covers the op: n/a",
    "inferred": "a forward convolution priced with the output shape its backward recorded",
    "no-share": "0: its op instance's cost went to the instance's other kernels (views, dispatch, helpers)",
    "record": "a memcpy/memset: the bytes it recorded, flops n/a",
    "what-ran": "a backward, or a forward without a model, priced on the aten ops the trace shows it ran",
    "no-work": "0: none of its op instance's records ran work (a wrapper's, an autograd node's own time)",
}

COLUMNS: tuple[Column, ...] = (
    Column("idx", "Idx", "int", "Kernel index, 1-based, in record order."),
    Column("seq", "SeqId", "list", "Autograd sequence ids of the forward op(s) open at launch."),
    Column("altseq", "AltSeqId", "list", "Sequence ids from backward ranges, tying a bprop kernel to its forward op."),
    Column("tid", "TId", "int", "Thread id of the launching thread."),
    Column("layer", "Layer", "list:", "Layers, outermost first, joined by ':' (module paths and layer:NAME ranges)."),
    Column("trace", "Trace", "list;", "Python call site(s) of the op, innermost first, joined by ';'."),
    Column("dir", "Direction", "str", "fprop, bprop, recomp (a checkpointed forward re-run by backward), bprop2 (a double backward) or optim."),
    Column("sub", "Sub", "int", "Index of the kernel among those its op instance launched (0-based)."),
    Column("mod", "Module", "str", "Namespace the op was called from (torch, torch.nn.functional, torch.Tensor, aten)."),
    Column("op", "Op", "str", "Operator name (conv2d, linear, __matmul__); for bprop kernels the forward op."),
    Column("kernel", "Kernel", "str", "Kernel short name."),
    Column("params", "Params", "str", "The op's arguments: tensors as name=(shape),dtype, scalars as name=value, ';'-separated."),
    Column("sil", "Sil(ns)", "int", "Silicon time: kernel duration in ns."),
    Column("tc", "TC", "tc", "Tensor cores: 1 used, 0 not used by a GEMM/conv/attention-like kernel, - not applicable."),
    Column("device", "Device", "int", "CUDA device ordinal."),
    Column("stream", "Stream", "int", "CUDA stream id."),
    Column("grid", "Grid", "dims", "Grid dimensions x,y,z."),
    Column("block", "Block", "dims", "Block dimensions x,y,z."),
    Column("flops", "FLOPs", "sci", "Floating-point operations of this kernel (FMA = 2): its share of the op instance's FLOPs."),
    Column("bytes", "Bytes", "sci", "Bytes to and from memory of this kernel: its share of the op instance's bytes."),
    # new in pyprof
    Column("longkernel", "KernelLName", "str", "Demangled full kernel name."),
    Column("start", "Start(ns)", "int", "Kernel start time, ns, in the export's clock."),
    Column("dtype", "DType", "str", "Dtype the op computed in (autocast dtype, else the tensors' dtype)."),
    Column("module", "ModulePath", "str", "Innermost layer: the nn.Module path (encoder.layers.3.attn) or layer:NAME."),
    Column("ai", "AI", "float", "Arithmetic intensity: FLOPs per byte."),
    Column("tflops", "TFLOP/s", "float", "Achieved TFLOP/s: flops / sil."),
    Column("gbps", "GB/s", "float", "Achieved bandwidth in GB/s: bytes / sil."),
    Column("ideal", "Ideal(ns)", "float", "Roofline time: max(flops / peak FLOP/s for dtype and unit, bytes / peak bandwidth)."),
    Column("gap", "Gap", "float", "sil / ideal: how many times slower than the roofline (1 = at the roofline); n/a for a kernel of no work."),
    Column("bound", "Bound", "str", "compute or memory: which roofline term is larger."),
    Column("note", "Note", "str", "Tensor-core eligibility note (fp32 without TF32, dims not multiple of 8) and model remarks."),
    Column("gpu", "GPU", "str", "GPU name from the export."),
    Column("opid", "OpId", "int", "Op instance id (kernels sharing opId and dir split the instance's cost)."),
    Column("priced_by", "PricedBy", "str", "The pricing stage that gave the row its flops and bytes, in the order "
           "the stages run: " + "; ".join(f"{k}: {v}" for k, v in PRICED_BY.items()) + "."),
)

# name, header, format, meaning: the one table of summary columns (``--summary``'s help, docs/prof.md and
# pyprof.prof.summary use it)
SUMMARY_COLUMNS = (
    ("key", "Key", "str", "The op, innermost layer (module path; outside every module: what the work is), kernel "
                          "name or direction."),
    ("time", "Time(ns)", "sci", "Time per step: the median over the profiled steps of the group's silicon time "
                                "(kernels, memcpy, memset) in a step."),
    ("spread", "Spread(%)", "float", "How much that time varied between steps: interquartile range / median "
                                     "(n/a with one step)."),
    ("share", "Share(%)", "float", "Percent of the time of all records in the profiled steps."),
    ("calls", "Calls", "int", "Op instances (calls) in all the profiled steps."),
    ("kernels", "Kernels", "int", "Kernels (and memcpy/memset) in all the profiled steps."),
    ("flops", "FLOPs", "sci", "FLOPs per step (median) of the kernels with a model (n/a when none has one)."),
    ("bytes", "Bytes", "sci", "Bytes per step (median) of the kernels with a model."),
    ("tflops", "TFLOP/s", "float", "Achieved: FLOPs / time of the kernels with FLOPs."),
    ("gbps", "GB/s", "float", "Achieved: bytes / time of the kernels with bytes."),
    ("ideal", "Ideal(ns)", "sci", "Roofline time per step (median) of the kernels with a known ideal."),
    ("excess", "Excess(ns)", "sci", "time - ideal per step (median) over the kernels with a known ideal: what the "
                                    "roofline would save."),
    ("gap", "Gap", "float", "time / ideal over the kernels with a known ideal (> 1 exactly when excess > 0)."),
    ("bound", "Bound", "str", "What bounds most of the group's time: compute, memory, or latency (kernels at the "
                              "device's floor: launch/dispatch cost)."),
)
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
DEFAULT = ("idx", "dir", "sub", "mod", "op", "kernel", "params", "sil", "tc", "flops", "bytes", "gap")


def parse_columns(spec: str | None) -> list[str]:
    """``-c idx,kernel,sil`` -> names; ``all`` for every column; raises UsageError on an unknown name."""
    from pyprof.errors import UsageError

    if not spec:
        return list(DEFAULT)
    if spec.strip() == "all":
        return [c.name for c in COLUMNS]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise UsageError(f"unknown column {bad[0]!r} in -c", "valid columns: " + ",".join(BY_NAME))
    return names


def help_text() -> str:
    """The column list for ``--help`` (one line each)."""
    width = max(len(c.name) for c in COLUMNS)
    return "\n".join(f"{c.name:<{width}}  {c.meaning}" for c in COLUMNS)
