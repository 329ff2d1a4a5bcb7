"""The kernel record: the one format between ``parse`` (any source) and ``prof``.

One JSON object per line. Field names follow NVIDIA PyProf's where it had them (``kShortName``,
``kLongName``, ``kDuration``, ``layer``, ``trace``, ``seqId``, ``altSeqId``, ``subSeqId``, ``dir``,
``mod``, ``op``, ``tid``, ``device``, ``stream``, ``grid``, ``block``) so that PyProf users feel at home;
the rest is what PyProf threw away or never had. :data:`FIELDS` is the single place every field is
documented; ``docs/records.md`` is generated from it (``scripts/gen_docs.py``) and a test checks
that the two agree and that parse writes no undocumented field.

Missing values are ``null`` (never 0 standing in for "unknown").

Every record file starts with a header line (:func:`header_line`: the format version, the pyprof that
wrote it, the source) and ends with an end line (:func:`end_line`: the record count); docs/records.md
says what each holds, and how readers (:func:`read_line`, :func:`check_version`) take a file of format
1 (no header) or of a newer one. Parquet has the same facts in its metadata (:mod:`pyprof.scale.parquet`).

:data:`CHECKS` turns each field's documented type (and its ``low``/``high`` bounds or its ``values``) into
the test ``pyprof prof`` applies to the records it reads (:mod:`pyprof.prof.load`): the type column of
:data:`FIELDS` is the only statement of a field's type, so the checks and the documentation cannot drift.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import IO, Any

import orjson

from pyprof.errors import InputError

#: the version of the record format: the fields of :data:`FIELDS` with their types. 1: the records before
#: the header line (no header; ``tid`` an integer or a string); 2: the header line, ``tid`` an integer.
FORMAT_VERSION = 2
#: the version of a record file without a header (written before there was one)
UNVERSIONED = 1
#: the key of the header line that holds the format version
HEADER_KEY = "pyprofRecords"
#: how every header line starts (``orjson`` writes keys in insertion order, without spaces)
HEADER_PREFIX = b'{"' + HEADER_KEY.encode() + b'":'
#: what a user with a file of another version is told to do
NEWER_HINT = "read it with the pyprof that wrote it, or upgrade pyprof (pip install -U pyprof-torch)"

# Durations (ns) and byte counts above this are impossible (2**62 ns is 146 years); the bound keeps them,
# and sums of a few of them, inside int64.
MAX_COUNT = 2**62


@dataclass(frozen=True)
class Field:
    """One record field: its name, JSON type (``null`` is always allowed: an unknown value), meaning, and
    for a number its valid range (``low``..``high``, inclusive) or for a text its only valid values."""

    name: str
    type: str
    meaning: str
    low: int | None = None
    high: int | None = None
    values: tuple[str, ...] | None = None


#: ``dir`` of a double backward: a node made by an op that another backward node ran (torch.profiler traces)
SECOND_ORDER = "bprop2"
#: the ``dir`` values of backward work (what prof prices as an op's backward)
BACKWARD_DIRS = ("bprop", SECOND_ORDER)


FIELDS: tuple[Field, ...] = (
    # identity and timing
    Field("kind", "str", "`kernel`, `memcpy` or `memset` (memcpy/memset records carry `bytes` and `copyKind`)."),
    Field("source", "str", "Where the record came from: `nsys`, `nvprof` or `kineto`."),
    Field("kShortName", "str", "Kernel base name (`unrolled_elementwise_kernel`); for memcpy/memset `memcpy HtoD` etc."),
    Field("kLongName", "str", "Demangled full kernel name (nvprof's mangled names are demangled)."),
    Field("kDuration", "int", "Kernel (silicon) time in ns: `end - start`; for CPU ops of a CPU trace, their self time.",
          low=0, high=MAX_COUNT),
    Field("start", "int", "Kernel start, ns, in the source's own clock (nsys: since session start; nvprof: absolute)."),
    Field("end", "int", "Kernel end, ns, same clock as `start`."),
    Field("correlationId", "int|null", "CUPTI correlation id joining the kernel to its API call (unique per process)."),
    Field("pid", "int|null", "Process id of the launching process (nsys: `(globalPid >> 24) & 0xFFFFFF`; nvprof: the API call's processId); null when the launch has no API call in the export."),
    Field("tid", "int|null", "Thread id of the launching thread (the API call's thread; nvprof: its 32-bit thread id, unsigned; kineto: the trace's `tid`, an integer also where the trace spells it as a decimal string, null where it is any other text); null when the launch has no API call in the export. (Format 1 files may hold it as a decimal string: readers turn it into its integer.)"),
    Field("device", "int|null", "CUDA device ordinal as the process saw it (after CUDA_VISIBLE_DEVICES); null on CPU."),
    Field("gpu", "str|null", "GPU name from the export's device tables (`NVIDIA H100 80GB HBM3`); null when unknown or CPU."),
    Field("gpuProps", "props|null", "Properties of `gpu` as the profiler recorded them, the facts prof derives its peaks from: `cc` (compute capability, `\"8.6\"`; AMD: the gfx version, `\"9.0\"` for gfx90a), `sms` (SMs; AMD: compute units; a MIG slice: its own), `clock` (max boost clock, Hz), `bw` (memory bandwidth, bytes/s), `mem` (memory, bytes), `warp` (threads per warp); a key is absent where not recorded (torch.profiler traces record no clock or bandwidth), null when nothing is."),
    Field("stream", "int|null", "CUDA stream id."),
    Field("grid", "list[int]|null", "Grid dimensions `[x, y, z]`."),
    Field("block", "list[int]|null", "Block dimensions `[x, y, z]`."),
    Field("bytes", "int|null", "memcpy/memset only: bytes moved or set.", low=0, high=MAX_COUNT),
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
    Field("args", "list[arg]|null", "The op's arguments in PyProf's format (see `pyprof.markers`): tensors with shape/dtype, scalars with value; each an argument object (below). "
          "A kernel Inductor generated (`mod` `inductor`, `link` `inductor`): `buffers`, a tensor list of the buffers it "
          "reads and writes as compiled, each tensor named `r`, `w`, `rw` (updated in place) or `?` (not told), as the "
          "kernel's signature names it (`in_ptr`, `out_ptr`, `in_out_ptr`), left out where a size is unknown; then one argument of type `op` per origin node that computes: "
          "`name` its aten op (`aten::add.Tensor`; null: a node not recorded), `items` its arguments in aten's order "
          "(null: a size unknown at compile time), `share` k where k kernels compute the node, `extern` true where an "
          "extern call of the graph came from it too; instead, `inputs` (an int: how many) where its origin nodes are "
          "graph inputs only (a copy into another layout). prof prices the kernel from them (prof.md, Conventions)."),
    Field("cdtype", "str|null", "Dtype the op computed in (the autocast dtype when autocast was on), else null: use the tensor args' dtype."),
    Field("opId", "int|null", "Identifier of the op instance that launched the kernel (unique within a record file); kernels of one op instance share it."),
    Field("aten", "str|null", "Innermost aten op open at launch (`aten::cudnn_convolution`), from emit_nvtx or kineto, without seq suffixes."),
    Field("atenSizes", "list|null", "Input sizes from emit_nvtx `sizes = [...]` / kineto `Input Dims` of that aten op."),
    Field("seqId", "list[int]", "Autograd sequence numbers of the forward op(s) open at launch (emit_nvtx `seq = N`, pyprof `seq`)."),
    Field("altSeqId", "list[int]", "Sequence numbers seen in backward ranges (`stashed seq = N`, pyprof `bwd` seq) tying a backward kernel to its forward op."),
    Field("bwdNode", "str|null", "Autograd node for a backward kernel (`ConvolutionBackward0`)."),
    Field("dir", "str", "`fprop`, `bprop`, `recomp` (a forward re-run by the backward pass to rebuild what it did "
          "not save: torch.utils.checkpoint), `bprop2` (a double backward: the backward of work a backward pass did "
          "with `create_graph=True`, a gradient penalty's, run by a later backward; torch.profiler traces) or "
          "`optim` (optimizer step); `` when it cannot be told.",
          values=("fprop", "bprop", "recomp", SECOND_ORDER, "optim", "")),
    Field("opDir", "str|null", "Which computation of `op` the kernel ran when it is not `dir`'s: `fprop` for an op run "
          "as itself in the backward pass (an aten op under an autograd node that links to no forward op, an op "
          "called inside a custom autograd Function's backward), priced by the op's own model; `none` for an op "
          "whose call raised before its work (torch.utils.checkpoint's early stop), priced 0; null: as `dir`.",
          values=("fprop", "none")),
    Field("link", "str|null", "Which case of the linking rule gave the kernel its op (below: \"How a kernel finds its op\"): "
          "`marker` (a pyprof op marker), `op` (a namespaced op: aten, fbgemm, torchvision, a custom "
          "torch.library op), `node` (an autograd node: its forward op's, once linked), `collective` "
          "(record_param_comms or a c10d op), `region` (a compiled region), `annotation` (a record_function "
          "range); `inductor`: a kernel Inductor generated for a compiled region, joined to its origin ops and "
          "modules recorded at compile time (`op` `fused:OPS`, `mod` `inductor`), or an extern call of the "
          "generated code (`aten::mm`) whose module was taken from that record (its op its own); `kernel-name`: such a kernel "
          "without that record, its origin ops read from its name and its module unknown (`layer` stays the "
          "compiled module's); `no-launch`: a GPU activity whose launch is not in the trace; null: no event "
          "around the launch names work.",
          values=("marker", "op", "node", "collective", "region", "annotation", "inductor", "kernel-name",
                  "no-launch")),
    Field("subSeqId", "int|null", "Index of this kernel among the kernels launched by the same op instance (0-based, launch order; a memcpy/memset: among that op's copies); null when no op instance is known."),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)

# The fields of an argument object (an item of `args`), those with a fixed type; others (`value`, the
# scalar itself, of any type) are not checked.
ARG_FIELDS: tuple[Field, ...] = (
    Field("name", "str|null", "Parameter name (`input`, `stride`); empty when unknown."),
    Field("type", "str|null", "`tensor`, `tensorlist`, `int`, `float`, `bool`, `str`, `dtype`, `list`, `tuple`, `NoneType`, `other`, ..."),
    Field("shape", "list[int]|null", "Tensor shape."),
    Field("dtype", "str|null", "Tensor dtype (`float32`)."),
    Field("items", "list[arg]|null", "`tensorlist` only: its tensors, each an argument object."),
)


def bound(n: int | None) -> str:
    """A range end as the docs and error lines write it: `any` for none, `2^62` for :data:`MAX_COUNT`."""
    if n is None:
        return "any"
    return "2^62" if n == MAX_COUNT else str(n)


_NUM = frozenset((int, float))  # not bool: JSON true is not a number
# a base type of the FIELDS table -> (kind, element kind, what a user is told it should be)
_KINDS = {
    "str": ("str", None, "a string"),
    "int": ("num", None, "an integer"),
    "list": ("list", None, "a list"),
    "list[int]": ("list", "num", "a list of integers"),
    "list[str]": ("list", "str", "a list of strings"),
    "list[dict]": ("list", "dict", "a list of objects"),
    "list[{text, domain}]": ("list", "dict", "a list of objects"),
    "list[arg]": ("list", "arg", "a list of argument objects"),
    "props": ("props", None, "an object of device properties (text or number values)"),
}
_ELEMENT_TYPES = {"num": _NUM, "str": frozenset((str,)), "dict": frozenset((dict,)), "arg": frozenset((dict,))}


_TEXT = (str, type(None))


def _arg_ok(arg: dict) -> bool:
    """An argument object whose fields of :data:`ARG_FIELDS` hold values of their types (``items`` nested
    too deep to check is not one); a tensor's or a scalar's told at once."""
    get = arg.get
    shape = get("shape")
    if get("items") is None and all(get(k).__class__ in _TEXT for k in ("name", "type", "dtype")) \
            and (shape is None or shape.__class__ is list and all(x.__class__ is int for x in shape)):
        return True
    try:
        return all(c.ok(get(c.name)) for c in ARG_CHECKS)
    except RecursionError:
        return False


def _finite(v: Any) -> bool:
    return v.__class__ is not float or math.isfinite(v)


class Check:
    """The test of one field, built from its :class:`Field`: its values must be null or of the field's
    type (a number: int or finite float; a list: of the documented element type; ``int|str``: either),
    within ``low``..``high``, among ``values``. :meth:`ok` tests one value."""

    __slots__ = ("name", "kind", "element", "low", "high", "allowed", "expected", "alternatives")
    expected: str  # (set in __init__; declared for the checks of a union, built before it)

    def __init__(self, field: Field, base: str | None = None):
        self.name = field.name
        self.low, self.high = field.low, field.high
        self.allowed = None if field.values is None else frozenset(field.values) | {None}
        self.alternatives: tuple[Check, ...] = ()
        bases = [b for b in field.type.split("|") if b != "null"] if base is None else [base]
        if len(bases) > 1:  # a union: one check per alternative
            self.alternatives = tuple(Check(field, b) for b in bases)
            self.kind, self.element = "union", None
            self.expected = " or ".join(a.expected.split(" from ")[0] for a in self.alternatives)
            return
        if not bases or bases[0] not in _KINDS:
            raise ValueError(f"record field {field.name}: no check for type {field.type!r}")
        self.kind, self.element, what = _KINDS[bases[0]]
        if self.low is not None or self.high is not None:
            what += f" from {bound(self.low)} to {bound(self.high)}"
        if field.values is not None:
            what = "one of " + ", ".join(f'"{v}"' for v in field.values)
        self.expected = what

    def ok(self, v: Any) -> bool:
        """True when ``v`` is a valid value of the field (null always is)."""
        if v is None:
            return True
        cls = v.__class__
        if self.kind == "str":
            return cls is str and (self.allowed is None or v in self.allowed)
        if self.kind == "num":
            if cls is not int and (cls is not float or not math.isfinite(v)):
                return False
            return (self.low is None or v >= self.low) and (self.high is None or v <= self.high)
        if self.kind == "union":
            return any(a.ok(v) for a in self.alternatives)
        if self.kind == "props":
            return cls is dict and all(x.__class__ is str or x.__class__ in _NUM and _finite(x) for x in v.values())
        return cls is list and self._items_ok(v)

    def _items_ok(self, v: list) -> bool:
        """Whether the items of list ``v`` are valid elements of the field (see :meth:`ok`)."""
        if self.element is None:
            return True
        allowed = _ELEMENT_TYPES[self.element]
        if not all(e.__class__ in allowed for e in v):
            return False
        if self.element == "arg":
            return all(map(_arg_ok, v))
        return self.element != "num" or all(map(_finite, v))

    def problem(self, v: Any) -> str:
        """The one-line description of a bad value: ``field "layer" is 5, expected a list of strings``
        (the value as JSON, NaN and infinities as Python's json module writes them, cut at 60 characters)."""
        shown = json.dumps(v, ensure_ascii=False, default=repr)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f'field "{self.name}" is {shown}, expected {self.expected}'


CHECKS: dict[str, Check] = {f.name: Check(f) for f in FIELDS}
ARG_CHECKS: tuple[Check, ...] = tuple(Check(f) for f in ARG_FIELDS)


def bad_field(rec: dict[str, Any], checks: Iterable[Check]) -> Check | None:
    """The first of ``checks`` whose field holds an invalid value in ``rec`` (a missing field is null)."""
    get = rec.get
    for check in checks:
        if not check.ok(get(check.name)):
            return check
    return None


def nulled(parts: list[dict[str, Any]], counts: dict[str, int],
           weights: Sequence[int] | None = None) -> dict[int, list[str]]:
    """The check parse runs as it writes, one for every source: each field of ``parts`` (records, or the
    pieces a writer splices them from; copied before a change) whose value :data:`CHECKS` refuses (a
    kernel ending before it starts) becomes null, unknown, counted in ``counts`` (field -> records;
    ``weights[i]``: the records ``parts[i]`` stands for), so prof never refuses what parse wrote. Column
    by column; returns the fields nulled, by part."""
    bad: dict[int, list[str]] = {}
    names = [n for n in CHECKS if n in set().union(*parts)]
    try:
        rows = [tuple(map(p.__getitem__, names)) for p in parts] if len(names) < 2 else \
            list(map(itemgetter(*names), parts))
    except KeyError:
        rows = [tuple(map(p.get, names)) for p in parts]
    for name, col in zip(names, zip(*rows, strict=True), strict=True):
        check = CHECKS[name]
        if all(map(check.ok, col)):
            continue
        for i, v in enumerate(col):
            if not check.ok(v):
                parts[i] = dict(parts[i], **{name: None})
                counts[name] = counts.get(name, 0) + (1 if weights is None else int(weights[i]))
                bad.setdefault(i, []).append(name)
    return bad


def nulled_text(counts: dict[str, int]) -> str:
    """The one warning line of :func:`nulled`'s counts."""
    return f"{sum(counts.values()):,} impossible values written as null, unknown (by field: " \
        + ", ".join(f"{k} {n:,}" for k, n in counts.items()) + ")"


@functools.cache
def pyprof_version() -> str:
    """The installed pyprof's version (``unknown`` in a source checkout that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyprof-torch")
    except PackageNotFoundError:
        return "unknown"


#: what a header may say beside the version, the writer and the source (:data:`HEADER_FACTS_DOC`)
HEADER_FACTS = ("steps", "conditions", "peaks")


def header(source: str | None, facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The header of a record file whose records come from ``source`` (``nsys``, ``nvprof``, ``kineto``;
    None where unknown): the format version, the pyprof that wrote it, the source, that an end line follows,
    then the ``facts`` of :data:`HEADER_FACTS` that are known (``steps``, ``conditions``, ``peaks``; see
    ``docs/records.md``)."""
    head = {HEADER_KEY: FORMAT_VERSION, "pyprof": pyprof_version(), "source": source, END_FLAG: True}
    for key in HEADER_FACTS:
        if facts and facts.get(key) is not None:
            head[key] = facts[key]
    return head


def header_line(source: str | None, facts: dict[str, Any] | None = None) -> bytes:
    """:func:`header` as the first line of a record file (bytes, newline included)."""
    return orjson.dumps(header(source, facts)) + b"\n"


def source_facts(source: Any) -> dict[str, Any]:
    """The header facts a parse source knows (its ``facts()``: the steps of a torch.profiler trace), else {}."""
    facts = getattr(source, "facts", None)
    return facts() if callable(facts) else {}


def read_header(path: str | os.PathLike | None) -> dict[str, Any]:
    """The header of the record file at ``path`` (its first line, version checked), or {} where there is
    none (stdin, a PyProf file, a file written before the header, an unreadable path: its reader says why)."""
    if path is None or str(path) == "-":
        return {}
    head = read_line(path)
    if not is_header(head) or END_COUNT in head:
        return {}
    check_version(head, os.fspath(path))
    return head


def is_header(value: Any) -> bool:
    """Whether a decoded line is a header line, or an end line (an object with :data:`HEADER_KEY`)."""
    return value.__class__ is dict and HEADER_KEY in value


def check_version(head: dict[str, Any], name: str) -> int:
    """The format version of the header ``head`` of the file ``name``; an
    :class:`~pyprof.errors.InputError` where it is not one this pyprof reads (newer, or not a version)."""
    v = head.get(HEADER_KEY)
    if v.__class__ is not int or v < UNVERSIONED:
        raise InputError(f"{name}: record format version {v!r} is not one pyprof knows", NEWER_HINT)
    if v > FORMAT_VERSION:
        raise InputError(f"{name}: record format version {v} (written by pyprof {head.get('pyprof')}) is newer than "
                         f"this pyprof {pyprof_version()} reads (up to {FORMAT_VERSION})", NEWER_HINT)
    return v


# -- the end line: a record file that knows where it ends ---------------------------------------------

#: the header key announcing an end line; the end line's key for its count (see :func:`end_line`)
END_FLAG, END_COUNT = "counted", "records"


def end_line(count: int, dropped: dict | None = None, nulled: dict | None = None) -> bytes:
    """A record file's last line: ``{"pyprofRecords": 2, "records": N}``, the records since the header,
    then parse's counts where any (``dropped``, ``nulled``). It starts as a header does, so a pyprof
    that knows no end line takes it for the header of an appended file; readers now check the count."""
    facts = {k: v for k, v in (("dropped", dropped), ("nulled", nulled)) if v}
    return orjson.dumps({HEADER_KEY: FORMAT_VERSION, END_COUNT: count, **facts}) + b"\n"


def is_end(value: Any) -> bool:
    """Whether a decoded header-like line is an end line (:func:`end_line`)."""
    return value.__class__ is dict and END_COUNT in value and HEADER_KEY in value


class RecordEnds:
    """A reader's account of the header and end lines it met, so that a file cut short is refused: a
    header announcing an end line (:data:`END_FLAG`) opens a part whose records are counted, the end line
    closes it. Parts may follow one another (``cat a.dict b.dict``); a part no header announced (pyprof
    before the end line) is not checked. A reader of a piece of a file (``inside``: the piece starts in
    an announced part) keeps its own account, and the pieces' are merged."""

    __slots__ = ("announced", "ends", "declared", "counted", "inside", "start")

    def __init__(self, inside: bool = False):
        self.announced = self.ends = self.declared = self.counted = self.start = 0
        self.inside = inside

    def copy(self) -> RecordEnds:
        return copy.copy(self)

    def finish(self, count: int) -> RecordEnds:
        """The piece read so far ended after ``count`` records."""
        self.counted += (count - self.start) * self.inside
        self.start = count
        return self

    def header(self, head: dict[str, Any], count: int) -> None:
        """A header line, after ``count`` records."""
        self.finish(count)
        self.inside = head.get(END_FLAG) is True
        self.announced += self.inside

    def end(self, tail: dict[str, Any], count: int, where: str) -> None:
        """An end line, after ``count`` records (``where``: its file and line)."""
        n = tail.get(END_COUNT)
        if n.__class__ is not int or n < 0:
            raise InputError(f"{where}: a broken end line (records {n!r})", "parse the export again")
        self.ends += self.inside
        self.declared += n * self.inside
        self.finish(count)
        self.inside = False

    def merge(self, other: RecordEnds) -> None:
        for k in ("announced", "ends", "declared", "counted"):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def check(self, name: str) -> None:
        """An :class:`~pyprof.errors.InputError` where an announced end line is missing (cut short) or
        counts other records than those read (edited, or cut and joined)."""
        if self.ends < self.announced:
            raise InputError(f"{name}: no end line after its {self.counted:,} records", "it was cut short (a "
                             "killed `pyprof parse`, a copy cut off): parse the export again")
        if self.counted != self.declared:
            raise InputError(f"{name} holds {self.counted:,} records where its end line counts {self.declared:,}: "
                             "cut short or edited", f'parse the export again (or correct "{END_COUNT}" in its last line)')


def read_line(path: str | os.PathLike, last: bool = False) -> dict[str, Any]:
    """The first (``last``: the last) line of the record file ``path`` as a dict where it is a header
    or an end line; else empty."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - (1 << 16)) if last else 0)
            line = fh.read().rstrip(b"\n").rpartition(b"\n")[2] if last else fh.readline(1 << 24)
        value = orjson.loads(line) if line.startswith(HEADER_PREFIX) else {}
    except (OSError, orjson.JSONDecodeError):
        return {}
    return value if value.__class__ is dict else {}


def thread_id(v: Any) -> int | None:
    """A ``tid`` as the record field holds it (an integer): a decimal string (torch.profiler traces of
    some versions, format 1 files) as its integer, any other text null."""
    if v is None or v.__class__ is int:
        return v
    if v.__class__ is str:
        t = v.strip()
        if t.isascii() and (t[1:] if t[:1] == "-" else t).isdigit():
            return int(t)
        return None
    return v  # (not an id at all: left for the field's check to name)


def dumps(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (bytes, newline included)."""
    return orjson.dumps(record) + b"\n"


def write_records(records: Iterable[dict[str, Any]], fh: IO, source: str | None = None,
                  facts: dict[str, Any] | None = None) -> int:
    """Stream a record file to a text or binary file object: the header line (:func:`header_line`), the
    records as JSON lines, the end line (:func:`end_line`); returns the count of records.

    ``source``: the header's; None: the first record's ``source`` field. ``facts``: the header's facts
    (:data:`HEADER_FACTS`), added to those the records' source knows. ``records`` that can also give
    themselves as JSON lines (``prepared()``, as the iterator of
    :meth:`pyprof.parse.kineto.KinetoSource.records` can) are written from those: the same bytes,
    without a dict per record."""
    out = getattr(fh, "buffer", None) if isinstance(fh, io.TextIOBase) else fh
    n = 0
    prepared = getattr(records, "prepared", None)
    if out is not None and prepared is not None:
        prep = prepared()
        src = getattr(prep, "src", None)
        out.write(header_line(source or getattr(src, "kind", None), {**source_facts(src), **(facts or {})}))
        for chunk in prep.lines():
            out.write(chunk)
        out.write(end_line(prep.n, getattr(getattr(prep, "src", None), "dropped", None), getattr(prep, "nulled", None)))
        return prep.n
    it = iter(records)
    first = next(it, None)
    if source is None and first is not None:
        source = first.get("source")
    write = out.write if out is not None else lambda b: fh.write(b.decode())  # (a text-only stream: StringIO)
    write(header_line(source, facts))
    for rec in chain((first,), it) if first is not None else ():
        write(dumps(rec))
        n += 1
    write(end_line(n))
    return n
