"""Seeded fuzz of torch.profiler (Kineto) chrome traces through ``pyprof parse``.

The committed traces (tests/fixtures/kineto/) and, where the corpus is present, its smallest Kineto
trace are mutated: cut at random offsets (plain, re-gzipped, and gzip streams cut short), bytes
flipped, deleted and inserted, and the JSON changed in shape (``traceEvents`` of the wrong type,
events that are no objects, ``ts``/``dur`` missing, negative, NaN or huge, ``pid``/``tid`` of other
types, unknown ``ph``, duplicated keys, bytes that are no UTF-8, list-valued keys after the events,
a byte order mark, an empty file, a directory). Each input goes through the CLI entry as a user runs
it, read one of several ways (:data:`CONFIGS`: the chunked loader with big or small chunks, so cuts
between and inside chunks and the fallback to the whole-document parse are reached, and in a process
pyprof owns), and must end one of two ways:

* exit 0: the output holds JSON lines, each a record whose fields pass :data:`pyprof.records.CHECKS`;
* exit 2: exactly one stderr line, ``pyprof: error: ...``, and no output (nor temporary file) left.

Never a traceback. :data:`COUNTS` gives the number of inputs of each kind (:func:`total`).

Field damage the fuzz once found reaching a record or a traceback, in files outside the loader, is
also tested on its own, case by case (:data:`FIELD_DAMAGE`).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import msgspec
import orjson
import pytest

from pyprof import process
from pyprof.parse.kineto import load as kineto_load
from pyprof.parse.kineto.events import event_types
from pyprof.records import CHECKS, bad_field
from tests.conftest import CORPUS, REPO, run_main

pytestmark = pytest.mark.slow

SEED = 20250923
FIXTURES = REPO / "tests" / "fixtures" / "kineto"
GPU = FIXTURES / "gpu_synthetic.json"
CPU = FIXTURES / "cpu_unescaped_markers.json.gz"
#: the corpus traces mutated: the smallest (mutations of a big one would be slow)
CORPUS_TRACES = 1

#: how an input is read: name -> kineto_load.CHUNK_BYTES. The default reads a small trace in one piece;
#: small chunks cut it into many (a damaged piece falls back to the whole-document parse); "owned" runs
#: as in a process pyprof owns (:func:`pyprof.process.owning`: the collector paused).
CONFIGS = {"whole": kineto_load.CHUNK_BYTES, "chunks-4k": 4096, "chunks-512": 512, "owned": 4096}

#: kind of mutation -> inputs made of that kind (all bases together)
COUNTS = {
    "truncate": 64,
    "truncate-gz": 36,
    "gz-stream-cut": 48,
    "gz-byte-flip": 32,
    "byte-flip": 64,
    "byte-delete": 48,
    "byte-insert": 48,
    "events-type": 27,
    "events-not-objects": 40,
    "ts-dur": 80,
    "pid-tid": 40,
    "ph-cat-name": 48,
    "args": 64,
    "duplicate-keys": 36,
    "non-utf8": 32,
    "trailer": 36,
    "bom": 16,
    "special": 38,
}
#: kinds whose inputs all (nearly) break the JSON: some must be refused; the others change values in
#: valid JSON: some must be parsed (the records of damaged values are checked, not only refusals)
REFUSED_KINDS = {"truncate", "truncate-gz", "gz-stream-cut", "gz-byte-flip", "byte-flip", "byte-delete",
                 "byte-insert", "events-type", "non-utf8", "bom", "special"}


def total() -> int:
    return sum(COUNTS.values())


# -- the traces mutated -----------------------------------------------------------------------------


def _base_paths() -> list[Path]:
    paths = [GPU, CPU]
    kineto = CORPUS / "kineto"
    if kineto.is_dir():
        traces = sorted((p for p in kineto.iterdir() if p.name.endswith((".json", ".json.gz"))),
                        key=lambda p: p.stat().st_size)
        paths += traces[:CORPUS_TRACES]
    return paths


def _read(path: Path) -> tuple[bytes, dict]:
    """(the trace's text as written, its document). The document of a trace with Kineto's unescaped
    names (the CPU fixture) is read from the repaired text."""
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return text, orjson.loads(kineto_load.repair_unescaped_names(text)[0])


_BASES: list[tuple[str, bytes, dict]] = []


def _bases() -> list[tuple[str, bytes, dict]]:
    """(name, text, document) of each trace mutated."""
    if not _BASES:
        _BASES.extend((p.name, *_read(p)) for p in _base_paths())
    return _BASES


# -- values ---------------------------------------------------------------------------------------

_RAW = "\x00raw:"


def raw(text: str) -> str:
    """A value written as JSON text ``text`` (what orjson cannot write: NaN, integers beyond 64 bits)."""
    return _RAW + text


NUMBERS = [None, -1, -1000, 0, -1.5, 0.0004, 1e300, -1e300, 2**63 - 1, 2**63, 2**64 + 7, -(2**63),
           raw("NaN"), raw("Infinity"), raw("-Infinity"), raw("1e999"), raw("123456789012345678901234567890"),
           raw("-0"), "12", "", "x", True, False, [], [1], {}, {"a": 1}]
#: values of a pid; (no string: a string pid reaches the records, see FIELD_DAMAGE)
PIDS = [None, 1.5, -1, 0, 2**63, 2**64 + 7, True, [], [1, 2], {}, {"a": 1}, raw("NaN"), raw("1e999"),
        raw("123456789012345678901234567890")]
IDS = PIDS + ["7", "", "x", "stream 7", "\ud800"]
TEXTS = [None, 0, 5, -1.5, True, [], ["a"], {}, {"a": 1}, "", "x" * 5000, raw("NaN"), "\u0000",
         "aten::", "autograd::engine::evaluate_function: ", "ProfilerStep#", "::", "\ud800", "\udc00x",
         "caf\u00e9 \U0001f600", "(42): f", "a.py(x): f"]
SHAPES = [None, [], [[]], [[1, 2], []], [[-1]], [[2**70]], [[0, 0]], [None], [[None]], [[], [3, 4], [5]],
          [[[[1]]]], [[1, 2, 3, 4, 5, 6, 7, 8]]]
DTYPES = [None, [], ["float"], ["float", 5], [None], ["c10::Half", "Scalar", "TensorList"], ["", "", ""],
          ["ScalarList"], [5, True], ["x" * 300], ["\ud800"]]
CONCRETE = [None, [], ["1"], ["", "1.5", "True"], ["[1, 2]", "[[1], 2]", "[x"], [5, ["x"], {"a": 1}],
            ["1e999", "NaN", "[NaN]", "99999999999999999999999"], [raw("NaN")], 5, "x"]
#: values of args keys, by key (Input Dims and Input type only of the shapes a trace has; other
#: values reach the records, see FIELD_DAMAGE)
ARG_VALUES = {
    "Input Dims": SHAPES, "Input type": DTYPES, "Concrete Inputs": CONCRETE,
    "bytes": [None, 0, 2**62, 2**62 + 1, 2**63, 1.5, "1", [], True, raw("NaN"), raw("1e999")],
    "grid": [None, [1, 2], [1, 2, 3], [0, 0, 0], [-1, 1, 1], [True, 1, 1], [2**70, 1, 1], [1.5, 1, 1], ["x"] * 3,
             5, "x", {}],
}
ARG_KEYS = ["External id", "Sequence number", "Input Dims", "Input type", "Concrete Inputs", "correlation",
            "device", "stream", "grid", "block", "bytes", "Fwd thread id", "Ev Idx", "name"]


def _arg_values(key: str) -> list:
    if key == "block":
        key = "grid"
    return ARG_VALUES.get(key, IDS + TEXTS[:12])


# -- making inputs ----------------------------------------------------------------------------------


def _dumps(doc, indent: bool) -> bytes:
    """``doc`` as JSON text: Kineto's indented layout or compact; :func:`raw` values as their text,
    integers beyond 64 bits in full and lone surrogates escaped (which orjson would refuse)."""
    raws: list[str] = []

    def fix(v):
        if isinstance(v, str):
            if v.startswith(_RAW):
                raws.append(v[len(_RAW):])
            elif any("\ud800" <= c <= "\udfff" for c in v):
                raws.append(json.dumps(v))
            else:
                return v
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            raws.append(str(v))
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    text = orjson.dumps(fix(doc), option=orjson.OPT_INDENT_2 if indent else 0)
    for i, r in enumerate(raws):
        text = text.replace(orjson.dumps(f"\x00RAW{i}\x00"), r.encode())
    return text


def _events(doc: dict) -> list:
    return doc["traceEvents"]


def _pick_events(rng: random.Random, doc: dict, k: int | None = None) -> list[dict]:
    """Some of the events (one, a few, or a tenth of them), complete (``X``) ones preferred."""
    evs = [e for e in _events(doc) if isinstance(e, dict)]
    full = [e for e in evs if e.get("ph") == "X"] or evs
    k = k or rng.choice([1, 1, 2, 5, max(1, len(full) // 10)])
    return rng.sample(full, min(k, len(full)))


def _offset(rng: random.Random, n: int) -> int:
    """A random offset into ``n`` bytes, a third of them near the start or the end (the metadata, the
    opening of the events array, its closing and the keys after it)."""
    r = rng.random()
    if r < 0.2:
        return rng.randrange(0, min(n, 4096))
    if r < 0.35:
        return rng.randrange(max(0, n - 4096), n)
    return rng.randrange(0, n)


def _flip(rng: random.Random, data: bytes, runs: int) -> bytes:
    b = bytearray(data)
    for _ in range(runs):
        off = _offset(rng, len(b))
        for i in range(off, min(len(b), off + rng.choice([1, 1, 2, 8]))):
            b[i] ^= rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 0xFF, rng.randrange(1, 256)])
    return bytes(b)


JSON_BYTES = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\n", b" ", b"0", b"-", b"e", b"null", b"}, {",
              b"\x00", b"\xff", b"\xc3", b"NaN", b'"ts": ', b'{"ph": "X"}']


def _insert(rng: random.Random, data: bytes, runs: int) -> bytes:
    b = bytearray(data)
    for _ in range(runs):
        off = _offset(rng, len(b) + 1)
        b[off:off] = rng.choice(JSON_BYTES) if rng.random() < 0.6 else rng.randbytes(rng.choice([1, 3, 16, 100]))
    return bytes(b)


def _delete(rng: random.Random, data: bytes, runs: int) -> bytes:
    b = bytearray(data)
    for _ in range(runs):
        off = _offset(rng, len(b))
        del b[off:off + rng.choice([1, 1, 2, 7, 64, 600])]
    return bytes(b)


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1, mtime=0)


Made = tuple[bytes | None, str]  # (the file's bytes, or None for a directory; its name's suffix)


def _plain_or_gz(rng: random.Random, data: bytes) -> Made:
    return (_gz(data), ".json.gz") if rng.random() < 0.3 else (data, ".json")


def _copy(doc: dict) -> dict:
    return orjson.loads(orjson.dumps(doc))


def _write(rng, doc) -> Made:
    return _plain_or_gz(rng, _dumps(doc, indent=rng.random() < 0.8))


def m_truncate(rng, text, doc) -> Made:
    return text[:_offset(rng, len(text))], rng.choice([".json", ".json", ".pt.trace.json"])


def m_truncate_gz(rng, text, doc) -> Made:
    return _gz(text[:_offset(rng, len(text))]), ".json.gz"


def m_gz_stream_cut(rng, text, doc) -> Made:
    z = _gz(text)
    cut = z[:rng.randrange(0, len(z))] if rng.random() < 0.8 else z[:-rng.randrange(1, 9)]  # or in the trailer
    return cut, rng.choice([".json.gz", ".json.gz", ".json"])  # (gzip is recognised by content too)


def m_gz_byte_flip(rng, text, doc) -> Made:
    z = bytearray(_gz(text))
    for _ in range(rng.choice([1, 1, 3])):
        off = rng.randrange(0, len(z)) if rng.random() < 0.7 else rng.randrange(max(0, len(z) - 8), len(z))
        z[off] ^= rng.randrange(1, 256)
    return bytes(z), ".json.gz"


def m_byte_flip(rng, text, doc) -> Made:
    return _plain_or_gz(rng, _flip(rng, text, rng.choice([1, 1, 2, 4, 16])))


def m_byte_delete(rng, text, doc) -> Made:
    return _plain_or_gz(rng, _delete(rng, text, rng.choice([1, 1, 2, 5])))


def m_byte_insert(rng, text, doc) -> Made:
    return _plain_or_gz(rng, _insert(rng, text, rng.choice([1, 1, 2, 5])))


def m_events_type(rng, text, doc) -> Made:
    doc = _copy(doc)
    first = _events(doc)[0]
    choice = rng.randrange(9)
    if choice == 0:
        del doc["traceEvents"]
    else:
        doc["traceEvents"] = [{}, "x", 5, None, True, [], {"0": first}, [[first]]][choice - 1]
    return _write(rng, doc)


def m_events_not_objects(rng, text, doc) -> Made:
    doc = _copy(doc)
    evs = _events(doc)
    for _ in range(rng.choice([1, 1, 3, 20])):
        junk = rng.choice([1, -2.5, "x", "", None, True, [], [{"ph": "X"}], {}, raw("NaN"),
                           [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]])
        pos = 0 if rng.random() < 0.25 else rng.randrange(len(evs) + 1)
        if rng.random() < 0.5 and pos < len(evs):
            evs[pos] = junk
        else:
            evs.insert(pos, junk)
    return _write(rng, doc)


def m_ts_dur(rng, text, doc) -> Made:
    doc = _copy(doc)
    for ev in _pick_events(rng, doc):
        key = rng.choice(["ts", "dur", "ts", "dur", "both"])
        for k in (["ts", "dur"] if key == "both" else [key]):
            if rng.random() < 0.15:
                ev.pop(k, None)
            else:
                ev[k] = rng.choice(NUMBERS)
    return _write(rng, doc)


def m_pid_tid(rng, text, doc) -> Made:
    doc = _copy(doc)
    for ev in _pick_events(rng, doc):
        for k in rng.choice([["pid"], ["tid"], ["pid", "tid"]]):
            if rng.random() < 0.1:
                ev.pop(k, None)
            else:
                ev[k] = rng.choice(PIDS if k == "pid" else IDS)
    return _write(rng, doc)


def m_ph_cat_name(rng, text, doc) -> Made:
    doc = _copy(doc)
    for ev in _pick_events(rng, doc):
        k = rng.choice(["ph", "ph", "cat", "cat", "name"])
        if k == "ph":
            ev["ph"] = rng.choice(["Z", "", "x", "B", "E", "i", "M", "f", None, 5, ["X"], {"X": 1}])
        elif k == "cat":
            ev["cat"] = rng.choice(["unknown", "", "kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset",
                                    "user_annotation", "python_function", None, 5, ["kernel"], {"a": 1}])
        elif rng.random() < 0.1:
            ev.pop("name", None)
        else:
            ev["name"] = rng.choice(TEXTS)
    return _write(rng, doc)


def m_args(rng, text, doc) -> Made:
    doc = _copy(doc)
    for ev in _pick_events(rng, doc):
        if rng.random() < 0.2:
            ev["args"] = rng.choice([None, 5, "x", [], [1, 2], True, raw("NaN")])
            continue
        args = ev.setdefault("args", {})
        if isinstance(args, dict):
            for _ in range(rng.choice([1, 2, 4])):
                key = rng.choice(ARG_KEYS)
                args[key] = rng.choice(_arg_values(key))
    return _write(rng, doc)


def m_duplicate_keys(rng, text, doc) -> Made:
    """A key written twice in an object (JSON readers keep the last): in events or at the top."""
    doc = _copy(doc)
    if rng.random() < 0.25:  # a second traceEvents (or other top-level key) after the first
        key = rng.choice(["traceEvents", "traceEvents", "schemaVersion", "deviceProperties"])
        second = rng.choice(['[]', '"x"', '{}', '[1, 2]', '[{"ph": "X", "ts": 1}]', 'null'])
        value = doc.get(key)
        doc[key] = raw(f'{orjson.dumps(value).decode()}, "{key}": {second}' if key in doc else second)
    else:
        for ev in _pick_events(rng, doc):
            key = rng.choice(["ts", "dur", "ph", "cat", "name", "pid", "tid", "args"])
            first = orjson.dumps(ev.get(key)).decode()
            second = rng.choice(['"x"', "null", "-1", "[]", "{}", "1e999", '"X"', first])
            ev[key] = raw(f'{first}, "{key}": {second}' if rng.random() < 0.5 else f'{second}, "{key}": {first}')
    return _write(rng, doc)


NOT_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80abc", b"\xe2\x82"]


def m_non_utf8(rng, text, doc) -> Made:
    """Bytes that are no UTF-8: inside strings (names, categories) or anywhere."""
    if rng.random() < 0.3:
        b = bytearray(text)
        for _ in range(rng.choice([1, 3])):
            off = _offset(rng, len(b) + 1)
            b[off:off] = rng.choice(NOT_UTF8)
        return _plain_or_gz(rng, bytes(b))
    doc = _copy(doc)
    marks = []
    for ev in _pick_events(rng, doc):
        key = rng.choice(["name", "name", "cat", "ph"])
        mark = f"\x01NONUTF{len(marks)}\x01"
        marks.append((mark, rng.choice(NOT_UTF8)))
        ev[key] = (ev.get(key) if isinstance(ev.get(key), str) else "") + mark
    data = _dumps(doc, indent=rng.random() < 0.8)
    for mark, b in marks:
        data = data.replace(orjson.dumps(mark)[1:-1], b)
    return _plain_or_gz(rng, data)


TRAILER_KEYS = ["ERROR", "deviceProperties", "traceName", "displayTimeUnit", "baseTimeNanoseconds", "extra",
                "distributedInfo"]
#: values of keys around the events; (deviceProperties only a list, with text names: see FIELD_DAMAGE)
TRAILER_VALUES = [["x"], [], [[1, 2], {"a": [3]}], {"a": ["]"]}, "]", "}, {", 5, None, [{"ph": "X", "ts": 1}],
                  {"ph": "X"}, "\ud800"]
DEVICE_PROPERTIES = [[], ["x"], [1, None], [{"id": 0, "name": "G"}], [{"id": [0], "name": "G"}], [{"name": None}],
                     [{"id": "0", "name": "G"}], [{"id": 2**70, "name": ""}], [{"ph": "X", "ts": 1}]]


def m_trailer(rng, text, doc) -> Made:
    """Keys after the events (Kineto writes some there) and before them: lists, objects, other types."""
    doc = _copy(doc)
    events = doc.pop("traceEvents")
    for key in TRAILER_KEYS:
        if rng.random() < 0.3:
            doc.pop(key, None)
    doc["traceEvents"] = events
    for _ in range(rng.choice([1, 2, 3])):
        key = rng.choice(TRAILER_KEYS)
        doc[key] = rng.choice(DEVICE_PROPERTIES if key == "deviceProperties" else TRAILER_VALUES)
    if rng.random() < 0.3:
        doc = {"ERROR": rng.choice(TRAILER_VALUES), **doc}
    return _write(rng, doc)


BOM = b"\xef\xbb\xbf"


def m_bom(rng, text, doc) -> Made:
    data = [BOM + text, BOM + b"  \n" + text, text.replace(b"{", BOM + b"{", 1), b"\xff\xfe" + text][rng.randrange(4)]
    return _plain_or_gz(rng, data)


SPECIALS = [b"", b" \n\t ", BOM, b"{}", b"[]", b"null", b"0", b'"x"', b"[1, 2]", b"[[]]", b"[{}]",
            b'{"traceEvents": []}', b'{"traceEvents": [{}]}', b'{"traceEvents": [{"ph": "X"}]}',
            b"[" * 100000, b'{"traceEvents": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"\x1f\x8b", b"\x00" * 64]


def m_special(i: int) -> Made:
    """The ``i``-th of :data:`SPECIALS` plain, then each gzipped, then a directory, in turn."""
    i %= 2 * len(SPECIALS) + 1
    if i == 2 * len(SPECIALS):
        return None, ""
    data = SPECIALS[i % len(SPECIALS)]
    return (_gz(data), ".json.gz") if i >= len(SPECIALS) else (data, ".json")


MUTATORS: dict[str, Callable] = {
    "truncate": m_truncate, "truncate-gz": m_truncate_gz, "gz-stream-cut": m_gz_stream_cut,
    "gz-byte-flip": m_gz_byte_flip, "byte-flip": m_byte_flip, "byte-delete": m_byte_delete,
    "byte-insert": m_byte_insert, "events-type": m_events_type, "events-not-objects": m_events_not_objects,
    "ts-dur": m_ts_dur, "pid-tid": m_pid_tid, "ph-cat-name": m_ph_cat_name, "args": m_args,
    "duplicate-keys": m_duplicate_keys, "non-utf8": m_non_utf8, "trailer": m_trailer, "bom": m_bom,
    "special": None,  # (made by index: m_special)
}
assert set(MUTATORS) == set(COUNTS)


def inputs(kind: str) -> list[tuple[str, bytes | None, str, str]]:
    """The seeded inputs of one kind: (label, bytes or None for a directory, suffix, config name)."""
    rng = random.Random(f"{SEED}:{kind}")
    bases = _bases()
    out = []
    for i in range(COUNTS[kind]):
        name, text, doc = bases[i % len(bases)]
        data, suffix = m_special(i) if kind == "special" else MUTATORS[kind](rng, text, doc)
        out.append((f"{kind}#{i} of {name}", data, suffix, rng.choice(list(CONFIGS))))
    return out


# -- running them -----------------------------------------------------------------------------------


def check_parse(capsys, path: Path, out: Path) -> tuple[int | None, str | None]:
    """Run ``pyprof parse path -o out``: (exit code, what is wrong with the outcome or None)."""
    try:
        code, _, err = run_main(capsys, ["parse", path, "-o", out])
    except BaseException:  # noqa: BLE001 - a traceback the user would see
        capsys.readouterr()
        return None, "traceback:\n" + traceback.format_exc(limit=-6)
    return code, _problem(code, err, out)


def _problem(code, err: str, out: Path) -> str | None:
    if code not in (0, 2):
        return f"exit {code}: {err!r}"
    if "Traceback" in err:
        return f"traceback in stderr: {err}"
    if list(out.parent.glob(".pyprof-*")):
        return "a temporary output file was left"
    if code == 2:
        lines = err.splitlines()
        if len(lines) != 1 or not lines[0].startswith("pyprof: error: ") or not err.endswith("\n"):
            return f"exit 2 without exactly one error line: {err!r}"
        if out.exists():
            return "exit 2 left an output file"
        return None
    if not all(line.startswith(("pyprof parse: ", "pyprof: warning: ")) for line in err.splitlines()):
        return f"exit 0 with other stderr lines: {err!r}"
    if not out.is_file():
        return "exit 0 without an output file"
    for n, line in enumerate(out.read_bytes().splitlines(), 1):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return f"output line {n} is not JSON ({exc}): {line[:200]!r}"
        if type(rec) is not dict:
            return f"output line {n} is not an object: {line[:200]!r}"
        bad = bad_field(rec, CHECKS.values())
        if bad is not None:
            return f"output line {n}: {bad.problem(rec.get(bad.name))}"
    return None


def _configure(monkeypatch, config: str) -> None:
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", CONFIGS[config])


def run_inputs(capsys, monkeypatch, tmp_path: Path, cases) -> tuple[list[str], list[int | None]]:
    """Parse each input; (failures, exit codes). Forked children's temporary files go to a folder of
    the test's own, which must be empty after each parse."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    failures, codes = [], []
    for i, (label, data, suffix, config) in enumerate(cases):
        path = tmp_path / f"in{i}{suffix}"
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
        out = tmp_path / f"out{i}.dict"
        _configure(monkeypatch, config)
        with process.owning() if config == "owned" else contextlib.nullcontext():
            code, problem = check_parse(capsys, path, out)
        if problem is None and any(temp.iterdir()):
            problem = f"temporary files left: {sorted(p.name for p in temp.iterdir())}"
        if problem is not None:
            failures.append(f"{label} (read {config}, as {path.name}): {problem}")
        codes.append(code)
        if data is None:
            path.rmdir()
        else:
            path.unlink()
        out.unlink(missing_ok=True)
        for p in temp.iterdir():
            p.unlink()
    return failures, codes


@pytest.mark.parametrize("kind", list(COUNTS))
def test_mutated_traces(kind, capsys, monkeypatch, tmp_path):
    failures, codes = run_inputs(capsys, monkeypatch, tmp_path, inputs(kind))
    assert not failures, f"{len(failures)} of {COUNTS[kind]} {kind} inputs failed:\n" + "\n".join(failures[:8])
    if kind in REFUSED_KINDS:
        assert 2 in codes, "no input of this kind was refused: the mutation does nothing"
    else:
        assert 0 in codes, "every input of this kind was refused: no damaged value reached the records"


def test_the_inputs():
    """As many as :data:`COUNTS` says; the same on every run (seeded); none the trace it was made of."""
    assert total() >= 600
    made = inputs("byte-flip")
    assert len(made) == COUNTS["byte-flip"] and made == inputs("byte-flip")
    texts = {text for _, text, _ in _bases()}
    assert not any(data in texts or gzip.decompress(data) in texts if suffix == ".json.gz" else data in texts
                   for _, data, suffix, _ in made)


# -- the two ways events are read give the same structs ----------------------------------------------

EVENT_VALUES = {"ph": ["X", "Z", None, 5, ["X"]], "cat": TEXTS + ["kernel", "cpu_op"], "name": TEXTS,
                "pid": IDS, "tid": IDS, "ts": NUMBERS + [1.5e12, 1700000000000], "dur": NUMBERS + [2.5, 7]}


def test_typed_and_dict_events_agree():
    """:mod:`pyprof.parse.kineto.events`: an event the typed decoder (msgspec) reads gives the struct
    the dict way (orjson or Python's json, then ``from_dicts``) gives; the dict way gives only values
    the typed decoder accepts (its struct, written out, reads back as itself)."""
    rng = random.Random(SEED)
    _, _, doc = _bases()[0]
    types = event_types(_events(doc))
    events = [e for e in _events(doc) if isinstance(e, dict) and e.get("ph") == "X"]
    arg_keys = [k for _, k, _ in types.arg_checks]
    typed = 0
    for _ in range(400):
        ev = _copy(rng.choice(events))
        for key in rng.sample(list(EVENT_VALUES), rng.randint(1, 3)):
            ev[key] = rng.choice(EVENT_VALUES[key])
        if rng.random() < 0.5:
            args = ev["args"] = dict(ev.get("args") or {})
            for key in rng.sample(arg_keys, 3):
                args[key] = rng.choice(_arg_values(key) + IDS)
        text = _dumps([ev], indent=False)
        (from_dicts,) = types.from_dicts(json.loads(text))
        try:
            (decoded,) = types.decoder.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            typed += 1
            assert _fields(decoded) == _fields(from_dicts), text
        (again,) = types.decoder.decode(msgspec.json.encode([_as_raw(from_dicts)]))
        assert _fields(again) == _fields(from_dicts), text
    assert 40 < typed < 360  # both ways taken


def _fields(struct) -> dict:
    """An event struct's fields, its args' too; a JSON text field (msgspec.Raw the typed way, bytes the
    dict way) as its value (the typed way keeps an explicit null as the text ``null``: the same value,
    None, once decoded)."""
    out = {}
    for f in struct.__struct_fields__:
        v = getattr(struct, f)
        if isinstance(v, (msgspec.Raw, bytes)):
            v = orjson.loads(bytes(v))
        elif isinstance(v, msgspec.Struct):
            v = _fields(v)
        out[f] = v
    return out


def _as_raw(event):
    """A dict-way event struct whose JSON text fields msgspec writes as JSON (not as base64 bytes)."""
    if event.args is None:
        return event
    texts = {f: msgspec.Raw(v) for f in event.args.__struct_fields__ if isinstance(v := getattr(event.args, f), bytes)}
    return msgspec.structs.replace(event, args=msgspec.structs.replace(event.args, **texts))


# -- damage the parser mishandles outside the loader ------------------------------------------------


def _gpu() -> dict:
    return _read(GPU)[1]


def _cpu() -> dict:
    return _read(CPU)[1]


def _set(doc: dict, cat: str, key: str, value, arg: bool = False) -> dict:
    """``doc`` with ``key`` (of ``args`` with ``arg``) set to ``value`` in every event of category ``cat``
    (that has the key already, for an args key)."""
    n = 0
    for ev in _events(doc):
        if isinstance(ev, dict) and ev.get("cat") == cat:
            if not arg:
                ev[key] = value
                n += 1
            elif key in (ev.get("args") or {}):
                ev["args"][key] = value
                n += 1
    assert n
    return doc


def _props(doc: dict, value) -> dict:
    doc["deviceProperties"] = value
    return doc


def _marker(doc: dict, payload: str) -> dict:
    """The first pyprof op marker's payload replaced by ``payload``."""
    for ev in _events(doc):
        if isinstance(ev, dict) and ev.get("cat") == "user_annotation" and "%22k%22:%22op%22" in ev.get("name", ""):
            ev["name"] = payload.replace('"', "%22")
            return doc
    raise AssertionError("no marker")


FIELD_DAMAGE = [
    ("deviceProperties-not-a-list", lambda: _props(_gpu(), 5),
     "pyprof/parse/kineto/source.py _device_names iterates deviceProperties: TypeError 'int' object is not iterable"),
    ("device-name-not-text", lambda: _props(_gpu(), [{"id": 0, "name": 5}]),
     "pyprof/parse/kineto/source.py _device_names takes any name: records get \"gpu\": 5"),
    ("device-name-lone-surrogate", lambda: _props(_gpu(), [{"id": 0, "name": "A\ud800"}]),
     "pyprof/parse/kineto/source.py takes a name Python's json read with a lone surrogate: TypeError writing the "
     "record (pyprof/parse/kineto/lines.py orjson.dumps)"),
    ("pid-text-cpu-op", lambda: _set(_cpu(), "cpu_op", "pid", "7"),
     "pyprof/parse/kineto/source.py _record writes the range's pid as it is: records get \"pid\": \"7\""),
    ("pid-text-launch", lambda: _set(_gpu(), "cuda_runtime", "pid", "7"),
     "pyprof/parse/kineto/source.py _gpu_kernels writes the launch's pid as it is: records get \"pid\": \"7\""),
    ("input-dims-not-a-list", lambda: _set(_gpu(), "cpu_op", "Input Dims", 5, arg=True),
     "pyprof/parse/kineto/source.py _kernel_fields writes Input Dims as it is: records get \"atenSizes\": 5"),
    ("input-dims-not-shapes", lambda: _set(_gpu(), "cpu_op", "Input Dims", [["x", 1.5], [True]], arg=True),
     "pyprof/parse/kineto/args.py kineto_args makes any Input Dims item a tensor's shape: args fail their "
     "check (shape [\"x\", 1.5])"),
    ("input-type-holds-a-list", lambda: _set(_gpu(), "cpu_op", "Input type", [["float"]], arg=True),
     "pyprof/parse/kineto/args.py ks.DTYPES.get(typ) with a list: TypeError unhashable type 'list'"),
    ("memcpy-negative-bytes", lambda: _set(_gpu(), "gpu_memcpy", "bytes", -1, arg=True),
     "pyprof/parse/kineto/source.py _gpu_kernels keeps any int bytes: records get \"bytes\": -1"),
    ("marker-op-not-text", lambda: _marker(_gpu(), '{"pyprof":1,"k":"op","op":5}'),
     "pyprof/parse/decode.py:123-126 _pyprof passes a marker's fields unchecked: records get \"op\": 5"),
    ("marker-args-not-a-list", lambda: _marker(_gpu(), '{"pyprof":1,"k":"op","op":"x","args":5}'),
     "pyprof/parse/decode.py:125 _pyprof passes a marker's args unchecked: records get \"args\": 5"),
]


@pytest.mark.parametrize("make", [pytest.param(make, id=name) for name, make, _where in FIELD_DAMAGE])
def test_damaged_fields_the_fuzz_found(make, capsys, tmp_path):
    """Each field damage the fuzz once found reaching a record (or a traceback), by hand: parse exits 0
    with valid records or 2 with one line. (The third item of each case says where it used to break.)"""
    path, out = tmp_path / "t.json", tmp_path / "o.dict"
    path.write_bytes(_dumps(make(), indent=True))
    code, problem = check_parse(capsys, path, out)
    assert problem is None, problem
