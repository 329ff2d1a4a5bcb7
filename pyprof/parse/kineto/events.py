"""The typed event records a Kineto trace is decoded into (msgspec), with the trace's own key spellings.

Where orjson builds a dict of every key of an event and its ``args``, msgspec decodes into structs of
only the fields the parser reads (docs/design.md, "msgspec"), and the scan reads attributes.

The types are made per trace (:func:`event_types`) once its first piece has been read as dicts and
the spellings it uses (:data:`pyprof.parse.kineto.schema.ARG_KEYS`) are known: an op's fields
(:data:`OP_ARGS`) under that trace's keys, ``dims``/``types``/``conc`` kept as JSON text
(:data:`RAW_ARGS`); the keys of GPU activities and launches, rarer and not always in the first
piece, under every spelling (:meth:`EventTypes.gpu_arg`).

The types admit only what the parser can use (:data:`EVENT_TYPES`, :func:`_arg_type`): text where
it reads text (a category is looked up, a name is searched), a hashable ``pid``/``tid``, integers
that fit int64, and times whose nanoseconds fit int64 (:data:`MAX_TS`, :data:`MAX_DUR`: no NaN, no
infinity, no negative duration). A piece holding anything else, or an event or ``args`` that is no
object, falls back to dicts converted field by field (:meth:`EventTypes.from_dicts`): the same
structs, only slower, and nothing lost without a count (:attr:`EventTypes.dropped`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
import orjson

from pyprof.parse.kineto import schema as ks

EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
#: op argument field -> logical argument (one spelling per trace)
OP_ARGS = {"ext": "external_id", "seq": "seq", "dims": "input_dims", "types": "input_types", "conc": "concrete",
           "ftid": "fwd_tid", "coll": "collective", "inn": "in_nelems", "outn": "out_nelems", "cdt": "comm_dtype", "gsz": "group_size"}
#: op argument fields kept as their JSON text (interned by the scan: a few hundred distinct values among
#: millions of ops; decoded once each, :meth:`pyprof.parse.kineto.index.Index.value`)
RAW_ARGS = frozenset({"dims", "types", "conc"})
#: logical arguments of GPU activities and launches, kept under every spelling
GPU_ARGS = ("correlation", "device", "stream", "grid", "block", "bytes")

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
#: the largest ``ts`` (microseconds) read: its nanoseconds fit int64 with a duration added
MAX_TS = 2**62 // 1000
#: the largest ``dur`` (microseconds) read (73 years)
MAX_DUR = 2**61 // 1000
_Int = Annotated[int, msgspec.Meta(ge=I64_MIN, le=I64_MAX)]


def _time(low: int, high: int) -> Any:
    return Annotated[int, msgspec.Meta(ge=low, le=high)] | Annotated[float, msgspec.Meta(ge=low, le=high)] | None


#: event field -> its type (what else a trace holds there is read as None)
EVENT_TYPES = {"ph": Any, "cat": str | None, "name": str | None, "pid": _Int | str | None, "tid": _Int | str | None,
               "ts": _time(-MAX_TS, MAX_TS), "dur": _time(0, MAX_DUR)}


def _unicode(v: str) -> bool:
    """Whether text can be written as UTF-8: Python's json, unlike orjson and msgspec, reads a lone
    surrogate (``"\\ud800"``), which no output could then hold."""
    try:
        v.encode()
    except UnicodeEncodeError:
        return False
    return True


def _as_str(v):
    return v if v.__class__ is str and (v.isascii() or _unicode(v)) else None


def escaped(v: str) -> str:
    """Text with each lone surrogate written as its escape (``\\ud800``), as no UTF-8 output holds it."""
    return v.encode("utf-8", "backslashreplace").decode()


#: why a complete event was left out, by the field that held a value of no use (see from_dicts)
DROP_REASONS = {"ts": "time (ts) not a finite number of microseconds", "dur": "duration (dur) negative or not a finite number",
                "cat": "category (cat) not text", "name": "name not text", "pid": "pid neither a 64-bit integer nor text",
                "tid": "tid neither a 64-bit integer nor text"}
#: the counts of what is no drop: arguments read as missing, names kept escaped
ARG_REASON, ESCAPED_REASON = "arguments of the wrong type, read as missing", "texts holding a lone surrogate, kept escaped"
#: why a complete event the scan needs a time for is left out without one
MISSING_TS = "no time (ts)"


def _as_int(v):
    return v if v.__class__ is int and I64_MIN <= v <= I64_MAX else None


def _as_id(v):
    return _as_str(v) if v.__class__ is str else _as_int(v)


def _as_ts(v):
    c = v.__class__  # (NaN fails the comparisons; bool is no number)
    return v if (c is int or c is float) and -MAX_TS <= v <= MAX_TS else None


def _as_dur(v):
    c = v.__class__
    return v if (c is int or c is float) and 0 <= v <= MAX_DUR else None


def _as_ints(v):
    ok = v.__class__ is list and all(x.__class__ is int and I64_MIN <= x <= I64_MAX for x in v)
    return v if ok else None


assert tuple(EVENT_TYPES) == EVENT_FIELDS  # (EventTypes.from_dicts checks them in this order)


@dataclass(frozen=True)
class EventTypes:
    """One trace's event struct, its args struct, and a decoder for a JSON array of events."""

    event: type
    args: type
    decoder: msgspec.json.Decoder
    gpu_fields: dict[str, tuple[str, ...]]  # logical GPU argument -> its fields, one per spelling
    arg_checks: tuple = ()  # (field, JSON key, check) of the args struct (see from_dicts)
    #: what :meth:`from_dicts` left out, read as missing or escaped: reason -> count
    dropped: dict = field(default_factory=dict)

    def from_dicts(self, events: list) -> list:
        """Events parsed as dicts (or anything else) as structs: what is not an object becomes an event
        with no fields (the scan skips it), ``args`` that is not an object becomes None, and a field
        whose value is not of its type (see the module's docstring) None; a complete event such a value
        would change is left out instead, and every one of these counted in :attr:`dropped`."""
        make, make_args, checks = self.event, self.args, self.arg_checks
        as_str, as_id, as_ts, as_dur = _as_str, _as_id, _as_ts, _as_dur
        dropped = self.dropped
        out = []
        for d in events:
            if type(d) is not dict:
                out.append(make())
                continue
            get = d.get
            a = get("args")
            if type(a) is dict:
                get_arg = a.get
                fields = {f: check(v) for f, k, check in checks if (v := get_arg(k)) is not None}
                args = make_args(**fields)
                if None in fields.values():
                    dropped[ARG_REASON] = dropped.get(ARG_REASON, 0) + sum(v is None for v in fields.values())
            else:
                args = None
            ev = (get("ph"), get("cat"), get("name"), get("pid"), get("tid"), get("ts"), get("dur"))
            typed: tuple | None = (ev[0], as_str(ev[1]), as_str(ev[2]), as_id(ev[3]), as_id(ev[4]), as_ts(ev[5]),
                                   as_dur(ev[6]))
            if typed[1:] != ev[1:] and ev[0] == "X":  # type: ignore[index]
                typed = _kept(ev, typed, dropped)  # type: ignore[arg-type]
            out.append(make() if typed is None else make(*typed, args))  # (None: left out, counted)
        return out

    def gpu_arg(self, args, name: str):
        """Logical GPU argument ``name`` (see :data:`GPU_ARGS`) of an args struct, under any spelling."""
        if args is None:
            return None
        for f in self.gpu_fields[name]:
            value = getattr(args, f)
            if value is not None:
                return value
        return None


def _kept(ev: tuple, typed: tuple, dropped: dict) -> tuple | None:
    """A complete event's fields ``ev`` (:data:`EVENT_FIELDS`) as the parser takes them, where ``typed``
    (their checked values) differs: text holding a lone surrogate escaped; None (the event left out) for
    any other value the parser cannot use, counted in ``dropped`` by its field's reason."""
    out = list(typed)
    for i, key in enumerate(EVENT_FIELDS[1:], 1):
        if out[i] is not None or ev[i] is None:
            continue
        if ev[i].__class__ is str and key in ("cat", "name", "pid", "tid"):
            out[i] = escaped(ev[i])
            dropped[ESCAPED_REASON] = dropped.get(ESCAPED_REASON, 0) + 1
        else:
            dropped[DROP_REASONS[key]] = dropped.get(DROP_REASONS[key], 0) + 1
            return None
    return tuple(out)


def _raw(value) -> bytes | None:
    """``value`` as JSON text; None for null, and for what orjson cannot write (an integer beyond 64 bits,
    which only Python's json reads: the text would not parse again)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def event_types(sample: list) -> EventTypes:
    """The types for a trace whose first events (dicts) are ``sample``."""
    spelled = ks.spellings(ev.get("args") for ev in sample[:4096] if type(ev) is dict)
    keys = [(f, spelled[logical]) for f, logical in OP_ARGS.items()]
    gpu_fields: dict[str, tuple[str, ...]] = {}
    taken = {k for _, k in keys}
    for logical in GPU_ARGS:
        fields = []
        for i, key in enumerate(ks.ARG_KEYS[logical]):
            if key not in taken:
                taken.add(key)
                fields.append(f"{logical}{i}")
                keys.append((fields[-1], key))
        gpu_fields[logical] = tuple(fields)
    types = {f: _arg_type(f) for f, _ in keys}
    args = msgspec.defstruct("KinetoArgs", [(f, types[f][0], msgspec.field(default=None, name=k)) for f, k in keys],
                             gc=False)
    event = msgspec.defstruct("KinetoEvent", [*((f, EVENT_TYPES[f], None) for f in EVENT_FIELDS),
                                              ("args", args | None, None)], gc=False)
    checks = tuple((f, k, types[f][1]) for f, k in keys)
    return EventTypes(event, args, msgspec.json.Decoder(list[event]),  # type: ignore[valid-type]  # made at run time
                      gpu_fields, checks)


def _arg_type(f: str) -> tuple[Any, Any]:
    """(type, :meth:`EventTypes.from_dicts`'s check) of args field ``f``: JSON text for :data:`RAW_ARGS`,
    integer lists for grid and block, text for a collective's name and dtype, an integer for the rest
    (ids, counts, sizes)."""
    if f in RAW_ARGS:
        return msgspec.Raw, _raw
    logical = f.rstrip("0123456789")
    if logical in ("grid", "block"):
        return list[_Int] | None, _as_ints
    if logical in ("coll", "cdt"):
        return str | None, _as_str
    return _Int | None, _as_int
