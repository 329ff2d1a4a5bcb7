"""``pyprof prof`` on records with a wrong-typed or impossible field.

Each bad record is one error line naming the file, line and field (exit 2, nothing on stdout), whichever
reader reads it: the columnar reader (a file in parse's layout, or lines it hands to the line reader),
the record-by-record reader (stdin, PyProf dict lines) and the parallel decoders. ``--skip-bad`` skips
such records with one warning and their count. Ratios beyond int64 print whole, not wrapped. A seeded
fuzz of a real parse output never gives a traceback, and every reader agrees with a record-by-record
check of the documented field types.
"""

from __future__ import annotations

import io
import json
import random

import orjson
import pytest

try:
    from conftest import REPO, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import REPO, run_main

from pyprof.errors import InputError, RecordError
from pyprof.prof import table
from pyprof.prof.devices import DEFAULT_FLOOR_NS
from pyprof.prof.fastread import read_columns
from pyprof.prof.fields import KEYS
from pyprof.prof.load import iter_records, prof_checks, skipping_bad
from pyprof.prof.ops import registry
from pyprof.prof.ops.registry import Cost
from pyprof.records import CHECKS, FIELD_NAMES, MAX_COUNT, Check, Field, bad_field

SYNTHETIC = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"
BAD_AT = 7  # the line of the bad record in the test files


def _seed() -> list[dict]:
    """The records ``pyprof parse`` writes for the GPU kineto fixture (real ops with arguments)."""
    from pyprof.parse import open_source

    recs = list(open_source(str(SYNTHETIC)).records())
    assert recs and any(r.get("args") for r in recs)
    return recs


SEED = _seed()


def parse_layout(rec: dict) -> dict:
    """``rec`` in the field order parse writes for nsys/nvprof (``ranges`` included, ``opId`` after
    ``dir``): the layout the columnar reader and the decoder cut into parts."""
    order = [k for k in FIELD_NAMES if k != "opId"]
    order.insert(order.index("dir") + 1, "opId")
    out = {k: rec.get(k, [] if k == "ranges" else None) for k in order}
    out.update({k: v for k, v in rec.items() if k not in out})
    return out


def tiled(n: int = 12, layout=parse_layout) -> list[dict]:
    """``n`` records: copies of the seed with fresh opIds and later starts."""
    out = []
    for i in range(n):
        r = dict(SEED[i % len(SEED)])
        rep = i // len(SEED)
        if r.get("opId") is not None:
            r["opId"] += 1000 * rep
        r["start"] = (r.get("start") or 0) + rep * 10**9
        out.append(layout(r))
    return out


def write(path, recs: list[dict]) -> bytes:
    """JSON lines as orjson (parse) writes them, without a header line (record format 1: its readers
    turn a ``tid`` text into an integer, see :func:`_expected_bad`); a record holding NaN, an infinity (which orjson would
    write as null) or an integer beyond 64 bits as Python's json module writes it (``NaN``, ``Infinity``,
    all the digits)."""
    lines = []
    for r in recs:
        try:
            json.dumps(r, allow_nan=False)
            lines.append(orjson.dumps(r))
        except (ValueError, TypeError):
            lines.append(json.dumps(r, separators=(",", ":")).encode())
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data)
    return data


class _Stdin(io.TextIOWrapper):
    def isatty(self):
        return False


def run(capsys, monkeypatch, args, stdin: bytes | None = None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", _Stdin(io.BytesIO(stdin)))
    return run_main(capsys, ["prof", *args])


@pytest.fixture(autouse=True)
def quiet_models(monkeypatch):
    """A cost model for the test op ``ptestbig`` (huge FLOPs and bytes)."""
    monkeypatch.setitem(registry._MODELS, "ptestbig", lambda call: Cost(1e30, 1e30, "float32"))


CASES = [  # (field, value, what the message says it should be)
    ("layer", 5, "a list of strings"),
    ("op", 7, "a string"),
    ("kDuration", "abc", "an integer from 0 to 2^62"),
    ("args", 3, "a list of argument objects"),
    ("kDuration", 10**19, "an integer from 0 to 2^62"),
    ("kDuration", 1e19, "an integer from 0 to 2^62"),
    ("kDuration", -5, "an integer from 0 to 2^62"),
    ("kDuration", float("nan"), "an integer from 0 to 2^62"),
    ("kDuration", float("inf"), "an integer from 0 to 2^62"),
    ("dir", "sideways", 'one of "fprop", "bprop", "recomp", "bprop2", "optim", ""'),
    ("bytes", -1, "an integer from 0 to 2^62"),
    ("trace", ["a.py:1", 2], "a list of strings"),
    ("seqId", ["a"], "a list of integers"),
    ("grid", {"x": 1}, "a list of integers"),
    ("tid", [1], "an integer"),
    ("kShortName", True, "a string"),
    ("args", [{"name": "x", "type": "tensor", "shape": 5}], "a list of argument objects"),
]
IDS = [f"{f}={v!r}"[:40] for f, v, _ in CASES]
SOURCES = ["fast", "slow-lines", "stdin", "parallel"]


def bad_file(tmp_path, field, value, source, n=12):
    recs = tiled(n, parse_layout if source != "slow-lines" else dict)
    recs[BAD_AT - 1][field] = value
    return tmp_path / "net.dict", recs


def _prepare(tmp_path, monkeypatch, field, value, source, n=12):
    path, recs = bad_file(tmp_path, field, value, source, n)
    data = write(path, recs)
    args = [str(path)]
    if source == "stdin":
        args = ["-"]
    if source == "parallel":
        monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 0)
        args = ["-j", "2", str(path)]
    return path, data, args


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("field,value,expected", CASES, ids=IDS)
def test_bad_field_is_one_error_line(tmp_path, capsys, monkeypatch, field, value, expected, source):
    path, data, args = _prepare(tmp_path, monkeypatch, field, value, source)
    code, out, err = run(capsys, monkeypatch, ["--csv", *args], data if source == "stdin" else None)
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("pyprof: error: "), err
    name = "<stdin>" if source == "stdin" else str(path)
    assert f"{name} line {BAD_AT}: field \"{field}\" is " in err
    assert f"expected {expected};" in err and "--skip-bad" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("field,value,expected", CASES, ids=IDS)
def test_skip_bad_skips_and_counts(tmp_path, capsys, monkeypatch, field, value, expected, source):
    path, data, args = _prepare(tmp_path, monkeypatch, field, value, source)
    code, out, err = run(capsys, monkeypatch, ["--csv", "--skip-bad", "-c", "idx,kernel", *args],
                         data if source == "stdin" else None)
    assert code == 0, err
    rows = out.splitlines()
    assert rows[0] == "Idx,Kernel" and len(rows) == 1 + 11  # the 11 good records
    warnings = [line for line in err.splitlines() if "skipped" in line]
    name = "<stdin>" if source == "stdin" else str(path)
    assert len(warnings) == 1 and warnings[0].startswith(
        f"pyprof: warning: skipped 1 record(s) with a wrong-typed or impossible field (--skip-bad), the first: "
        f"{name} line {BAD_AT}: field \"{field}\" is ")
    assert warnings[0].endswith(f"expected {expected}")
    code, out, err = run(capsys, monkeypatch, ["--csv", "-q", "--skip-bad", *args],
                         data if source == "stdin" else None)
    assert code == 0 and err == ""  # -q: no warnings


def test_parallel_skip_names_the_files_own_line(tmp_path, capsys, monkeypatch):
    """Decoding processes count lines from their part's start; the warning gives the file's line."""
    monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 0)
    recs = tiled(300)
    for i in (250, 280):
        recs[i]["op"] = 7
    path = tmp_path / "net.dict"
    write(path, recs)
    code, out, err = run(capsys, monkeypatch, ["--csv", "-j", "2", "--skip-bad", "-c", "idx", str(path)])
    assert code == 0 and len(out.splitlines()) == 1 + 298
    assert "skipped 2 record(s)" in err and f"{path} line 251: field \"op\" is 7" in err


def test_every_record_bad_is_an_error(tmp_path, capsys, monkeypatch):
    recs = tiled(5)
    for r in recs:
        r["kDuration"] = -1
    path = tmp_path / "net.dict"
    data = write(path, recs)
    for args, stdin in (([str(path)], None), (["-"], data)):
        code, out, err = run(capsys, monkeypatch, ["--skip-bad", *args], stdin)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "all 5 records have a bad field" in err and "line 1" in err


def test_broken_line_still_stops_with_skip_bad(tmp_path, capsys, monkeypatch):
    path = tmp_path / "net.dict"
    data = write(path, tiled(4))
    path.write_bytes(data + b'{"kShortName": "k", "kDuration": \n')
    code, out, err = run(capsys, monkeypatch, ["--skip-bad", str(path)])
    assert code == 2 and out == "" and "line 5: not a JSON record" in err


@pytest.mark.parametrize("field,value", [("layer", 5), ("kDuration", -5)])
def test_first_bad_line_is_reported_before_a_later_broken_line(tmp_path, capsys, monkeypatch, field, value):
    recs = tiled(12)
    recs[2][field] = value
    path = tmp_path / "net.dict"
    data = write(path, recs)
    path.write_bytes(data + b"hello\n")
    for args, stdin in (([str(path)], None), (["-"], path.read_bytes())):
        code, _, err = run(capsys, monkeypatch, args, stdin)
        assert code == 2 and f'line 3: field "{field}" is {value}' in err, err


def test_pyprof_dict_lines_are_checked(tmp_path, capsys, monkeypatch):
    """NVIDIA PyProf ``str(dict)`` records: op/mod lists are normalised first, then checked."""
    good = {"kShortName": "volta_sgemm_128x64_tn", "kDuration": 2000, "layer": [], "trace": ["lm.py:10"],
            "seqId": [7], "altSeqId": [], "subSeqId": 0, "dir": "fprop", "mod": ["torch"], "op": ["matmul"],
            "tid": 9, "device": 0, "stream": 7, "grid": (1, 1, 1), "block": (128, 1, 1), "kLongName": "k",
            "marker": [], "reprMarkers": [], "seqMarker": []}
    path = tmp_path / "pyprof.dict"
    bad = (dict(good, op=[7]), dict(good, kDuration=float("inf")), dict(good, kDuration=float("nan")),
           dict(good, kDuration=-float("inf")), dict(good, layer=5))
    path.write_text("".join(f"{d!r}\n" for d in (good, *bad)))  # str(dict) writes inf and nan bare
    code, out, err = run(capsys, monkeypatch, [str(path)])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f'{path} line 2: field "op" is 7, expected a string' in err
    code, out, err = run(capsys, monkeypatch, ["--skip-bad", "-c", "idx,op,sil", str(path)])
    assert code == 0 and out.splitlines()[1:] == ["1 matmul 2000"]
    assert "skipped 5 record(s)" in err and "line 2" in err
    for value, shown in (("inf", "Infinity"), ("nan", "NaN"), ("-inf", "-Infinity")):
        path.write_text(f"{good!r}\n" + f"{good!r}\n".replace("'kDuration': 2000", f"'kDuration': {value}"))
        code, _, err = run(capsys, monkeypatch, [str(path)])
        assert code == 2 and f'line 2: field "kDuration" is {shown}' in err, err


def test_no_int64_overflow_reaches_the_output(tmp_path, capsys, monkeypatch):
    """The longest valid duration over a tiny ideal time, and huge FLOPs over 1 ns: every ratio column
    prints its value whole (render formats ratios through int64, which wrapped them to
    -9223372036854775808)."""
    recs = [{"kind": "kernel", "kShortName": "k", "kLongName": "k", "kDuration": d, "start": i, "device": 0,
             "gpu": "NVIDIA A100-SXM4-40GB", "op": "ptestbig", "mod": "torch", "args": [], "opId": i,
             "dir": "fprop", "seqId": [], "altSeqId": []} for i, d in enumerate((MAX_COUNT, 1, 1000))]
    path = tmp_path / "net.dict"
    write(path, recs)
    cols = "idx,sil,flops,bytes,ai,tflops,gbps,ideal,gap"
    for style in (["--csv"], []):
        code, out, err = run(capsys, monkeypatch, [*style, "-c", cols, "--peak-flops", "1e40", "--peak-bw",
                                                   "1e40", str(path)], None)
        assert code == 0, err
        assert "-9223372036854775808" not in out and "9223372036854775807" not in out
        rows = [line.replace(",", " ").split() for line in out.splitlines()[1:]]
        gap, tflops = float(rows[0][8]), float(rows[1][5])
        assert gap == pytest.approx(MAX_COUNT / DEFAULT_FLOOR_NS, rel=1e-9)  # (a roof of 1e-21 ns: the floor)
        assert tflops == pytest.approx(1e30 / 1 / 1e3, rel=1e-9)
        assert rows[2][8] != "n/a" and 0 < float(rows[2][8]) < 1e18  # ordinary values format as before
    # the aligned form prints human units (ms, PFLOP/s): the same values whole, no int64 wrap either
    code, out, err = run(capsys, monkeypatch, ["-w", "200", "-c", cols, "--peak-flops", "1e40", "--peak-bw", "1e40",
                                               str(path)], None)
    assert code == 0 and "-9223372036854775808" not in out and "9223372036854775807" not in out
    lines = out.splitlines()
    assert float(lines[1].split()[-1]) == pytest.approx(MAX_COUNT / DEFAULT_FLOOR_NS, rel=1e-9)
    assert "999999999999999983222784 PFLOP/s" in lines[2]  # 1e39 FLOP/s, whole
    assert 0 < float(lines[3].split()[-1]) < 1e18
    code, out, err = run(capsys, monkeypatch, ["--summary", "op", "--peak-flops", "1e40", "--peak-bw", "1e40",
                                               str(path)], None)
    assert code == 0 and "-9223372036854775808" not in out
    assert [line for line in out.splitlines() if line and not line.startswith(("#", "  "))][2].startswith("ptestbig ")
    code, out, _ = run(capsys, monkeypatch, ["--json", "-c", "gap", "--peak-flops", "1e40", "--peak-bw", "1e40",
                                             str(path)], None)
    assert orjson.loads(out.splitlines()[0])["gap"] == pytest.approx(MAX_COUNT / DEFAULT_FLOOR_NS)  # raw values


def test_record_error_carries_where(tmp_path):
    path, recs = bad_file(tmp_path, "layer", 5, "fast")
    write(path, recs)
    with pytest.raises(RecordError) as exc:
        list(iter_records(path))
    assert (exc.value.line, exc.value.field, exc.value.name) == (BAD_AT, "layer", str(path))
    with skipping_bad() as bad:
        assert len(list(iter_records(path))) == 11
    assert bad.count == 1 and bad.first_text() == f'{path} line {BAD_AT}: field "layer" is 5, expected a list of strings'


def test_unknown_fields_and_nulls_are_allowed(tmp_path, capsys, monkeypatch):
    recs = tiled(6)
    recs[1]["futureField"] = {"any": ["thing", 1]}
    recs[2] = {k: (None if k not in ("kShortName", "kDuration") else v) for k, v in recs[2].items()}
    path = tmp_path / "net.dict"
    data = write(path, recs)
    for args, stdin in (([str(path)], None), (["-"], data)):
        code, out, err = run(capsys, monkeypatch, ["--csv", "-q", *args], stdin)
        assert code == 0 and len(out.splitlines()) == 7, err


# -- the checks themselves --------------------------------------------------------------------------

POOL = [None, 0, 1, -1, 7, MAX_COUNT, MAX_COUNT + 1, 2**64, -(2**63), 1.5, -0.0, 1e19, 1e308, float("nan"),
        float("inf"), float("-inf"), True, False, "", "x", "fprop", "bprop", "optim", "sideways", [], [1],
        [1, 2, 3], [1.5], [float("nan")], ["a"], ["a", 1], [None], [[1]], [{}], [{"shape": [1]}],
        [{"shape": 5}], [{"type": "tensorlist", "items": [{"shape": [2]}]}],
        [{"type": "tensorlist", "items": [{"shape": "x"}]}], [{"dtype": 5}], {}, {"a": 1}]


def test_checks_come_from_the_documented_types():
    assert set(CHECKS) == set(FIELD_NAMES)
    assert CHECKS["layer"].expected == "a list of strings" and CHECKS["kind"].expected == "a string"
    assert CHECKS["kDuration"].high == MAX_COUNT and CHECKS["kDuration"].low == 0
    assert CHECKS["dir"].ok("") and not CHECKS["dir"].ok("sideways")
    with pytest.raises(ValueError, match="no check"):
        Check(Field("x", "set[int]", "an undocumented type"))
    assert {c.name for c in prof_checks()} == set(KEYS) & set(CHECKS)


def test_parse_output_passes_the_checks():
    """What parse writes has the documented types (every field, not only those prof reads)."""
    for rec in SEED:
        assert bad_field(rec, CHECKS.values()) is None, rec


# -- fuzz ------------------------------------------------------------------------------------------

FUZZ_VALUES = POOL + [10**30, -5, 2**62 - 1, "ns", "stream 7", [64, 1, 1], [-1], ["x"] * 3, {"shape": [1]}]
FUZZ_FIELDS = ["kind", "kShortName", "kLongName", "kDuration", "start", "tid", "device", "gpu", "stream",
               "grid", "block", "bytes", "layer", "trace", "mod", "op", "args", "cdtype", "opId", "seqId",
               "altSeqId", "dir", "subSeqId", "end", "pid", "ranges", "extra"]


def _mutate(rnd: random.Random, recs: list[dict]) -> list[dict]:
    recs = [dict(r) for r in recs]
    for _ in range(rnd.choice((1, 1, 2, 3))):
        r = rnd.choice(recs)
        field = rnd.choice(FUZZ_FIELDS)
        if field == "args" and r.get("args") and rnd.random() < 0.5:  # inside an argument object
            args = [dict(a) for a in r["args"]]
            rnd.choice(args)[rnd.choice(["shape", "dtype", "type", "name", "items", "value"])] = rnd.choice(
                FUZZ_VALUES)
            r["args"] = args
        else:
            r[field] = rnd.choice(FUZZ_VALUES)
    return recs


def _format1(rec: dict) -> dict:
    """A record of a format 1 file (no header: :func:`write`) as its readers take it: a ``tid`` text is
    an integer where it is one in decimal, else null (docs/records.md)."""
    tid = rec.get("tid")
    if isinstance(tid, str):
        rec = {**rec, "tid": int(tid) if tid.strip().lstrip("-").isdigit() else None}
    return rec


def _expected_bad(recs: list[dict]) -> list[int]:
    """The lines a record-by-record check of prof's fields rejects (the reference for every reader)."""
    checks = prof_checks()
    return [i for i, r in enumerate(recs, 1) if bad_field(_format1(r), checks) is not None]


@pytest.mark.slow
def test_fuzz_never_a_traceback(tmp_path, capsys, monkeypatch):
    rnd = random.Random(20240611)
    base = {"fast": tiled(12), "slow": tiled(12, dict)}
    path = tmp_path / "fuzz.dict"
    runs = 0
    for i in range(320):
        layout = "fast" if i % 2 else "slow"
        recs = _mutate(rnd, base[layout])
        data = write(path, recs)
        bad = _expected_bad(recs)
        outcomes = []
        for args, stdin in (([str(path)], None), (["-"], data)):
            code, out, err = run(capsys, monkeypatch, ["--csv", "-c", "idx,op,sil,flops,gap", *args], stdin)
            runs += 1
            assert code in (0, 2), (recs, err)
            assert "Traceback" not in err
            if code == 2:
                assert err.count("\n") == 1 and out == "", err
                assert bad and f"line {bad[0]}: " in err, (bad, err)
            else:
                assert not bad, (bad, err)
                assert "-9223372036854775808" not in out
            outcomes.append((code, err.replace("<stdin>", str(path))))
        assert outcomes[0] == outcomes[1]  # the columnar and the record-by-record readers agree
        if bad and len(bad) < len(recs):
            code, out, err = run(capsys, monkeypatch, ["--csv", "-q", "--skip-bad", "-c", "idx", str(path)])
            assert code == 0 and len(out.splitlines()) == 1 + len(recs) - len(bad), err
    assert runs >= 600


def test_fuzz_readers_keep_exactly_the_good_records(tmp_path):
    """The record reader (known-good masks, per-column checks) and the columnar reader keep the records a
    record-by-record check keeps, in order."""
    rnd = random.Random(7)
    path = tmp_path / "fuzz.dict"
    for i in range(150):
        recs = _mutate(rnd, tiled(24, parse_layout if i % 3 else dict))
        write(path, recs)
        bad = set(_expected_bad(recs))
        with skipping_bad() as policy:
            try:
                got = list(iter_records(path))
            except InputError:  # every record bad
                assert len(bad) == len(recs)
                continue
        want = [r for j, r in enumerate(recs, 1) if j not in bad]
        assert [r.get("kDuration") for r in got] == [r.get("kDuration") for r in want]
        assert [r.get("opId") for r in got] == [r.get("opId") for r in want]
        assert policy.count == len(bad)
        with skipping_bad() as policy:
            cols = read_columns(path)
            assert len(cols) == len(want)
            arrays = cols.arrays()
        assert arrays["opId"].tolist() == [r.get("opId") for r in want]
        assert policy.count == len(bad)
