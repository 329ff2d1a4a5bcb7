"""Everything pyprof knows about the torch.profiler (Kineto) chrome-trace format, as data (docs/design.md,
"torch.profiler (Kineto)"): event categories, the spellings an argument has had across PyTorch 1.8 - 2.x
(seen in PyTorch's and HTA's test traces and in traces recorded here), dtype names, the time rule.

Timestamps: the Trace Event Format puts ``ts``/``dur`` in microseconds. PyTorch before 2.4 wrote
integers (us resolution); since pytorch/pytorch#122425 they are floats with three decimals (ns
resolution). Both become integer nanoseconds; an integer is multiplied exactly.
"""

from __future__ import annotations

import re

# category -> role. Roles: "op" (an ATen/autograd op: a range, and a CPU "kernel" in CPU traces),
# "ann" (a record_function range: pyprof markers, ProfilerStep#N, Optimizer.step#...),
# "py" (a Python frame), "launch" (a CUDA runtime/driver call), and the GPU activities.
CATEGORY_ROLE: dict[str, str] = {
    "cpu_op": "op",
    "Operator": "op",
    "operator": "op",
    "user_annotation": "ann",
    "User annotation": "ann",
    "python_function": "py",
    "cuda_runtime": "launch",
    "cuda_driver": "launch",
    "Runtime": "launch",
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}

# logical argument -> the keys it has been written under, newest first.
ARG_KEYS: dict[str, tuple[str, ...]] = {
    "external_id": ("External id", "external id", "External ID"),
    "correlation": ("correlation", "correlation id", "Correlation id", "correlationId"),
    "seq": ("Sequence number", "Sequence Number", "sequence number"),
    "fwd_tid": ("Fwd thread id", "Fwd Thread Id", "fwd thread id"),
    "input_dims": ("Input Dims", "Input dims", "input dims"),
    "input_types": ("Input type", "Input types", "input type"),
    "concrete": ("Concrete Inputs", "Concrete inputs"),
    # record_param_comms (a c10d collective): its kind, message sizes, element type and group
    "collective": ("Collective name",),
    "in_nelems": ("In msg nelems",),
    "out_nelems": ("Out msg nelems",),
    "comm_dtype": ("dtype",),
    "group_size": ("Group size",),
    "device": ("device", "Device"),
    "stream": ("stream", "Stream"),
    "grid": ("grid",),
    "block": ("block",),
    "bytes": ("bytes", "Bytes"),
}

# Names of backward-pass wrappers emitted by the autograd engine: ``<prefix><NodeName>``.
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
# Profiler-made ranges that are no layer: ``ProfilerStep#3``.
PROFILER_STEP_PREFIX = "ProfilerStep#"

# Kineto "Input type" strings (c10 ScalarType names) -> pyprof dtype names.
DTYPES: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
}
#: c10 ScalarType names, as record_param_comms' ``dtype`` gives them -> pyprof dtype names
SCALAR_TYPE_NAMES: dict[str, str] = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
    "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
    "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2": "float8_e5m2", "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
}
#: the cpu_op torch.distributed records around each collective (its args: see ARG_KEYS)
COMMS_OP = "record_param_comms"
#: op namespaces of collectives (their ops name a collective: ``c10d::allreduce_``)
COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional"})
#: the backward node of a C++ autograd Function X: ``torch::autograd::CppNode<X>``
CPP_NODE = "CppNode<"
#: the range NCCL's process group opens inside record_param_comms: ``nccl:all_to_all``
NCCL_RANGE_PREFIX = "nccl:"
#: the range gloo's process group opens on its worker thread while it runs a collective: ``gloo:all_reduce``
#: (its Input Dims / Input type: the input tensor). In a CPU trace it is the collective's run, one record.
GLOO_RANGE_PREFIX = "gloo:"
#: ranges of a backend's collective, whose Input Dims / Input type the scan keeps (an annotation's are dropped)
BACKEND_RANGE_PREFIXES = (NCCL_RANGE_PREFIX, GLOO_RANGE_PREFIX)
#: collectives whose output message is the size of their input (so one recorded tensor gives both)
SAME_SIZE_COLLECTIVES = frozenset({"all_reduce", "allreduce", "allreduce_", "all_to_all", "alltoall", "alltoall_base",
                                   "broadcast", "broadcast_", "send_recv"})
#: op ranges (no namespace) around a torch.compile'd graph: its kernels, a CUDA graph's replay included
COMPILED_REGIONS = frozenset({"CompiledFunction", "CompiledFunctionBackward"})
#: NCCL/RCCL kernel names: ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``
_NCCL_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")
_POINT_TO_POINT = frozenset({"SendRecv", "Send", "Recv"})


def collective_of_kernel(name: str | None) -> str | None:
    """The collective an NCCL/RCCL kernel runs, in c10d's spelling (``AllReduce`` -> ``all_reduce``;
    ``SendRecv``, ``Send``, ``Recv`` -> ``send_recv``: point-to-point), or None for another kernel."""
    m = _NCCL_KERNEL.search(name or "")
    if m is None:
        return None
    kind = m.group(1)
    if kind in _POINT_TO_POINT:
        return "send_recv"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


SCALAR_TYPES = frozenset({"Scalar"})
LIST_TYPES = frozenset({"ScalarList", "GenericList"})
TENSORLIST_TYPES = frozenset({"TensorList"})

# Memcpy kinds in Kineto event names: "Memcpy HtoD (Pageable -> Device)".
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD", "AtoH", "HtoA", "AtoA")


def to_ns(value) -> int:
    """A Trace Event Format time (microseconds, int or float) as integer nanoseconds."""
    if type(value) is int:
        return value * 1000
    return round(value * 1000.0)


def spellings(sample) -> dict[str, str]:
    """For each logical argument, the key this trace spells it with, judged on a sample of ``args``
    dicts (the first spelling seen; the newest spelling when none is seen)."""
    seen: set[str] = set()
    for a in sample:
        if type(a) is dict:  # (a damaged trace's args may be anything)
            seen.update(a)
    return {name: next((k for k in keys if k in seen), keys[0]) for name, keys in ARG_KEYS.items()}
