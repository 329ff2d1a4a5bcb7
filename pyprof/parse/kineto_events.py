"""The typed event records a Kineto trace is decoded into (msgspec), with the trace's own key spellings.

orjson builds a dict for every event and for its ``args``, with every key and value in them
(``Input Strides``, ``Record function id``, ``Ev Idx`` ...). msgspec decodes straight into small
structs holding only the fields the parser reads, skipping the rest of each object without making
objects for it: at 1M events that halves the JSON time (measured: 1.4-2.0 s against 2.5-4.8 s for
the same 632 MB, ``scripts/bench_kineto.py``'s trace), and attribute reads in the scan are cheaper
than ``dict.get``.

Argument keys have had several spellings (:data:`pyprof.parse.kineto_schema.ARG_KEYS`). The types
are made per trace (:func:`event_types`), once the first piece of its events has been read as
dicts and the spellings it uses are known: an op's ``ext``/``seq``/``dims``/``types``/``conc``
fields are decoded from that trace's keys; ``dims``/``types``/``conc`` stay JSON text (:data:`RAW_ARGS`). The keys of GPU activities and launches, rarer and not
always in the first piece, are kept under every spelling (:meth:`EventTypes.gpu_arg`).

Events that do not fit the types (``args`` that is not an object, an event that is no object) make
their piece fall back to dicts, converted field by field (:meth:`EventTypes.from_dicts`): the same
structs, the same parse, only slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from pyprof.parse import kineto_schema as ks

EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
#: op argument field -> logical argument (one spelling per trace)
OP_ARGS = {"ext": "external_id", "seq": "seq", "dims": "input_dims", "types": "input_types", "conc": "concrete"}
#: op argument fields kept as their JSON text (interned by the scan: a few hundred distinct values among
#: millions of ops; decoded once each, :meth:`pyprof.parse.kineto_index.Index.value`)
RAW_ARGS = frozenset({"dims", "types", "conc"})
#: logical arguments of GPU activities and launches, kept under every spelling
GPU_ARGS = ("correlation", "device", "stream", "grid", "block", "bytes")


@dataclass(frozen=True)
class EventTypes:
    """One trace's event struct, its args struct, and a decoder for a JSON array of events."""

    event: type
    args: type
    decoder: msgspec.json.Decoder
    arg_keys: tuple[tuple[str, str], ...]  # (field, JSON key) of the args struct
    gpu_fields: dict[str, tuple[str, ...]]  # logical GPU argument -> its fields, one per spelling

    def decode(self, array: bytes) -> list:
        """The events of ``array`` (JSON bytes ``[...]``); raises msgspec's errors."""
        return self.decoder.decode(array)

    def from_dicts(self, events: list) -> list:
        """Events parsed as dicts (or anything else) as structs: what is not an object becomes an event
        with no fields (the scan skips it), ``args`` that is not an object becomes None."""
        make, make_args, keys = self.event, self.args, self.arg_keys
        out = []
        for d in events:
            if type(d) is not dict:
                out.append(make())
                continue
            a = d.get("args")
            args = make_args(**{f: _raw(a.get(k)) if f in RAW_ARGS else a.get(k) for f, k in keys}) \
                if type(a) is dict else None
            out.append(make(*(d.get(f) for f in EVENT_FIELDS), args))
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


def _raw(value) -> bytes | None:
    return None if value is None else orjson.dumps(value)


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
    args = msgspec.defstruct("KinetoArgs", [(f, msgspec.Raw if f in RAW_ARGS else Any,
                                              msgspec.field(default=None, name=k)) for f, k in keys], gc=False)
    event = msgspec.defstruct("KinetoEvent", [*((f, Any, None) for f in EVENT_FIELDS), ("args", args | None, None)],
                              gc=False)
    return EventTypes(event, args, msgspec.json.Decoder(list[event]), tuple(keys), gpu_fields)
