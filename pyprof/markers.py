"""The pyprof marker payload: what ``pyprof.init()`` writes into NVTX ranges, and how it is read back.

No torch import here: the parser and ``prof`` use this module on machines without PyTorch.

Wire format (version 1)
-----------------------
Every pyprof range message is compact JSON whose first key is ``"pyprof"`` with the schema version,
so a marker is recognised by its prefix ``{"pyprof":`` (constant :data:`PREFIX`) in any tool: Nsight
(where the ranges also carry the NVTX domain :data:`DOMAIN`), nvprof, or a torch.profiler trace
(where the same text is the name of a ``record_function`` range, which has no domain).

``k`` says what the range is:

* ``"op"``: one call of an instrumented API::

    {"pyprof":1,"k":"op","ns":"torch.nn.functional","op":"conv2d",
     "args":[{"name":"input","type":"tensor","shape":[8,3,32,32],"dtype":"float32",
              "device":"cuda:0","contig":true,"grad":false}, {"name":"stride","type":"int","value":1}],
     "cdtype":"bfloat16",            # compute dtype under torch.autocast (absent when not autocasting)
     "seq":[41],                      # autograd sequence number(s) of the op's nodes (absent without grad)
     "id":1234,                       # per-process op instance id (increasing)
     "trace":["train.py:42:forward"]} # user call site, innermost first (first frame outside torch/pyprof)

  ``ns`` is the namespace the user called: ``torch``, ``torch.Tensor``, ``torch.nn.functional``,
  ``torch.linalg``, ``torch.fft``, ``torch.special``, or ``wrap`` for ``pyprof.wrap``-ed callables.
* ``"mod"``: one ``nn.Module`` forward::

    {"pyprof":1,"k":"mod","path":"encoder.layers.3.self_attn","cls":"MultiheadAttention","repr":"..."}

* ``"bwd"``: an autograd node running in the backward pass (opened on the autograd thread)::

    {"pyprof":1,"k":"bwd","node":"ConvolutionBackward0","seq":41,"id":1234,"nseq":41}

  ``seq`` equals one of the forward op's ``seq`` values, which is how the parser ties backward kernels
  to the forward op, its arguments and its module path. ``id`` (when present) is the forward op's
  ``id``: the exact join key (several forward ops may carry the same ``seq``, see
  :mod:`pyprof.annotate.backward`); ``nseq`` is the node's own autograd sequence number. The forward
  op's ``seq`` is the thread's autograd sequence counter read just before the op ran (the range text
  is fixed before the op creates its nodes); for a one-node op it equals ``out.grad_fn``'s own.
* ``"optim"``: an optimizer step: ``{"pyprof":1,"k":"optim","cls":"AdamW"}``.
* ``"range"``: a user range from ``pyprof.range(name)``: ``{"pyprof":1,"k":"range","name":"attention"}``.
* ``"raised"``: an empty range opened right after an op's range closed because its call raised
  (``torch.utils.checkpoint``'s early stop raises inside the op it stops at, as the op saves its
  tensors for backward): ``{"pyprof":1,"k":"raised"}``. The op is the range's previous sibling.

Tensor arguments are ``{"name","type":"tensor","shape","dtype","device","contig","grad"}``. A tensor that is
not a plain strided ``torch.Tensor``/``nn.Parameter`` adds ``"kind"``, and ``"cls"`` for a Python subclass::

    {"name":"input","type":"tensor","shape":null,"dtype":"float32","device":"cpu","contig":true,
     "grad":false,"kind":"nested"}
    {"name":"input","type":"tensor","shape":[3,4],"dtype":"float32","device":"cpu","contig":true,
     "grad":false,"kind":"subclass","cls":"DTensor"}

  A tensor batched by ``torch.func.vmap`` adds ``"vmap": [[level, batch size], ...]`` (its ``shape`` is the
  per-sample one the op sees); so does a ``bwd`` range whose node ran under ``vmap`` (``jacrev``). A dual
  tensor of ``torch.func.jvp`` adds ``"tangent"``: the levels its tangent is batched at (``jacfwd``). Under
  ``torch.func.grad`` a tensor no transform wraps (one the function captured) has ``"grad": false``.
  ``kind`` is ``nested``; a layout's name (``sparse_coo``, ``sparse_csr``, ``sparse_csc``, ``sparse_bsr``,
  ``sparse_bsc``, ``mkldnn``); ``quantized`` (``dtype`` is then ``quint8``, ``qint8``, ...); else ``subclass``
  (``strided`` for a plain tensor whose shape could not be read). ``cls`` is the subclass's class name
  (``NestedTensor`` for a jagged nested tensor, ``DTensor``, ``FakeTensor``). ``shape`` is null where it
  has no fixed size per dim (a nested tensor's ragged dims, symbolic sizes) or cannot be read; ``dtype``,
  ``device``, ``contig`` and ``grad`` are null where torch (or a subclass) refuses to say. The shape
  of a sparse tensor is its dense shape, of a quantized one its elements'. A meta tensor is a plain
  tensor whose ``device`` is ``"meta"`` (no ``kind``).

Scalars are ``{"name","type":<int|float|bool|str|complex>,"value"}``; ``None`` is ``{"name","type":"NoneType","value":null}``;
dtypes/devices/layouts/memory formats are ``{"type":"dtype"|"device"|...,"value":"float16"}``; lists and
tuples of scalars ``{"type":"list"|"tuple","value":[...]}``; lists of tensors
``{"type":"tensorlist","items":[<tensor arg>...]}``; anything else ``{"type":"other","value":<type name>}``.
This is the argument format of NVIDIA's PyProf (``name``/``type``/``shape``/``dtype``/``value``), so its
old dict markers decode into the same structure (:func:`decode_legacy_pyprof`).

Plain-text ranges that follow PyProf's user convention, ``layer:NAME``, name a layer too.
"""

from __future__ import annotations

import ast
from typing import Any
from urllib.parse import unquote

import orjson

VERSION = 1
PREFIX = '{"pyprof":'
DOMAIN = "pyprof"
LAYER_PREFIX = "layer:"

KINDS = ("op", "mod", "bwd", "optim", "range", "raised")
#: The text of a ``raised`` marker (it has no fields).
RAISED = '{"pyprof":1,"k":"raised"}'


class MarkerError(ValueError):
    """A message that claims to be a pyprof marker but cannot be decoded."""


def encode(payload: dict[str, Any]) -> str:
    """Serialise a payload built by the instrumentation. ``payload`` must start with ``pyprof``/``k``."""
    return orjson.dumps(payload).decode()


def make(kind: str, **fields: Any) -> dict[str, Any]:
    """Build a payload dict with the version and kind first (so :data:`PREFIX` holds)."""
    return {"pyprof": VERSION, "k": kind, **fields}


def is_pyprof(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def decode(text: str) -> dict[str, Any]:
    """Decode a pyprof marker; raise :class:`MarkerError` naming the problem if it is malformed."""
    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise MarkerError(f"malformed pyprof marker (not JSON: {exc}): {text[:80]!r}") from None
    if not isinstance(payload, dict) or "pyprof" not in payload:
        raise MarkerError(f"malformed pyprof marker (no 'pyprof' version key): {text[:80]!r}")
    version = payload["pyprof"]
    if not isinstance(version, int) or version < 1:
        raise MarkerError(f"malformed pyprof marker (bad version {version!r}): {text[:80]!r}")
    if version > VERSION:
        raise MarkerError(
            f"pyprof marker of schema version {version}, newer than this pyprof reads ({VERSION}); "
            "upgrade pyprof-torch"
        )
    if payload.get("k") not in KINDS:
        raise MarkerError(f"malformed pyprof marker (unknown kind {payload.get('k')!r}): {text[:80]!r}")
    return payload


def is_legacy_pyprof(text: str | None) -> bool:
    """NVIDIA PyProf / DLProf wrote ``str(dict)`` markers: ``{'mod': ...}`` and ``{'traceMarker': ...}``."""
    return text is not None and text.startswith(("{'mod'", "{'traceMarker'"))


#: the longest PyProf dict marker read (``literal_eval`` takes about 500 bytes of memory per byte of a
#: list-heavy literal: a 4 MB one took 1.9 GB; real ones are a few kB)
LEGACY_MAX = 1 << 20
#: the largest integer literal read (bits: about 1,200 decimal digits; Python prints no int beyond 4,300)
INT_MAX_BITS = 4096


def decode_legacy_pyprof(text: str) -> dict[str, Any]:
    """Read an old PyProf dict marker with ``ast.literal_eval`` (never ``eval``).

    Returns the dict with tuples turned into lists (``shape`` is a tuple there). Raises
    :class:`MarkerError` if the text is not a Python literal dict, or is one past what pyprof reads:
    longer than :data:`LEGACY_MAX`, nested deeper than Python's parser goes, or holding an integer
    beyond :data:`INT_MAX_BITS`.
    """
    if len(text) > LEGACY_MAX:
        raise MarkerError(f"PyProf dict marker of {len(text):,} characters, past the {LEGACY_MAX:,} read: {text[:80]!r}")
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        # TypeError: a literal that cannot be built, such as a dict keyed by a list ({[1]: 2})
        raise MarkerError(f"malformed PyProf dict marker: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise MarkerError(f"malformed PyProf dict marker (not a dict): {text[:80]!r}")
    return as_lists(value)


#: the integers a JSON record may hold (what orjson writes: int64 and uint64)
_INT_LOW, _INT_HIGH = -(2**63), 2**64 - 1


def as_lists(value: Any) -> Any:
    """A ``literal_eval``'d PyProf dict in the JSON shapes pyprof uses: tuples as lists, all the way
    down, and every value that is not plain JSON (bytes, complex, set, ``...``, a dict with keys that are
    not strings, an integer outside 64 bits) as its text, so that it is data a record can hold rather
    than a value no JSON writer takes; :class:`MarkerError` for an integer past :data:`INT_MAX_BITS`."""
    if value is None or value.__class__ in (str, bool, float):
        return value
    if value.__class__ is int:
        if _INT_LOW <= value <= _INT_HIGH:
            return value
        if value.bit_length() > INT_MAX_BITS:
            raise MarkerError(f"an integer of {value.bit_length():,} bits, past the {INT_MAX_BITS:,} read")
        return str(value)
    if value.__class__ is dict and all(k.__class__ is str for k in value):
        return {k: as_lists(v) for k, v in value.items()}
    if value.__class__ in (list, tuple):
        return [as_lists(v) for v in value]
    return repr(value)


def layer_name(text: str | None) -> str | None:
    """``layer:NAME`` -> ``NAME`` (PyProf's user layer convention); else ``None``."""
    if text and text.startswith(LAYER_PREFIX):
        return text[len(LAYER_PREFIX):].strip() or None
    return None


# -- markers inside torch.profiler (Kineto) traces ---------------------------------------------
# Kineto writes record_function names into export_chrome_trace JSON verbatim: it does not escape
# '"' (so a raw marker makes the trace invalid JSON) and it turns '\' into '/'; and torch's export
# drops every event whose name holds a character beyond ASCII (a module named `café`, a script under
# `Código/`). pyprof therefore names its record_function ranges with the marker percent-encoded on
# '%' (-> %25), '"' (-> %22), '\' (-> %5C) and every non-ASCII character (its UTF-8 bytes, %C3%A9):
# the trace stays valid JSON, keeps every event, and the text is recovered exactly. (The NVTX text,
# built in Python or by the C extension, stays plain UTF-8: Nsight keeps it whole.)
PROFILER_PREFIX = "{%22pyprof%22:"


def to_profiler_name(text: str) -> str:
    """The record_function name pyprof uses for marker ``text`` (see the note above)."""
    name = text.replace("%", "%25").replace('"', "%22").replace("\\", "%5C")
    if name.isascii():
        return name
    return "".join(c if c.isascii() else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                   for c in name)


def from_profiler_name(name: str) -> str:
    """Inverse of :func:`to_profiler_name`; other names are returned unchanged."""
    if not name.startswith(PROFILER_PREFIX):
        return name
    return unquote(name, errors="surrogatepass")
