"""Without the ``fast`` extra (adbc-driver-sqlite, adbc-driver-manager, nanoarrow) or the ``progress``
extra (tqdm), parse gives the same records: every Arrow query is read through sqlite3 instead, and the
progress of many files is a line per file.

The Arrow path is forced on a small export (``ARROW_MIN_ROWS = 0``) so that both readers read every
integer query; the reader without the extra runs in a child interpreter where the three modules cannot be
imported (absent, or broken: an import that fails with something other than ImportError).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyprof.markers import encode, make
from pyprof.parse import fetch
from pyprof.parse.run import parse_file, parse_many
from tests.conftest import REPO, corpus_file, record_body
from tests.nsys_synth import Export

FAST = ("adbc_driver_sqlite", "adbc_driver_manager", "nanoarrow")

#: the child: the fast extra made unimportable, then the same parse with the Arrow path forced
CHILD = """
import importlib.abc, sys
how, src, out = sys.argv[1:]
FAST = FAST_NAMES
if how == "missing":
    for name in FAST:
        sys.modules[name] = None  # import raises ImportError, as where the extra is not installed
else:
    class Broken(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in FAST:
                raise OSError("a broken install: its shared library does not load")
    for name in list(sys.modules):
        if name.split(".")[0] in FAST:
            del sys.modules[name]
    sys.meta_path.insert(0, Broken())
from pyprof.parse import fetch
from pyprof.parse.run import parse_file
assert not fetch.arrow_available()
assert fetch.read_ints_arrow(src, "SELECT 1", 1) is None
fetch.ARROW_MIN_ROWS = 0
parse_file(src, out)
assert not any(sys.modules.get(name) for name in FAST), "the fast extra was imported after all"
""".replace("FAST_NAMES", repr(FAST))


def small_export(path) -> str:
    """A small synthetic Nsight export: kernels under layer, op and plain ranges on two threads."""
    ex = Export()
    main = ex.track(name="python3")
    for step in range(4):
        with main.range(f"step {step}"):
            for layer in ("conv1", "fc"):
                with main.range(encode(make("mod", path=f"net.{layer}", mod="Linear")), domain="pyprof"):
                    with main.range(encode(make("op", op="linear", id=10 * step + len(layer))), domain="pyprof"):
                        main.launch("ampere_sgemm_32x128_tn", duration=4_000 + step)
                        main.launch("vectorized_elementwise_kernel", duration=1_000)
    side = ex.track(tid=ex.pid + 3, name="worker")
    with side.range("layer:side"):
        side.launch("reduce_kernel", duration=700)
    return ex.write(path)


def _arrow_parse(src, out, monkeypatch) -> bytes:
    """``parse_file`` with every integer query offered to the Arrow reader; checks it took some."""
    took = []
    real = fetch.read_ints_arrow

    def spy(*args, **kwargs):
        got = real(*args, **kwargs)
        took.append(got is not None)
        return got

    with monkeypatch.context() as m:
        m.setattr(fetch, "ARROW_MIN_ROWS", 0)
        m.setattr(fetch, "read_ints_arrow", spy)
        parse_file(str(src), str(out))
    assert any(took), "the Arrow reader read nothing"
    return out.read_bytes()


def _child_parse(how: str, src, out) -> bytes:
    p = subprocess.run([sys.executable, "-c", CHILD, how, str(src), str(out)], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    return out.read_bytes()


def _inputs(tmp_path, which: str):
    if which == "synthetic":
        return small_export(tmp_path / "small.sqlite")
    return corpus_file(which)


@pytest.mark.parametrize("how", ["missing", "broken"])
@pytest.mark.parametrize("which", ["synthetic", pytest.param("zx3xyy__assignment2-systems", marks=pytest.mark.corpus)])
def test_without_the_fast_extra_the_records_are_the_arrow_readers(tmp_path, monkeypatch, how, which):
    if not fetch.arrow_available():
        pytest.skip("the fast extra (adbc-driver-sqlite, nanoarrow) is not installed: no Arrow records to compare")
    src = _inputs(tmp_path, which)
    arrow = _arrow_parse(src, tmp_path / "arrow.dict", monkeypatch)
    assert arrow.count(b"\n") > 0
    assert _child_parse(how, src, tmp_path / "sqlite3.dict") == arrow


def test_without_the_fast_extra_parse_still_works(tmp_path):
    """Where the extra is absent (this interpreter too, perhaps): the records of the plain reader."""
    src = small_export(tmp_path / "small.sqlite")
    parse_file(str(src), str(tmp_path / "plain.dict"))
    plain = (tmp_path / "plain.dict").read_bytes()
    assert record_body(plain).count(b"\n") == 17  # 4 steps x 2 layers x 2 kernels + 1 on the side thread
    assert _child_parse("missing", src, tmp_path / "child.dict") == plain


@pytest.mark.parametrize("where", ["connect", "stream"])
def test_a_failing_arrow_reader_hands_the_query_to_sqlite3(tmp_path, monkeypatch, where):
    """Any failure inside the Arrow path (the driver refusing the file, the stream breaking) is a None:
    the query is read through sqlite3, with the same records."""
    if not fetch.arrow_available():
        pytest.skip("the fast extra is not installed")
    import adbc_driver_sqlite
    import nanoarrow

    src = small_export(tmp_path / "small.sqlite")
    arrow = _arrow_parse(src, tmp_path / "arrow.dict", monkeypatch)

    def fail(*_a, **_k):
        raise RuntimeError("the driver failed")

    with monkeypatch.context() as m:
        m.setattr(adbc_driver_sqlite if where == "connect" else nanoarrow,
                  "connect" if where == "connect" else "c_array_stream", fail)
        m.setattr(fetch, "ARROW_MIN_ROWS", 0)
        assert fetch.read_ints_arrow(str(src), "SELECT 1", 1) is None
        parse_file(str(src), str(tmp_path / "failed.dict"))
    assert (tmp_path / "failed.dict").read_bytes() == arrow


def test_progress_without_tqdm_is_a_line_per_file(tmp_path, monkeypatch, capsys):
    srcs = [small_export(tmp_path / f"rank{i}.sqlite") for i in range(2)]
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import raises ImportError, as without the extra
    results = list(parse_many(srcs, str(tmp_path / "out"), jobs=1, progress=True))
    assert [r.error for r in results] == [None, None]
    err = capsys.readouterr().err
    assert err.splitlines() == ["pyprof parse: 1/2 files", "pyprof parse: 2/2 files"]
