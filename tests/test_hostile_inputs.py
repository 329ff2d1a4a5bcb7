"""Hostile and unlucky inputs, generated and seeded: what an attacker or an unlucky user hands pyprof.

Each class of input gives a result or one line, never a traceback, and loses nothing silently:

* exit 0 with outputs complete (records its own readers accept), or 1/2 with exactly one
  ``pyprof: error:`` line and no output left behind;
* memory bounded: the refused big inputs run in a child under an address-space limit (``RLIMIT_AS``),
  so an input that would take gigabytes fails the test rather than the machine.

No wall-clock assertions; the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pyprof.records import CHECKS, bad_field
from tests.conftest import REPO, read_record_file, record_body, run_main
from tests.nsys_synth import Export

pytestmark = pytest.mark.slow

SEED = 20261127
KINETO_GPU = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"


def one_line_or_result(code, err: str, outs: list[Path]) -> str | None:
    """What is wrong with the outcome of a command, or None: exit 0 (outputs present, no traceback) or
    exit 1/2 with one ``pyprof: error:`` line and none of ``outs`` left."""
    if "Traceback" in err:
        return f"traceback: {err[-600:]}"
    if code == 0:
        missing = [str(p) for p in outs if not p.exists()]
        return f"exit 0 without {missing}" if missing else None
    if code not in (1, 2):
        return f"exit {code}: {err!r}"
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("pyprof: error: ")]
    if len(errors) != 1 or not lines[-1].startswith("pyprof: error: "):
        return f"exit {code} without exactly one error line: {err!r}"
    left = [str(p) for p in outs if p.exists()]
    return f"exit {code} left {left}" if left else None


def records_ok(path: Path) -> str | None:
    """None when every line of ``path`` after its header is a record whose fields pass
    :data:`pyprof.records.CHECKS`."""
    for n, line in enumerate(record_body(path.read_bytes()).splitlines(), 2):
        rec = orjson.loads(line)
        bad = bad_field(rec, CHECKS.values())
        if bad is not None:
            return f"line {n}: {bad.problem(rec.get(bad.name))}"
    return None


# -- 4. decoded markers are data ---------------------------------------------------------------------

#: Python literals that are no JSON value (and the ones that are, of a type no field takes)
ODD_LITERALS = ["b'xx'", "1j", "{1, 2}", "...", "{1: 2}", "{(1, 2): 'a'}", str(2**70), str(2**64),
                str(-(2**63) - 1), "1e999", "-1e999", "(1, b'x')", "frozenset()", "{'a': {3: 4}}",
                "{'a': [1j, ...]}", "[[[[b'']]]]", "set()", "'x'", "3", "True", "None", "[1, 'a']", "{}"]
#: text that is no literal at all (literal_eval refuses it): a dict keyed by a list, a call, a name
NON_LITERALS = ["{[1]: 2}", "2 ** 70", "{'mod': 'x', [1]: 2}", "f(1)", "nan", "{{}: 1}"]
#: ill-typed values in JSON (pyprof markers)
ODD_JSON = ["5", "1.5", "true", "null", '"x"', "[1, 2]", '["a", 3]', '{"a": 1}', "[{}]", '[{"name": 1}]',
            '[{"shape": "a"}]', '[{"items": 5}]', "18446744073709551616", "-1e308", "[[[]]]", '""']


def _legacy_marker(rng: random.Random) -> str:
    """A PyProf ``str(dict)`` marker with odd values in its fields (``{'mod': ...}`` or a traceMarker)."""
    pick = lambda: rng.choice(ODD_LITERALS + ["'torch'", "'conv2d'"])  # noqa: E731
    if rng.random() < 0.2:
        return "{'traceMarker': " + rng.choice([pick(), f"[{pick()}, {pick()}]"]) + "}"
    if rng.random() < 0.1:
        return "{'mod': " + rng.choice(NON_LITERALS) + "}"
    fields = {"mod": pick(), "op": pick(),
              "args": rng.choice([pick(), f"[{pick()}]",
                                  "[{'name': " + pick() + ", 'type': " + pick() + ", 'value': " + pick() + "}]",
                                  "[{'name': 'x', 'type': 'tensor', 'shape': " + pick() + ", 'dtype': " + pick() + "}]"])}
    keys = rng.sample(list(fields), rng.randint(1, 3))
    return "{'mod': " + fields["mod"] + "".join(f", '{k}': {fields[k]}" for k in keys if k != "mod") + "}"


def _pyprof_marker(rng: random.Random) -> str:
    """A pyprof JSON marker of a random kind whose fields hold ill-typed JSON."""
    kind = rng.choice(["op", "op", "mod", "bwd", "optim", "range"])
    keys = {"op": ["op", "ns", "args", "cdtype", "seq", "id", "trace"], "mod": ["path", "cls"],
            "bwd": ["node", "seq", "id"], "optim": ["cls"], "range": ["name"]}[kind]
    fields = [f'"{k}":{rng.choice(ODD_JSON)}' for k in rng.sample(keys, rng.randint(1, len(keys)))]
    if kind == "op" and rng.random() < 0.5:
        fields.append('"op":"conv2d"')
    return '{"pyprof":1,"k":"' + kind + '",' + ",".join(fields) + "}"


def generated_markers(n: int) -> list[str]:
    rng = random.Random(SEED)
    return [(_legacy_marker if i % 2 else _pyprof_marker)(rng) for i in range(n)]


def test_generated_markers_are_legal_python_or_json():
    """The generator makes what it says: odd literals that Python reads, and JSON that is JSON."""
    import ast

    legacy = [m for m in generated_markers(200) if m.startswith("{'")]
    read = sum(1 for m in legacy if _literal(ast, m))
    assert len(legacy) > 60 and read > len(legacy) // 2  # most are literals, a few are not
    for m in generated_markers(200):
        if m.startswith('{"'):
            json.loads(m)


def _literal(ast, text) -> bool:
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _export_with_markers(path: Path, texts: list[str]) -> None:
    ex = Export()
    main = ex.track(name="python")
    for text in texts:
        with main.range(text, domain="pyprof" if text.startswith('{"') else None):
            main.launch("ampere_sgemm_32x128_tn")
    ex.write(path)


def test_generated_markers_through_parse_then_prof(capsys, tmp_path):
    """Markers whose literals are no plain JSON (bytes, complex, set, ``...``, int keys, ints of 2^64
    and more) or whose fields are of the wrong type, one per kernel: parse writes records its own
    checks accept (never a traceback), counts the damaged markers in one warning, and ``prof`` reads
    what parse wrote."""
    texts = generated_markers(300)
    src, out = tmp_path / "m.sqlite", tmp_path / "m.dict"
    _export_with_markers(src, texts)
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0, err
    assert records_ok(out) is None
    assert len(read_record_file(out)) == len(texts)  # no kernel lost
    warned = [line for line in err.splitlines() if "malformed pyprof/PyProf marker" in line]
    assert len(warned) == 1
    n_bad = int(warned[0].split("warning: ")[1].split()[0])
    assert 0 < n_bad < len(texts)
    code, table, err = run_main(capsys, ["prof", out])
    assert code == 0, err
    assert "Traceback" not in err
    # prof's own reader, with its checks, read every record back
    code, summary, err = run_main(capsys, ["prof", "--csv", out])
    assert code == 0 and len(summary.splitlines()) == len(texts) + 1, err
    # and so do the readers that keep ranges and walk arguments and call sites (the issue: "prof,
    # report and diff then reject")
    for args in (["diff", out, out], ["advise", out]) + ((["report", out, "-o", tmp_path / "r.html"],)
                                                        if _has("plotly") else ()):
        code, _, err = run_main(capsys, args)
        assert code == 0 and "Traceback" not in err, (args, err)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_odd_literal_is_stored_as_its_text(capsys, tmp_path):
    """A value that is no JSON (bytes in args) is kept as its Python text, not lost nor a traceback."""
    src, out = tmp_path / "m.sqlite", tmp_path / "m.dict"
    _export_with_markers(src, ["{'mod': 'torch', 'op': 'mul', 'args': [{'name': 'x', 'type': 'int', "
                               "'value': b'\\x00'}, {'name': 'y', 'type': 'int', 'value': " + str(2**70) + "}]}"])
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0, err
    (rec,) = read_record_file(out)
    assert rec["op"] == "mul" and [a["value"] for a in rec["args"]] == ["b'\\x00'", str(2**70)]


def test_generated_markers_in_a_torch_profiler_trace(capsys, tmp_path):
    """The same markers as torch.profiler range names (percent-encoded as pyprof names them)."""
    from pyprof.markers import to_profiler_name

    doc = json.loads(KINETO_GPU.read_text())
    names = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "user_annotation"
             and e.get("name", "").startswith("{%22pyprof%22:")]
    assert names
    rng = random.Random(SEED)
    for ev in names:
        ev["name"] = to_profiler_name(_pyprof_marker(rng))
    src, out = tmp_path / "t.json", tmp_path / "t.dict"
    src.write_text(json.dumps(doc))
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0, err
    assert records_ok(out) is None
    code, _, err = run_main(capsys, ["prof", out])
    assert code == 0, err


# -- 6. no silent loss; every OS error on output is one line ------------------------------------------


def _small_export(path: Path, kernels: int = 400) -> None:
    ex = Export()
    main = ex.track(name="python")
    for i in range(kernels):
        with main.range("layer:x"):
            main.launch(f"k{i}")
    ex.write(path)


@pytest.mark.parametrize("pages", [1, 2, 5])
def test_export_cut_short_is_refused(pages, capsys, tmp_path):
    """An export whose last pages are cut off (a copy or download cut short): refused in one line that
    says so, never read as a smaller capture."""
    src, cut, out = tmp_path / "s.sqlite", tmp_path / "cut.sqlite", tmp_path / "o.dict"
    _small_export(src)
    data = src.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    cut.write_bytes(data[: len(data) - pages * page])
    code, _, err = run_main(capsys, ["parse", cut, "-o", out])
    assert one_line_or_result(code, err, [out]) is None
    assert code == 2 and "truncated" in err


def test_locked_database_is_called_locked(monkeypatch, capsys, tmp_path):
    """An export another program holds an exclusive lock on is "locked", not "truncated or corrupt".
    (pyprof's connections wait 0.1 s for the lock here, not sqlite3's default 5 s.)"""
    import functools
    import sqlite3

    src, out = tmp_path / "s.sqlite", tmp_path / "o.dict"
    _small_export(src, 5)
    con = sqlite3.connect(src, isolation_level=None)
    monkeypatch.setattr(sqlite3, "connect", functools.partial(sqlite3.connect, timeout=0.1))
    con.execute("BEGIN EXCLUSIVE")
    try:
        code, _, err = run_main(capsys, ["parse", src, "-o", out])
    finally:
        con.close()
    assert one_line_or_result(code, err, [out]) is None
    assert code == 2 and "locked" in err and "corrupt" not in err


@pytest.fixture
def records(tmp_path, capsys) -> Path:
    src, out = tmp_path / "s.sqlite", tmp_path / "r.dict"
    _small_export(src, 20)
    assert run_main(capsys, ["parse", src, "-o", out])[0] == 0
    return out


@pytest.mark.parametrize("where", ["missing-folder", "a-folder", "dev-full"])
@pytest.mark.parametrize("command", ["parse", "prof", "report"])
def test_output_os_errors_are_one_line(where, command, records, capsys, tmp_path):
    if command == "report":
        pytest.importorskip("plotly")
    target = {"missing-folder": tmp_path / "no" / "such" / "out", "a-folder": tmp_path,
              "dev-full": Path("/dev/full")}[where]
    if where == "dev-full" and not target.exists():
        pytest.skip("no /dev/full here")
    if command == "parse" and where == "a-folder":
        pytest.skip("parse -o FOLDER writes FOLDER/NAME.dict: a folder is a valid output there")
    args = {"parse": ["parse", tmp_path / "s.sqlite", "-o", target],
            "prof": ["prof", records, "-o", target],
            "report": ["report", records, "-o", target]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run_main(capsys, args)
    assert code == 2, err
    assert one_line_or_result(code, err, []) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing left (no temporary file)


#: ``pyprof parse SRC -o /dev/full`` with the NVTX ranges read in windows of 100 rows, a forked reader
#: for them whatever the export's size, printing "forked" where the reader was started
_FULL_DISK_PARSE = """
import sys
from pyprof.parse import fetch, nsys
nsys.WINDOW_ROWS = nsys.SLICE_ROWS = 100
fetch.PARALLEL_MIN_ROWS = 10
fork = nsys.NsysSource._fork
def spy(nvtx):
    print("forked", flush=True)
    return fork(nvtx)
nsys.NsysSource._fork = staticmethod(spy)
from pyprof.cli.main import main
main(["parse", sys.argv[1], "-o", "/dev/full"])
"""


def test_full_disk_parse_with_a_forked_reader_is_one_line(tmp_path):
    """A full disk met while the forked NVTX reader still has windows to send: one line, exit 2, and
    nothing at interpreter exit. (Before, the reader was left to the garbage collector, which closed
    the pipe twice: "Exception ignored ... OSError: Bad file descriptor" after the error line.) Run in
    a child of its own, as only an interpreter's exit shows it."""
    from tests.nsys_synth import write_nested

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    src = tmp_path / "nested.sqlite"
    write_nested(src, 60_000, 2)  # 30,000 kernels (a threaded write), 600 windows of ranges
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", _FULL_DISK_PARSE, str(src)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.stdout == "forked\n"
    assert r.returncode == 2 and r.stderr.startswith("pyprof: error: cannot write /dev/full")
    assert one_line_or_result(r.returncode, r.stderr, []) is None
    assert len(r.stderr.splitlines()) == 1, r.stderr


@pytest.fixture
def read_only(tmp_path, monkeypatch) -> Path:
    """A folder (holding one file) where no file can be made, removed or renamed into: mode 0555. Where
    the tests run as a user, that is all; as root, who may write there anyway, the kernel's refusal
    is simulated: ``os.open`` with O_CREAT, ``os.mkdir``, ``os.unlink`` and ``os.replace``/``os.rename``
    into it raise PermissionError (EACCES), as they do for a user. (A check that asks ``os.access``
    instead of trying would pass as root and so not be tested here; this tests the handling of
    the error.)"""
    import errno

    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    folder.chmod(0o555)
    if os.geteuid() == 0:
        def inside(path) -> bool:
            return os.path.dirname(os.path.abspath(os.fspath(path))) == str(folder)

        def refuse(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

        def guard(real, creates=lambda *a, **k: True, target=0):
            def call(*args, **kw):
                if inside(args[target]) and creates(*args, **kw):
                    refuse(args[target])
                return real(*args, **kw)
            return call

        monkeypatch.setattr(os, "open", guard(os.open, lambda path, flags, *a, **k: bool(flags & os.O_CREAT)))
        for name, target in (("mkdir", 0), ("unlink", 0), ("remove", 0), ("replace", 1), ("rename", 1)):
            monkeypatch.setattr(os, name, guard(getattr(os, name), target=target))
    yield folder
    folder.chmod(0o755)


@pytest.mark.parametrize("command", ["parse", "parquet", "prof", "report", "parse-two"])
def test_read_only_output_folder_is_one_line(command, read_only, records, capsys, tmp_path):
    """An output in a read-only folder: one line saying it cannot be written, exit 2, the folder as
    it was."""
    if command == "report":
        pytest.importorskip("plotly")
    if command == "parquet":
        pytest.importorskip("pyarrow")
    src = tmp_path / "s.sqlite"
    args = {"parse": ["parse", src, "-o", read_only / "o.dict"],
            "parquet": ["parse", "--format", "parquet", src, "-o", read_only / "o.parquet"],
            "prof": ["prof", records, "-o", read_only / "o.txt"],
            "report": ["report", records, "-o", read_only / "r.html"],
            "parse-two": ["parse", "-j", "1", src, records, "-o", read_only]}[command]
    code, _, err = run_main(capsys, args)
    assert code == 2 and "Traceback" not in err, err
    lines = err.splitlines()
    assert lines[-1].startswith("pyprof: error: ")
    if command != "parse-two":  # (two inputs: a line for each, then the count)
        assert one_line_or_result(code, err, []) is None
    assert "cannot write" in err and "Permission denied" in err and "writable" in err
    assert sorted(p.name for p in read_only.iterdir()) == ["keep.txt"]


@pytest.mark.torch
def test_run_into_a_read_only_folder_fails_before_the_script(read_only, capsys, tmp_path):
    """``pyprof run -o READ_ONLY``: one line before the script runs (not after it, at the trace's
    export), exit 2; the older file in the folder untouched."""
    pytest.importorskip("torch")
    ran = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    code, _, err = run_main(capsys, ["run", "--no-calibrate", "--steps-from", "all", "-o", read_only, script])
    assert code == 2 and one_line_or_result(code, err, []) is None, err
    assert "cannot write" in err and "Permission denied" in err
    assert not ran.exists()
    assert sorted(p.name for p in read_only.iterdir()) == ["keep.txt"]


def test_output_through_a_symlink_keeps_link_and_mode(records, capsys, tmp_path):
    """``-o`` over a symlink writes its target (the link stays a link); a private 0600 output stays 0600."""
    target, link = tmp_path / "private.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    target.chmod(0o600)
    link.symlink_to(target)
    code, _, err = run_main(capsys, ["prof", records, "-o", link])
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("Idx") and (target.stat().st_mode & 0o777) == 0o600


def test_closed_pipe_exits_0(records):
    """``pyprof prof x.dict | head -1``: exit 0, nothing on stderr but warnings."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    big = records.with_name("big.dict")
    big.write_bytes(records.read_bytes() * 200)
    proc = subprocess.Popen([sys.executable, "-m", "pyprof", "prof", "-q", big], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline().startswith(b"Idx")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 0 and err == "", err


# -- 5. bounded work -----------------------------------------------------------------------------------

#: address space a refused input may take, in the child that parses it (the issue's bound: 2 GB)
MEMORY_LIMIT = 2 << 30


def parse_bounded(src: Path, out: Path, *extra: str, limits: str = "") -> subprocess.CompletedProcess:
    """``pyprof parse src -o out`` in a child limited to :data:`MEMORY_LIMIT` of address space (an
    input that needs more fails there, with a MemoryError traceback, rather than here); ``limits``:
    ``PYPROF_LIMITS`` for it."""
    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT})); "
            "from pyprof.cli.main import main; main(sys.argv[1:])")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYPROF_LIMITS=limits)
    return subprocess.run([sys.executable, "-c", code, "parse", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def _gzip_padded(path: Path, head: bytes, blanks: int) -> None:
    """``head`` then ``blanks`` bytes of blanks (a multiple of 4 MiB), gzipped: one member for the head,
    then one 4 MiB member of blanks (compressed once, about 1000 times) repeated, as gzip allows."""
    import gzip

    block = 4 << 20
    assert blanks % block == 0
    path.write_bytes(gzip.compress(head, 9) + gzip.compress(b" " * block, 9) * (blanks // block))


def test_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    """The issue's case: a .json.gz of 2 MB inflating to 2 GiB, at the default limits (inflate: 512 MiB),
    refused in one line, in bounded memory (before #29: 4 to 8 GB, one killed at 300 s). The
    command-line readers (``prof``, ``report``) parse an export through the same reader; their time
    and peak memory on it: ``scripts/hostile_bounds.py``."""
    src, out = tmp_path / "bomb.json.gz", tmp_path / "o.dict"
    _gzip_padded(src, b'{"traceEvents": [', 2 << 30)
    assert 1 << 20 < src.stat().st_size < 4 << 20
    r = parse_bounded(src, out)
    assert one_line_or_result(r.returncode, r.stderr, [out]) is None
    assert r.returncode == 2 and "--limit inflate=" in r.stderr


def test_inflate_limit_can_be_raised(monkeypatch, capsys, tmp_path):
    """A real trace followed by 8 MiB of blanks: past a 4 MiB limit, read under ``--limit`` of 16 MiB; a
    malformed ``--limit`` is one line. (In this process: the bounded memory of a refusal is the bomb's
    test; ``--limit`` sets PYPROF_LIMITS, which monkeypatch restores.)"""
    src, out = tmp_path / "padded.json.gz", tmp_path / "o.dict"
    _gzip_padded(src, KINETO_GPU.read_bytes(), 8 << 20)
    assert 100 * src.stat().st_size < 8 << 20  # past the 100x a gzip trace may always inflate to
    monkeypatch.setenv("PYPROF_LIMITS", "inflate=4194304")
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 2 and one_line_or_result(code, err, [out]) is None and "--limit inflate=" in err
    code, _, err = run_main(capsys, ["parse", src, "-o", out, "--limit", "inflate=16777216"])
    assert code == 0, err
    assert records_ok(out) is None
    bad = out.with_name("x.dict")
    code, _, err = run_main(capsys, ["parse", src, "-o", bad, "--limit", "inflate=x"])
    assert code == 2 and one_line_or_result(code, err, [bad]) is None


def test_deep_nvtx_nesting_is_refused(monkeypatch, capsys, tmp_path):
    """30,000 NVTX ranges open at once: refused in one line naming the depth limit, within the 2 GB
    bound; a nesting under the limit is read, and refused under a lower one (those two in this
    process). (Before #29 the label stacks took the square of the depth: this one needed over 2 GB
    even with the limit raised; see tests/test_parse_sweep.py for the stacks now.)"""
    from tests.nsys_synth import write_nested

    src, out = tmp_path / "deep.sqlite", tmp_path / "o.dict"
    write_nested(src, 30_000, 30_000)
    r = parse_bounded(src, out)
    assert one_line_or_result(r.returncode, r.stderr, [out]) is None
    assert r.returncode == 2 and "--limit depth=" in r.stderr
    src = tmp_path / "less.sqlite"
    write_nested(src, 1200, 1200)
    monkeypatch.setenv("PYPROF_LIMITS", "depth=1000")
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 2 and one_line_or_result(code, err, [out]) is None and "--limit depth=" in err
    monkeypatch.setenv("PYPROF_LIMITS", "")
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0, err
    assert records_ok(out) is None
    (rec,) = read_record_file(out)
    assert len(rec["ranges"]) == 1200


def _annotation_trace(depth: int, name=lambda i: f"ann{i}") -> dict:
    events = [{"ph": "X", "cat": "user_annotation", "name": name(i), "pid": 1, "tid": 1, "ts": i,
               "dur": 10 * depth - 2 * i} for i in range(depth)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": depth + 1,
                   "dur": 5, "args": {}})
    return {"traceEvents": events}


def test_deep_user_annotations_are_refused(tmp_path):
    """20,000 nested torch.profiler user annotations (8.9 GB before): one line, bounded memory."""
    src, out = tmp_path / "deep.json", tmp_path / "o.dict"
    src.write_text(json.dumps(_annotation_trace(20_000)))
    r = parse_bounded(src, out)
    assert one_line_or_result(r.returncode, r.stderr, [out]) is None
    assert r.returncode == 2 and "--limit depth=" in r.stderr


def test_huge_range_text_is_refused(capsys, tmp_path):
    """One range text of 17 M characters: refused, naming the text limit (in this process: 17 MB)."""
    src, out = tmp_path / "long.json", tmp_path / "o.dict"
    src.write_text(json.dumps(_annotation_trace(1, name=lambda i: "layer:" + "a" * (17 << 20))))
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert one_line_or_result(code, err, [out]) is None
    assert code == 2 and "--limit text=" in err


def test_recursive_view_named_like_a_cupti_table_is_not_followed(capsys, tmp_path):
    """A recursive VIEW in place of the kernel table: never read (tables only), so no hang; the line says
    so (before #45: "holds no CUDA kernels")."""
    import sqlite3

    src, out = tmp_path / "v.sqlite", tmp_path / "o.dict"
    _small_export(src, 5)
    con = sqlite3.connect(src)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
                "SELECT x + 1 FROM r) SELECT " + ", ".join(f"x AS {c}" for c in cols) + " FROM r")
    con.commit()
    con.close()
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert one_line_or_result(code, err, [out]) is None
    assert code == 2 and "CUPTI_ACTIVITY_KIND_KERNEL is a view, not a table" in err  # (#45: not "no CUDA kernels")


# -- 10. names are data --------------------------------------------------------------------------------


def test_names_reach_terminal_and_csv_as_data(capsys, tmp_path):
    """An op named like a spreadsheet formula and a kernel name holding terminal escape codes: the
    table shows no control character, the CSV leads each would-be formula with ``'``."""
    src, out = tmp_path / "evil.sqlite", tmp_path / "evil.dict"
    ex = Export()
    main = ex.track(name="python")
    evil = {"=HYPERLINK(\"http://x\")": "\x1b[31mred\x1b[0m_kernel", "+cmd|calc": "@SUM(A1)", "-2+3": "k\x07"}
    for op, kernel in evil.items():
        with main.range(json.dumps({"pyprof": 1, "k": "op", "ns": "torch", "op": op, "args": []}), domain="pyprof"):
            main.launch(kernel)
    ex.write(src)
    assert run_main(capsys, ["parse", src, "-o", out])[0] == 0
    terminal = [["prof", out], ["prof", "--summary", "op", out], ["prof", "-w", "200", out], ["diff", out, out]]
    spreadsheet = [["prof", "--csv", out], ["diff", "--csv", out, out]]
    try:  # the per-rank summary of a dataset: its op names too (the scale extra)
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        pq = tmp_path / "evil.parquet"
        assert run_main(capsys, ["parse", "-q", "--format", "parquet", src, "-o", pq])[0] == 0
        terminal.append(["prof", pq])
        spreadsheet.append(["prof", "--csv", pq])
    for args in terminal:
        code, text, err = run_main(capsys, args)
        assert code == 0, err
        assert not any(c < " " and c != "\n" or "\x7f" <= c <= "\x9f" for c in text), (args, text)
    import csv
    import io

    for args in spreadsheet:  # (before #29, diff --csv and the per-rank CSV kept formulas and ESC)
        code, text, err = run_main(capsys, args)
        assert code == 0, err
        assert not any(c < " " and c != "\n" or "\x7f" <= c <= "\x9f" for c in text), (args, text)
        rows = list(csv.reader(io.StringIO(text)))
        cells = [c for row in rows[1:] for c in row]
        assert not [c for c in cells if c[:1] in "=+-@" and len(c) > 1 and not _number(c)], args
        ops = {"'=HYPERLINK(\"http://x\")", "'+cmd|calc", "'-2+3"}
        assert ops | ({"'@SUM(A1)"} if args[-1] == out else set()) <= set(cells), args


def _number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


# -- 8. the report over its size cap -------------------------------------------------------------------


def test_report_of_huge_arguments_fits_its_cap(capsys, tmp_path):
    """An op whose string argument holds 9 MB (a page over the 8 MB cap before: a RuntimeError): the
    page is written under its cap, saying its cells were cut; the records keep the full text."""
    pytest.importorskip("plotly")
    from pyprof.report import page

    src, out, html = tmp_path / "big.sqlite", tmp_path / "big.dict", tmp_path / "r.html"
    ex = Export()
    main = ex.track(name="python")
    items = [{"name": "", "type": "tensor", "shape": [4, 4], "dtype": "float32"}] * 400
    for i in range(20):
        with main.range(json.dumps({"pyprof": 1, "k": "op", "ns": "torch", "op": "cat", "trace": [f"x.py:{i}:f"],
                                    "args": [{"name": "tensors", "type": "tensorlist", "items": items}]}),
                        domain="pyprof"):
            main.launch("cat_kernel")
    with main.range(json.dumps({"pyprof": 1, "k": "op", "ns": "torch", "op": "mul",
                                "args": [{"name": "a", "type": "str", "value": "x" * (9 << 20)}]}), domain="pyprof"):
        main.launch("mul_kernel")
    ex.write(src)
    assert run_main(capsys, ["parse", src, "-o", out])[0] == 0
    code, _, err = run_main(capsys, ["report", out, "-o", html])
    assert one_line_or_result(code, err, [html]) is None
    assert code == 0 and html.stat().st_size <= page.MAX_BYTES
    assert max(len(line) for line in out.read_text().splitlines()) > 9 << 20


def test_report_labels_are_escaped():
    """A GPU name holding markup is text in the charts' labels (Plotly renders <a href> in them)."""
    pytest.importorskip("plotly")
    from pyprof.report import figures
    from pyprof.report.breakdown import Breakdown

    evil = '<a href="https://x">NVIDIA</a>'
    fig = figures.breakdown([Breakdown(evil, 100.0, 50.0, 0.0, 0.0, 50.0, 0.0, 0.0)])
    text = fig.to_json()
    assert "<a " not in text and "&lt;a" in text


# -- 9. --cluster ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["tcp://", "bogus://x", "local:100000", "local:-1", "tcp://host:port"])
def test_cluster_address_is_checked(address, capsys, tmp_path):
    """A bad address or an unbounded local:N: one line, exit 2, before any cluster starts."""
    pytest.importorskip("distributed")
    src, out = tmp_path / "s.sqlite", tmp_path / "out"
    _small_export(src, 2)
    code, _, err = run_main(capsys, ["parse", "--cluster", address, src, "-o", out])
    assert code == 2 and one_line_or_result(code, err, []) is None
    assert not out.exists() or not any(out.iterdir())


def test_local_cluster_serves_no_dashboard(monkeypatch, capsys, tmp_path):
    """local:N starts its cluster with no dashboard, listening on 127.0.0.1 only."""
    distributed = pytest.importorskip("distributed")
    seen = {}

    class Refused(Exception):
        pass

    def cluster(**kwargs):
        seen.update(kwargs)
        raise Refused

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    src = tmp_path / "s.sqlite"
    _small_export(src, 2)
    with pytest.raises(Refused):
        run_main(capsys, ["parse", "--cluster", "local:1", src, "-o", tmp_path / "out"])
    assert seen["dashboard_address"] is None and seen["host"] == "127.0.0.1"


# -- 10. non-ASCII names survive torch.profiler's export ---------------------------------------------


@pytest.mark.parametrize("text", ['{"pyprof":1,"k":"range","name":"café 层 %22 \\\\ \\"q\\" 🙂"}',
                                  '{"pyprof":1,"k":"op","op":"x","trace":["Código/modèle.py:3:f"]}',
                                  '{"pyprof":1,"k":"mod","path":"a.b"}'])
def test_profiler_name_is_ascii_and_exact(text):
    from pyprof.markers import PROFILER_PREFIX, from_profiler_name, to_profiler_name

    name = to_profiler_name(text)
    assert name.isascii() and '"' not in name and "\\" not in name
    assert name.startswith(PROFILER_PREFIX) and from_profiler_name(name) == text


@pytest.mark.torch
def test_non_ascii_module_range_and_path_survive_pyprof_run(capsys, tmp_path):
    """A module attribute named 层, a ``pyprof.range("café")`` and a script under ``Código/``: torch's
    chrome-trace export drops events whose name holds non-ASCII; all three reach the records. The
    script also forks a child that returns from it (no ``os._exit``): before, the child ran pyprof's
    epilogue and deadlocked; now it ends with the script (exit 0) and the run completes once.

    In this process, as tests/test_run_cli.py runs scripts; so that a child pyprof fails to end can
    neither hang the suite nor run the rest of it, the child is killed by an alarm after 60 s, and one
    that comes back here exits at once with status 3; the script records the child's wait status."""
    pytest.importorskip("torch")
    script = tmp_path / "Código" / "modèle.py"
    script.parent.mkdir()
    status = tmp_path / "child-status"
    script.write_text(
        "import os, signal, torch, pyprof\n"
        "class Café(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.层 = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        with pyprof.range('café'):\n"
        "            return self.层(x).relu()\n"
        "m = Café()\n"
        "for _ in range(2):\n"
        "    m(torch.randn(2, 4)).sum().backward()\n"
        "pid = os.fork()\n"  # a child that returns from the script (no os._exit): it must end there
        "if pid == 0:\n"
        "    signal.alarm(60)\n"
        "else:\n"
        f"    open({str(status)!r}, 'w').write(str(os.waitpid(pid, 0)[1]))\n", encoding="utf-8")
    out = tmp_path / "run"
    parent = os.getpid()
    try:
        # (no calibration: the roofline is not what this tests, and measuring the CPU's peaks takes 15 s)
        code, stdout, err = run_main(capsys, ["run", "--no-calibrate", "--steps-from", "all", "-o", out, script])
    finally:
        if os.getpid() != parent:  # the script's child came back here: pyprof did not end it
            os._exit(3)
    assert code == 0, err[-2000:]
    assert status.read_text() == "0"  # the child exited 0, where the script ended (not killed, not 3)
    recs = read_record_file(out / "records.dict")
    layers = {name for rec in recs for name in rec.get("layer") or ()}
    assert {"café", "层"} <= layers
    assert any("modèle.py" in site for rec in recs for site in rec.get("trace") or ())
    assert (stdout + err).count("pyprof run:") == 1


def test_pipes_and_devices_are_named_as_such(capsys, tmp_path):
    """A FIFO or /dev/zero given to parse is "not a regular file" (not "empty"); /dev/zero given to
    prof is a device (not a MemoryError after reading it for ever)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = tmp_path / "o.dict"
    for path in (fifo, Path("/dev/zero")):
        if not path.exists():
            continue
        code, _, err = run_main(capsys, ["parse", path, "-o", out])
        assert code == 2 and one_line_or_result(code, err, [out]) is None
        assert "not a regular file" in err and "empty" not in err
    if Path("/dev/zero").exists():
        code, _, err = run_main(capsys, ["prof", "/dev/zero"])
        assert code == 2 and one_line_or_result(code, err, []) is None and "device" in err


def test_multi_file_parse_isolates_an_unexpected_failure(monkeypatch, capsys, tmp_path):
    """Three inputs, the second hitting an unexpected error (a bug, injected): the other two are
    written, the failure is named in one line, exit 2."""
    from pyprof.parse import run as parse_run

    srcs = []
    for name in ("a", "b", "c"):
        src = tmp_path / f"{name}.sqlite"
        _small_export(src, 3)
        srcs.append(src)
    real = parse_run._parse_file

    def flaky(path, out):
        if path.endswith("b.sqlite"):
            raise KeyError("injected")
        return real(path, out)

    monkeypatch.setattr(parse_run, "_parse_file", flaky)
    out = tmp_path / "out"
    code, _, err = run_main(capsys, ["parse", "-j", "1", *srcs, "-o", out])
    assert code == 2 and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["a.dict", "c.dict"]
    assert "b.sqlite" in err and "KeyError" in err


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_failed_inputs_are_named_as_given(fmt, capsys, tmp_path):
    """Inputs of the same name (``pyprof run`` writes every trace as ``trace.json``), one broken: the
    closing line names it by its path, not a name both share; a single input into a folder that fails
    is its own one line (before: that line, then "1 of 1 inputs could not be parsed ... the other
    outputs were written"), with no folder left."""
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
        pytest.importorskip("duckdb")
    good, broken = tmp_path / "a" / "trace.json", tmp_path / "b" / "trace.json"
    good.parent.mkdir()
    broken.parent.mkdir()
    good.write_bytes(KINETO_GPU.read_bytes())
    broken.write_text('{"traceEvents": [')
    out = tmp_path / "out"
    code, _, err = run_main(capsys, ["parse", "-q", "--format", fmt, good, broken, "-o", f"{out}{os.sep}"])
    assert code == 2 and err.splitlines()[-1].startswith(f"pyprof: error: 1 of 2 inputs could not be parsed: {broken};")
    assert "the other outputs were written" in err and len(list(out.iterdir())) == 1
    alone = tmp_path / "alone"
    code, _, err = run_main(capsys, ["parse", "-q", "--format", fmt, broken, "-o", f"{alone}{os.sep}"])
    assert code == 2 and one_line_or_result(code, err, [alone]) is None, err
    assert err.startswith(f"pyprof: error: {broken}: ")


# -- 7. Parquet paths are data; foreign Parquet is one line ------------------------------------------


@pytest.mark.parametrize("name", ["ranks[1]", "run*", "r?"])
def test_dataset_folder_with_glob_characters_reads_its_own_files(name, capsys, tmp_path):
    """A dataset folder named with glob characters beside folders its pattern would match: the per-rank
    summary counts its own kernels only."""
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    from pyprof.scale.query import tables

    src, other = tmp_path / "s.sqlite", tmp_path / "big.sqlite"
    _small_export(src, 7)
    _small_export(other, 40)
    mine = tmp_path / name
    for folder in (mine, tmp_path / "ranks1", tmp_path / "runx", tmp_path / "rx"):
        folder.mkdir()
    assert run_main(capsys, ["parse", "-q", "--format", "parquet", src, "-o", mine / "s.parquet"])[0] == 0
    for decoy in ("ranks1", "runx", "rx"):
        assert run_main(capsys, ["parse", "-q", "--format", "parquet", other, "-o", tmp_path / decoy / "s.parquet"])[0] == 0
    ranks, _ = tables(str(mine))
    assert int(ranks["kernels"].sum()) == 7


@pytest.mark.parametrize("ranges", [5, "ProfilerStep#1", [1, 2]])
def test_ill_typed_ranges_in_a_record_file(ranges, records, capsys, tmp_path):
    """A record file whose fifth record has ``ranges`` of the wrong type (after four good records of
    the same shape, which the reader has come to trust): report, diff and advise, which walk ``ranges``
    for the steps, name the field in one line (before: a TypeError traceback, or a string's characters
    taken for ranges); prof, which never reads it, gives its table."""
    lines = records.read_bytes().splitlines()
    rec = orjson.loads(lines[4])
    rec["ranges"] = ranges
    lines[4] = orjson.dumps(rec)
    bad, html = tmp_path / "bad.dict", tmp_path / "r.html"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    report = (["report", bad, "-o", html],) if _has("plotly") else ()  # the report extra
    for args in (*report, ["diff", records, bad], ["advise", bad]):
        code, _, err = run_main(capsys, args)
        assert code == 2 and one_line_or_result(code, err, [html]) is None, err
        assert 'bad.dict line 5: field "ranges"' in err
    assert run_main(capsys, ["prof", bad])[0] == 0


#: every command that reads records, as ``pyprof ARGS`` with ``{}`` for the input (``{b}``: a good one)
READERS = (["prof", "{}"], ["prof", "--summary", "op", "{}"], ["prof", "-c", "idx,op,kernel,layer", "{}"],
           ["prof", "--csv", "{}"], ["report", "{}", "-o", "{html}"], ["diff", "{}", "{b}"], ["advise", "{}"])


def _wrong_type(pa, column, rng: random.Random):
    """A column of the same length as ``column`` holding values of another Arrow type than its own."""
    n = len(column)
    t = column.type
    choices = [pa.array(["x"] * n), pa.array(list(range(n)), pa.int64()), pa.array([1.5] * n),
               pa.array([[1, 2]] * n), pa.array([{"a": 1}] * n), pa.array([True] * n)]
    return rng.choice([c for c in choices if c.type != t and not (pa.types.is_list(t) and pa.types.is_list(c.type))])


def hostile_parquet(folder: Path, good: Path, n: int) -> list[tuple[str, Path]]:
    """Parquet files a reader may be handed by mistake or malice, made from ``good`` (a file ``pyprof
    parse --format parquet`` wrote): foreign, cut short at the head, the middle and the last byte, a
    dataset folder mixing a good file with a foreign one, and, seeded, ``n`` files each with one
    record column (``ranges``, ``kDuration`` and ``op`` always among them) replaced by one of
    another type or dropped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(SEED)
    folder.mkdir()
    out = []

    def put(name, table=None, data=None):
        path = folder / f"{name}.parquet"
        if table is not None:
            pq.write_table(table, path)
        else:
            path.write_bytes(data)
        out.append((name, path))
        return path

    put("foreign", pa.table({"a": [1, 2], "b": ["x", "y"]}))
    data = good.read_bytes()
    for cut in (8, len(data) // 2, len(data) - 1):
        put(f"cut-{cut}", data=data[:cut])
    mixed = folder / "mixed"
    mixed.mkdir()
    (mixed / "a.parquet").write_bytes(data)
    pq.write_table(pa.table({"a": [1]}), mixed / "b.parquet")
    out.append(("mixed-dataset", mixed))
    table = pq.read_table(good)
    names = [f for f in table.column_names if f not in ("ranges", "kDuration", "op")]
    for name in ["ranges", "kDuration", "op", *rng.sample(names, n - 3)]:
        i = table.column_names.index(name)
        if rng.random() < 0.2 and name != "ranges":
            put(f"no-{name}", table.remove_column(i))
        else:
            put(f"{name}-typed", table.set_column(i, name, _wrong_type(pa, table.column(i), rng)))
    return out


def test_hostile_parquet_into_every_reader(capsys, tmp_path):
    """Foreign, truncated and wrong-typed Parquet (a column of another type, or none) into every
    command that reads records (prof with --summary, -c and --csv, report, diff on either side, advise)
    and into ``pyprof.load``: a result or one line naming the file, never a traceback (before: a
    ``ranges`` column of integers was a TypeError in report, diff and advise; the per-rank summary
    told a wrong-typed column in DuckDB's binder words). A wrong-typed column is named as such."""
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    pytest.importorskip("plotly")
    import pyprof
    from pyprof.errors import PyprofError

    src, good = tmp_path / "s.sqlite", tmp_path / "good.parquet"
    _small_export(src, 12)
    assert run_main(capsys, ["parse", "-q", "--format", "parquet", src, "-o", good])[0] == 0
    html = tmp_path / "r.html"
    problems = []
    for name, path in hostile_parquet(tmp_path / "bad", good, 8):
        for args in READERS:
            argv = [a.format(path, b=good, html=html) for a in args]
            code, _, err = run_main(capsys, argv)
            bad = one_line_or_result(code, err, [html] if "report" in args else [])
            if bad is None and code == 2 and str(path) not in err:
                bad = "error line does not name the file"
            if bad is None and code == 2 and name.endswith("-typed") and args[1:] == ["{}"]:
                column = name.removesuffix("-typed")  # the per-rank summary names the column
                bad = None if f"column {column!r}" in err or f'"{column}"' in err else f"column not named: {err}"
            if bad is not None:
                problems.append(f"{name}: pyprof {' '.join(args)}: {bad}")
            html.unlink(missing_ok=True)
        for kw in ({}, {"prof": True}):
            try:
                pyprof.load(path, **kw)
            except PyprofError:
                pass
            except Exception as exc:  # noqa: BLE001 - any other exception is what this test looks for
                problems.append(f"{name}: pyprof.load({kw}): {type(exc).__name__}: {exc}")
    assert not problems, "\n".join(problems)
    # a ``ranges`` of integers is a bad field where the steps are read, not a result without them
    bad_ranges = tmp_path / "bad" / "ranges-typed.parquet"
    for command in (["report", bad_ranges, "-o", html], ["diff", bad_ranges, good], ["advise", bad_ranges]):
        code, _, err = run_main(capsys, command)
        assert code == 2 and 'field "ranges"' in err, err


# -- 9. pyprof run: forked children, failed runs ---------------------------------------------------------


@pytest.mark.torch
def test_failed_run_leaves_no_older_results(capsys, tmp_path):
    """A run that fails in a folder holding an older run's outputs: none of them is left beside it.
    (In this process, as tests/test_run_cli.py runs scripts: ``pyprof run`` runs its script in-process.)"""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    out.mkdir()
    from pyprof.runner import RUN_OUTPUTS

    for name in RUN_OUTPUTS:
        (out / name).write_text("an older run's\n")
    script = tmp_path / "script.py"
    script.write_text("import torch\ntorch.randn(2) @ torch.randn(2)\nraise RuntimeError('boom')\n")
    code, _, err = run_main(capsys, ["run", "--no-calibrate", "--steps-from", "all", "-o", out, script])
    assert code == 1 and "Traceback" in err and "RuntimeError: boom" in err  # the script's own, as Python prints it
    # (this run's own trace may be there: the profiler exports what it saw before the failure)
    assert [p.name for p in out.iterdir() if p.read_bytes() == b"an older run's\n"] == []
    assert not (out / "records.dict").exists() and not (out / "report.html").exists()
