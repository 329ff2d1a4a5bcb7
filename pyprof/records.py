"""The kernel record: the one format between ``parse`` (any source) and ``prof``.

One JSON object per line. Field names follow NVIDIA PyProf's where it had them (``kShortName``,
``kLongName``, ``kDuration``, ``layer``, ``trace``, ``seqId``, ``altSeqId``, ``subSeqId``, ``dir``,
``mod``, ``op``, ``tid``, ``device``, ``stream``, ``grid``, ``block``) so that PyProf users feel at home;
the rest is what PyProf threw away or never had. :data:`FIELDS` is the single place every field is
documented; ``docs/records.md`` is generated from it (``python -m pyprof.records``) and a test checks
that the two agree and that parse writes no undocumented field.

Missing values are ``null`` (never 0 standing in for "unknown").
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    meaning: str


FIELDS: tuple[Field, ...] = (
    # identity and timing
    Field("kind", "str", "`kernel`, `memcpy` or `memset` (memcpy/memset records carry `bytes` and `copyKind`)."),
    Field("source", "str", "Where the record came from: `nsys`, `nvprof` or `kineto`."),
    Field("kShortName", "str", "Kernel base name (`unrolled_elementwise_kernel`); for memcpy/memset `memcpy HtoD` etc."),
    Field("kLongName", "str", "Demangled full kernel name (nvprof's mangled names are demangled)."),
    Field("kDuration", "int", "Kernel (silicon) time in ns: `end - start`; for CPU ops of a CPU trace, their self time."),
    Field("start", "int", "Kernel start, ns, in the source's own clock (nsys: since session start; nvprof: absolute)."),
    Field("end", "int", "Kernel end, ns, same clock as `start`."),
    Field("correlationId", "int|null", "CUPTI correlation id joining the kernel to its API call (unique per process)."),
    Field("pid", "int|null", "Process id of the launching process (nsys: `(globalPid >> 24) & 0xFFFFFF`; nvprof: the API call's processId); null when the launch has no API call in the export."),
    Field("tid", "int|null", "Thread id of the launching thread (the API call's thread; nvprof: its 32-bit thread id, unsigned); null when the launch has no API call in the export."),
    Field("device", "int|null", "CUDA device ordinal as the process saw it (after CUDA_VISIBLE_DEVICES); null on CPU."),
    Field("gpu", "str|null", "GPU name from the export's device tables (`NVIDIA H100 80GB HBM3`); null when unknown or CPU."),
    Field("stream", "int|null", "CUDA stream id."),
    Field("grid", "list[int]|null", "Grid dimensions `[x, y, z]`."),
    Field("block", "list[int]|null", "Block dimensions `[x, y, z]`."),
    Field("bytes", "int|null", "memcpy/memset only: bytes moved or set."),
    Field("copyKind", "str|null", "memcpy only: `HtoD`, `DtoH`, `DtoD`, `HtoH`, `PtoP`, ... ; memset: `memset`."),
    # the API call
    Field("apiName", "str|null", "CUDA runtime/driver API that launched it (`cudaLaunchKernel_v7000`, `cuLaunchKernelEx`)."),
    Field("apiStart", "int|null", "API call start, ns (same clock as `start`)."),
    Field("apiEnd", "int|null", "API call end, ns."),
    # NVTX context
    Field("ranges", "list[{text, domain}]", "Every NVTX range open on the launching thread when the API call started, outermost first: the message text and its domain (null for the default domain)."),
    # decoded fields
    Field("layer", "list[str]", "Layer names, outermost first: pyprof module paths (`encoder.layers.3.self_attn`) and `layer:NAME` user ranges."),
    Field("trace", "list[str]", "Python call site of the op, innermost first (`train.py:42:forward`); from pyprof or PyProf markers."),
    Field("mod", "str|null", "Namespace of the op the user called: `torch`, `torch.Tensor`, `torch.nn.functional`, ... ; `aten` when known only from emit_nvtx/kineto."),
    Field("op", "str|null", "Operator name (`conv2d`, `__matmul__`, `linear`; `addmm` for an aten-only source). For backward kernels, the forward op."),
    Field("args", "list[dict]|null", "The op's arguments in PyProf's format (see `pyprof.markers`): tensors with shape/dtype, scalars with value."),
    Field("cdtype", "str|null", "Dtype the op computed in (the autocast dtype when autocast was on), else null: use the tensor args' dtype."),
    Field("opId", "int|null", "Identifier of the op instance that launched the kernel (unique within a record file); kernels of one op instance share it."),
    Field("aten", "str|null", "Innermost aten op open at launch (`aten::cudnn_convolution`), from emit_nvtx or kineto, without seq suffixes."),
    Field("atenSizes", "list|null", "Input sizes from emit_nvtx `sizes = [...]` / kineto `Input Dims` of that aten op."),
    Field("seqId", "list[int]", "Autograd sequence numbers of the forward op(s) open at launch (emit_nvtx `seq = N`, pyprof `seq`)."),
    Field("altSeqId", "list[int]", "Sequence numbers seen in backward ranges (`stashed seq = N`, pyprof `bwd` seq) tying a backward kernel to its forward op."),
    Field("bwdNode", "str|null", "Autograd node for a backward kernel (`ConvolutionBackward0`)."),
    Field("dir", "str", "`fprop`, `bprop` or `optim` (optimizer step); `` when it cannot be told."),
    Field("subSeqId", "int|null", "Index of this kernel among the kernels launched by the same op instance (0-based, launch order; a memcpy/memset: among that op's copies); null when no op instance is known."),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)


def dumps(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (bytes, newline included)."""
    return orjson.dumps(record) + b"\n"


def write_records(records: Iterable[dict[str, Any]], fh: IO) -> int:
    """Stream records as JSON lines to a text or binary file object; returns the count.

    ``records`` that can also give themselves as JSON lines (``prepared()``, as the iterator of
    :meth:`pyprof.parse.kineto.KinetoSource.records` can) are written from those: the same bytes,
    without a dict per record."""
    out = getattr(fh, "buffer", None) if isinstance(fh, io.TextIOBase) else fh
    n = 0
    prepared = getattr(records, "prepared", None)
    if out is not None and prepared is not None:
        prep = prepared()
        for chunk in prep.lines():
            out.write(chunk)
        return prep.n
    if out is not None:
        for rec in records:
            out.write(dumps(rec))
            n += 1
        return n
    for rec in records:  # a text-only stream (StringIO)
        fh.write(dumps(rec).decode())
        n += 1
    return n


def iter_records(fh: IO) -> Iterator[dict[str, Any]]:
    """Read JSON-lines records. Old PyProf ``str(dict)`` lines are read too (``ast.literal_eval``)."""
    from pyprof.markers import MarkerError, decode_legacy_pyprof

    for lineno, line in enumerate(fh, 1):
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line:
            continue
        if line.startswith("{'"):
            try:
                yield decode_legacy_pyprof(line)
            except MarkerError as exc:
                raise ValueError(f"line {lineno}: {exc}") from None
            continue
        try:
            yield orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"line {lineno}: not a JSON record ({exc})") from None


def markdown() -> str:
    """The field reference as a Markdown table (``docs/records.md``)."""
    lines = [
        "# Kernel record fields",
        "",
        "Generated from `pyprof/records.py` (`python -m pyprof.records > docs/records.md`). "
        "One JSON object per line; `parse` writes them, `prof` reads them.",
        "",
        "| field | type | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{f.name}` | {f.type} | {f.meaning} |" for f in FIELDS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
