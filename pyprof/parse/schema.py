"""Every table name, column name, enum value and version difference of the exports, as data.

Nothing here touches a database: the readers (``nsys.py``, ``nvprof.py``) look names up here, so a
new exporter version is usually one line in this file. See ``docs/nsys-schema.md`` in the shared
folder for where each fact comes from.
"""

from __future__ import annotations

# -- nsys -----------------------------------------------------------------------------------------
NSYS_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
NSYS_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NSYS_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
NSYS_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NSYS_NVTX = "NVTX_EVENTS"
NSYS_STRINGS = "StringIds"
NSYS_ANALYSIS = "ANALYSIS_DETAILS"  # duration: when the capture ended (where nsys ends open push ranges)
NSYS_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023.3+, then 2022.1-2023.2

#: NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE, constant in every version that ships it).
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END)

#: RUNTIME.eventClass: 0 CUDA runtime, 1 CUDA driver; 67 is the CUDA-backtrace duplicate row.
API_EVENT_CLASSES = (0, 1)

#: Columns the nsys reader cannot do without, per table that holds rows (an export lacking one is a
#: one-line error naming it); every other column it reads is optional and reads as null when absent.
NSYS_ESSENTIAL = {NSYS_KERNEL: ("start", "end"), NSYS_MEMCPY: ("start", "end"), NSYS_MEMSET: ("start", "end")}
#: NVTX_EVENTS columns without which no range can be rebuilt (the records then carry none, with a warning)
NSYS_NVTX_NEEDS = ("start", "end", "globalTid")

# -- nvprof ---------------------------------------------------------------------------------------
NVPROF_KERNEL_TABLES = ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL")
NVPROF_API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
NVPROF_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
NVPROF_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVPROF_MARKER = "CUPTI_ACTIVITY_KIND_MARKER"
NVPROF_STRINGS = "StringTable"
NVPROF_MARKER_START = 2
NVPROF_MARKER_END = 4

#: Columns the nvprof reader cannot do without, per table that holds rows (see :data:`NSYS_ESSENTIAL`).
NVPROF_ESSENTIAL = {t: ("start", "end") for t in (*NVPROF_KERNEL_TABLES, NVPROF_MEMCPY, NVPROF_MEMSET)}
#: MARKER columns without which no range can be rebuilt (start/end rows are paired by ``id``)
NVPROF_MARKER_NEEDS = ("timestamp", "id", "flags")

#: CUPTI callback ids (cupti_runtime_cbid.h / cupti_driver_cbid.h) of the calls that launch work.
#: nvprof stores only the id; names outside this table are written as ``runtime cbid N``.
RUNTIME_CBID = {
    13: "cudaLaunch_v3020", 31: "cudaMemcpy_v3020", 32: "cudaMemcpy2D_v3020", 39: "cudaMemcpyToSymbol_v3020",
    40: "cudaMemcpyFromSymbol_v3020", 41: "cudaMemcpyAsync_v3020", 44: "cudaMemcpy2DAsync_v3020",
    47: "cudaMemcpyToSymbolAsync_v3020", 48: "cudaMemcpyFromSymbolAsync_v3020", 49: "cudaMemset_v3020",
    50: "cudaMemset2D_v3020", 51: "cudaMemsetAsync_v3020", 52: "cudaMemset2DAsync_v3020",
    144: "cudaMemcpy3D_v3020", 145: "cudaMemcpy3DAsync_v3020", 160: "cudaMemcpyPeer_v4000",
    161: "cudaMemcpyPeerAsync_v4000", 211: "cudaLaunchKernel_v7000", 214: "cudaLaunchKernel_ptsz_v7000",
    215: "cudaMemcpy_ptds_v7000", 225: "cudaMemcpyAsync_ptsz_v7000", 233: "cudaMemset_ptds_v7000",
    235: "cudaMemsetAsync_ptsz_v7000", 269: "cudaLaunchCooperativeKernel_v9000",
    270: "cudaLaunchCooperativeKernel_ptsz_v9000",
}
DRIVER_CBID = {
    115: "cuLaunch", 116: "cuLaunchGrid", 117: "cuLaunchGridAsync", 276: "cuMemcpyHtoD_v2",
    277: "cuMemcpyHtoDAsync_v2", 278: "cuMemcpyDtoH_v2", 279: "cuMemcpyDtoHAsync_v2", 280: "cuMemcpyDtoD_v2",
    281: "cuMemcpyDtoDAsync_v2", 305: "cuMemcpy", 306: "cuMemcpyAsync", 307: "cuLaunchKernel",
    442: "cuLaunchKernel_ptsz", 477: "cuLaunchCooperativeKernel", 652: "cuLaunchKernelEx",
    653: "cuLaunchKernelEx_ptsz",
}

# -- shared enums ---------------------------------------------------------------------------------
#: copyKind: nsys ENUM_CUDA_MEMCPY_OPER and raw CUPTI agree on these values.
COPY_KIND = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
    10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}


def copy_kind_name(value) -> str:
    """``copyKind`` integer -> ``HtoD`` etc.; unknown values keep their number visible; a null (None,
    NaN, -1) or a value that is no number is ``unknown``."""
    try:
        kind = int(value)
    except (TypeError, ValueError, OverflowError):
        return "unknown"
    if kind < 0:
        return "unknown"
    return COPY_KIND.get(kind, f"kind {kind}")
